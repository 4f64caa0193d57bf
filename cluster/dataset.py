"""Ratings read, indexed, split and placed on the Dask workers: the data path of a distributed fit.

A Dask DataFrame, or a path, directory or glob of Parquet / CSV files (one partition per file, read
by a task on a worker), goes to its row shards without ever passing through the client:

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
5. route   a pass counts each partition's ratings per (row shard, subset k = block (p, (p + k) mod B));
           from these counts the client knows where every piece goes. Each shard is allocated
           at its final size on its host, then the partitions are cut by row shard a window at a
           time and every piece is copied into its place: subset k, then position, the order in
           which `MatrixFactorization.arrange` stores block (p, k) in process (cluster.routing).
           Duplicate pairs are found there (a pair lives in one block).
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

import copy
import glob
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cluster.layout import FactorLayout
from cluster.placement import ShardData, assign_shards, set_v_homes, touched_items, v_homes
from cluster.plan import FactorConfig
from cluster.routing import (
    DuplicatePair,
    PiecePlaces,
    ShardRatings,
    block_counts,
    cut_pieces,
    empty_shard,
    fill_shard,
    finish_shard,
    release_freed_memory,
)
from cluster.shard import CommonState, ShardState
from hamsi.data.moments import RatingStatistics, mean_of, sum_in_order
from hamsi.data.ratings import _LOOKUP_SLACK, _as_integer_ids, dense_index, heldout_mask
from hamsi.errors import InputError
from hamsi.problems.matrix_factorization import (
    BiasShard,
    bias_weight,
    check_penalty,
    heldout_range,
    penalty_weights,
)
from hamsi.training import TrainingFacts

if TYPE_CHECKING:
    import pandas as pd

SCHEMES = ("strata", "strata-b")
FILE_KINDS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
# ids merged per task when reducing the partitions' distinct ids and counts (a tree on the workers)
MERGE_FANIN = 8
# normals drawn per call when a host skips the start stream up to its rows
DRAW_CHUNK = 1 << 20
BIAS_SWEEPS = 10
# partitions cut per window of the routing, per worker (cluster.routing: at most two windows in flight)
ROUTE_WINDOW = 2


# --------------------------------------------------------------------------- sources
def is_distributed_source(source) -> bool:
    """True for a Dask DataFrame, a glob, or a directory of Parquet/CSV files (not a MovieLens directory)."""
    if (type(source).__module__ or "").startswith("dask") and hasattr(source, "columns"):
        return True
    if not isinstance(source, (str, os.PathLike)):
        return False
    text = os.fspath(source)
    if glob.has_magic(text):
        return True
    return os.path.isdir(text) and bool(_files_in(text))


def _files_in(directory: str) -> list:
    """Return the Parquet (else CSV) files of a directory, sorted by name."""
    names = sorted(os.listdir(directory))
    for kind in ("parquet", "csv"):
        found = [
            os.path.join(directory, f)
            for f in names
            if FILE_KINDS.get(os.path.splitext(f)[1].lower()) == kind
        ]
        if found:
            return found
    return []


def source_files(source) -> tuple[list, str]:
    """Return (files sorted by name, "parquet" or "csv") of a path, directory or glob; InputError if none."""
    text = os.fspath(source)
    if os.path.isdir(text):
        files = _files_in(text)
    elif glob.has_magic(text):
        files = sorted(f for f in glob.glob(text) if os.path.isfile(f))
    else:
        files = [text] if os.path.isfile(text) else []
    if not files:
        raise InputError(f"{text}: matches no Parquet or CSV file")
    kinds = {FILE_KINDS.get(os.path.splitext(f)[1].lower()) for f in files}
    if len(kinds) != 1 or None in kinds:
        raise InputError(
            f"{text}: the files must all be .parquet or all .csv; got {sorted(map(str, kinds))}"
        )
    return files, kinds.pop()


def read_rating_file(path: str, kind: str, columns) -> pd.DataFrame:
    """Return the checked (user, item, rating) frame of one Parquet or CSV file (a task on a worker)."""
    import pyarrow as pa

    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path)
        else:
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: not a readable {kind} file: {exc}") from None
    return checked_frame(table.to_pandas(), columns, path)


def checked_frame(frame, columns, label: str):
    """Return frame's (user, item, rating) columns as int64, int64, float64; InputError naming label, row, column."""
    import pandas as pd

    from hamsi.data.readers import _pick_columns

    names = [str(c) for c in frame.columns]
    use = [frame.columns[k] for k in _pick_columns(names, columns, label)]
    out = {}
    for key, name in zip(("user", "item"), use[:2]):
        out[key] = _as_integer_ids(
            frame[name].to_numpy(), f"{key} id (column {name!r})", lambda k: f"{label}: row {k}"
        )
    raw = frame[use[2]]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        k = int(np.argmax(bad))
        raise InputError(
            f"{label}: row {k}: rating {raw.iloc[k]!r} in column {use[2]!r} is not a finite number"
        )
    out["rating"] = values
    return pd.DataFrame(out)


