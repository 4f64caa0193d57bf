"""COLOR / COLOR-B covers colored on the workers (cluster.coloring): valid, balanced, and the run's iterates."""

import numpy as np
import pytest
from helpers import N_ITEMS, N_USERS, dask_frame

import partition

pytestmark = pytest.mark.cluster


def without_time(trace):
    """Return the trace as an array without the (machine-dependent) time column; NaN == NaN."""
    return np.array([row[:2] + row[3:] for row in trace.rows])


@pytest.fixture(scope="module")
def colored(client, frame):
    """COLOR-B on the workers from a 7-partition Dask DataFrame: (WorkerRatings, ratings, Partition)."""
    from cluster.coloring import collect_cover
    from cluster.dataset import load_worker_ratings

    data = load_worker_ratings(
        client, dask_frame(frame, 7), partitioner="color-b", n_blocks=2, seed=3, n_subsets=8
    )
    ratings, cover = collect_cover(client, data.shards, data.cover)
    return data, ratings, cover


def test_color_b_on_the_workers_is_a_valid_cover_as_balanced_as_in_process(colored):
    data, ratings, cover = colored
    cover.validate()  # every rating in exactly one block; blocks of a subset parameter-disjoint
    assert cover.n_functions == ratings.nnz == 3000 and cover.n_subsets == 8
    assert np.array_equal(cover.block_sizes(), data.cover.block_sizes)
    # the speculative rounds had conflicts to repair, and repaired them all
    assert data.cover.rounds >= 2 and data.cover.conflicts > 0
    got = cover.stats()
    ref = partition.make("color-b", ratings, blocks=2, subsets=8, seed=3).stats()
    assert got["imbalance"] <= 1.1 * ref["imbalance"]
    assert data.cover.n_colors <= 1.1 * ref["n_colors"]
    # the shards hold their ratings in the cover's engine order: subset k's block, row by row
    sizes = np.array([d.subset_cuts[-1] for d in data.client.gather(data.shards)])
    assert np.array_equal(sizes, data.cover.shard_block_sizes.sum(axis=(1, 2)))


def test_color_first_fit_on_the_workers_is_a_valid_cover_as_good_as_in_process(client, frame):
    from cluster.coloring import collect_cover
    from cluster.dataset import load_worker_ratings

    data = load_worker_ratings(
        client, dask_frame(frame, 7), partitioner="color", n_blocks=2, seed=1
    )
    ratings, cover = collect_cover(client, data.shards, data.cover)
    cover.validate()
    assert cover.n_subsets == 20 and cover.scheme == "color"
    ref = partition.make("color", ratings, blocks=2, seed=1)
    assert cover.stats()["imbalance"] <= 1.1 * ref.stats()["imbalance"]
    assert data.cover.n_colors <= 1.1 * ref.info["n_colors"]


@pytest.mark.slow
def test_the_worker_coloring_is_seeded_and_splits_colors_when_k_exceeds_them(
    client,
    frame,
    colored,
):
    """The same seed gives the same cover; K above the colors splits classes (unit_parts), still valid."""
    from cluster.coloring import collect_cover
    from cluster.dataset import load_worker_ratings

    data = load_worker_ratings(
        client, dask_frame(frame, 7), partitioner="color-b", n_blocks=2, seed=3, n_subsets=8
    )
    again = collect_cover(client, data.shards, data.cover)[1]
    first = colored[2]
    assert all(
        np.array_equal(a, b) for s, t in zip(first.subsets, again.subsets) for a, b in zip(s, t)
    )
    many = load_worker_ratings(
        client, dask_frame(frame, 3), partitioner="color-b", n_blocks=2, seed=3, n_subsets=200
    )
    assert many.cover.n_colors < 200 == many.cover.n_subsets
    ratings, cover = collect_cover(client, many.shards, many.cover)
    cover.validate()
    assert min(sum(s) for s in cover.block_sizes()) >= 1  # every subset holds ratings
    ref = partition.make("color-b", ratings, blocks=2, subsets=200, seed=3).stats()
    assert cover.stats()["subset_imbalance"] <= 1.1 * ref["subset_imbalance"]


