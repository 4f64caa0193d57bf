"""The state a worker keeps between epoch chunks, and the per-shard compute of one inner iteration.

Per row shard U_p (lives only on its host): U_p and its L-BFGS rows S[:, U_p], Y[:, U_p].
Replicated on every worker (kept identical because every worker applies the same deterministic
update): V, its L-BFGS rows S[:, V], Y[:, V], the compact memory (R, C, sigma; hamsi.lbfgs) and the
cycle counter. All arithmetic goes through the engine's kernels (hamsi.kernels) on the same shard
slices as the in-process engine, so the iterates agree with it (bit for bit for STRATA/STRATA-B).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from hamsi import kernels


@dataclass
class ShardState:
    """U_p (rows x width) and its memory rows S_p, Y_p (M x rows*width) of row shard `shard`."""

    shard: int
    U: np.ndarray
    S: np.ndarray
    Y: np.ndarray
    x_start: np.ndarray | None = None  # kept across chunks only with one subset (K = 1)
    g_start: np.ndarray | None = None

    def copy(self) -> "ShardState":
        """Return a deep copy (tasks never mutate their inputs: those are the chunk snapshots)."""
        keep = (None if self.x_start is None else self.x_start.copy(),
                None if self.g_start is None else self.g_start.copy())
        return ShardState(self.shard, self.U.copy(), self.S.copy(), self.Y.copy(), *keep)


@dataclass
class CommonState:
    """The replicated part: V (n x width), S_V, Y_V (M x n*width), the L-BFGS memory, cycles done."""

    V: np.ndarray
    S: np.ndarray
    Y: np.ndarray
    memory: object
    cycles_done: int = 0
    inner_done: int = 0
    extra: dict = field(default_factory=dict)

    def copy(self) -> "CommonState":
        """Return a deep copy."""
        return CommonState(self.V.copy(), self.S.copy(), self.Y.copy(), copy.deepcopy(self.memory),
                           self.cycles_done, self.inner_done, dict(self.extra))


def touched_view(gV: np.ndarray, touched):
    """Return the rows of gV named by `touched` ((lo, hi) -> a view; indices -> a copy)."""
    if isinstance(touched, tuple):
        return gV[touched[0]:touched[1]]
    return gV[touched]


def zero_touched(gV: np.ndarray, touched):
    """Set the rows of gV named by `touched` to zero."""
    if isinstance(touched, tuple):
        gV[touched[0]:touched[1]] = 0.0
    else:
        gV[touched] = 0.0


def add_touched(gV: np.ndarray, touched, rows: np.ndarray):
    """Add a shard's gV partial rows into the assembled gV (fixed shard order by the caller).

    Overlapping item rows (HOGWILD, COLOR blocks spanning shards) are summed, as a serial sweep of
    the blocks would do: no update is lost. Added onto zeros, a single contribution is exact.
    """
    if isinstance(touched, tuple):
        gV[touched[0]:touched[1]] += rows
    else:  # touched indices are unique (placement.touched_items), so a fancy += adds each row once
        gV[touched] += rows


class _StepWork:
    """What a U shard and the V replica share: x, g, their memory rows S, Y, the cycle-start copies.

    Subclasses set `memory_rows` (the object holding S and Y) and the x, g views.
    """

    memory_rows: ShardState | CommonState

    def store_pair(self, slot: int):
        """Write the new pair into memory row `slot` (Alg. 3, line 17, ring buffer)."""
        self.memory_rows.S[slot] = self.s_new[0]
        self.memory_rows.Y[slot] = self.y_new[0]

    def remember_start(self):
        """Keep x and g at the cycle's first inner iteration (Alg. 3, line 12)."""
        self.x_start[:] = self.x
        self.g_start[:] = self.g

    def step(self, coef, sigma: float, inv_beta: float):
        """Apply the L-BFGS step (coef given) or, with coef None, the gradient step (Alg. 3, l. 13).

        Elementwise, so V's shards need no split here.
        """
        if coef is None:
            kernels.shard_gradient_step(self.x, self.g, inv_beta)
        else:
            kernels.shard_lbfgs_step(self.x, self.g, self.memory_rows.S, self.memory_rows.Y, coef, sigma, inv_beta)


