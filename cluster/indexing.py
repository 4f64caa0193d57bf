"""The passes over the rating partitions that index them on the workers (cluster.dataset).

Each function is a task on one partition (a pandas frame with user, item, rating) or on one
built shard, returning small arrays: the distinct ids, the dense positions of a partition's pairs,
their counts per user and item, the cut of a partition into row-shard pieces, a shard's summary.
Nothing is kept between passes: each pass indexes its partition again from the merged ids.
"""

from __future__ import annotations

import numpy as np

from cluster.kept import TestPairs
from cluster.placement import touched_v_shards
from cluster.routing import ShardRatings, block_counts, cut_pieces
from hamsi.data.ratings import LOOKUP_SLACK, TEST_STREAM, dense_index, heldout_mask


# --------------------------------------------------------------------------- worker tasks
def distinct_ids(frame) -> tuple:
    """Return (rows, sorted distinct users, sorted distinct items) of one partition (`dense_index`'s)."""
    return (
        len(frame),
        dense_index(frame["user"].to_numpy())[0],
        dense_index(frame["item"].to_numpy())[0],
    )


def merge_distinct(*parts) -> tuple:
    """Return the merged (rows, distinct users, distinct items) of several `distinct_ids` results."""
    return (
        sum(p[0] for p in parts),
        dense_index(np.concatenate([p[1] for p in parts]))[0],
        dense_index(np.concatenate([p[2] for p in parts]))[0],
    )


def positions_in(sorted_ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Return each value's index among sorted_ids (all present): a lookup table for small ids, else a search.

    The table is `dense_index`'s rule (MovieLens ids are small): O(n + max id) instead of n log(ids).
    """
    if (
        sorted_ids.size
        and sorted_ids[0] >= 0
        and sorted_ids[-1] < LOOKUP_SLACK * values.size + (1 << 20)
    ):
        table = np.empty(int(sorted_ids[-1]) + 1, dtype=np.int32)
        table[sorted_ids] = np.arange(sorted_ids.size, dtype=np.int32)
        return table[values]
    return np.searchsorted(sorted_ids, values).astype(np.int32)


def ids_only(distinct: tuple) -> tuple:
    """Return (None, users, items) of a merged `distinct_ids` (the count is not needed downstream)."""
    return None, distinct[1], distinct[2]


def outside_test(frame, test_fraction: float = 0.0, test_seed=None, *, test: bool = False):
    """Return the rows of `frame` outside the test split (test=True: inside it), `heldout_mask`'s TEST_STREAM.

    The test pairs are drawn by a hash independent of the validation one, so the validation split
    is taken from what is left, as the in-memory split_by_hash of the training ratings takes it.
    """
    if not test_fraction > 0:
        return frame.iloc[:0] if test else frame
    users, items = frame["user"].to_numpy(), frame["item"].to_numpy()
    held = heldout_mask(users, items, test_fraction, test_seed, stream=TEST_STREAM)
    return frame[held if test else ~held]


def dense_pairs(
    frame, ids: tuple, fraction: float, seed, test_fraction=0.0, test_seed=None
) -> tuple:
    """Return the partition's dense rows and cols (int32), ratings and held-out flags (`heldout_mask`).

    Pairs of the test split (test_fraction > 0) are left out: they are neither trained on nor
    validated on (`test_pairs` keeps them).
    """
    frame = outside_test(frame, test_fraction, test_seed)
    users, items = frame["user"].to_numpy(), frame["item"].to_numpy()
    held = (
        heldout_mask(users, items, fraction, seed)
        if fraction > 0
        else np.zeros(len(frame), dtype=bool)
    )
    return (
        positions_in(ids[1], users),
        positions_in(ids[2], items),
        frame["rating"].to_numpy(),
        held,
    )


def test_pairs(frame, ids, test_fraction, test_seed) -> TestPairs:
    """Return the partition's pairs of the test split, indexed (`outside_test`; kept on the worker)."""
    frame = outside_test(frame, test_fraction, test_seed, test=True)
    return TestPairs(
        positions_in(ids[1], frame["user"].to_numpy()),
        positions_in(ids[2], frame["item"].to_numpy()),
        frame["rating"].to_numpy(dtype=np.float64),
    )


test_pairs.__test__ = False  # type: ignore[attr-defined]  # not for pytest to collect


def pair_counts(frame, ids, fraction, seed, shape, test_fraction=0.0, test_seed=None) -> tuple:
    """Return (training ratings per user, per item, validation ratings, test ratings) of one partition."""
    rows, cols, _, held = dense_pairs(frame, ids, fraction, seed, test_fraction, test_seed)
    train = ~held
    return (
        np.bincount(rows[train], minlength=shape[0]),
        np.bincount(cols[train], minlength=shape[1]),
        int(np.count_nonzero(held)),
        len(frame) - rows.size,
    )


def merge_counts(*parts) -> tuple:
    """Return the sums of several `pair_counts` results (integers: the order does not matter)."""
    return tuple(sum(p[i] for p in parts) for i in range(len(parts[0])))


def shard_block_counts(
    frame, ids, fraction, seed, row_bounds, col_bounds, test_fraction=0.0, test_seed=None
) -> np.ndarray:
    """Return the partition's ratings per (row shard, subset) and held out per shard (`routing.block_counts`)."""
    rows, cols, _, held = dense_pairs(frame, ids, fraction, seed, test_fraction, test_seed)
    return block_counts(rows, cols, held, row_bounds, col_bounds)


def cut_by_shard(frame, ids, fraction, seed, row_bounds, test_fraction=0.0, test_seed=None) -> list:
    """Return the partition cut into one `routing.Piece` per row shard (indexed again: nothing kept between passes)."""
    return cut_pieces(
        *dense_pairs(frame, ids, fraction, seed, test_fraction, test_seed), row_bounds
    )


def piece_of_shard(pieces: list, shard: int):
    """Return one shard's piece of a cut partition (a small task, next to the cut)."""
    return pieces[shard]


def rows_of_pair(frame, user, item) -> list:
    """Return the rows of the partition that hold the raw (user, item) pair (the duplicate message)."""
    return np.flatnonzero(
        (frame["user"].to_numpy() == user) & (frame["item"].to_numpy() == item)
    ).tolist()


def shard_summary(data: ShardRatings, col_bounds: np.ndarray) -> tuple:
    """Return (per-user value sums, rating min, max, item shards touched per subset): small, for the client."""
    if data.vals.size:
        low, high = float(data.vals.min()), float(data.vals.max())
    else:
        low, high = np.inf, -np.inf
    return data.value_sums, low, high, touched_v_shards(data.subsets("cols"), col_bounds)


def squared_deviations(data: ShardRatings, mean: float) -> np.ndarray:
    """Return the shard's per-user sums of (v - mean)^2 in position order (`squared_deviation_sums`'s terms)."""
    return data.user_sums(lambda vals: (vals - mean) ** 2)
