"""Compact-form L-BFGS memory: the small (M x M) algebra of HAMSI's quasi-Newton step.

The big vectors (x, g, and the memory rows S, Y of length |x|) live with the driver, cut into
parameter shards; this class only sees reductions of them (2M + 2 numbers per new pair, 2M per
step) and returns the 2M coefficients that `hamsi.kernels.shard_lbfgs_step` applies. The
in-process engine and the Dask driver both call it, so both take the same steps.

Compact representation (Byrd, Nocedal & Schnabel 1994; thesis Alg. 3, lines 14-19), with pairs
in chronological order (oldest first):
    H g = sigma g + W N W^T g,    W = [S, sigma Y],
    N = [[R^-T (D + sigma C) R^-1, -R^-T], [-R^-1, 0]],
    R = triu(S^T Y), D = diag(R), C = Y^T Y.
The memory rows are a ring buffer (no shifting): pair number c goes to row c mod M. The entries
S_i.y_j and Y_i.y_j are kept in ring indexing and updated by one column per accepted pair;
`order` maps chronological position -> ring row when N is built.

Reference behaviour (spartensor/hamsi-mf): sigma starts at 500 and is lowered to
min(sigma, s'y / y'y) with each accepted pair; a pair is accepted only when
s'y / |y| > 1e-6; the quasi-Newton step is used once M pairs have been accepted.
"""

from __future__ import annotations

import math

import numpy as np

from partition.jit import cached_njit

SIGMA_INITIAL = 500.0
ACCEPTANCE_THRESHOLD = 1.0e-6