class ShardWork(_StepWork):
    """One hosted row shard during a chunk: data, state, gradient buffers, cycle-start copies, new pair."""

    def __init__(self, data, state: ShardState, n_items: int, memory: int):
        self.data = data
        self.state = state
        self.memory_rows = state
        self.gU = np.zeros_like(state.U)
        self.gV = np.zeros((n_items, state.U.shape[1]))  # this shard's partial of gV
        size = state.U.size
        self.x_start = np.zeros(size)
        self.g_start = np.zeros(size)
        self.s_new = np.empty((1, size))  # the candidate curvature pair (Alg. 3, line 14)
        self.y_new = np.empty((1, size))
        self.wtg = np.zeros(2 * memory)
        self.new_pair_g = np.zeros(2)
        self.pair = np.zeros(2 * memory + 2)
        self.v_wtg = np.zeros(2 * memory)
        self.v_pair = np.zeros(2 * memory + 2)
        self.v_new_pair_g = np.zeros(2)

    @property
    def x(self) -> np.ndarray:
        """U_p as a flat vector (a view)."""
        return self.state.U.reshape(-1)

    @property
    def g(self) -> np.ndarray:
        """gU_p as a flat vector (a view)."""
        return self.gU.reshape(-1)

    def gradient(self, k: int, V: np.ndarray, cfg) -> np.ndarray:
        """Return the gV partial rows after adding subset k's gradient on this shard (Alg. 3, l. 10).

        The shard's ratings of subset k are visited in the engine's order, so gU_p is bitwise the
        engine's; gV rows are partial wherever another shard's ratings touch the same item.
        """
        d = self.data
        self.gU[:] = 0.0
        touched = d.touched[k]
        zero_touched(self.gV, touched)
        kernels.mf_block_gradient(d.rows[k], d.cols[k], d.vals[k], self.state.U, V, self.gU, self.gV,
                                  cfg.rank, cfg.scale, cfg.offset, d.row_reg, cfg.col_reg)
        return touched_view(self.gV, touched)

    def pair_partials(self):
        """Form s = x - x_start, y = g - g_start and their products on this shard (Alg. 3, l. 14).

        Also s.g and y.g, so that W^T g with the new pair in the memory is known before the
        memory is updated (the engine stores the pair first and then reduces W^T g).
        """
        x, g = self.x, self.g
        kernels.shard_store_pair(x, self.x_start, g, self.g_start, self.s_new, self.y_new, 0)
        kernels.shard_pair_partials(x, self.x_start, g, self.g_start, self.state.S, self.state.Y, self.pair)
        kernels.shard_wtg_partials(g, self.s_new, self.y_new, self.new_pair_g)

    def wtg_partials(self):
        """Compute the shard's unscaled W^T g partial [S_j.g, Y_j.g] with the current memory."""
        kernels.shard_wtg_partials(self.g, self.state.S, self.state.Y, self.wtg)

    def home_partials(self, k: int, replica, wtg: bool, pair: bool):
        """Return (j, W^T g partial, pair products, s'g and y'g) of V_j if this shard is its home in subset k.

        The same kernels on the same numbers as every worker would use after assembling gV (its
        partial gV over V_j is complete, V and its memory rows are replicated), computed once here.
        """
        j = self.data.v_home[k] if self.data.v_home else -1
        if j < 0 or not (wtg or pair):
            return None
        n_cols = self.gV.shape[1]
        sl = slice(int(replica.bounds[j]), int(replica.bounds[j + 1]))
        g = self.gV[sl.start // n_cols:sl.stop // n_cols].reshape(-1)
        S, Y, x = replica.common.S[:, sl], replica.common.Y[:, sl], replica.x[sl]
        if wtg:
            kernels.shard_wtg_partials(g, S, Y, self.v_wtg)
        if pair:
            s_new, y_new = replica.s_new[:, sl], replica.y_new[:, sl]
            kernels.shard_store_pair(x, replica.x_start[sl], g, replica.g_start[sl], s_new, y_new, 0)
            kernels.shard_pair_partials(x, replica.x_start[sl], g, replica.g_start[sl], S, Y, self.v_pair)
            kernels.shard_wtg_partials(g, s_new, y_new, self.v_new_pair_g)
        return (j, self.v_wtg if wtg else None, self.v_pair if pair else None,
                self.v_new_pair_g if pair else None)

    def evaluation(self, V: np.ndarray, cfg) -> tuple[list, float, float]:
        """Return (train SSE per subset, regularization norm, test SSE) of this shard at U_p, V.

        Per subset, because the engine sums its SSE block by block in (subset, block) order: for
        STRATA/-B a shard's part of a subset is one block, so the reducer can add them in that order.
        """
        d = self.data
        sse = [float(kernels.mf_squared_error(d.rows[k], d.cols[k], d.vals[k], self.state.U, V, cfg.rank,
                                              cfg.offset)) for k in range(len(d.vals))]
        norm = (kernels.weighted_row_norms(self.state.U, d.row_norm_weight) if cfg.reg > 0.0 else 0.0)
        test = (kernels.mf_squared_error(d.test_rows, d.test_cols, d.test_vals, self.state.U, V, cfg.rank,
                                         cfg.offset) if d.test_vals.size else 0.0)
        return sse, float(norm), float(test)


class ReplicaWork(_StepWork):
    """The replicated V during a chunk: assembled gV, per-V-shard partials, cycle-start copies, new pair."""

    def __init__(self, common: CommonState, v_bounds: np.ndarray, memory: int):
        self.common = common
        self.memory_rows = common
        self.bounds = v_bounds  # offsets of V_0..V_{B-1} inside V's flat buffer
        self.gV = np.zeros_like(common.V)
        n_shards = len(v_bounds) - 1
        self.wtg = np.zeros((n_shards, 2 * memory))
        self.pair = np.zeros((n_shards, 2 * memory + 2))
        size = common.V.size
        self.x_start = np.zeros(size)
        self.g_start = np.zeros(size)
        self.s_new = np.empty((1, size))
        self.y_new = np.empty((1, size))

    @property
    def x(self) -> np.ndarray:
        """V as a flat vector (a view)."""
        return self.common.V.reshape(-1)

    @property
    def g(self) -> np.ndarray:
        """The assembled gV as a flat vector (a view)."""
        return self.gV.reshape(-1)

    def _shards(self):
        for j in range(len(self.bounds) - 1):
            yield j, slice(int(self.bounds[j]), int(self.bounds[j + 1]))

    def wtg_partials(self, skip=()) -> np.ndarray:
        """Return the (B, 2M) W^T g partials of V_0..V_{B-1}; rows in `skip` come from their homes."""
        S, Y, g = self.common.S, self.common.Y, self.g
        for j, sl in self._shards():
            if j not in skip:
                kernels.shard_wtg_partials(g[sl], S[:, sl], Y[:, sl], self.wtg[j])
        return self.wtg

    def pair_partials(self, skip=()) -> np.ndarray:
        """Form V's new pair; return its (B, 2M + 2) pair products (Alg. 3, line 14), `skip` rows from homes."""
        x, g, S, Y = self.x, self.g, self.common.S, self.common.Y
        for j, sl in self._shards():
            kernels.shard_store_pair(x[sl], self.x_start[sl], g[sl], self.g_start[sl],
                                  self.s_new[:, sl], self.y_new[:, sl], 0)
            if j not in skip:
                kernels.shard_pair_partials(x[sl], self.x_start[sl], g[sl], self.g_start[sl],
                                         S[:, sl], Y[:, sl], self.pair[j])
        return self.pair

    def norm(self, cfg) -> float:
        """Return V's weighted regularization norm (every worker computes the same number)."""
        return float(kernels.weighted_row_norms(self.common.V, cfg.col_norm_weight)) if cfg.reg > 0.0 else 0.0
