"""STRATA and STRATA-B: DSGD stratification of a rating matrix into B x B rectangles (thesis sec. 3.3, Fig. 3.4).

Each dimension is cut into B intervals; subset k holds the B blocks (p, (p + k) mod B), which
share no row interval and no column interval, so their parameters are disjoint (Gemulla et al.).
STRATA uses equal-length intervals; STRATA-B grows each interval until it holds about |I|/B
ratings, one dimension after the other, which balances the blocks on skewed data.
"""

from __future__ import annotations

import numpy as np

from partition.base import Partition
from partition.grouping import group_by_key, nested_blocks
from partition.jit import cached_njit


def equal_length_bounds(length: int, n_intervals: int) -> np.ndarray:
    """Return the n_intervals + 1 boundaries of equal-length intervals of range(length) (STRATA)."""
    return (np.arange(n_intervals + 1, dtype=np.int64) * length) // n_intervals


def balanced_bounds(index: np.ndarray, length: int, n_intervals: int) -> np.ndarray:
    """Return boundaries whose intervals hold about len(index)/n_intervals entries (STRATA-B, sec. 3.3).

    The thesis grows an interval "until it contains no more than |I|/K functions"; cutting the
    cumulative count at the multiples of |I|/B (nearest side) does the same without the drift a
    greedy pass accumulates. Every interval keeps at least one index, which needs
    n_intervals <= length.
    """
    return balanced_bounds_of_counts(np.bincount(index, minlength=length), n_intervals)


def balanced_bounds_of_counts(counts: np.ndarray, n_intervals: int) -> np.ndarray:
    """Return `balanced_bounds` from the entries per position (what the Dask data path reduces on workers)."""
    length = counts.shape[0]
    cumulative = np.cumsum(counts, dtype=np.int64)
    total = int(cumulative[-1]) if length else 0
    targets = np.arange(1, n_intervals, dtype=np.float64) * (total / n_intervals)
    first_reaching = np.searchsorted(cumulative, targets, side="left")  # cumulative[c] >= target
    below = np.where(first_reaching > 0, cumulative[np.maximum(first_reaching - 1, 0)], 0)
    above = cumulative[np.minimum(first_reaching, length - 1)]
    # cut before or after the row that crosses the target, whichever lands closer to it
    inner = np.where(targets - below <= above - targets, first_reaching, first_reaching + 1)
    bounds = np.concatenate([[0], inner, [length]]).astype(np.int64)
    for p in range(1, n_intervals):  # B steps, not |I|: keep intervals non-empty
        bounds[p] = max(bounds[p], bounds[p - 1] + 1)
    for p in range(n_intervals - 1, 0, -1):
        bounds[p] = min(bounds[p], bounds[p + 1] - 1)
    return bounds


@cached_njit
def _stratum_keys(rows, cols, row_interval, col_interval, n_blocks):
    keys = np.empty(rows.shape[0], dtype=np.int32)
    for i in range(rows.shape[0]):
        p = row_interval[rows[i]]
        q = col_interval[cols[i]]
        k = (q - p) % n_blocks
        keys[i] = k * n_blocks + p
    return keys


def _interval_of(bounds: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(bounds.shape[0] - 1, dtype=np.int32), np.diff(bounds))


def stratify(rows, cols, shape, row_bounds, col_bounds, scheme, seed=None) -> Partition:
    """Return the Partition with subset k = blocks (p, (p + k) mod B) of the given interval grid."""
    n_blocks = row_bounds.shape[0] - 1
    keys = _stratum_keys(
        np.ascontiguousarray(rows),
        np.ascontiguousarray(cols),
        _interval_of(row_bounds),
        _interval_of(col_bounds),
        n_blocks,
    )
    order, offsets = group_by_key(keys, n_blocks * n_blocks)
    del keys
    subsets = nested_blocks(order, offsets, n_blocks, n_blocks)
    intervals = [[(p, (p + k) % n_blocks) for p in range(n_blocks)] for k in range(n_blocks)]
    return Partition(
        scheme=scheme,
        shape=tuple(shape),
        subsets=subsets,
        seed=seed,
        row_bounds=row_bounds,
        col_bounds=col_bounds,
        block_intervals=intervals,
        info={"n_strata": n_blocks},
    )


def strata(rows, cols, shape, n_blocks: int, seed=None) -> Partition:
    """Return the STRATA partition: equal-length intervals in both dimensions (Fig. 3.4 left)."""
    return stratify(
        rows,
        cols,
        shape,
        equal_length_bounds(shape[0], n_blocks),
        equal_length_bounds(shape[1], n_blocks),
        "strata",
        seed,
    )


def strata_balanced(rows, cols, shape, n_blocks: int, seed=None) -> Partition:
    """Return the STRATA-B partition: intervals holding about |I|/B ratings each (Fig. 3.4 right)."""
    return stratify(
        rows,
        cols,
        shape,
        balanced_bounds(rows, shape[0], n_blocks),
        balanced_bounds(cols, shape[1], n_blocks),
        "strata-b",
        seed,
    )


def warm_up() -> None:
    """Compile (or load from numba's cache) the STRATA kernels on a 2 x 2 grid (hamsi.kernels.warm_up's `also`)."""
    index = np.array([0, 1, 1], dtype=np.int32)
    strata(index, index[::-1].copy(), (2, 2), 2)
