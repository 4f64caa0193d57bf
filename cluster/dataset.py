"""Ratings read, indexed, split and placed on the Dask workers: the data path of a distributed fit.

A Dask DataFrame, or a path, directory or glob of Parquet / CSV files (one partition per file, read
by a task on a worker: cluster.sources), goes to its row shards without ever passing through the client:

1. read    every partition is read and checked (integer ids, numeric finite ratings) by a task;
           a bad value is an InputError naming the file (or partition), row and column. No
           partition is kept: each pass below reads it again in its own graph (`over_partitions`),
           so a worker holds a partition only while one task uses it.
2. ids     each partition's distinct user and item ids, merged on the workers into the sorted
           distinct ids: row a is the a-th smallest user id, whatever the partitioning.
3. index   each pass gives a partition dense (row, col) (int32) and the held-out flag, a seeded
           hash of the raw (user, item) pair (hamsi.data.ratings.heldout_mask, the rule the
           in-memory estimator uses too). Positions (the order of the concatenated partitions)
           are implicit: partitions are visited in order, rows in file order.
4. counts  per-user and per-item training counts, summed on the workers (integers: exact); the
           client gets them (O(users + items)) and cuts the STRATA / STRATA-B intervals from them.
   COLOR/-B, HOGWILD: B equal user (and item) intervals; the ratings are routed as one subset
           (position order), then colored or split at random and arranged on the hosts
           (cluster.coloring).
5. route   a pass counts each partition's ratings per (row shard, subset k = block (p, (p + k) mod B));
           from these counts the client knows where every piece goes. Each shard is allocated
           at its final size on its host, then the partitions are cut by row shard a window at a
           time and every piece is copied into its place: subset k, then position, the order in
           which `MatrixFactorization.arrange` stores block (p, k) in process (cluster.route_pass,
           cluster.routing). Duplicate pairs are found there (a pair lives in one block).
6. stats   per-user sums reduced as hamsi.data.moments does in process: the mean and spread the
           defaults and the bias offset read; the bias start by sweeps whose item sums are the
           shards' partials added in shard order (`ridge_bias_sweeps`' reduction).
7. start   each host draws its rows of the N(0, s^2) start from the engine's init stream (the
           whole stream up to its rows, in chunks) and zero L-BFGS memory: nothing is scattered.

The iterates are then bitwise those of the in-process engine on the same ratings (STRATA/-B).
Lost workers: every future here keeps its lineage and no task is pinned hard (allow_other_workers),
so Dask recomputes what a dead worker held from the partitions' read tasks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from cluster.coloring import COLOR_SCHEMES, ShardedCover, color_shards, hogwild_shards
from cluster.indexing import (
    distinct_ids,
    ids_only,
    merge_counts,
    merge_distinct,
    pair_counts,
    rows_of_pair,
    shard_summary,
    squared_deviations,
    test_pairs,
)
from cluster.kept import KeptRatings
from cluster.placement import assign_shards, v_homes
from cluster.route_pass import (  # noqa: F401 (ROUTE_WINDOW re-exported: callers import it from here)
    ROUTE_WINDOW,
    route_shards,
)
from cluster.routing import DuplicatePair, release_freed_memory
from cluster.sharded import GridCover, ShardedFactorization, grid_bounds
from cluster.sources import (  # noqa: F401 (some re-exported: callers import them from here)
    FILE_KINDS,
    TestSplit,
    checked_frame,
    is_distributed_source,
    over_partitions,
    partition_readers,
    read_rating_file,
    rows_before,
    source_files,
)
from hamsi.data.moments import RatingStatistics, mean_of
from hamsi.errors import InputError
from hamsi.parameters import renamed_keyword
from hamsi.problems.base import equal_bounds
from hamsi.training import TrainingFacts
from partition.registry import DEFAULT_SUBSETS

SCHEMES = ("strata", "strata-b") + COLOR_SCHEMES + ("hogwild",)
# ids merged per task when reducing the partitions' distinct ids and counts (a tree on the workers)
MERGE_FANIN = 8


@dataclass(eq=False)
class WorkerRatings:
    """Ratings that live on the workers as row shards (load_worker_ratings reads, indexes and routes them).

    The client keeps the sorted distinct ids, the per-user and per-item counts, the cover's bounds and sizes,
    the shard hosts and the shards' futures. `statistics` are what hamsi.defaults reads;
    `problem(...)` turns them into the `ShardedFactorization` the run minimizes (hamsi.training's
    TrainingData).
    """

    client: object
    labels: list  # how messages name each partition (its file, or "partition i")
    user_ids: np.ndarray
    item_ids: np.ndarray
    row_counts: np.ndarray  # training ratings per user
    col_counts: np.ndarray  # training ratings per item
    n_test: int  # ratings held out by the hash split
    cover: GridCover | ShardedCover
    owner: dict  # row shard -> worker
    sizes: list  # training ratings per row shard
    shards: list  # futures of the shards' ShardRatings, on their hosts
    homes: list  # V homes per shard and subset (cluster.placement.v_homes)
    mean: float
    rating_min: float
    rating_max: float
    statistics: RatingStatistics
    test: list = field(default_factory=list)  # futures of each partition's TestPairs (cluster.kept)
    n_test_pairs: int = 0  # ratings of the test split (TestSplit), neither trained nor validated on

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.user_ids.size), int(self.item_ids.size))

    @property
    def n_ratings(self) -> int:
        return int(self.row_counts.sum())

    def facts(self) -> TrainingFacts:
        """Return what a fitted model keeps: the range and mean, the ids, per-user counts (hamsi.training).

        The items each user rated and the test pairs stay on the workers (cluster.kept).
        """
        return TrainingFacts(
            rating_min=float(self.rating_min),
            rating_max=float(self.rating_max),
            mean=float(self.mean),
            user_ids=np.asarray(self.user_ids),
            item_ids=np.asarray(self.item_ids),
            seen_indptr=np.concatenate([[0], np.cumsum(self.row_counts)]).astype(np.int64),
            seen_items=None,
            item_known=self.col_counts > 0,
            kept=KeptRatings.of(self.client, self.shards, self.test, self.n_test_pairs),
        )

    def problem(
        self,
        rank: int,
        *,
        reg: float = 0.0,
        biases: bool = False,
        reg_weighting: str = "uniform",
        reg_damping: float = 0.0,
        init_scale: float = 1.0,
        init_biases: bool = False,
        init_factors: str = "random",
        clip_heldout: bool = True,
    ) -> ShardedFactorization:
        """Return the MatrixFactorization of these ratings with the data on the workers (same keywords)."""
        return ShardedFactorization(
            self,
            rank,
            reg=reg,
            biases=biases,
            reg_weighting=reg_weighting,
            reg_damping=reg_damping,
            init_scale=init_scale,
            init_biases=init_biases,
            init_factors=init_factors,
            clip_heldout=clip_heldout,
        )


def load_worker_ratings(
    client,
    source,
    *,
    columns=None,
    partitioner="strata-b",
    n_blocks: int,
    n_subsets: int | None = None,
    validation_fraction: float = 0.0,
    seed=None,
    workers=None,
    test_fraction: float = 0.0,
    test_seed=None,
    scheme=None,
    heldout_fraction=None,
) -> WorkerRatings:
    """Return the WorkerRatings of `source`, read, indexed, split and routed by tasks (module steps 1-6).

    `source`: a Dask DataFrame, or a path, directory or glob of Parquet / CSV files (`columns`
    picks user, item, rating); `validation_fraction` of the pairs is held out by a seeded hash;
    n_blocks row shards of the `partitioner`'s cover, placed on `workers` (default: all). STRATA/-B
    covers follow from the counts; COLOR/-B covers (n_subsets K, default 20) are colored on the
    workers and HOGWILD's random blocks drawn there (cluster.coloring), seeded by `seed` (0 when
    None, as the estimator's partition). `test_fraction` of the pairs (a TestSplit source gives
    it and `test_seed`) are held out first by an independent hash and kept, indexed, on the
    workers that read them (WorkerRatings.test; cluster.kept scores them); the validation split
    is then drawn from the other pairs. scheme and heldout_fraction: deprecated names.
    """
    scheme, heldout_fraction = current_keywords(
        "load_worker_ratings", scheme, partitioner, heldout_fraction, validation_fraction
    )
    if scheme not in SCHEMES:
        raise InputError(
            f"ratings on the workers need partitioner {', '.join(SCHEMES)}; got {scheme!r}"
        )
    source, test_fraction, test_seed = _test_split_of(source, test_fraction, test_seed)
    readers, labels = partition_readers(source, columns)
    split = (heldout_fraction, seed, test_fraction, test_seed)
    counted = _ids_and_counts(client, source, readers, split)
    n_blocks = min(int(n_blocks), min(counted.shape))
    if scheme not in ("strata", "strata-b"):
        n_subsets = _color_subsets(n_subsets, counted.n_ratings)
    plan = _shard_plan(client, workers, scheme, counted, n_blocks)
    color = dict(scheme=scheme, n_subsets=n_subsets, seed=0 if seed is None else seed)
    placed = _placed_shards(client, source, (readers, labels), counted, plan, color)
    return _worker_ratings(client, labels, readers, counted, plan, placed)


@dataclass(frozen=True)
class _Counted:
    """What the id and count passes found (module steps 2 and 4), and the split later passes apply."""

    user_ids: np.ndarray
    item_ids: np.ndarray
    where: dict  # the split's rules: the ids' future, the fractions and seeds of the hashes
    row_counts: np.ndarray
    col_counts: np.ndarray
    n_test: int
    n_test_pairs: int

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.user_ids.size), int(self.item_ids.size))

    @property
    def n_ratings(self) -> int:
        return int(self.row_counts.sum())


@dataclass(frozen=True)
class _ShardPlan:
    """The cover the ratings are routed by, its bounds, and each row shard's size and host."""

    routed: GridCover
    row_bounds: np.ndarray
    col_bounds: np.ndarray
    sizes: list  # training ratings per row shard
    owner: dict  # row shard -> worker


