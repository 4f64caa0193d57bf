"""The spectral start (hamsi.spectral_start) of ratings kept on the workers.

Each row shard's `ResidualShard` is built on the shard's host from its ratings and the bias
start; the products with R and R^T run there (`WorkerShards`), the n x l ones are added in shard
order by one task on a worker (`sum_in_order`), and the m x l ones and the sums come to the
client, which does the QR factorizations, the SVD and the scales as in process: the same bits as
MatrixFactorization.initial_point, and O((users + items) x rank) numbers in the client.
"""

from __future__ import annotations

import numpy as np

from cluster.routing import ShardRatings
from hamsi.data.moments import sum_in_order
from hamsi.problems.matrix_factorization import penalty_weights
from hamsi.spectral_start import (
    ResidualShard,
    on_one_thread,
    spectral_factors,
)


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

    return spectral_factors(
        WorkerShards(client, shards), problem.shape, problem.rank, problem.col_norm_weight, rng
    )


class WorkerShards:
    """ResidualShard futures on their hosts, read as hamsi.spectral_start.LocalShards reads its own."""

    def __init__(self, client, futures):
        self.client, self.futures = client, futures

    def _submit(self, function, args) -> list:
        sent = [self.client.scatter(arg, broadcast=True, hash=False) for arg in args]
        return [
            self.client.submit(on_one_thread, function, shard, *sent, pure=False)
            for shard in self.futures
        ]

    def gather(self, function, *args) -> list:
        """Return [function(shard, *args) for every shard] in shard order, computed on the hosts."""
        return self.client.gather(self._submit(function, args))

    def reduce(self, function, *args):
        """Return the shards' results added in shard order, by one task on a worker."""
        parts = self._submit(function, args)
        return self.client.submit(_summed, *parts, pure=False).result()


def _summed(*parts):
    """Return sum_in_order(parts) (a task)."""
    return sum_in_order(parts)
