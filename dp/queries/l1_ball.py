"""Exact Euclidean projection of every column of a matrix onto the L1 ball.

Duchi, Shalev-Shwartz, Singer and Chandra (ICML 2008), Fig. 1: sort the magnitudes, find the
largest index rho with u_rho > (sum_{j<=rho} u_j - z) / rho, and soft-threshold by
theta = (sum_{j<=rho} u_j - z) / rho. O(r log r) per column; here vectorized over all columns
at once (one sort of the whole matrix), as Alg. 2 of the Low-Rank Mechanism paper (seed 001,
Formula (11)) needs for the r x n factor L at every Nesterov step.
"""

from __future__ import annotations

import numpy as np


def l1_ball_thresholds(magnitudes_by_row: np.ndarray, radius: float) -> np.ndarray:
    """Return the soft threshold theta >= 0 of each row of a non-negative (k x d) array.

    Row i projected onto {||w||_1 <= radius} is sign(v) * max(|v| - theta_i, 0); theta_i = 0
    when the row already lies in the ball (Duchi et al. 2008, Fig. 1).
    """
    k, d = magnitudes_by_row.shape
    descending = -np.sort(-magnitudes_by_row, axis=1)
    partial_sums = np.cumsum(descending, axis=1)
    partial_sums -= radius
    counts = np.arange(1, d + 1, dtype=np.float64)
    # the condition holds on a prefix of the sorted order, so its length is rho
    rho = np.count_nonzero(descending * counts > partial_sums, axis=1)
    rho = np.maximum(rho, 1)
    theta = partial_sums[np.arange(k), rho - 1] / rho
    return np.maximum(theta, 0.0)


def project_columns_l1(V: np.ndarray, radius: float = 1.0) -> np.ndarray:
    """Return the matrix whose column j is the Euclidean projection of V[:, j] onto the L1 ball.

    Solves min_L ||L - V||_F^2 s.t. sum_i |L_ij| <= radius for every j (seed 001, Formula (11)),
    exactly, columns independently. Columns already inside the ball are returned unchanged.
    """
    if not radius > 0:
        raise ValueError(f"radius of the L1 ball must be > 0, got {radius!r}")
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {V.shape}")
    magnitudes = np.abs(V)
    outside = np.flatnonzero(magnitudes.sum(axis=0) > radius)
    out = V.copy()
    if outside.size:
        # rows of the transposed block are contiguous, so the sort runs on contiguous memory
        block = np.ascontiguousarray(magnitudes[:, outside].T)
        theta = l1_ball_thresholds(block, radius)
        shrunk = np.maximum(block - theta[:, None], 0.0).T
        out[:, outside] = np.copysign(shrunk, V[:, outside])
    return out
