"""Rating statistics reduced in an order that does not depend on how the ratings are partitioned.

A sum of floats depends on the order of its terms. The in-process engine sees one array, the Dask
path sees the same ratings spread over row shards; both reduce them the same way, so they agree to
the bit: every user's ratings are summed in their order in the rating list (np.bincount adds its
weights one after the other), then the per-user sums are summed as one array of length m (a shard
contributes its users' sums, concatenated in user order). The client holds only O(users) numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RatingStatistics:
    """What hamsi.defaults reads of the ratings: their count, spread and the largest user/item count."""

    n_ratings: int
    spread: float
    max_count: int


def rating_statistics(ratings) -> RatingStatistics:
    """Return the RatingStatistics of in-memory Ratings (the Dask path forms them from shard reductions)."""
    rows, cols = np.asarray(ratings.rows), np.asarray(ratings.cols)
    values = np.asarray(ratings.values, dtype=np.float64)
    n_users = int(ratings.shape[0]) if hasattr(ratings, "shape") else int(rows.max(initial=-1)) + 1
    if values.size == 0:
        return RatingStatistics(0, 0.0, 0)
    max_count = max(int(np.bincount(rows).max()), int(np.bincount(cols).max()))
    return RatingStatistics(int(values.size), rating_spread(rows, values, n_users), max_count)


def user_sums(rows: np.ndarray, weights: np.ndarray, n_users: int) -> np.ndarray:
    """Return sum_i weights[i] per user (rows: dense indices), each in the ratings' order."""
    return np.bincount(rows, weights=weights, minlength=n_users)


def mean_of(per_user_sums: np.ndarray, count: int) -> float:
    """Return sum(per-user sums) / count: the mean from the per-user sums (pairwise over users)."""
    return float(np.sum(per_user_sums) / count) if count else 0.0


def rating_mean(rows: np.ndarray, values: np.ndarray, n_users: int) -> float:
    """Return the mean rating, reduced as the module docstring says."""
    return mean_of(user_sums(rows, values, n_users), values.size)


def rating_spread(rows: np.ndarray, values: np.ndarray, n_users: int) -> float:
    """Return the standard deviation (ddof 0) of the ratings, reduced as the module docstring says."""
    mean = rating_mean(rows, values, n_users)
    return float(np.sqrt(mean_of(squared_deviation_sums(rows, values, n_users, mean), values.size)))


def squared_deviation_sums(
    rows: np.ndarray, values: np.ndarray, n_users: int, mean: float
) -> np.ndarray:
    """Return sum_i (values[i] - mean)^2 per user."""
    return user_sums(rows, (values - mean) ** 2, n_users)


def sum_in_order(partials) -> np.ndarray:
    """Return partials[0] + partials[1] + ... added one after the other from zero (shard order).

    The engine's own reduction (the bits of kernels.sum_partials_in_order: elementwise IEEE sums
    in the same order), on a list of arrays of one shape, added in place without stacking them.
    """
    total = np.zeros(np.shape(partials[0]))
    for part in partials:
        total += part
    return total