def current_keywords(function: str, scheme, partitioner, heldout_fraction, validation_fraction):
    """Return (partitioner, validation_fraction) of `function`'s call: the current keywords, or the
    deprecated scheme / heldout_fraction with a FutureWarning (hamsi.parameters.renamed_keyword)."""
    partitioner = renamed_keyword(function, "scheme", scheme, "partitioner", partitioner)
    validation_fraction = renamed_keyword(
        function, "heldout_fraction", heldout_fraction, "validation_fraction", validation_fraction
    )
    return partitioner, validation_fraction


def _ids_and_counts(client, source, readers: list, split: tuple) -> _Counted:
    """Return the sorted distinct ids, the split's rules and the training counts (module steps 2, 4).

    split: (validation fraction, seed, test fraction, test seed). InputError when the source holds
    no ratings, or every rating was held out.
    """
    distinct = _tree(client, merge_distinct, over_partitions(client, readers, distinct_ids))
    n_read, users, items = client.gather(distinct)
    if n_read == 0:
        raise InputError(f"{_name(source)} holds no ratings")
    shape = (int(users.size), int(items.size))
    fraction, seed, test_fraction, test_seed = split
    where = dict(
        ids=client.submit(ids_only, distinct, pure=False),
        fraction=float(fraction),
        seed=seed,
        test_fraction=float(test_fraction),
        test_seed=test_seed,
    )
    counts = over_partitions(client, readers, pair_counts, shape=shape, **where)
    row_counts, col_counts, n_test, n_test_pairs = client.gather(
        _tree(client, merge_counts, counts)
    )
    if int(row_counts.sum()) == 0:
        raise InputError(
            f"{_name(source)}: every rating was held out; lower the validation (or test) fraction"
        )
    return _Counted(users, items, where, row_counts, col_counts, int(n_test), int(n_test_pairs))