class LBFGSMemory:
    """The curvature memory of M pairs: sigma, R and C in ring indexing, and N once full."""

    def __init__(
        self, memory: int = 5, sigma: float = SIGMA_INITIAL, threshold: float = ACCEPTANCE_THRESHOLD
    ):
        if memory < 1:
            raise ValueError(f"memory must be >= 1; got {memory}")
        self.memory = int(memory)
        self.sigma = float(sigma)
        self.threshold = float(threshold)
        self.n_accepted = 0
        self.n_rejected = 0
        self.sy = np.zeros((self.memory, self.memory))  # sy[i, j] = S_i . y_j (i not newer than j)
        self.yy = np.zeros((self.memory, self.memory))  # yy[i, j] = Y_i . Y_j
        self._scaled_n = None

    @property
    def full(self) -> bool:
        """True once M pairs have been accepted: the quasi-Newton step is available."""
        return self.n_accepted >= self.memory

    @property
    def next_slot(self) -> int:
        """The ring row the next accepted pair overwrites."""
        return self.n_accepted % self.memory

    @property
    def order(self) -> np.ndarray:
        """Ring rows of the stored pairs in chronological order, oldest first."""
        newest = (self.n_accepted - 1) % self.memory
        return (newest + 1 + np.arange(self.memory)) % self.memory

    def consider_pair(self, products: np.ndarray) -> bool:
        """Return True when the pair is accepted; then R, C, sigma (and N) are updated (Alg. 3, 15-19).

        products (2M + 2) is the shard-order sum of `kernels.shard_pair_partials`:
        [s'y, y'y, S_j.y (j = 0..M-1), Y_j.y (j = 0..M-1)] with S, Y before the update. The
        caller then stores the pair into row `slot` (the value of next_slot before this call).
        """
        M = self.memory
        sy, yy = float(products[0]), float(products[1])
        if not (yy > 0.0 and sy / math.sqrt(yy) > self.threshold):  # also False for NaN
            self.n_rejected += 1
            return False
        slot = self.next_slot
        s_dot_y = np.array(products[2 : 2 + M], dtype=np.float64)
        y_dot_y = np.array(products[2 + M : 2 + 2 * M], dtype=np.float64)
        s_dot_y[slot] = sy
        y_dot_y[slot] = yy
        self.sy[:, slot] = s_dot_y
        self.yy[:, slot] = y_dot_y
        self.yy[slot, :] = y_dot_y
        self.sigma = min(self.sigma, sy / yy)
        self.n_accepted += 1
        if self.full:
            self._build_n()
        return True

    def _build_n(self):
        """Set the 2M x 2M matrix mapping unscaled W^T g to step coefficients, in ring indexing."""
        self._scaled_n = scaled_n_matrix(self.sy, self.yy, self.order, self.sigma)

    def coefficients(self, wtg: np.ndarray) -> np.ndarray:
        """Return coef (2M) with H g = sigma g + sum_j coef_j S_j + coef_{M+j} Y_j (Alg. 3, line 13).

        wtg is the unscaled [S_j.g, Y_j.g] (shard-order sum of `kernels.shard_wtg_partials`).
        Only valid once `full`.
        """
        coef = np.empty(2 * self.memory)
        small_matvec(self._scaled_n, wtg, coef)
        return coef

    def direction(self, g: np.ndarray, S: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Return H g for dense S, Y (rows in ring order): a reference path for tests, unsharded."""
        wtg = np.concatenate([S @ g, Y @ g])
        coef = self.coefficients(wtg)
        return self.sigma * g + coef[: self.memory] @ S + coef[self.memory :] @ Y


@cached_njit(nogil=True, inline="always")
def _chronological_r_and_c(sy, yy, order):
    """Return R = triu(S'Y) and C = Y'Y with rows and columns in chronological order (`order`)."""
    M = order.shape[0]
    R = np.zeros((M, M))
    C = np.empty((M, M))
    for a in range(M):
        for b in range(M):
            C[a, b] = yy[order[a], order[b]]
            if a <= b:
                R[a, b] = sy[order[a], order[b]]
    return R, C


@cached_njit(nogil=True, inline="always")
def _upper_triangular_inverse(R):
    """Return R^-1 for upper-triangular R, column by column by back substitution."""
    M = R.shape[0]
    R_inv = np.zeros((M, M))
    for col in range(M):
        for i in range(M - 1, -1, -1):
            acc = 1.0 if i == col else 0.0
            for j in range(i + 1, M):
                acc -= R[i, j] * R_inv[j, col]
            R_inv[i, col] = acc / R[i, i]
    return R_inv


@cached_njit(nogil=True)
def scaled_n_matrix(sy, yy, order, sigma):
    """Return diag(1, sigma) N diag(1, sigma) in ring indexing (thesis Alg. 3, lines 18-19).

    sy, yy: ring-indexed S_i.y_j and Y_i.y_j; order: ring rows oldest first. R = triu(S'Y) and
    C = Y'Y are taken in chronological order, R^-1 by back substitution, and the result is
    scattered back to ring indexing so the drivers multiply by S and Y rows as stored. Plain
    loops (no BLAS) keep the few hundred flops fast and identical on every machine.
    """
    M = order.shape[0]
    R, C = _chronological_r_and_c(sy, yy, order)
    R_inv = _upper_triangular_inverse(R)
    middle = np.empty((M, M))  # D + sigma C
    for a in range(M):
        for b in range(M):
            middle[a, b] = sigma * C[a, b]
        middle[a, a] += R[a, a]
    left = np.zeros((M, M))  # R^-T (D + sigma C)
    for a in range(M):
        for b in range(M):
            acc = 0.0
            for j in range(M):
                acc += R_inv[j, a] * middle[j, b]
            left[a, b] = acc
    scaled = np.zeros((2 * M, 2 * M))
    for a in range(M):
        for b in range(M):
            acc = 0.0
            for j in range(M):
                acc += left[a, j] * R_inv[j, b]
            ra, rb = order[a], order[b]
            scaled[ra, rb] = acc  # N11
            scaled[ra, M + rb] = -R_inv[b, a] * sigma  # N12 = -R^-T, times sigma for Y's side
            scaled[M + ra, rb] = -R_inv[a, b] * sigma  # N21 = -R^-1
    return scaled


@cached_njit(nogil=True)
def small_matvec(A, v, out):
    """Write out = A v with plain loops, rows summed left to right."""
    for i in range(A.shape[0]):
        acc = 0.0
        for j in range(A.shape[1]):
            acc += A[i, j] * v[j]
        out[i] = acc


def warm_up() -> None:
    """Compile (or load from cache) the small-algebra kernels before a driver starts its clock."""
    scaled_n_matrix(np.eye(2), np.eye(2), np.arange(2), 1.0)
    small_matvec(np.eye(2), np.ones(2), np.empty(2))
