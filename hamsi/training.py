"""The ratings an estimator fits, wherever they are: the TrainingData protocol.

Two places implement it: `InMemoryRatings` (hamsi.Ratings in this process) and
cluster.dataset.WorkerRatings (ratings read by the Dask workers and kept there, of which the
client holds only ids and counts). MatrixFactorizer asks a TrainingData for the numbers its
defaults read, the objective to minimize, and the facts a fitted model keeps; it never asks which
kind it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hamsi.data import Ratings
from hamsi.data.moments import RatingStatistics, rating_statistics
from hamsi.problems import MatrixFactorization
from hamsi.recommender import seen_lists


@dataclass(frozen=True)
class TrainingFacts:
    """What a fitted model keeps of its training ratings.

    The rating range (predictions are clipped to it), the raw ids, the mean rating, and the items
    each user rated in CSR form (seen_indptr, seen_items; recommend leaves them out). Ratings kept
    on the workers give only the per-user counts: seen_items is None, item_known says which items
    have a rating, and `kept` fetches a user's items from the workers (seen_items(row)).
    """

    rating_min: float
    rating_max: float
    mean: float
    user_ids: np.ndarray
    item_ids: np.ndarray
    seen_indptr: np.ndarray
    seen_items: np.ndarray | None
    item_known: np.ndarray | None = None
    # ratings kept on the workers: their seen lists and test pairs stay there (cluster.kept.KeptRatings)
    kept: object | None = None


class TrainingData(Protocol):
    """Ratings an estimator can fit: numbers for the defaults, an objective, the facts to keep."""

    user_ids: np.ndarray
    item_ids: np.ndarray
    shape: tuple[int, int]

    @property
    def statistics(self) -> RatingStatistics:
        """The count, spread and largest user/item count of the ratings (hamsi.defaults)."""

    def problem(self, rank: int, **options):
        """Return the objective to minimize: matrix factorization at `rank` (problem_options)."""

    def facts(self) -> TrainingFacts:
        """Return what a fitted model keeps of these ratings."""


class InMemoryRatings:
    """TrainingData over hamsi.Ratings in this process: MatrixFactorization of them."""

    def __init__(self, ratings: Ratings):
        self.ratings = ratings
        self.user_ids, self.item_ids, self.shape = ratings.user_ids, ratings.item_ids, ratings.shape

    @property
    def statistics(self) -> RatingStatistics:
        return rating_statistics(self.ratings)

    def problem(self, rank: int, **options) -> MatrixFactorization:
        return MatrixFactorization(self.ratings, rank, **options)

    def facts(self) -> TrainingFacts:
        r = self.ratings
        indptr, items = seen_lists(r.rows, r.cols, r.shape[0])
        return TrainingFacts(
            rating_min=float(r.values.min()),
            rating_max=float(r.values.max()),
            mean=float(r.values.mean()),
            user_ids=np.asarray(r.user_ids),
            item_ids=np.asarray(r.item_ids),
            seen_indptr=indptr,
            seen_items=items,
        )
