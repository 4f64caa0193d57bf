"""Place the ratings on workers: row shards of U are the unit, each rating goes to its row's shard.

Shards follow the in-process engine (`MatrixFactorization.shard_bounds`): U_0..U_{B-1} are the row
intervals (partition.row_bounds for STRATA/-B, else B equal intervals) and V_0..V_{B-1} the column
intervals. Shard p holds every rating whose user row lies in U_p, per subset k in the order the
engine's gradient visits them (block by block, each block in its rating order), so the gradient of
U_p is complete on its host and accumulates in the engine's order. Workers only host shards; B shards
may sit on fewer workers (after a failure, or when B > workers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# A subset's gV partial touches some item rows; when they fill at least this share of their
# range, a contiguous slice (cheap to zero, copy and send) beats an index array.
DENSE_RANGE_SHARE = 0.5


@dataclass
class ShardData:
    """The ratings of row shard `shard` (rows row_lo..row_hi-1), placed once on its host.

    rows[k] (local: global row - row_lo), cols[k], vals[k]: the shard's ratings of subset k in the
    engine's order. touched[k] is the item rows its gV partial writes: (lo, hi) or an index array.
    row_reg is the shard's slice of the engine's per-user regularization weights (empty for reg 0).
    v_home[k] = j when this shard alone touches item shard V_j in subset k and touches nothing else
    (STRATA/-B): then its gV partial over V_j is the full gV there, and it reduces V_j's partials
    itself instead of every worker doing it (see `assign_v_homes`); -1 otherwise.
    """

    shard: int
    row_lo: int
    row_hi: int
    rows: list
    cols: list
    vals: list
    touched: list
    row_reg: np.ndarray
    row_norm_weight: np.ndarray
    test_rows: np.ndarray
    test_cols: np.ndarray
    test_vals: np.ndarray
    v_home: list = field(default_factory=list)

    @property
    def n_ratings(self) -> int:
        """The number of ratings of this shard (over all subsets)."""
        return int(sum(v.size for v in self.vals))


def touched_items(cols: np.ndarray):
    """Return the item rows a gradient over `cols` writes: (lo, hi) when dense enough, else indices."""
    if cols.size == 0:
        return (0, 0)
    unique = np.unique(cols)
    lo, hi = int(unique[0]), int(unique[-1]) + 1
    if unique.size >= DENSE_RANGE_SHARE * (hi - lo):
        return (lo, hi)
    return unique.astype(np.int64)


def split_by_row_shard(problem, row_bounds: np.ndarray, heldout=None) -> list[ShardData]:
    """Return one ShardData per row interval of `row_bounds`, from an arranged MatrixFactorization.

    heldout (Ratings or None): test ratings, split by row the same way (for the trace's test RMSE).

    `problem.arrange(partition)` must have been called: its rows/cols/vals are then stored subset
    after subset, each block contiguous, so filtering a subset's slice by row keeps the engine order.
    """
    layout = problem.layout
    n_shards = len(row_bounds) - 1
    shard_of_row = np.repeat(np.arange(n_shards), np.diff(row_bounds))
    pieces = [dict(rows=[], cols=[], vals=[], touched=[]) for _ in range(n_shards)]
    for k in range(layout.n_subsets):
        lo = int(layout.starts[k][0]) if len(layout.starts[k]) else 0
        hi = int(layout.ends[k][-1]) if len(layout.ends[k]) else 0
        rows, cols, vals = problem.rows[lo:hi], problem.cols[lo:hi], problem.vals[lo:hi]
        owner = shard_of_row[rows]
        # a stable sort by shard keeps the (block, position) order within every shard
        by_shard = np.argsort(owner, kind="stable")
        cuts = np.searchsorted(owner[by_shard], np.arange(n_shards + 1))
        for p in range(n_shards):
            take = by_shard[cuts[p] : cuts[p + 1]]
            piece = pieces[p]
            piece["rows"].append(np.ascontiguousarray(rows[take] - row_bounds[p], dtype=np.int32))
            piece["cols"].append(np.ascontiguousarray(cols[take], dtype=np.int32))
            piece["vals"].append(np.ascontiguousarray(vals[take], dtype=np.float64))
            piece["touched"].append(touched_items(cols[take]))
    row_weight = problem.row_norm_weight  # the engine's own weights of |U_a|^2 in the objective
    if heldout is not None:
        test_rows = np.asarray(heldout.rows, dtype=np.int64)
        test_owner = shard_of_row[test_rows]
    out = []
    for p in range(n_shards):
        lo, hi = int(row_bounds[p]), int(row_bounds[p + 1])
        reg = problem.row_reg[lo:hi].copy() if problem.row_reg.size else np.zeros(0)
        weight = np.ascontiguousarray(row_weight[lo:hi])
        if heldout is not None:
            mine = test_owner == p
            test = (
                np.ascontiguousarray(test_rows[mine] - lo, dtype=np.int32),
                np.ascontiguousarray(heldout.cols[mine], dtype=np.int32),
                np.ascontiguousarray(heldout.values[mine], dtype=np.float64),
            )
        else:
            test = (np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0))
        out.append(
            ShardData(
                p,
                lo,
                hi,
                row_reg=reg,
                row_norm_weight=weight,
                test_rows=test[0],
                test_cols=test[1],
                test_vals=test[2],
                **pieces[p],
            )
        )
    return out


def assign_shards(n_shards: int, workers: list[str], sizes=None) -> dict[int, str]:
    """Return {shard: worker address}: contiguous runs of shards, balanced by `sizes` (ratings).

    With as many workers as shards this is shard p -> workers[p]. Every worker gets >= 1 shard
    when n_shards >= len(workers); extra workers get none.
    """
    n_workers = min(len(workers), n_shards)
    sizes = np.ones(n_shards) if sizes is None else np.asarray(sizes, dtype=np.float64)
    if n_workers == n_shards:
        return {p: workers[p] for p in range(n_shards)}
    # cut the cumulative load at multiples of total / n_workers, keeping every group non-empty
    cumulative = np.cumsum(sizes)
    targets = cumulative[-1] * np.arange(1, n_workers) / n_workers
    cuts = np.searchsorted(cumulative, targets, side="left") + 1
    for i in range(len(cuts)):
        cuts[i] = min(max(cuts[i], (cuts[i - 1] if i else 0) + 1), n_shards - (n_workers - 1 - i))
    bounds = np.concatenate([[0], cuts, [n_shards]])
    return {p: workers[w] for w in range(n_workers) for p in range(bounds[w], bounds[w + 1])}


def assign_v_homes(datas: list[ShardData], col_bounds: np.ndarray) -> None:
    """Set every ShardData's v_home (and widen its touched rows to the whole V_j it is home of).

    A row shard is the home of item shard V_j in subset k when it is the only shard whose subset-k
    ratings touch V_j's items and those ratings touch no other item shard: STRATA/-B blocks. Its
    touched rows become V_j's full interval, so its partial gV there is exactly the assembled gV.
    """
    homes = v_homes([touched_v_shards(d.cols, col_bounds) for d in datas], len(col_bounds) - 1)
    for d, mine in zip(datas, homes):
        set_v_homes(d, mine, col_bounds)


def touched_v_shards(cols_per_subset: list, col_bounds: np.ndarray) -> list:
    """Return, per subset, the item shards V_j a row shard's ratings touch (sorted)."""
    v_of_col = np.repeat(np.arange(len(col_bounds) - 1), np.diff(col_bounds))
    return [np.unique(v_of_col[cols]) for cols in cols_per_subset]


def v_homes(touching: list, n_v: int) -> list:
    """Return homes[p][k]: j when row shard p alone touches V_j in subset k and nothing else, else -1.

    touching[p][k]: the item shards shard p's subset-k ratings touch (`touched_v_shards`); the Dask
    data path gathers these small lists from the shards' hosts.
    """
    n_subsets = len(touching[0]) if touching else 0
    homes = [[-1] * n_subsets for _ in touching]
    for k in range(n_subsets):
        sets = [t[k] for t in touching]
        counts = (
            np.bincount(np.concatenate(sets).astype(np.int64), minlength=n_v)
            if sets
            else np.zeros(n_v, int)
        )
        for p, js in enumerate(sets):
            if js.size == 1 and counts[js[0]] == 1:
                homes[p][k] = int(js[0])
    return homes


def set_v_homes(data: ShardData, homes: list, col_bounds: np.ndarray) -> None:
    """Set data.v_home and widen touched[k] to V_j's interval where the shard is V_j's home."""
    data.v_home = list(homes)
    for k, j in enumerate(homes):
        if j >= 0:
            data.touched[k] = (int(col_bounds[j]), int(col_bounds[j + 1]))
