"""Load every kernel a worker's chunk uses before the clock starts (numba compiles or reads its cache)."""

from __future__ import annotations

import numpy as np


def warm_up(width: int = 3, memory: int = 2) -> bool:
    """Return True after calling every kernel once on tiny arrays of the real dtypes."""
    from hamsi import kernels, lbfgs

    kernels.warm_up()
    lbfgs.warm_up()
    U = np.ones((2, width))
    g = np.zeros((2, width))
    rows = np.array([0, 1], dtype=np.int32)
    vals = np.array([1.0, 2.0])
    kernels.mf_block_gradient(rows, rows, vals, U, U, g, g.copy(), width, 1.0, 0.0, np.zeros(0), np.zeros(0))
    kernels.mf_squared_error(rows, rows, vals, U, U, width, 0.0)
    flat = U.reshape(-1)
    S = np.ones((memory, flat.size))
    one = np.ones((1, flat.size))
    for rows_s in (S, one, S[:, :2]):
        kernels.shard_wtg_partials(flat[:rows_s.shape[1]], rows_s, rows_s, np.zeros(2 * rows_s.shape[0]))
    kernels.shard_pair_partials(flat, flat, flat, flat, S, S, np.zeros(2 * memory + 2))
    kernels.shard_gram_partials(flat, flat, S, S, np.zeros(2 * memory + 1))
    kernels.shard_norm_partials(flat, flat, np.zeros(2))
    kernels.shard_store_pair(flat, flat, flat, flat, one, one, 0)
    kernels.shard_lbfgs_step(flat.copy(), flat, S, S, np.zeros(2 * memory), 1.0, 1.0)
    kernels.shard_gradient_step(flat.copy(), flat, 1.0)
    kernels.sum_partials_in_order(np.ones((2, 3)), np.zeros(3))
    return True