def _shard_plan(client, workers, scheme: str, counted: _Counted, n_blocks: int) -> _ShardPlan:
    """Return the routing cover, its bounds, the row shards' sizes and their hosts (cluster.placement)."""
    routed, rb, cb = _routing_cover(
        scheme, counted.shape, counted.row_counts, counted.col_counts, n_blocks
    )
    cumulative = np.concatenate([[0], np.cumsum(counted.row_counts)])
    sizes = [int(cumulative[rb[p + 1]] - cumulative[rb[p]]) for p in range(n_blocks)]
    owner = assign_shards(n_blocks, list(workers or client.scheduler_info()["workers"]), sizes)
    return _ShardPlan(routed, rb, cb, sizes, owner)


def _placed_shards(
    client, source, partitions: tuple, counted: _Counted, plan: _ShardPlan, color: dict
) -> tuple:
    """Return (the shards' futures, the cover, the shards' summaries): routed, then colored or split.

    partitions: (readers, labels). color: the scheme, K and seed of a COLOR/-B or HOGWILD cover.
    A repeated (user, item) pair is an InputError naming both of its rows.
    """
    readers, labels = partitions
    try:
        shards = route_shards(
            client,
            readers,
            counted.where,
            plan.routed,
            plan.owner,
            counted.user_ids,
            counted.item_ids,
        )
        cover = plan.routed
        if color["scheme"] not in ("strata", "strata-b"):
            grid = (counted.shape, plan.row_bounds, plan.col_bounds, plan.sizes)
            shards, cover = _cover_on_workers(client, shards, plan.owner, grid, **color)
        summaries = client.gather(
            client.map(shard_summary, shards, col_bounds=plan.col_bounds, pure=False)
        )
    except DuplicatePair as pair:
        raise InputError(_duplicate_message(client, source, readers, labels, pair)) from None
    client.run(release_freed_memory)
    return shards, cover, summaries