def _pick_names(names, columns) -> list:
    """Return the (user, item, rating) column names of a Dask DataFrame (metadata only)."""
    from hamsi.data.readers import _pick_columns

    return [names[k] for k in _pick_columns([str(n) for n in names], columns, "Dask DataFrame")]


def partition_readers(source, columns=None) -> tuple[list, list]:
    """Return (a Delayed per partition giving its checked frame, a label per partition: file or partition number).

    Nothing is read here: every pass over the ratings (`over_partitions`) computes the readers again
    inside its own graph, so a worker holds a partition only while one task of that pass uses it.
    """
    import dask

    if isinstance(source, (str, os.PathLike)):
        files, kind = source_files(source)
        read = dask.delayed(read_rating_file, pure=False)
        return [read(f, kind, columns) for f in files], [str(f) for f in files]
    use = _pick_names(list(source.columns), columns)
    raw = source[use].to_delayed()
    labels = [f"Dask DataFrame partition {i}" for i in range(len(raw))]
    check = dask.delayed(checked_frame, pure=False)
    return [check(part, [0, 1, 2], label) for part, label in zip(raw, labels)], labels


def over_partitions(client, readers: list, task, **kwargs) -> list:
    """Return futures of task(frame, **kwargs) for each reader's frame, read and used in one graph.

    One graph per pass: dask.order runs each partition's task right after its read, so the frame
    is released at once (a separate graph would read every partition before the first task).
    """
    import dask

    apply = dask.delayed(task, pure=False)
    return client.compute([apply(reader, **kwargs) for reader in readers])


# --------------------------------------------------------------------------- worker tasks
def _distinct_ids(frame) -> tuple:
    """Return (rows, sorted distinct users, sorted distinct items) of one partition (`dense_index`'s)."""
    return (
        len(frame),
        dense_index(frame["user"].to_numpy())[0],
        dense_index(frame["item"].to_numpy())[0],
    )


def _merge_distinct(*parts) -> tuple:
    """Return the merged (rows, distinct users, distinct items) of several `_distinct_ids` results."""
    return (
        sum(p[0] for p in parts),
        dense_index(np.concatenate([p[1] for p in parts]))[0],
        dense_index(np.concatenate([p[2] for p in parts]))[0],
    )