def test_a_duplicate_pair_is_one_clear_error_when_coloring(client, frame, tmp_path):
    from cluster.dataset import load_worker_ratings
    from hamsi.errors import InputError

    for i, part in enumerate([frame.iloc[:10], frame.iloc[10:20], frame.iloc[[15]]]):
        part.to_parquet(tmp_path / f"ratings-{i}.parquet")
    with pytest.raises(
        InputError, match=r"duplicate \(user, item\) pair .*ratings-2\.parquet row 0"
    ):
        load_worker_ratings(client, str(tmp_path), partitioner="color-b", n_blocks=2)
    with pytest.raises(InputError, match="need partitioner .*hogwild; got 'stripes'"):
        load_worker_ratings(client, str(tmp_path), partitioner="stripes", n_blocks=2)
    with pytest.raises(InputError, match=r"subsets=20 is larger than the number of ratings \(10\)"):
        load_worker_ratings(client, dask_frame(frame.iloc[:10], 2), partitioner="color", n_blocks=2)


def test_hogwild_on_the_workers_is_the_in_process_cover_and_run(client, frame):
    """HOGWILD is deterministic: the same blocks as partition.make on the ratings in shard order,
    and the run bitwise the Dask run of those ratings from memory."""
    from cluster.coloring import collect_cover
    from cluster.dataset import load_worker_ratings
    from cluster.driver import minimize_hamsi
    from hamsi.problems import MatrixFactorization

    data = load_worker_ratings(
        client, dask_frame(frame, 7), partitioner="hogwild", n_blocks=2, seed=5, n_subsets=6
    )
    ratings, cover = collect_cover(client, data.shards, data.cover)
    ref = partition.make("hogwild", ratings, blocks=2, subsets=6, seed=5)
    assert cover.n_subsets == ref.n_subsets == 6
    for got, want in zip(cover.subsets, ref.subsets):
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
    options = dict(client=client, random_state=2, max_cycles=3, chunk_cycles=2, quiet=True)
    on_workers = minimize_hamsi(data.problem(3, reg=0.1, biases=True), data.cover, **options)
    from_memory = minimize_hamsi(MatrixFactorization(ratings, 3, 0.1, True), ref, **options)
    assert on_workers.reason == "epoch_limit" and np.array_equal(on_workers.x, from_memory.x)


def test_a_wrong_coloring_fails_validation(colored):
    """The check above can fail: a block moved to another subset shares parameters there."""
    _, _, cover = colored
    broken = partition.Partition(
        scheme=cover.scheme,
        shape=cover.shape,
        subsets=[[cover.subsets[0][0], cover.subsets[1][1]]] + cover.subsets[2:],
    )
    broken.graph = cover.graph
    with pytest.raises(partition.PartitionError):
        broken.validate()