def _mean_and_spread(client, shards: list, summaries: list, n_ratings: int) -> tuple[float, float]:
    """Return the ratings' mean and spread, reduced as hamsi.data.moments does (module step 6)."""
    mean = mean_of(np.concatenate([s[0] for s in summaries]), n_ratings)
    squares = client.gather(client.map(squared_deviations, shards, mean=mean, pure=False))
    return mean, float(np.sqrt(mean_of(np.concatenate(squares), n_ratings)))


def _worker_ratings(
    client, labels: list, readers: list, counted: _Counted, plan: _ShardPlan, placed: tuple
) -> WorkerRatings:
    """Return the WorkerRatings of the placed shards, with their moments and the test pairs' futures."""
    shards, cover, summaries = placed
    n_ratings, row_counts, col_counts = counted.n_ratings, counted.row_counts, counted.col_counts
    mean, spread = _mean_and_spread(client, shards, summaries, n_ratings)
    return WorkerRatings(
        client=client,
        labels=labels,
        user_ids=counted.user_ids,
        item_ids=counted.item_ids,
        row_counts=row_counts,
        col_counts=col_counts,
        n_test=counted.n_test,
        cover=cover,
        owner=plan.owner,
        sizes=plan.sizes,
        shards=shards,
        homes=v_homes([s[3] for s in summaries], plan.col_bounds.size - 1),
        mean=mean,
        rating_min=min(s[1] for s in summaries),
        rating_max=max(s[2] for s in summaries),
        statistics=RatingStatistics(
            n_ratings, spread, int(max(row_counts.max(), col_counts.max()))
        ),
        test=_test_pairs(client, readers, counted.where),
        n_test_pairs=counted.n_test_pairs,
    )


def _test_split_of(source, test_fraction: float, test_seed) -> tuple:
    """Return (the ratings, test fraction, test seed) of a TestSplit source, or of the keywords."""
    if isinstance(source, TestSplit):
        return source.source, source.fraction, source.seed
    return source, test_fraction, test_seed


