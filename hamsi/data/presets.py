"""The shapes and difficulties of the synthetic rating sets (`make_ratings(preset=...)`).

hamsi.data.synth's module docstring says what each preset matches and how it was calibrated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import beta as beta_distribution

from hamsi.errors import InputError


@dataclass(frozen=True)
class RatingModel:
    """Standard deviations of the planted score b_u + c_i + <x_u, y_i> + noise (before stars).

    popularity_corr is the correlation of an item's bias with its log activity weight (popular
    films are rated higher in MovieLens, so shrinking a rarely rated item's bias to the mean is
    also a bias, as on the real data).
    """

    user_bias: float
    item_bias: float
    factors: float
    noise: float
    popularity_corr: float = 0.0


@dataclass(frozen=True)
class ContinuousScale:
    """Ratings on the grid lo, lo + step, ..., hi whose law is a Beta on [lo, hi] of this mean and sd.

    The Beta's parameters come from the mean and sd by the method of moments; `shares` discretizes
    it to the grid (each level gets the mass of the cell of width `step` around it, half at the
    ends), so the scores are mapped to values by the same quantile cut as star shares, and the
    values are already rounded to the grid and inside [lo, hi]. `step` must divide 1 (0.01, 0.5).
    """

    lo: float
    hi: float
    step: float
    mean: float
    sd: float

    def __post_init__(self):
        per_unit = 1.0 / self.step if self.step > 0 else 0.5
        on_grid = all(abs(x * per_unit - round(x * per_unit)) < 1e-9 for x in (self.lo, self.hi))
        if per_unit != round(per_unit) or not on_grid:
            raise InputError(
                f"a continuous scale's step must divide 1 and its ends, got step {self.step} "
                f"for [{self.lo}, {self.hi}]"
            )
        if not self.lo < self.mean < self.hi:
            raise InputError(f"mean {self.mean} is not inside the scale [{self.lo}, {self.hi}]")
        # a law on [lo, hi] with this mean has sd at most sqrt((mean - lo)(hi - mean)), all at the ends
        if not 0 < self.sd < np.sqrt((self.mean - self.lo) * (self.hi - self.mean)):
            raise InputError(
                f"sd {self.sd} is impossible for mean {self.mean} on [{self.lo}, {self.hi}]"
            )

    def shares(self) -> dict[float, float]:
        """Return {value: probability} over the grid (values exact decimals: k / (1 / step))."""
        per_unit = round(1.0 / self.step)
        levels = np.arange(round(self.lo * per_unit), round(self.hi * per_unit) + 1) / per_unit
        width = self.hi - self.lo
        m = (self.mean - self.lo) / width
        concentration = m * (1.0 - m) / (self.sd / width) ** 2 - 1.0
        edges = np.concatenate(([0.0], (levels[1:] - self.step / 2 - self.lo) / width, [1.0]))
        mass = np.diff(beta_distribution.cdf(edges, m * concentration, (1 - m) * concentration))
        return dict(zip(levels.tolist(), mass.tolist()))


@dataclass(frozen=True)
class Preset:
    """A rating set's shape: counts, activity laws, rating scale and planted model.

    `scale` is either star shares {star: share} or a ContinuousScale.
    """

    users: int
    items: int
    ratings: int
    user_activity_shape: float
    item_activity_shape: float
    scale: dict | ContinuousScale
    model: RatingModel
    min_user_ratings: int = 20  # MovieLens keeps users with >= 20 ratings
    # or "lognormal" (the user shape is then the log's standard deviation) or "weibull"
    user_activity_law: str = "gamma"

    def __iter__(self):
        """Unpack as (users, items, ratings), the tuple a preset used to be."""
        return iter((self.users, self.items, self.ratings))


# Star shares of MovieLens 100K and 1M (1..5) and a half-star grid (1, 1.5, ..., 5) shaped like ML-20M.
STAR_SHARES = {1.0: 0.061, 2.0: 0.114, 3.0: 0.271, 4.0: 0.341, 5.0: 0.213}
STAR_SHARES_1M = {1.0: 0.056, 2.0: 0.108, 3.0: 0.261, 4.0: 0.349, 5.0: 0.226}
# MovieLens "latest-small" (672 x 9,066, half stars 0.5..5, a long item tail).
LONG_TAIL_SHARES = {
    0.5: 0.011,
    1.0: 0.033,
    1.5: 0.017,
    2.0: 0.073,
    2.5: 0.044,
    3.0: 0.201,
    3.5: 0.105,
    4.0: 0.288,
    4.5: 0.077,
    5.0: 0.151,
}
HALF_STAR_SHARES = {
    1.0: 0.04,
    1.5: 0.02,
    2.0: 0.09,
    2.5: 0.05,
    3.0: 0.22,
    3.5: 0.12,
    4.0: 0.27,
    4.5: 0.07,
    5.0: 0.12,
}
# Calibrated so that a random 80/20 split of ml-100k-like scores as real MovieLens-100K does
# (global mean 1.130, regularized biases 0.954, best factorization about 0.91); see the module
# doc. The 10M/20M presets reuse it (not calibrated to those releases).
MOVIELENS_MODEL = RatingModel(
    user_bias=0.39, item_bias=0.44, factors=0.45, noise=0.67, popularity_corr=0.45
)
# long-tail-like: calibrated so that a random 80/20 split scores as the real latest-small file does
# relative to its bias baseline (seed 0, the same split for all: biases 0.893 (real, unregularized,
# 0.902), scikit-surprise SVD defaults 0.897 (0.895), its best grid point 0.865 (0.871), Spark ALS
# best point 0.924 (0.915)). With MOVIELENS_MODEL, which it used before, a factor model gained
# 0.010 over the biases where the real file gains 0.031, so no setting could show the real gain.
LONG_TAIL_MODEL = RatingModel(
    user_bias=0.45, item_bias=0.5, factors=0.52, noise=0.62, popularity_corr=0.45
)
# joke-like: the Jester joke ratings' scale, continuous -10..+10 in steps of 0.01 (mean 0.88, sd 5.24).
JOKE_SCALE = ContinuousScale(-10.0, 10.0, 0.01, mean=0.88, sd=5.24)
# Calibrated against the figures of the real Jester set on a random 80/20 split: Surprise SVD at
# its defaults 4.10 and biases only about 4.35 (a factor model 6 % lower RMSE, 8 % more variance
# explained). On joke-like (random 80/20 split, seeds 0 / 1): global mean 5.24 / 5.25, regularized
# biases (ALS, reg 15 users / 10 items) 4.37 / 4.41, biased ALS rank 10, reg 200, 12 sweeps,
# 4.11 / 4.18 (reg 60 and 500 did worse).
JOKE_MODEL = RatingModel(user_bias=0.47, item_bias=0.33, factors=0.38, noise=0.72)
# book-like: 1..5 stars with mean 3.90 and sd 0.95, four the mode. Its model is long-tail-like's
# (no figures of a real book set to calibrate against).
BOOK_SHARES = {1.0: 0.02, 2.0: 0.055, 3.0: 0.225, 4.0: 0.405, 5.0: 0.295}
# For explicit shapes: a strong planted signal (signal variance about 1.5, noise 0.5), the
# generator's original model, which tests of recovery rely on.
# Gamma shapes: fitted to min / median / max activity of each release (expected counts).
PLANTED_MODEL = RatingModel(user_bias=0.4, item_bias=0.6, factors=1.0, noise=0.5)
PRESETS = {
    "ml-100k-like": Preset(943, 1682, 100_000, 0.45, 0.42, STAR_SHARES, MOVIELENS_MODEL),
    "ml-1m-like": Preset(6040, 3706, 1_000_209, 0.50, 0.42, STAR_SHARES_1M, MOVIELENS_MODEL),
    "ml-10m-like": Preset(69878, 10677, 10_000_054, 0.26, 0.22, STAR_SHARES, MOVIELENS_MODEL),
    "ml-20m-like": Preset(138493, 26744, 20_000_263, 0.25, 0.13, STAR_SHARES, MOVIELENS_MODEL),
    "long-tail-like": Preset(
        672,
        9066,
        100_020,
        1.4,
        0.26,
        LONG_TAIL_SHARES,
        LONG_TAIL_MODEL,
        min_user_ratings=16,
        user_activity_law="lognormal",
    ),
    "joke-like": Preset(
        25_000,
        100,
        1_800_000,
        2.0,
        3.0,
        JOKE_SCALE,
        JOKE_MODEL,
        min_user_ratings=36,
    ),
    "book-like": Preset(
        2212,
        95_872,
        227_000,
        0.56,
        0.02,
        BOOK_SHARES,
        LONG_TAIL_MODEL,
        min_user_ratings=1,
        user_activity_law="weibull",
    ),
}
