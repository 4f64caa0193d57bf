"""Exact Euclidean projection of every column of a matrix onto the L1 ball.

The projection of v onto {||w||_1 <= z} is sign(v) * max(|v| - theta, 0), with theta = 0 when v
is inside and otherwise the unique theta > 0 with sum_i max(|v_i| - theta, 0) = z (Duchi,
Shalev-Shwartz, Singer and Chandra, ICML 2008). theta is found sort-free by Michelot's pivot
iteration (as analysed by Condat, Math. Program. 2016, sec. 2): start from all entries, set
theta = (sum of the kept |v_i| - z) / (their count), keep only the entries > theta and repeat
until the kept set no longer shrinks. theta only grows, every entry it drops is zero in the
projection, and it stops exactly at the Duchi threshold. The iteration runs on blocks of
COLUMN_BLOCK columns at once, reading the C-ordered r x n matrix row by row, so each pass over a
block is a contiguous, branch-free (SIMD) loop across its columns; measured on r = 308,
n = 1024 iterates like those of the Low-Rank Mechanism (LRM paper, Alg. 2, Formula (11)): 4-5
passes, 0.8 ms against 5.7 ms for Condat's one-column-at-a-time filter (its running pivot is a
chain of divisions) and 26 ms for the sort. Blocks are independent, so they are split over
threads (the kernels release the GIL) and the result does not depend on the split.
projected_gradient_step fuses a whole step of Alg. 2 around the projection.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from partition.jit import cached_njit

COLUMN_BLOCK = (
    128  # columns per Michelot block: r x 128 float64 stays in L2 cache for r in the hundreds
)
# below this many entries one thread is faster than handing parts to a pool (measured: a hand-off costs
# 0.1-0.15 ms; at 70,000 entries 1 and 2 threads tie on a loaded machine)
PARALLEL_MIN_ENTRIES = 1 << 17
_pools: dict[int, ThreadPoolExecutor] = {}  # one pool per thread count, kept for the process's life


@cached_njit(nogil=True)
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


@cached_njit(nogil=True, inline="always")
def _shrink(value, theta):
    """Return sign(value) * max(|value| - theta, 0): the soft threshold of one entry."""
    shrunk = max(abs(value) - theta, 0.0)
    return shrunk if value >= 0.0 else -shrunk


@cached_njit(nogil=True)
def _project_blocks(V, radius, out, lo, hi):
    """Project columns lo..hi-1 of V into `out`, block by block (thresholds, then soft thresholding)."""
    magnitudes = np.empty((V.shape[0], COLUMN_BLOCK))
    for start in range(lo, hi, COLUMN_BLOCK):
        stop = min(hi, start + COLUMN_BLOCK)
        theta = _block_thresholds(V, radius, start, stop, magnitudes)
        for i in range(V.shape[0]):
            for b in range(stop - start):
                out[i, start + b] = _shrink(V[i, start + b], theta[b])
    return 0.0, 0.0


@cached_njit(nogil=True)
def _projected_step_blocks(
    search, gradient, linear, omega, radius, current, following, momentum, lo, hi
):
    """One step of Alg. 2 on columns lo..hi-1, fused into one pass over memory; return (||S - L+||^2, ||L+||^2).

    following = P(S - (gradient - linear) / omega) (the projected step, line 5 / Formula (11));
    search is then overwritten with the next point L+ + momentum (L+ - current) (line 4).
    """
    r = search.shape[0]
    step, magnitudes = np.empty((r, COLUMN_BLOCK)), np.empty((r, COLUMN_BLOCK))
    distance, size = (
        np.zeros(COLUMN_BLOCK),
        np.zeros(COLUMN_BLOCK),
    )  # per column: the loops vectorize
    for start in range(lo, hi, COLUMN_BLOCK):
        width = min(hi, start + COLUMN_BLOCK) - start
        for i in range(r):
            for b in range(width):
                j = start + b
                step[i, b] = search[i, j] - (gradient[i, j] - linear[i, j]) / omega
        theta = _block_thresholds(step, radius, 0, width, magnitudes)
        for i in range(r):
            for b in range(width):
                j = start + b
                value = _shrink(step[i, b], theta[b])
                following[i, j] = value
                distance[b] += (search[i, j] - value) ** 2
                size[b] += value * value
                search[i, j] = value + momentum * (value - current[i, j])
    return distance.sum(), size.sum()


def _split_columns(n: int, parts: int) -> list[tuple[int, int]]:
    """Return `parts` contiguous column ranges of about equal size, cut at block boundaries."""
    blocks = -(-n // COLUMN_BLOCK)
    cuts = [min(n, COLUMN_BLOCK * (blocks * k // parts)) for k in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]


def default_threads() -> int:
    """Return the number of cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _over_columns(kernel, n: int, threads: int, *args) -> tuple[float, float]:
    """Return the summed results of kernel(*args, lo, hi) over column ranges split across `threads` threads."""
    threads = min(threads, -(-n // COLUMN_BLOCK))
    if threads <= 1 or args[0].size < PARALLEL_MIN_ENTRIES:
        return kernel(*args, 0, n)
    pool = _pools.get(threads) or _pools.setdefault(threads, ThreadPoolExecutor(threads, "l1-ball"))
    parts = [pool.submit(kernel, *args, lo, hi) for lo, hi in _split_columns(n, threads)]
    results = [part.result() for part in parts]
    return sum(first for first, _ in results), sum(second for _, second in results)


def projected_gradient_step(
    search,
    gradient,
    linear,
    omega: float,
    current,
    following,
    momentum: float,
    radius: float = 1.0,
    threads: int | None = None,
) -> tuple[float, float]:
    """Write one accelerated projected gradient step (LRM paper, Alg. 2, lines 4-5) into the buffers.

    following <- P(search - (gradient - linear) / omega), every column projected onto the L1 ball of
    `radius`; then search <- following + momentum (following - current), the next search point.
    Returns (||search_old - following||_F, ||following||_F) for the stopping test (line 9). All
    arrays are C-ordered float64 r x n and distinct; one fused pass instead of seven numpy ones.
    """
    distance, size = _over_columns(
        _projected_step_blocks,
        search.shape[1],
        default_threads() if threads is None else int(threads),
        search,
        gradient,
        linear,
        float(omega),
        float(radius),
        current,
        following,
        float(momentum),
    )
    return float(np.sqrt(distance)), float(np.sqrt(size))


def _checked(V: np.ndarray, radius: float) -> tuple[np.ndarray, float]:
    if not radius > 0:
        raise ValueError(f"radius of the L1 ball must be > 0, got {radius!r}")
    V = np.ascontiguousarray(V, dtype=np.float64)
    if V.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {V.shape}")
    return V, float(radius)


def project_columns_l1(
    V: np.ndarray, radius: float = 1.0, out: np.ndarray | None = None, threads: int | None = None
) -> np.ndarray:
    """Return the matrix whose column j is the Euclidean projection of V[:, j] onto the L1 ball.

    Solves min_L ||L - V||_F^2 s.t. sum_i |L_ij| <= radius for every j (LRM paper, Formula (11)),
    exactly, columns independently. Columns already inside the ball are returned unchanged.
    out: a C-ordered float64 array of V's shape to write into (may not be V). threads: column
    blocks are split over this many threads (default: the cores of this process); the result
    is the same for every value.
    """
    V, radius = _checked(V, radius)
    if out is None:
        out = np.empty_like(V)
    elif (
        out.shape != V.shape
        or out.dtype != np.float64
        or not out.flags.c_contiguous
        or np.shares_memory(out, V)
    ):
        raise ValueError(f"out must be a separate C-ordered float64 array of shape {V.shape}")
    _over_columns(
        _project_blocks,
        V.shape[1],
        default_threads() if threads is None else int(threads),
        V,
        radius,
        out,
    )
    return out
