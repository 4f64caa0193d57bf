"""Exact Euclidean projection of every column of a matrix onto the L1 ball.

The projection of v onto {||w||_1 <= z} is sign(v) * max(|v| - theta, 0), with theta = 0 when v
is inside and otherwise the unique theta > 0 with sum_i max(|v_i| - theta, 0) = z (Duchi,
Shalev-Shwartz, Singer and Chandra, ICML 2008). theta is found sort-free by Michelot's pivot
iteration (as analysed by Condat, Math. Program. 2016, sec. 2): start from all entries, set
theta = (sum of the kept |v_i| - z) / (their count), keep only the entries > theta and repeat
until the kept set no longer shrinks. theta only grows, every entry it drops is zero in the
projection, and it stops exactly at the Duchi threshold. The iteration runs on blocks of
COLUMN_BLOCK columns at once, reading the C-ordered r x n matrix row by row, so each pass over a
block is a contiguous, branch-free (SIMD) loop across its columns; measured on the r = 308,
n = 1024 iterates of the Low-Rank Mechanism (seed 001, Alg. 2, Formula (11)): 4-5 passes, 1.5 ms
against 5.6 ms for Condat's one-column-at-a-time filter, whose running pivot is a chain of
divisions. Blocks are independent, so they are split over threads (the kernels release the
GIL) and the result does not depend on the split.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

COLUMN_BLOCK = 128  # columns per Michelot block: r x 128 float64 stays in L2 cache for r in the hundreds
# below this many entries one thread is faster than handing halves to a pool (measured: ~50 us per hand-off)
PARALLEL_MIN_ENTRIES = 1 << 16
_pool: ThreadPoolExecutor | None = None


@njit(nogil=True, cache=True)
def _block_thresholds(V, radius, lo, hi, magnitudes):
    """Return the Duchi thresholds of columns lo..hi-1 of V by Michelot's pivot iteration.

    magnitudes: an r x COLUMN_BLOCK work buffer (|V| of the block, contiguous for the passes).
    """
    r, width = V.shape[0], hi - lo
    sums, counts, kept, theta = np.zeros(width), np.zeros(width), np.zeros(width), np.zeros(width)
    for i in range(r):
        for b in range(width):
            value = abs(V[i, lo + b])
            magnitudes[i, b] = value
            sums[b] += value
    pending = 0
    for b in range(width):  # columns inside the ball keep theta = 0 (count 0: never updated)
        if sums[b] > radius:
            theta[b] = (sums[b] - radius) / r
            counts[b] = r
            pending += 1
    while pending > 0:
        sums[:] = 0.0
        kept[:] = 0.0
        for i in range(r):
            row = magnitudes[i]
            for b in range(width):
                value = row[b]
                keep = value > theta[b]
                sums[b] += value if keep else 0.0
                kept[b] += 1.0 if keep else 0.0
        pending = 0
        for b in range(width):
            # the kept set stopped shrinking: theta is the fixed point. An empty set only happens
            # when rounding puts theta at the largest entry (huge scales): the last theta stays.
            if kept[b] < counts[b] and kept[b] > 0.0:
                counts[b] = kept[b]
                theta[b] = (sums[b] - radius) / kept[b]
                pending += 1
    return theta


@njit(nogil=True, cache=True)
def _project_blocks(V, radius, out, lo, hi):
    """Project columns lo..hi-1 of V into `out`, block by block (thresholds, then soft thresholding)."""
    magnitudes = np.empty((V.shape[0], COLUMN_BLOCK))
    for start in range(lo, hi, COLUMN_BLOCK):
        stop = min(hi, start + COLUMN_BLOCK)
        theta = _block_thresholds(V, radius, start, stop, magnitudes)
        for i in range(V.shape[0]):
            for b in range(stop - start):
                value = V[i, start + b]
                shrunk = max(abs(value) - theta[b], 0.0)
                out[i, start + b] = shrunk if value >= 0.0 else -shrunk


def _split_columns(n: int, parts: int) -> list[tuple[int, int]]:
    """Return `parts` contiguous column ranges of about equal size, cut at block boundaries."""
    blocks = -(-n // COLUMN_BLOCK)
    cuts = [min(n, COLUMN_BLOCK * (blocks * k // parts)) for k in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]


def default_threads() -> int:
    """Return the number of cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _run_blocks(V, radius, out, threads: int) -> None:
    global _pool
    threads = min(threads, -(-V.shape[1] // COLUMN_BLOCK))
    if threads <= 1 or V.size < PARALLEL_MIN_ENTRIES:
        _project_blocks(V, radius, out, 0, V.shape[1])
        return
    if _pool is None or _pool._max_workers < threads:
        _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="l1-ball")
    for done in [_pool.submit(_project_blocks, V, radius, out, lo, hi)
                 for lo, hi in _split_columns(V.shape[1], threads)]:
        done.result()


def _checked(V: np.ndarray, radius: float) -> tuple[np.ndarray, float]:
    if not radius > 0:
        raise ValueError(f"radius of the L1 ball must be > 0, got {radius!r}")
    V = np.ascontiguousarray(V, dtype=np.float64)
    if V.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {V.shape}")
    return V, float(radius)


def l1_ball_thresholds(V: np.ndarray, radius: float = 1.0) -> np.ndarray:
    """Return the soft threshold theta_j >= 0 of each column of V for the ball of `radius`."""
    V, radius = _checked(V, radius)
    magnitudes = np.empty((V.shape[0], COLUMN_BLOCK))
    return np.concatenate([_block_thresholds(V, radius, lo, min(V.shape[1], lo + COLUMN_BLOCK), magnitudes)
                           for lo in range(0, V.shape[1], COLUMN_BLOCK)] or [np.empty(0)])


def project_columns_l1(V: np.ndarray, radius: float = 1.0, out: np.ndarray | None = None,
                       threads: int | None = None) -> np.ndarray:
    """Return the matrix whose column j is the Euclidean projection of V[:, j] onto the L1 ball.

    Solves min_L ||L - V||_F^2 s.t. sum_i |L_ij| <= radius for every j (seed 001, Formula (11)),
    exactly, columns independently. Columns already inside the ball are returned unchanged.
    out: a C-ordered float64 array of V's shape to write into (may not be V). threads: column
    blocks are split over this many threads (default: the cores of this process); the result
    is the same for every value.
    """
    V, radius = _checked(V, radius)
    if out is None:
        out = np.empty_like(V)
    elif out.shape != V.shape or out.dtype != np.float64 or not out.flags.c_contiguous or np.shares_memory(out, V):
        raise ValueError(f"out must be a separate C-ordered float64 array of shape {V.shape}")
    _run_blocks(V, radius, out, default_threads() if threads is None else int(threads))
    return out
