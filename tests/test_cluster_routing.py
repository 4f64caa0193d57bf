"""cluster.routing: pieces copied into their places give the engine order of a concatenate-and-sort."""

import numpy as np
import pytest

from cluster.routing import (
    DuplicatePair,
    PiecePlaces,
    block_counts,
    cut_pieces,
    empty_shard,
    fill_shard,
    finish_shard,
    subset_of,
)
from hamsi.data.moments import squared_deviation_sums, user_sums

N_USERS, N_ITEMS = 40, 30


def partitions(seed=0, n_parts=5, held_share=0.2):
    """Distinct (row, col) pairs cut into partitions of uneven sizes (one empty), with held-out flags."""
    rng = np.random.default_rng(seed)
    pairs = rng.permutation(N_USERS * N_ITEMS)[:700]
    rows, cols = (pairs // N_ITEMS).astype(np.int32), (pairs % N_ITEMS).astype(np.int32)
    vals = rng.integers(1, 11, size=pairs.size) / 2.0
    held = rng.random(pairs.size) < held_share
    cuts = np.sort(np.concatenate([[0, 0, pairs.size], rng.integers(0, pairs.size, n_parts - 2)]))
    return [(rows[a:b], cols[a:b], vals[a:b], held[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def routed(parts, row_bounds, col_bounds, fill_order=None):
    """Return every shard's ShardRatings built as the workers do (counts, places, fills, finish)."""
    places = PiecePlaces.of(
        [block_counts(rows, cols, held, row_bounds, col_bounds) for rows, cols, _, held in parts]
    )
    pieces = [cut_pieces(*part, row_bounds) for part in parts]
    shards = []
    for p in range(row_bounds.size - 1):
        data = empty_shard(
            p, row_bounds[p], row_bounds[p + 1], places.subset_cuts[p], places.test_starts[-1, p]
        )
        for f in fill_order or range(len(parts)):
            fill_shard(
                data,
                pieces[f][p],
                places.subset_starts[f, p],
                places.train_starts[f, p],
                places.test_starts[f, p],
                col_bounds,
            )
        shards.append(
            finish_shard(
                data,
                np.arange(N_USERS) * 3,
                np.arange(N_ITEMS) + 7,
                places.train_starts[:, p],
                places.test_starts[:, p],
            )
        )
    return shards


@pytest.mark.parametrize("n_blocks", [1, 2, 3])
def test_shards_hold_the_engine_order_of_the_concatenated_partitions(n_blocks):
    parts = partitions()
    rows, cols, vals, held = (np.concatenate(c) for c in zip(*parts))
    row_bounds = np.linspace(0, N_USERS, n_blocks + 1).astype(np.int64)
    col_bounds = np.array([0, 4, 20, N_ITEMS][:n_blocks] + [N_ITEMS], dtype=np.int64)
    for p, data in enumerate(routed(parts, row_bounds, col_bounds)):
        lo = row_bounds[p]
        mine = (rows >= lo) & (rows < row_bounds[p + 1])
        train = np.flatnonzero(mine & ~held)  # position order
        subset = subset_of(cols[train], col_bounds, p)
        order = train[np.argsort(subset, kind="stable")]  # the reference: a stable sort by subset
        assert np.array_equal(data.rows, rows[order] - lo) and np.array_equal(
            data.cols, cols[order]
        )
        assert np.array_equal(data.vals, vals[order])
        assert np.array_equal(
            data.subset_cuts, np.searchsorted(np.sort(subset), np.arange(n_blocks + 1))
        )
        assert np.array_equal(
            np.concatenate(data.in_position_order()),
            np.concatenate([rows[train] - lo, cols[train], vals[train]]),
        )
        test = np.flatnonzero(mine & held)
        assert np.array_equal(data.test_rows, rows[test] - lo) and np.array_equal(
            data.test_vals, vals[test]
        )
        # the per-user sums are those of np.bincount over the position-ordered ratings, to the bit
        assert np.array_equal(
            data.value_sums, user_sums(rows[train] - lo, vals[train], data.row_hi - lo)
        )
        mean = 2.7182818
        assert np.array_equal(
            data.user_sums(lambda v: (v - mean) ** 2),
            squared_deviation_sums(rows[train] - lo, vals[train], data.row_hi - lo, mean),
        )


def test_fills_in_any_order_or_run_twice_give_the_same_shards():
    parts = partitions(seed=1)
    row_bounds, col_bounds = np.array([0, 25, N_USERS]), np.array([0, 11, N_ITEMS])
    once = routed(parts, row_bounds, col_bounds)
    again = routed(parts, row_bounds, col_bounds, fill_order=[4, 2, 2, 0, 1, 3, 4, 0])
    for a, b in zip(once, again):
        for name in (
            "rows",
            "cols",
            "vals",
            "position_order",
            "test_rows",
            "test_cols",
            "test_vals",
            "value_sums",
        ):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("held_out", [False, True])
def test_a_repeated_pair_names_its_raw_ids_and_both_partitions(held_out):
    parts = partitions(seed=2, held_share=0.0)
    rows, cols, vals, held = parts[3]
    parts[3] = (rows, cols, vals, np.full(rows.size, held_out))
    parts.append(
        (rows[[2]], cols[[2]], vals[[2]], np.array([held_out]))
    )  # partition 5 repeats one pair
    row, col = int(rows[2]), int(cols[2])
    with pytest.raises(DuplicatePair) as raised:
        routed(parts, np.array([0, 20, N_USERS]), np.array([0, 15, N_ITEMS]))
    assert (raised.value.user, raised.value.item, raised.value.partitions) == (
        3 * row,
        col + 7,
        [3, 5],
    )


def test_piece_places_count_the_partitions_before():
    counts = [
        np.array([[1, 2, 3], [4, 0, 1]]),
        np.array([[0, 5, 0], [2, 2, 2]]),
    ]  # B = 2: [p, k], [p, held]
    places = PiecePlaces.of(counts)
    assert places.subset_cuts.tolist() == [[0, 1, 8], [0, 6, 8]]
    assert places.subset_starts[1].tolist() == [[1, 3], [4, 6]]
    assert places.train_starts[:, 0].tolist() == [0, 3, 8] and places.test_starts[
        :, 1
    ].tolist() == [0, 1, 3]


@pytest.mark.parametrize("n_items", [70_000, 1 << 31])  # keys of 4 bytes, then of 8
def test_repeated_pairs_are_found_with_either_key_width(n_items):
    from cluster.routing import _repeated_pair

    rows, cols = np.array([5, 3, 9, 1], np.int32), np.array([n_items - 1, 2, 0, 0], np.int32)
    assert _repeated_pair(rows, cols, n_items) is None
    rows[2], cols[2] = 5, n_items - 1
    assert _repeated_pair(rows, cols, n_items) == (5, n_items - 1)
