"""Small builders shared by several test modules (imported as `helpers`: tests/ is on sys.path)."""

import numpy as np
import scipy.sparse as sp

from partition.base import Partition


def finite_difference_gradient(problem, x, eps=1e-6):
    """Return the central-difference gradient of problem.evaluate(x)[1] (the objective)."""
    grad = np.empty_like(x)
    for i in range(x.size):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (problem.evaluate(up)[1] - problem.evaluate(down)[1]) / (2 * eps)
    return grad


def block_least_squares(seed=0, groups=4, width=3, rows_per_group=12):
    """Return (A, b): a block-diagonal sparse A whose group-j functions touch only group j's parameters."""
    rng = np.random.default_rng(seed)
    A = sp.block_diag(
        [rng.standard_normal((rows_per_group, width)) for _ in range(groups)], format="csr"
    )
    b = A @ rng.standard_normal(A.shape[1]) + 0.1 * rng.standard_normal(A.shape[0])
    return A, b


def least_squares_cover(A, groups=4, rows_per_group=12):
    """Return two subsets of `groups` blocks; subset k's block j holds the k-th half of group j's rows."""
    half = rows_per_group // 2
    subsets = [
        [
            np.arange(
                j * rows_per_group + k * half, j * rows_per_group + (k + 1) * half, dtype=np.int64
            )
            for j in range(groups)
        ]
        for k in range(2)
    ]
    return Partition(scheme="custom", shape=A.shape, subsets=subsets)