@pytest.mark.slow
def test_color_b_fit_on_the_workers_gives_the_in_memory_iterates_on_its_cover(
    client,
    frame,
    gathered,
    monkeypatch,
):
    """DaskMatrixFactorizer(partitioner="color-b") on worker data, against its cover run from memory.

    Bitwise the Dask run of the same ratings in memory (the row shards' order: row shard, then
    position, the cover's function order) on the same cover, and the in-process engine to
    rounding: a COLOR cover's item rows get partials from several row shards, which the Dask run
    adds shard by shard and the in-process one rating by rating (cluster/README.md, invariant 1).
    """
    from cluster import DaskMatrixFactorizer
    from cluster.coloring import collect_cover
    from cluster.engine import DaskEngine
    from hamsi.engine import InProcessEngine
    from hamsi.problems import MatrixFactorization

    runs = []
    solve = DaskEngine.solve

    def recorded(self, problem, cover, options, **kwargs):
        result = solve(self, problem, cover, options, **kwargs)
        runs.append((problem, cover, options, kwargs, result))
        return result

    monkeypatch.setattr(DaskEngine, "solve", recorded)
    model = DaskMatrixFactorizer(
        client=client,
        partitioner="color-b",
        rank=3,
        blocks=2,
        max_cycles=4,
        random_state=3,
        search=False,
        chunk_cycles=2,
        biases=True,
    ).fit(dask_frame(frame, 7))
    # the client held no ratings: at most a count per user, item or color (colors < users + items)
    assert gathered and max(gathered) <= N_USERS + N_ITEMS
    ((problem, cover, options, kwargs, result),) = runs
    assert kwargs["validation"] is None and cover.scheme == "color-b"
    assert np.array_equal(model.item_factors_, problem.factors(result.x)[1][:, :3])
    ratings, part = collect_cover(client, problem.ratings.shards, cover)
    part.validate()
    memory = MatrixFactorization(
        ratings,
        problem.rank,
        problem.reg,
        problem.biases,
        reg_weighting=problem.reg_weighting,
        reg_damping=problem.reg_damping,
        init_scale=problem.init_scale,
        init_biases=problem.init_biases,
        init_factors=problem.init_factors,
    )
    assert memory.offset == problem.offset
    from_memory = solve(DaskEngine(client), memory, part, options)
    assert from_memory.reason == result.reason == "epoch_limit"
    assert np.array_equal(result.x, from_memory.x)
    np.testing.assert_array_equal(without_time(result.trace), without_time(from_memory.trace))
    in_process = InProcessEngine(threads=2).solve(memory, part, options)
    assert np.all(np.isfinite(in_process.x))
    np.testing.assert_allclose(result.x, in_process.x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_shards_blocks_are_component_blocks_of_the_ratings_in_shard_order(seed):
    """Step 3 in pieces (per shard, merged per subset) gives partition.kernels.component_blocks' blocks."""
    from cluster.coloring import components, merge_components
    from cluster.routing import ShardRatings
    from hamsi.data.synth import make_ratings
    from partition.graph import FactorGraph
    from partition.grouping import group_by_key
    from partition.kernels import component_blocks, graph_arrays

    r = make_ratings(users=40, items=30, ratings=300, rank=2, seed=seed)
    n_shards, n_subsets, bounds = 2, 4, [0, 20, 40]
    order = np.argsort(r.rows >= 20, kind="stable")  # shard order: row shard, then position
    rows, cols = r.rows[order], r.cols[order]
    subset = np.random.default_rng(seed).integers(0, n_subsets, rows.size)
    groups, offsets = group_by_key(subset, n_subsets)
    graph = FactorGraph.from_coordinates((rows, cols), r.shape)
    want, _ = component_blocks(groups, offsets, n_shards, graph.n_params, *graph_arrays(graph))
    found, empty = [], np.zeros(0, np.int32)
    for p in range(n_shards):
        mine = (rows >= bounds[p]) & (rows < bounds[p + 1])
        data = ShardRatings(
            p,
            bounds[p],
            bounds[p + 1],
            (rows[mine] - bounds[p]).astype(np.int32),
            cols[mine],
            np.ones(mine.sum()),
            np.array([0, mine.sum()]),
            empty,
            empty,
            np.zeros(0),
            np.arange(mine.sum(), dtype=np.int32),
        )
        found.append(components(data, subset[mine], np.arange(n_subsets), n_subsets, r.shape[1]))
    merged = [
        merge_components(n_shards, r.shape[1], *[f[2][k] for f in found]) for k in range(n_subsets)
    ]
    got = np.concatenate(
        [
            [merged[k][0][p][label] for k, label in zip(found[p][0], found[p][1])]
            for p in range(n_shards)
        ]
    )
    assert np.unique(want).size == n_shards and np.array_equal(got, want)
    sizes = np.bincount(subset * n_shards + want, minlength=n_subsets * n_shards)
    assert np.array_equal(np.array([np.sum(m[1], axis=0) for m in merged]).ravel(), sizes)
