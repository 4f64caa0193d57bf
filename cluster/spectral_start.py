"""The spectral start (hamsi.spectral_start) of ratings kept on the workers.

Each row shard's `ResidualShard` is built on the shard's host from its ratings and the bias
start; the products with R and R^T run there (`on_shards`), and what they return, m x l and
n x l numbers, comes to the client, which adds the n x l ones in shard order (`sum_in_order`) and
does the QR factorizations, the SVD and the scales as in process: the same bits as
MatrixFactorization.initial_point, and O(users + items) numbers in the client.
"""

from __future__ import annotations

import numpy as np

from cluster.routing import ShardRatings
from hamsi.data.moments import sum_in_order
from hamsi.problems.matrix_factorization import penalty_weights
from hamsi.spectral_start import ResidualShard, spectral_factors


def _residual_shard(
    data: ShardRatings, offset: float, row_bias, col_bias, n_items: int, penalty: tuple
) -> ResidualShard:
    """Return the shard's ResidualShard (as MatrixFactorization.spectral_factors forms it), on its host."""
    rows, cols, vals = data.in_position_order()
    n_rows = data.row_hi - data.row_lo
    residual = vals - offset
    if row_bias is not None:
        residual = residual - row_bias[rows] - col_bias[cols]
    reg, reg_weighting, damping = penalty
    counts = np.bincount(rows, minlength=n_rows).astype(np.float64)
    row_weight = penalty_weights(reg, counts, reg_weighting, damping)[1]
    return ResidualShard(data.row_lo, rows, cols, residual, n_rows, n_items, row_weight)


def worker_spectral_factors(client, ratings, problem, row_bias, col_bias, rng):
    """Return (dU, dV) of the spectral start, the shard products run on the shards' hosts.

    `row_bias` (a future per shard, or None) and `col_bias` (a future or None) are the bias
    start; `rng` is the engine's init stream positioned after the factors' normals.
    """
    penalty = (problem.reg, problem.reg_weighting, problem.reg_damping)
    shards = [
        client.submit(
            _residual_shard,
            ratings.shards[p],
            problem.offset,
            None if row_bias is None else row_bias[p],
            col_bias,
            problem.shape[1],
            penalty,
            workers=[ratings.owner[p]],
            allow_other_workers=True,
            pure=False,
        )
        for p in range(len(ratings.shards))
    ]

    def on_shards(function, *args):
        sent = [client.scatter(arg, broadcast=True, hash=False) for arg in args]
        return client.gather(
            [client.submit(function, shard, *sent, pure=False) for shard in shards]
        )

    return spectral_factors(
        on_shards, sum_in_order, problem.shape, problem.rank, problem.col_norm_weight, rng
    )
