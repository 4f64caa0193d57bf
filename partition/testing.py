"""Rating-shaped test and benchmark data built with NumPy alone (partition must not import hamsi)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(eq=False)
class CoordinateRatings:
    """The minimal ratings interface partitioners need: .rows, .cols, .shape (values optional)."""

    rows: np.ndarray
    cols: np.ndarray
    shape: tuple[int, int]
    values: np.ndarray | None = None


def _distinct_pairs(draw_rows, draw_cols, n_cols, nnz, rng):
    keys = np.zeros(0, dtype=np.int64)
    while keys.size < nnz:
        extra = int((nnz - keys.size) * 1.25) + 16
        fresh = draw_rows(extra).astype(np.int64) * n_cols + draw_cols(extra)
        keys = np.unique(np.concatenate([keys, fresh]))
    # drop a random surplus so the kept pairs are not biased towards small keys
    keep = (
        np.sort(rng.choice(keys.size, size=nnz, replace=False)) if keys.size > nnz else slice(None)
    )
    keys = keys[keep]
    rng.shuffle(keys)  # rating order matters to first-fit coloring; avoid a sorted file
    return np.divmod(keys, n_cols)


def random_ratings(n_rows: int, n_cols: int, nnz: int, seed: int = 0) -> CoordinateRatings:
    """Return `nnz` distinct uniformly random (row, col) entries of an n_rows x n_cols matrix."""
    nnz = min(nnz, n_rows * n_cols)
    rng = np.random.default_rng(seed)
    rows, cols = _distinct_pairs(
        lambda s: rng.integers(0, n_rows, s), lambda s: rng.integers(0, n_cols, s), n_cols, nnz, rng
    )
    return CoordinateRatings(
        rows.astype(np.int32),
        cols.astype(np.int32),
        (n_rows, n_cols),
        rng.integers(1, 6, nnz).astype(np.float64),
    )


def power_law_ratings(
    n_rows: int, n_cols: int, nnz: int, exponent: float = 0.6, seed: int = 0
) -> CoordinateRatings:
    """Return `nnz` distinct entries whose row and column activity follow Zipf's law.

    Index r is drawn with probability proportional to (r + 1) ** -exponent, so low indices are
    the heavy users and popular items, as in MovieLens where early ids are the most rated;
    this is the skew that unbalances first-fit coloring and equal-length strata (Figs. 3.3-3.4).
    """
    rng = np.random.default_rng(seed)

    def sampler(length):
        weights = np.arange(1, length + 1, dtype=np.float64) ** -exponent
        cdf = np.cumsum(weights / weights.sum())
        return lambda size: np.minimum(np.searchsorted(cdf, rng.random(size)), length - 1)

    rows, cols = _distinct_pairs(sampler(n_rows), sampler(n_cols), n_cols, nnz, rng)
    return CoordinateRatings(
        rows.astype(np.int32),
        cols.astype(np.int32),
        (n_rows, n_cols),
        rng.integers(1, 6, rows.size).astype(np.float64),
    )
