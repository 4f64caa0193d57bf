"""The spectral start of a rating factorization: the objective minimized along the top singular directions.

From a small random start the factors must first grow out of the saddle at U = V = 0: on the
presets the validation RMSE stayed flat for 10-20 cycles and the best cycle came near 100. The
matrix-completion literature starts from the top singular vectors of the observed matrix
instead (Keshavan, Montanari & Oh 2010; Jain, Netrapalli & Sanghavi 2013; the review of Chi, Lu
& Chen 2019, sec. 5.1); from there the best cycles came after 20-50 (docs/accuracy.md).

``spectral_factors(shards, shape, rank, col_weight, rng) -> (dU, dV)``:

1. The top-`rank` singular triplets (p_k, sigma_k, q_k) of R, the residuals
   e = v - mu - b_a - c_b of the bias start on the ratings and 0 elsewhere: randomized subspace
   iteration (Halko, Martinsson & Tropp 2011, Alg. 4.4) with POWER_ITERATIONS iterations and
   OVERSAMPLING extra columns. A start needs directions, not digits: two iterations put the
   10th singular value of the presets' residuals within 1 % of seven iterations'.
2. Along each direction alone, the scale s_k >= 0 minimizing the objective F of
   hamsi.problems.matrix_factorization at X = s_k p_k q_k^T, split as U_k = p_k sqrt(s_k) t_k,
   V_k = q_k sqrt(s_k) / t_k with the penalty's balanced t_k = (B_k / A_k)^(1/4):
   s_k = max(0, (z_k . e - c_k / 2) / |z_k|^2), z_k = p_ak q_bk over the ratings,
   A_k = sum_a w_a p_ak^2, B_k = sum_b w_b q_bk^2 (w the objective's weights of |U_a|^2 and
   |V_b|^2: reg, or reg (n + d) when count-weighted), c_k = 2 sqrt(A_k B_k). With the uniform
   penalty c_k = 2 reg: soft-thresholding, as the nuclear norm's proximal step.
3. The scales of step 2 ignore how the directions overlap on the ratings; on sparse data at a
   high rank their sum overshot (long-tail-like, rank 50: validation RMSE 0.92 at the start
   against the biases' 0.88). All of them are multiplied by the t in [0, 1] minimizing F along
   their sum, x = sum_k s_k z_k: t = (x . e - sum_k c_k s_k / 2) / |x|^2 (1 when the directions
   do not overlap, as on a fully observed matrix), so F at the start is at most the biases'.
4. (dU, dV) = those U_k and V_k, which the caller adds to its small random start (a direction
   with s_k = 0 keeps that start rather than the saddle).

The ratings are row shards (`ResidualShard`), reached through `shards.gather(function, *args)`,
[function(shard, *args) for every shard] in shard order, and `shards.reduce(function, *args)`,
their results added in shard order (`hamsi.data.moments.sum_in_order`). In process (`LocalShards`) the
shards are the problem's own; on Dask (cluster.spectral_start) the functions run on the shards'
hosts, the sums on a worker, and the rest (QR, SVD of n x l, the scales) in the
client, so both engines start from the same bits. Every step runs on one BLAS thread (on Dask the
shards' functions too, `on_one_thread`): the bits then do not depend on a machine's core count,
and the search's trials, which start side by side on threads, do not oversubscribe the cores.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from hamsi.data.moments import sum_in_order

POWER_ITERATIONS = 2
OVERSAMPLING = 10
LINE_CHUNK = 8192  # ratings per piece of the line search's |x|^2


class ResidualShard:
    """One row shard's bias residuals: rows row_lo.. of R, as a CSR matrix (n_rows x n_items)."""

    def __init__(self, row_lo: int, rows, cols, residual, n_rows: int, n_items: int, row_weight):
        self.row_lo, self.n_rows = int(row_lo), int(n_rows)
        self.matrix = sp.csr_matrix(
            (np.asarray(residual, dtype=np.float64), (rows, cols)), shape=(self.n_rows, n_items)
        )
        # the rated pattern (1 where R has an entry): |z_k|^2 = p_k^2 . (pattern @ q_k^2)
        self.pattern = sp.csr_matrix(
            (np.ones(self.matrix.nnz), self.matrix.indices, self.matrix.indptr),
            shape=self.matrix.shape,
        )
        self.row_weight = np.asarray(row_weight, dtype=np.float64)

    def _rows(self, full: np.ndarray) -> np.ndarray:
        return full[self.row_lo : self.row_lo + self.n_rows]

    def times(self, right: np.ndarray) -> np.ndarray:
        """Return R_p @ right (n_rows x l): this shard's rows of R @ right."""
        return np.asarray(self.matrix @ right)

    def transpose_times(self, left: np.ndarray) -> np.ndarray:
        """Return R_p^T @ left_p (n_items x l) for left_p this shard's rows of the m x l `left`."""
        return np.asarray(self.matrix.T @ self._rows(left))

    def line_sums(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Return [x . e, |x|^2] over this shard for x_ab = left_a . right_b on its ratings.

        x . e = sum_a left_a . (R @ right)_a; |x|^2 from x on LINE_CHUNK ratings at a time, so
        no (ratings x k) array is formed.
        """
        rows = self._rows(left)
        fit = float(np.einsum("ik,ik->", rows, self.times(right)))
        pattern = self.pattern
        row_of = np.repeat(np.arange(self.n_rows), np.diff(pattern.indptr))
        size = 0.0
        for lo in range(0, pattern.nnz, LINE_CHUNK):
            hi = min(lo + LINE_CHUNK, pattern.nnz)
            x = np.einsum("ik,ik->i", rows[row_of[lo:hi]], right[pattern.indices[lo:hi]])
            size += float(x @ x)
        return np.array([fit, size])

    def direction_sums(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Return [z_k . e, |z_k|^2, sum_a w_a p_ak^2] over this shard, as rows of a 3 x k array.

        z_k = p_ak q_bk on the ratings: z_k . e = p_k . (R @ q_k), |z_k|^2 = p_k^2 . (pattern @ q_k^2).
        """
        rows = self._rows(left)
        return np.stack(
            [
                np.einsum("ik,ik->k", rows, self.times(right)),
                np.einsum("ik,ik->k", rows**2, np.asarray(self.pattern @ right**2)),
                self.row_weight @ rows**2,
            ]
        )


def on_one_thread(function, *args):
    """Return function(*args) run on one BLAS thread (a shard's function on a Dask worker)."""
    with threadpool_limits(1, user_api="blas"):
        return function(*args)


class LocalShards:
    """ResidualShards held in this process (what `spectral_factors` reads them through)."""

    def __init__(self, shards):
        self.shards = list(shards)

    def gather(self, function, *args) -> list:
        """Return [function(shard, *args) for every shard], in shard order."""
        return [function(shard, *args) for shard in self.shards]

    def reduce(self, function, *args) -> np.ndarray:
        """Return the shards' function(shard, *args) added in shard order."""
        return sum_in_order(self.gather(function, *args))


def top_singular(shards, shape, rank: int, omega: np.ndarray):
    """Return (P m x k, sigma k, Q n x k), R's top k = min(rank, m, n) singular triplets (Alg. 4.4).

    `omega` is the n x l Gaussian test matrix, l = min(rank + OVERSAMPLING, m, n).
    """
    m, n = shape
    k = min(rank, m, n)

    def transpose_product(left):
        return shards.reduce(ResidualShard.transpose_times, left)

    basis = np.linalg.qr(np.vstack(shards.gather(ResidualShard.times, omega)))[0]
    for _ in range(POWER_ITERATIONS):
        across = np.linalg.qr(transpose_product(basis).reshape(n, -1))[0]
        basis = np.linalg.qr(np.vstack(shards.gather(ResidualShard.times, across)))[0]
    # R^T basis = (basis^T R)^T = Ub S Vb^T, so R ~ (basis Vb) S Ub^T
    ub, sigma, vbt = np.linalg.svd(transpose_product(basis).reshape(n, -1), full_matrices=False)
    return basis @ vbt.T[:, :k], sigma[:k], ub[:, :k]


def spectral_factors(shards, shape, rank: int, col_weight, rng):
    """Return (dU m x rank, dV n x rank): the scaled top directions of R (module steps 1-4)."""
    with threadpool_limits(1, user_api="blas"):
        return _spectral_factors(shards, shape, rank, col_weight, rng)


def _spectral_factors(shards, shape, rank: int, col_weight, rng):
    m, n = shape
    width = min(rank + OVERSAMPLING, m, n)
    dU, dV = np.zeros((m, rank)), np.zeros((n, rank))
    if width == 0:
        return dU, dV
    left, _, right = top_singular(shards, shape, rank, rng.standard_normal((n, width)))
    k = left.shape[1]
    along, squares, row_side = shards.reduce(ResidualShard.direction_sums, left, right)
    col_side = np.asarray(col_weight, dtype=np.float64) @ right**2
    penalty = 2.0 * np.sqrt(row_side * col_side)
    scale = np.zeros(k)
    seen = squares > 0
    scale[seen] = np.maximum((along[seen] - penalty[seen] / 2.0) / squares[seen], 0.0)
    # the scales were fitted one direction at a time; where the directions overlap on the
    # ratings (sparse rows, a high rank) their sum overshoots: an exact line search along it
    fit, size = shards.reduce(ResidualShard.line_sums, left * scale, right)
    step = (fit - penalty @ scale / 2.0) / size if size > 0 else 0.0
    scale *= min(max(step, 0.0), 1.0)
    both = (row_side > 0) & (col_side > 0)  # else one side is unpenalized: split evenly
    balance = np.ones(k)
    balance[both] = (col_side[both] / row_side[both]) ** 0.25
    dU[:, :k] = left * (np.sqrt(scale) * balance)
    dV[:, :k] = right * (np.sqrt(scale) / balance)
    return dU, dV