def _positions(sorted_ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Return each value's index among sorted_ids (all present): a lookup table for small ids, else a search.

    The table is `dense_index`'s rule (MovieLens ids are small): O(n + max id) instead of n log(ids).
    """
    if (
        sorted_ids.size
        and sorted_ids[0] >= 0
        and sorted_ids[-1] < _LOOKUP_SLACK * values.size + (1 << 20)
    ):
        table = np.empty(int(sorted_ids[-1]) + 1, dtype=np.int32)
        table[sorted_ids] = np.arange(sorted_ids.size, dtype=np.int32)
        return table[values]
    return np.searchsorted(sorted_ids, values).astype(np.int32)


def _ids_only(distinct: tuple) -> tuple:
    """Return (None, users, items) of a merged `_distinct_ids` (the count is not needed downstream)."""
    return None, distinct[1], distinct[2]


def _dense(frame, ids: tuple, fraction: float, seed) -> tuple:
    """Return the partition's dense rows and cols (int32), ratings and held-out flags (`heldout_mask`)."""
    users, items = frame["user"].to_numpy(), frame["item"].to_numpy()
    held = (
        heldout_mask(users, items, fraction, seed)
        if fraction > 0
        else np.zeros(len(frame), dtype=bool)
    )
    return _positions(ids[1], users), _positions(ids[2], items), frame["rating"].to_numpy(), held


def _counts(frame, ids, fraction, seed, shape) -> tuple:
    """Return (training ratings per user, per item, held-out ratings) of one partition."""
    rows, cols, _, held = _dense(frame, ids, fraction, seed)
    train = ~held
    return (
        np.bincount(rows[train], minlength=shape[0]),
        np.bincount(cols[train], minlength=shape[1]),
        int(np.count_nonzero(held)),
    )


def _merge_counts(*parts) -> tuple:
    """Return the sums of several `_counts` results (integers: the order does not matter)."""
    return tuple(sum(p[i] for p in parts) for i in range(3))


def _block_counts(frame, ids, fraction, seed, row_bounds, col_bounds) -> np.ndarray:
    """Return the partition's ratings per (row shard, subset) and held out per shard (`routing.block_counts`)."""
    rows, cols, _, held = _dense(frame, ids, fraction, seed)
    return block_counts(rows, cols, held, row_bounds, col_bounds)


def _cut_by_shard(frame, ids, fraction, seed, row_bounds) -> list:
    """Return the partition cut into one `routing.Piece` per row shard (indexed again: nothing kept between passes)."""
    return cut_pieces(*_dense(frame, ids, fraction, seed), row_bounds)


def _piece(pieces: list, shard: int):
    """Return one shard's piece of a cut partition (a small task, next to the cut)."""
    return pieces[shard]


def _rows_of_pair(frame, user, item) -> list:
    """Return the rows of the partition that hold the raw (user, item) pair (the duplicate message)."""
    return np.flatnonzero(
        (frame["user"].to_numpy() == user) & (frame["item"].to_numpy() == item)
    ).tolist()


def _shard_summary(data: ShardRatings) -> tuple:
    """Return (per-user value sums, rating min, max, item shards touched per subset): small, for the client."""
    if data.vals.size:
        low, high = float(data.vals.min()), float(data.vals.max())
    else:
        low, high = np.inf, -np.inf
    return data.value_sums, low, high, data.touched_v_shards()


def _squares(data: ShardRatings, mean: float) -> np.ndarray:
    """Return the shard's per-user sums of (v - mean)^2 in position order (`squared_deviation_sums`'s terms)."""
    return data.user_sums(lambda vals: (vals - mean) ** 2)


def _bias_shard(data: ShardRatings, offset: float) -> BiasShard:
    """Return the shard's BiasShard in position order, as MatrixFactorization.ridge_biases builds it.

    Built once per shard for the sweeps; the sweep tasks take shallow copies (tasks never mutate
    their inputs).
    """
    rows, cols, vals = data.in_position_order()
    return BiasShard(rows, cols, vals - offset, data.row_hi - data.row_lo)


def _col_partial(base: BiasShard, row_bias, n_items):
    """Return one sweep's item sums of this shard (BiasShard.col_partial on its host)."""
    shard = copy.copy(base)
    if row_bias is not None:
        shard.row_bias = row_bias
    return shard.col_partial(n_items)


def _item_bias(col_counts, reg, reg_weighting, damping, *partials):
    """Return the item biases from the shards' partial sums, reduced in shard order (`sum_in_order`)."""
    col_sums = sum_in_order(partials)
    weight = bias_weight(col_counts, reg, reg_weighting, damping)
    return np.divide(col_sums, weight, out=np.zeros(col_sums.size), where=col_counts > 0)


def _row_bias(base: BiasShard, col_bias, reg, reg_weighting, damping):
    """Return the shard's user biases given the item biases (BiasShard.solve_rows on its host)."""
    return copy.copy(base).solve_rows(col_bias, reg, reg_weighting, damping)


def _shard_data(
    data: ShardRatings, homes: list, col_bounds, reg: float, reg_weighting: str, damping: float
) -> ShardData:
    """Return the ShardData the chunk tasks read (cluster.placement), built on the shard's host."""
    counts = np.bincount(data.rows, minlength=data.row_hi - data.row_lo).astype(np.float64)
    row_reg, row_norm_weight = penalty_weights(reg, counts, reg_weighting, damping)
    cols = data.subsets("cols")
    out = ShardData(
        data.shard,
        data.row_lo,
        data.row_hi,
        data.subsets("rows"),
        cols,
        data.subsets("vals"),
        [touched_items(c) for c in cols],
        row_reg,
        row_norm_weight,
        data.test_rows,
        data.test_cols,
        data.test_vals,
    )
    set_v_homes(out, homes, col_bounds)
    return out


def _normals(init_rng, skip: int, count: int) -> np.ndarray:
    """Return normals skip..skip+count-1 of the engine's init stream (drawn in chunks: the same numbers)."""
    rng = copy.deepcopy(init_rng)  # the stream's start, whoever else draws from the same object
    while skip > 0:
        step = min(skip, DRAW_CHUNK)
        rng.standard_normal(step)
        skip -= step
    return rng.standard_normal(count)


def _factor_rows(init_rng, skip, n_rows, start: StartSpec, bias):
    """Return n_rows x width start rows: N(0, 1) times init_scale (as `initial_point`), the bias column set."""
    out = np.zeros((n_rows, start.width))
    out[:, : start.rank] = _normals(init_rng, skip, n_rows * start.rank).reshape(n_rows, start.rank)
    if start.init_scale != 1.0:
        out *= start.init_scale
    if bias is not None:
        out[:, start.rank] = bias
    return out


def _shard_start(
    shard: int, lo: int, hi: int, start: StartSpec, row_bias, memory: int
) -> ShardState:
    """Return row shard `shard`'s start state: U_p from the init stream, zero memory rows."""
    U = _factor_rows(start.init_rng, lo * start.rank, hi - lo, start, row_bias)
    size = U.size
    return ShardState(
        shard, U, np.zeros((memory, size)), np.zeros((memory, size)), np.zeros(size), np.zeros(size)
    )


def _common_start(start: StartSpec, col_bias, memory: int) -> CommonState:
    """Return the replicated start: V from the init stream (after all of U's normals), zero memory rows."""
    V = _factor_rows(start.init_rng, start.shape[0] * start.rank, start.shape[1], start, col_bias)
    size = V.size
    return CommonState(
        V,
        np.zeros((memory, size)),
        np.zeros((memory, size)),
        np.zeros(size),
        np.zeros(size),
        None,
        None,
    )


@dataclass(frozen=True)
class StartSpec:
    """What a host needs to draw its start rows: the engine's init rng (stepper.engine_rngs), shape, rank, scale."""

    init_rng: object
    shape: tuple
    rank: int
    width: int
    init_scale: float


# --------------------------------------------------------------------------- the client side
@dataclass
class GridCover:
    """The STRATA / STRATA-B cover of ratings on the workers: its intervals (the blocks are implied).

    Subset k holds blocks (p, (p + k) mod B) (partition.strata); `arrange` and `shard_bounds` are what
    the driver asks of a problem and its partition.
    """

    scheme: str
    shape: tuple
    row_bounds: np.ndarray
    col_bounds: np.ndarray

    @property
    def n_subsets(self) -> int:
        """K = B subsets of B blocks each."""
        return self.row_bounds.size - 1


def grid_bounds(
    scheme: str, row_counts: np.ndarray, col_counts: np.ndarray, n_blocks: int
) -> tuple:
    """Return (row bounds, col bounds) of STRATA (equal lengths) or STRATA-B (balanced by the counts)."""
    from partition.strata import balanced_bounds_of_counts, equal_length_bounds

    if scheme == "strata":
        return equal_length_bounds(row_counts.size, n_blocks), equal_length_bounds(
            col_counts.size, n_blocks
        )
    return balanced_bounds_of_counts(row_counts, n_blocks), balanced_bounds_of_counts(
        col_counts, n_blocks
    )


class WorkerRatings:
    """Ratings that live on the workers, as row shards: read, indexed, split, routed (module steps 1-6).

    The client keeps the sorted distinct ids, the per-user and per-item counts, the intervals and
    futures. `statistics` are what hamsi.defaults reads; `problem(...)` turns them into a
    `ShardedFactorization` the driver runs.
    """

    def __init__(
        self,
        client,
        source,
        *,
        columns=None,
        scheme="strata-b",
        n_blocks: int,
        heldout_fraction: float = 0.0,
        seed=None,
        workers=None,
    ):
        if scheme not in SCHEMES:
            raise InputError(
                f"ratings on the workers need partitioner strata or strata-b (its blocks follow "
                f"from the counts alone); got {scheme!r}"
            )
        self.client = client
        readers, self.labels = partition_readers(source, columns)
        distinct = _tree(client, _merge_distinct, over_partitions(client, readers, _distinct_ids))
        n_read, users, items = client.gather(distinct)
        if n_read == 0:
            raise InputError(f"{_name(source)} holds no ratings")
        self.user_ids, self.item_ids = users, items
        self.shape = (int(users.size), int(items.size))
        ids = client.submit(_ids_only, distinct, pure=False)
        where = dict(ids=ids, fraction=float(heldout_fraction), seed=seed)
        row_counts, col_counts, n_test = client.gather(
            _tree(
                client,
                _merge_counts,
                over_partitions(client, readers, _counts, shape=self.shape, **where),
            )
        )
        self.row_counts, self.col_counts, self.n_test = row_counts, col_counts, int(n_test)
        self.n_ratings = int(row_counts.sum())
        if self.n_ratings == 0:
            raise InputError(
                f"{_name(source)}: every rating was held out; lower the validation fraction"
            )
        n_blocks = min(int(n_blocks), min(self.shape))
        self.cover = GridCover(
            scheme, self.shape, *grid_bounds(scheme, row_counts, col_counts, n_blocks)
        )
        rb = self.cover.row_bounds
        cumulative = np.concatenate([[0], np.cumsum(row_counts)])
        self.sizes = [int(cumulative[rb[p + 1]] - cumulative[rb[p]]) for p in range(n_blocks)]
        self.owner = assign_shards(
            n_blocks, list(workers or client.scheduler_info()["workers"]), self.sizes
        )
        self.shards = self._route(readers, where)
        try:
            summaries = client.gather(client.map(_shard_summary, self.shards, pure=False))
        except DuplicatePair as pair:
            raise InputError(self._duplicate_message(readers, pair)) from None
        client.run(release_freed_memory)
        self.homes = v_homes([s[3] for s in summaries], self.cover.col_bounds.size - 1)
        value_sums = np.concatenate([s[0] for s in summaries])
        self.mean = mean_of(value_sums, self.n_ratings)
        squares = client.gather(client.map(_squares, self.shards, mean=self.mean, pure=False))
        spread = float(np.sqrt(mean_of(np.concatenate(squares), self.n_ratings)))
        self.rating_min = min(s[1] for s in summaries)
        self.rating_max = max(s[2] for s in summaries)
        self.statistics = RatingStatistics(
            self.n_ratings, spread, int(max(row_counts.max(), col_counts.max()))
        )

    def _route(self, readers: list, where: dict) -> list:
        """Return futures of the row shards' ShardRatings, built on their hosts (module step 5, cluster.routing).

        A pass counts every partition's ratings per (shard, subset); then the partitions are cut a
        window at a time and each piece is copied into its place in its shard. A window is submitted
        once the one before the last is in its shards: a worker holds the pieces of two windows at most.
        """
        from distributed import wait

        client, (rb, cb), owner = (
            self.client,
            (self.cover.row_bounds, self.cover.col_bounds),
            self.owner,
        )
        places = PiecePlaces.of(
            client.gather(
                over_partitions(
                    client, readers, _block_counts, row_bounds=rb, col_bounds=cb, **where
                )
            )
        )
        pinned = dict(allow_other_workers=True, pure=False)
        shards = [
            client.submit(
                empty_shard,
                p,
                rb[p],
                rb[p + 1],
                places.subset_cuts[p],
                int(places.test_starts[-1, p]),
                workers=[owner[p]],
                **pinned,
            )
            for p in range(rb.size - 1)
        ]
        window = ROUTE_WINDOW * len(set(owner.values()))
        earlier = []
        for first in range(0, len(readers), window):
            batch = range(first, min(first + window, len(readers)))
            cuts = over_partitions(
                client, [readers[f] for f in batch], _cut_by_shard, row_bounds=rb, **where
            )
            for f, cut in zip(batch, cuts):
                for p, shard in enumerate(shards):
                    train, test = (
                        places.train_starts[f : f + 2, p],
                        places.test_starts[f : f + 2, p],
                    )
                    if train[1] == train[0] and test[1] == test[0]:
                        continue
                    piece = client.submit(_piece, cut, p, pure=False)
                    shards[p] = client.submit(
                        fill_shard,
                        shard,
                        piece,
                        places.subset_starts[f, p],
                        int(train[0]),
                        int(test[0]),
                        cb,
                        workers=[owner[p]],
                        **pinned,
                    )
            with client.as_current():  # distributed.wait asks for the current client
                wait(earlier)
            earlier = list(shards)
        return [
            client.submit(
                finish_shard,
                shards[p],
                self.user_ids,
                self.item_ids,
                places.train_starts[:, p],
                places.test_starts[:, p],
                workers=[owner[p]],
                **pinned,
            )
            for p in range(rb.size - 1)
        ]

    def _duplicate_message(self, readers: list, pair: DuplicatePair) -> str:
        """Return the InputError text of a repeated pair: both occurrences' file (or partition) and row."""
        found = sorted(set(pair.partitions))
        rows = dict(
            zip(
                found,
                self.client.gather(
                    over_partitions(
                        self.client,
                        [readers[f] for f in found],
                        _rows_of_pair,
                        user=pair.user,
                        item=pair.item,
                    )
                ),
            )
        )
        where = [(f, rows[f].pop(0)) for f in pair.partitions]
        return f"duplicate (user, item) pair ({pair.user}, {pair.item}) in " + " and ".join(
            f"{self.labels[f]} row {row}" for f, row in where
        )

    def facts(self) -> TrainingFacts:
        """Return what a fitted model keeps: the range and mean, the ids, per-user counts (hamsi.training)."""
        return TrainingFacts(
            rating_min=float(self.rating_min),
            rating_max=float(self.rating_max),
            mean=float(self.mean),
            user_ids=np.asarray(self.user_ids),
            item_ids=np.asarray(self.item_ids),
            seen_indptr=np.concatenate([[0], np.cumsum(self.row_counts)]).astype(np.int64),
            seen_items=None,
            item_known=self.col_counts > 0,
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
            clip_heldout=clip_heldout,
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


class ShardedFactorization:
    """hamsi.problems.MatrixFactorization whose ratings are row shards on the workers (WorkerRatings).

    It answers what the Dask driver asks of a problem (shapes, arrange, shard_bounds) and brings its
    own layout (`worker_layout`): shard data and start states built on the hosts. Same objective,
    same start, same engine order: the iterates are the in-process ones.
    """

    metric = "rmse"

    def __init__(
        self,
        ratings: WorkerRatings,
        rank,
        *,
        reg,
        biases,
        reg_weighting,
        init_scale,
        init_biases,
        reg_damping: float = 0.0,
        clip_heldout: bool = True,
    ):
        check_penalty(reg_weighting, reg_damping)
        self.ratings = ratings
        self.shape = ratings.shape
        self.rank, self.reg, self.biases = int(rank), float(reg), bool(biases)
        self.reg_weighting, self.reg_damping, self.init_scale = (
            reg_weighting,
            float(reg_damping),
            float(init_scale),
        )
        self.init_biases = bool(init_biases) and self.biases
        self.width = self.rank + (1 if self.biases else 0)
        self.n_functions = ratings.n_ratings
        self.n_params = (self.shape[0] + self.shape[1]) * self.width
        self.scale = 1.0 / self.n_functions
        self.offset = ratings.mean if self.biases else 0.0
        self.rating_range = (
            ratings.rating_min,
            ratings.rating_max,
        )  # the workers' reduced training range
        self.heldout_range = heldout_range(self.rating_range, clip_heldout)
        self.col_reg, self.col_norm_weight = penalty_weights(
            self.reg, ratings.col_counts.astype(np.float64), reg_weighting, self.reg_damping
        )
        self.layout = None

    def arrange(self, cover: GridCover) -> GridCover:
        """The ratings are already in engine order on their hosts; return the cover (it has n_subsets)."""
        self.layout = cover
        return cover

    def shard_bounds(self, cover: GridCover) -> np.ndarray:
        """Return offsets of U_0..U_{B-1}, V_0..V_{B-1} in x (MatrixFactorization.shard_bounds)."""
        m = self.shape[0]
        return np.concatenate(
            [cover.row_bounds * self.width, (m + cover.col_bounds[1:]) * self.width]
        ).astype(np.int64)

    def factors(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return the views (U, V) of x."""
        split = self.shape[0] * self.width
        return x[:split].reshape(self.shape[0], self.width), x[split:].reshape(
            self.shape[1], self.width
        )

    def worker_layout(self, bounds) -> WorkerLayout:
        """Return the driver's layout of this problem (cluster.layout.layout_for asks for it)."""
        return WorkerLayout(self, bounds)


class WorkerLayout(FactorLayout):
    """FactorLayout whose shard data and start are built on the hosts (split/join as FactorLayout)."""

    builds_start = True

    def __init__(self, problem: ShardedFactorization, bounds):
        ratings, client = problem.ratings, problem.ratings.client
        self.problem, self.width, self.m = problem, problem.width, problem.shape[0]
        self.n_shards = (bounds.size - 1) // 2
        self.row_bounds = bounds[: self.n_shards + 1] // self.width
        self.ratings = ratings
        cb = ratings.cover.col_bounds
        self.datas = None
        self.shard_futures = [
            client.submit(
                _shard_data,
                ratings.shards[p],
                ratings.homes[p],
                cb,
                problem.reg,
                problem.reg_weighting,
                problem.reg_damping,
                workers=[ratings.owner[p]],
                allow_other_workers=True,
                pure=False,
            )
            for p in range(self.n_shards)
        ]
        n_v = cb.size - 1
        self.homes_complete = all(
            sorted(h[k] for h in ratings.homes) == list(range(n_v))
            for k in range(ratings.cover.n_subsets)
        )
        v_bounds = (cb * self.width).astype(np.int64)
        self.config = FactorConfig(
            rank=problem.rank,
            width=self.width,
            n_items=problem.shape[1],
            n_ratings=problem.n_functions,
            n_test=ratings.n_test,
            scale=problem.scale,
            offset=problem.offset,
            reg=problem.reg,
            col_reg=problem.col_reg,
            col_norm_weight=problem.col_norm_weight,
            n_subsets=ratings.cover.n_subsets,
            v_bounds=v_bounds,
            n_shards=self.n_shards,
            heldout_range=problem.heldout_range,
        )

    def sizes(self) -> list:
        """Training ratings per shard (placement balances them; the memory check reads them)."""
        return list(self.ratings.sizes)

    def place(self, client, shard: int, host: str):
        """Return a future of the shard's data on `host` (built there, or copied worker to worker)."""
        return client.submit(
            _same, self.shard_futures[shard], workers=[host], allow_other_workers=False, pure=False
        )

    def start_futures(self, client, owner: dict, used: list, memory: int, random_state=None):
        """Return ({shard: ShardState future}, {worker: CommonState future}), built on the hosts.

        The start is `MatrixFactorization.initial_point(engine_rngs(random_state)[0])`, each host
        drawing its rows of it.
        """
        from hamsi.stepper import engine_rngs

        problem = self.problem
        start = StartSpec(
            engine_rngs(random_state)[0],
            problem.shape,
            problem.rank,
            problem.width,
            problem.init_scale,
        )
        row_bias, col_bias = self._biases(client)
        rb = self.row_bounds
        states = {
            p: client.submit(
                _shard_start,
                p,
                int(rb[p]),
                int(rb[p + 1]),
                start,
                None if row_bias is None else row_bias[p],
                memory,
                workers=[owner[p]],
                allow_other_workers=False,
                pure=False,
            )
            for p in range(self.n_shards)
        }
        commons = {
            a: client.submit(
                _common_start,
                start,
                col_bias,
                memory,
                workers=[a],
                allow_other_workers=False,
                pure=False,
            )
            for a in used
        }
        return states, commons

    def _biases(self, client):
        """Return (per-shard user bias futures, item bias future) of the bias start, or (None, None)."""
        problem, ratings = self.problem, self.ratings
        if not problem.init_biases:
            return None, None
        counts = ratings.col_counts.astype(np.float64)
        bases = [
            client.submit(
                _bias_shard,
                ratings.shards[p],
                problem.offset,
                workers=[ratings.owner[p]],
                allow_other_workers=True,
                pure=False,
            )
            for p in range(self.n_shards)
        ]
        row_bias = [None] * self.n_shards
        col_bias = None
        for _ in range(BIAS_SWEEPS):
            partials = [
                client.submit(_col_partial, bases[p], row_bias[p], problem.shape[1], pure=False)
                for p in range(self.n_shards)
            ]
            col_bias = client.submit(
                _item_bias,
                counts,
                problem.reg,
                problem.reg_weighting,
                problem.reg_damping,
                *partials,
                pure=False,
            )
            row_bias = [
                client.submit(
                    _row_bias,
                    bases[p],
                    col_bias,
                    problem.reg,
                    problem.reg_weighting,
                    problem.reg_damping,
                    pure=False,
                )
                for p in range(self.n_shards)
            ]
        return row_bias, col_bias


def _same(value):
    """Return value unchanged (a copy of a shard's data on its new host)."""
    return value