def _test_pairs(client, readers: list, where: dict) -> list:
    """Return futures of every partition's TestPairs, built and kept where each partition is read (none without a test split)."""
    if not where["test_fraction"] > 0:
        return []
    return over_partitions(
        client,
        readers,
        test_pairs,
        ids=where["ids"],
        test_fraction=where["test_fraction"],
        test_seed=where["test_seed"],
    )


def _routing_cover(scheme: str, shape: tuple, row_counts, col_counts, n_blocks: int) -> tuple:
    """Return (the GridCover the ratings are routed by, its row bounds, the cover's col bounds).

    STRATA/-B: the cover itself, cut from the counts. COLOR/-B and HOGWILD: equal intervals, as
    MatrixFactorization.shard_bounds cuts a cover without strata; the ratings are routed in
    position order (one subset) and colored or split on their hosts.
    """
    if scheme in ("strata", "strata-b"):
        routed = GridCover(scheme, shape, *grid_bounds(scheme, row_counts, col_counts, n_blocks))
        return routed, routed.row_bounds, routed.col_bounds
    rb, cb = equal_bounds(shape[0], n_blocks), equal_bounds(shape[1], n_blocks)
    return GridCover("position", shape, rb, np.array([0, shape[1]], dtype=np.int64)), rb, cb


def _cover_on_workers(client, shards, owner, grid, *, scheme, n_subsets, seed) -> tuple:
    """Return (the shards in the cover's engine order, the ShardedCover) of COLOR/-B or HOGWILD.

    grid: (shape, row bounds, col bounds, training ratings per row shard) of the routed shards.
    """
    shape, rb, cb, sizes = grid
    if scheme == "hogwild":
        return hogwild_shards(
            client, shards, owner, shape, rb, cb, sizes, n_subsets=n_subsets, seed=seed
        )
    return color_shards(
        client, shards, owner, shape, rb, cb, scheme=scheme, n_subsets=n_subsets, seed=seed
    )


def _color_subsets(n_subsets, n_ratings: int) -> int:
    """Return K for a COLOR/-B or HOGWILD cover: partition.registry's default and checks."""
    n_subsets = DEFAULT_SUBSETS if n_subsets is None else n_subsets
    if isinstance(n_subsets, bool) or not isinstance(n_subsets, (int, np.integer)) or n_subsets < 1:
        raise InputError(f"subsets must be a positive integer; got {n_subsets!r}")
    if n_subsets > n_ratings:
        raise InputError(f"subsets={n_subsets} is larger than the number of ratings ({n_ratings})")
    return int(n_subsets)


def _duplicate_message(client, source, readers: list, labels: list, pair: DuplicatePair) -> str:
    """Return the InputError text of a repeated pair: both occurrences' file (or partition) and row.

    The row is the file's: a piece of a file adds the rows before it (cluster.sources.rows_before).
    """
    found = sorted(set(pair.partitions))
    before = rows_before(client, source, found)
    rows = dict(
        zip(
            found,
            client.gather(
                over_partitions(
                    client,
                    [readers[f] for f in found],
                    rows_of_pair,
                    user=pair.user,
                    item=pair.item,
                )
            ),
        )
    )
    where = [(f, rows[f].pop(0) + before[f]) for f in pair.partitions]
    return f"duplicate (user, item) pair ({pair.user}, {pair.item}) in " + " and ".join(
        f"{labels[f]} row {row}" for f, row in where
    )


def _name(source) -> str:
    """Return how error messages call the source."""
    return os.fspath(source) if isinstance(source, (str, os.PathLike)) else "Dask DataFrame"


def _tree(client, merge, futures):
    """Return one future: `merge` applied on the workers in groups of MERGE_FANIN until one is left."""
    while len(futures) > 1:
        futures = [
            client.submit(merge, *futures[i : i + MERGE_FANIN], pure=False)
            for i in range(0, len(futures), MERGE_FANIN)
        ]
    return futures[0] if len(futures) == 1 else client.submit(merge, futures[0], pure=False)
