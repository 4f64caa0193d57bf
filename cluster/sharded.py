"""The factorization of ratings kept on the workers: its cover, its problem and its layout.

`GridCover` is the STRATA/-B cover computed from the counts alone; `ShardedFactorization` is
hamsi.problems.MatrixFactorization over the row shards that cluster.dataset built on the workers,
and `WorkerLayout` places its shard data and builds its start there (the same start, biases and
engine order as in process, so the iterates are the in-process ones).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from cluster.layout import FactorLayout
from cluster.placement import ShardData, set_v_homes, touched_items
from cluster.plan import FactorConfig
from cluster.routing import ShardRatings
from cluster.shard import CommonState, ShardState
from cluster.spectral_start import worker_spectral_factors
from hamsi.data.moments import sum_in_order
from hamsi.problems.matrix_factorization import (
    BiasShard,
    bias_weight,
    check_init_factors,
    check_penalty,
    heldout_range,
    penalty_weights,
)
from hamsi.stepper import engine_rngs
from partition.strata import balanced_bounds_of_counts, equal_length_bounds

# normals drawn per call when a host skips the start stream up to its rows
DRAW_CHUNK = 1 << 20
BIAS_SWEEPS = 10


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


def skipped_stream(init_rng, skip: int):
    """Return a copy of the engine's init stream after its first `skip` normals (drawn in chunks: the same numbers)."""
    rng = copy.deepcopy(init_rng)  # the stream's start, whoever else draws from the same object
    while skip > 0:
        step = min(skip, DRAW_CHUNK)
        rng.standard_normal(step)
        skip -= step
    return rng


def _factor_rows(init_rng, skip, n_rows, start: StartSpec, bias, spectral=None):
    """Return n_rows x width start rows: N(0, 1) times init_scale plus the spectral start's rows (as `initial_point`), the bias column set."""
    out = np.zeros((n_rows, start.width))
    normals = skipped_stream(init_rng, skip).standard_normal(n_rows * start.rank)
    out[:, : start.rank] = normals.reshape(n_rows, start.rank)
    if start.init_scale != 1.0:
        out *= start.init_scale
    if bias is not None:
        out[:, start.rank] = bias
    if spectral is not None:
        out[:, : start.rank] += spectral
    return out


def _shard_start(
    shard: int, lo: int, hi: int, start: StartSpec, row_bias, memory: int, spectral=None
) -> ShardState:
    """Return row shard `shard`'s start state: U_p from the init stream, zero memory rows."""
    U = _factor_rows(start.init_rng, lo * start.rank, hi - lo, start, row_bias, spectral)
    size = U.size
    return ShardState(
        shard, U, np.zeros((memory, size)), np.zeros((memory, size)), np.zeros(size), np.zeros(size)
    )


def _common_start(start: StartSpec, col_bias, memory: int, spectral=None) -> CommonState:
    """Return the replicated start: V from the init stream (after all of U's normals), zero memory rows."""
    V = _factor_rows(
        start.init_rng, start.shape[0] * start.rank, start.shape[1], start, col_bias, spectral
    )
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
    if scheme == "strata":
        return equal_length_bounds(row_counts.size, n_blocks), equal_length_bounds(
            col_counts.size, n_blocks
        )
    return balanced_bounds_of_counts(row_counts, n_blocks), balanced_bounds_of_counts(
        col_counts, n_blocks
    )


class ShardedFactorization:
    """hamsi.problems.MatrixFactorization whose ratings are row shards on the workers (WorkerRatings).

    It answers what the Dask driver asks of a problem (shapes, arrange, shard_bounds) and brings its
    own layout (`worker_layout`): shard data and start states built on the hosts. Same objective,
    same start, same engine order: the iterates are the in-process ones.
    """

    metric = "rmse"

    def __init__(
        self,
        ratings,
        rank,
        *,
        reg,
        biases,
        reg_weighting,
        init_scale,
        init_biases,
        reg_damping: float = 0.0,
        init_factors: str = "random",
        clip_heldout: bool = True,
    ):
        check_penalty(reg_weighting, reg_damping)
        check_init_factors(init_factors)
        self.ratings = ratings
        self.shape = ratings.shape
        self.rank, self.reg, self.biases = int(rank), float(reg), bool(biases)
        self.reg_weighting, self.reg_damping, self.init_scale = (
            reg_weighting,
            float(reg_damping),
            float(init_scale),
        )
        self.init_biases = bool(init_biases) and self.biases
        self.init_factors = init_factors
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
        dU, dV = self._spectral(client, start, row_bias, col_bias)
        states = {
            p: client.submit(
                _shard_start,
                p,
                int(rb[p]),
                int(rb[p + 1]),
                start,
                None if row_bias is None else row_bias[p],
                memory,
                None if dU is None else dU[rb[p] : rb[p + 1]],
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
                dV,
                workers=[a],
                allow_other_workers=False,
                pure=False,
            )
            for a in used
        }
        return states, commons

    def _spectral(self, client, start: StartSpec, row_bias, col_bias):
        """Return (dU, dV) of the spectral start (cluster.spectral_start), or (None, None)."""
        problem = self.problem
        if problem.init_factors != "spectral":
            return None, None
        m, n = problem.shape
        rng = skipped_stream(start.init_rng, (m + n) * problem.rank)
        return worker_spectral_factors(client, self.ratings, problem, row_bias, col_bias, rng)

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
