"""Load every kernel a worker's chunk uses before the clock starts (numba compiles or reads its cache)."""

from __future__ import annotations

import numpy as np


def warm_up(width: int = 3, memory: int = 2) -> bool:
    """Return True after calling every kernel a worker uses once on tiny arrays of the real dtypes.

    Only the sequential per-shard kernels: a worker runs one task thread, and calling a parallel
    kernel would start numba's thread pool in every worker for nothing.
    """
    # why lazy: numba's kernels load only when a worker warms them up
    from hamsi import kernels, lbfgs

    lbfgs.warm_up()
    U = np.ones((2, width))
    g = np.zeros((2, width))
    rows = np.array([0, 1], dtype=np.int32)
    vals = np.array([1.0, 2.0])
    kernels.one_block_gradient(
        rows, rows, vals, U, U, g, g.copy(), width, 1.0, 0.0, np.zeros(0), np.zeros(0)
    )
    kernels.one_block_squared_error(rows, rows, vals, U, U, width, 0.0)
    kernels.one_block_squared_error(rows, rows, vals, U, U, width, 0.0, 1.0, 2.0)  # the test SSE
    kernels.weighted_row_norms(U, np.ones(2))
    norms = np.zeros(1)
    kernels.row_shard_norms(U, np.ones(2), np.array([0, 2], dtype=np.int64), norms)
    kernels.regularizer_in_order(
        norms, U, np.ones(2)
    )  # the objective's penalty, reduced in shard order
    flat = U.reshape(-1)
    S, Y = kernels.memory_rows(
        memory, flat.size
    )  # a shard's rows: all of them (U) or a column slice (V)
    # the pair rows s_new, y_new: a whole array (U shards) or a column slice (V shards): two layouts
    for new, x in ((np.zeros((1, flat.size)), flat), (np.zeros((1, flat.size))[:, :2], flat[:2])):
        rows = (S[:, : x.size], Y[:, : x.size])
        kernels.shard_iteration_partials(
            x,
            x,
            x,
            x,
            *rows,
            new,
            new,
            True,
            True,
            True,
            True,
            np.zeros(2 * memory + 2),
            np.zeros(2),
            np.zeros(2 * memory + 1),
            np.zeros(2 * memory),
            np.zeros(2),
        )
        kernels.shard_store_pair(x, x, x, x, new, new, 0)
        kernels.shard_copy_pair(new, new, *rows, 0)
        kernels.shard_lbfgs_step(x.copy(), x, *rows, np.zeros(2 * memory), 1.0, 1.0)
    kernels.shard_gradient_step(flat.copy(), flat, 1.0)
    kernels.sum_partials_in_order(np.ones((2, 3)), np.zeros(3))
    return True
