"""Exact Euclidean projection of every column of a matrix onto the L1 ball.

The projection of v onto {||w||_1 <= z} is sign(v) * max(|v| - theta, 0), with theta = 0 when v
is inside and otherwise the unique theta > 0 with sum_i max(|v_i| - theta, 0) = z (Duchi,
Shalev-Shwartz, Singer and Chandra, ICML 2008). theta is found sort-free by Michelot's pivot
iteration (as analysed by Condat, Math. Program. 2016, sec. 2): start from all entries, set
theta = (sum of the kept |v_i| - z) / (their count), drop the entries <= theta and repeat until
none is dropped. theta only grows, every entry it drops is zero in the projection, and it stops
exactly at the Duchi threshold; a few O(r) passes per column instead of a sort. Compiled with
numba over the columns of the r x n factor L, which Alg. 2 of the Low-Rank Mechanism paper
(seed 001, Formula (11)) projects at every Nesterov step.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def _column_thresholds(V, radius):
    """Return theta_j >= 0 of every column of V (0 for columns already inside the ball)."""
    r, n = V.shape
    norms = np.zeros(n)
    for i in range(r):  # row-wise: contiguous in a C-ordered V
        for j in range(n):
            norms[j] += abs(V[i, j])
    outside = np.flatnonzero(norms > radius)
    theta = np.zeros(n)
    block = 64  # columns gathered at once, reading V row by row (a column is strided)
    kept = np.empty((block, r))
    active, waiting = np.empty(r), np.empty(r)
    for start in range(0, outside.size, block):
        columns = outside[start:start + block]
        for i in range(r):
            for b in range(columns.size):
                kept[b, i] = abs(V[i, columns[b]])
        for b in range(columns.size):
            theta[columns[b]] = _condat_threshold(kept[b], radius, active, waiting)
    return theta


@njit(nogil=True, cache=True)
def _condat_threshold(y, radius, active, waiting):
    """Return the Duchi threshold of a non-negative vector y whose sum exceeds `radius` (Condat, Alg. 3).

    `active` and `waiting` are work buffers of y's length. rho = (sum of the active entries -
    radius) / (their count) throughout; entries <= rho are never in the projection's support.
    """
    n_active, n_waiting = 1, 0
    active[0] = y[0]
    rho = y[0] - radius
    for k in range(1, y.size):  # one pass: a running pivot filters most entries out
        value = y[k]
        if value > rho:
            rho += (value - rho) / (n_active + 1)
            if rho > value - radius:
                active[n_active] = value
                n_active += 1
            else:
                waiting[n_waiting:n_waiting + n_active] = active[:n_active]
                n_waiting += n_active
                active[0] = value
                n_active = 1
                rho = value - radius
    for k in range(n_waiting):  # entries set aside by a restart may still belong
        value = waiting[k]
        if value > rho:
            active[n_active] = value
            n_active += 1
            rho += (value - rho) / n_active
    while True:  # Michelot's pivot iteration on what is left: drop entries <= rho
        kept = 0
        for k in range(n_active):
            value = active[k]
            remaining = n_active - (k - kept)  # the active set's size before this entry is decided
            if value > rho or remaining == 1:  # the largest entry always stays (rounding at huge scales)
                active[kept] = value
                kept += 1
            else:
                rho += (rho - value) / (remaining - 1)
        if kept == n_active:
            return max(rho, 0.0)
        n_active = kept


@njit(nogil=True, cache=True)
def _soft_threshold_columns(V, theta):
    """Return sign(V_ij) * max(|V_ij| - theta_j, 0), row by row."""
    r, n = V.shape
    out = np.empty((r, n))
    for i in range(r):
        for j in range(n):
            value = V[i, j]
            shrunk = max(abs(value) - theta[j], 0.0)
            out[i, j] = shrunk if value >= 0.0 else -shrunk
    return out


def l1_ball_thresholds(V: np.ndarray, radius: float = 1.0) -> np.ndarray:
    """Return the soft threshold theta_j >= 0 of each column of V for the ball of `radius`."""
    return _column_thresholds(np.ascontiguousarray(V, dtype=np.float64), float(radius))


def project_columns_l1(V: np.ndarray, radius: float = 1.0) -> np.ndarray:
    """Return the matrix whose column j is the Euclidean projection of V[:, j] onto the L1 ball.

    Solves min_L ||L - V||_F^2 s.t. sum_i |L_ij| <= radius for every j (seed 001, Formula (11)),
    exactly, columns independently. Columns already inside the ball are returned unchanged.
    """
    if not radius > 0:
        raise ValueError(f"radius of the L1 ball must be > 0, got {radius!r}")
    V = np.ascontiguousarray(V, dtype=np.float64)
    if V.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {V.shape}")
    return _soft_threshold_columns(V, _column_thresholds(V, float(radius)))
