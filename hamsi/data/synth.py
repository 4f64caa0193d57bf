"""Synthetic MovieLens-shaped ratings: heavy-tailed activity and a planted low-rank model.

How a matrix is made (`make_ratings`):

1. Users and items get activity weights proportional to the quantiles of a gamma distribution
   of shape < 1 (many light raters, a few very heavy ones), in random order. The shapes of
   the presets are fitted to MovieLens: ml-100k-like gives users min 20, median about 65,
   max 600-650 and items min 1, median about 27, max about 500 (MovieLens-100K: 20 / 65 / 737
   and 1 / 27 / 583; the heaviest rows fall short because repeated draws of a pair collide).
   No entity is expected to be drawn more than MAX_FILL times its row or column length.
2. Every user first gets MIN_RATINGS_PER_USER distinct items (MovieLens keeps only users with
   at least 20 ratings) and every item at least one rating, when N allows it.
3. The remaining pairs are sampled in chunks with probability ∝ w_user * w_item, encoded as
   int64 keys ``user * items + item``, deduplicated by sorting and topped up until there are
   exactly N distinct pairs (a random subset of the last draw is kept).
4. Each rating is a planted score ``b_u + c_i + <x_u, y_i>`` (rank-`rank` factors) plus Gaussian
   noise, cut at normal quantiles into stars with the release's shares (MovieLens-100K:
   6.1 / 11.4 / 27.1 / 34.2 / 21.2 %, so mean 3.53 and sd 1.126). Item biases correlate with
   popularity, as on MovieLens.

Difficulty (MOVIELENS_MODEL): the standard deviations of the bias, factor and noise terms were
chosen so that a random 80/20 split of ml-100k-like scores as the real MovieLens-100K does:
global mean 1.13-1.14 (real 1.130), regularized user + item biases 0.95-0.96 (real 0.954), the
best biased matrix factorization 0.91-0.92 (real: Spark ALS 0.922, Surprise SVD 0.939), over
seeds 0 and 1 (benchmarks/bench_accuracy.py prints these baselines). ml-1m-like uses the same
model with ML-1M's size (6040 x 3706, 1,000,209 ratings, every user >= 20, mean about 3.58).

long-tail-like has the statistics of a MovieLens "latest-small"
release: 672 x 9,066, 100,020 half-star ratings 0.5..5 with its shares (mean 3.54, sd 1.06),
every user >= 16; users from a lognormal law (median about 72, max about 2,400: real 71 / 2,391)
and items from gamma 0.26 (median 3, 47 % with <= 2 ratings; max about 190 against the real
343, the one figure it misses). Its difficulty (LONG_TAIL_MODEL) is calibrated to the gains over
the bias baseline that the real file shows.

Two presets have the statistics of non-MovieLens sets. joke-like is shaped like the Jester joke
ratings (24,983 x 100, 1.81M ratings, every user 36-100 jokes, median 72): 25,000 x 100 with
1,800,000 ratings, a dense matrix (72 % of the pairs), users from gamma 2 above a floor of 36,
and a continuous scale (ContinuousScale): values on the 0.01 grid of [-10, 10] drawn by the same
quantile cut as stars, from a Beta law with Jester's mean 0.88 and sd 5.24. book-like has the shape
of a book-rating set: 2,212 x 95,872, 227,000 ratings 1..5 (mean 3.90, sd 0.95); users 1 / 35 /
2,802 ratings (min / median / max) from a Weibull law of shape 0.56, and items 1 / 1 / 359 from
gamma 0.02, so nine items in ten are rated once (it falls short on the busiest user, about 2,300).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy.special import ndtri
from scipy.stats import gamma as gamma_distribution

from hamsi.data.presets import (  # noqa: F401 (re-exported: callers import them from here)
    BOOK_SHARES,
    HALF_STAR_SHARES,
    JOKE_MODEL,
    JOKE_SCALE,
    LONG_TAIL_MODEL,
    LONG_TAIL_SHARES,
    MOVIELENS_MODEL,
    PLANTED_MODEL,
    PRESETS,
    STAR_SHARES,
    STAR_SHARES_1M,
    ContinuousScale,
    Preset,
    RatingModel,
)
from hamsi.data.ratings import Ratings
from hamsi.errors import InputError
from hamsi.limits import refuse_unless_fits

DEFAULT_ACTIVITY_SHAPE = 0.7
MIN_RATINGS_PER_USER = 20
# Expected draws of one entity at most MAX_FILL x its row or column length: above 1 because
# repeated draws collide, and MovieLens's most rated film has 62 % of the users.
MAX_FILL = 3.0
PAIRS_PER_CHUNK = 1 << 22


def make_ratings(
    preset: str | None = None,
    users: int | None = None,
    items: int | None = None,
    ratings: int | None = None,
    rank: int = 10,
    seed=0,
    *,
    half_stars: bool = False,
    noise: float | None = None,
) -> Ratings:
    """Return a synthetic Ratings with exactly `ratings` distinct (user, item) pairs.

    Parameters
    ----------
    preset : str, optional
        One of PRESETS: shape, size, rating scale and difficulty of a real set; explicit
        users/items/ratings override the size. "ml-100k-like", "ml-1m-like", "ml-10m-like",
        "ml-20m-like": the MovieLens releases (1..5 stars, MOVIELENS_MODEL); "long-tail-like": a
        MovieLens latest-small release (672 x 9,066, half stars, half the items rated <= 2 times);
        "joke-like": the Jester jokes (25,000 x 100, 1.8M ratings, users 36-100 items, median 72;
        continuous -10..10 in steps of 0.01, mean 0.88, sd 5.24); "book-like": a book-rating set
        (2,212 x 95,872, 227k ratings 1..5, mean 3.90, sd 0.95; users 1 / 35 / 2,802 ratings
        min / median / max, items 1 / 1 / 359: most books rated once).
    users, items, ratings : int
        Matrix shape and number of observed entries (needed when no preset is given; then the
        planted signal is strong, PLANTED_MODEL).
    rank : int
        Rank of the planted factor model.
    seed : int or None
        Seed of numpy's default_rng; the same seed gives the same matrix.
    half_stars : bool
        Ratings on 1, 1.5, ..., 5 (shaped like ML-20M) instead of the preset's scale.
    noise : float, optional
        Standard deviation of the Gaussian noise added to the planted score (default: the
        model's, 0.67 for presets against a signal of variance 0.55, 0.5 otherwise against 1.5).

    The ids are 1-based like MovieLens; ``notes`` holds the planted user and item factors
    (``planted_user_factors``, ``planted_item_factors``) and biases.
    """
    spec = _resolve_shape(preset, users, items, ratings)
    n_users, n_items = spec.users, spec.items
    rank = int(rank)
    model = _checked_model(spec, rank, noise)
    rng = np.random.default_rng(seed)  # one stream, drawn in this order: pairs, factors, noise
    rows, cols, item_weights = _draw_pairs(rng, spec)
    planted = _planted_model(rng, spec, model, rank, item_weights)
    scores = _planted_scores(rng, rows, cols, planted, model.noise)
    scale = HALF_STAR_SHARES if half_stars else spec.scale
    values = stars_from_scores(
        scores, scale.shares() if isinstance(scale, ContinuousScale) else scale
    )
    del scores
    notes = {
        "generator": "hamsi.data.synth.make_ratings",
        "preset": preset,
        "seed": seed,
        "rank": rank,
        "noise": model.noise,
        **planted,
    }
    return Ratings(
        rows,
        cols,
        values,
        (n_users, n_items),
        user_ids=np.arange(1, n_users + 1, dtype=np.int64),
        item_ids=np.arange(1, n_items + 1, dtype=np.int64),
        source=f"synthetic {preset or f'{n_users}x{n_items}'} seed={seed}",
        notes=notes,
    )


def _checked_model(spec: Preset, rank: int, noise):
    """Return the preset's planted model (noise overridden); InputError on a shape that cannot be made."""
    n_users, n_items, n_ratings = spec.users, spec.items, spec.ratings
    if n_users < 1 or n_items < 1 or n_ratings < 1 or rank < 1:
        raise InputError(
            f"users, items, ratings and rank must be positive, got "
            f"{n_users}, {n_items}, {n_ratings}, {rank}"
        )
    if n_ratings > n_users * n_items:
        raise InputError(f"{n_ratings} ratings do not fit in {n_users} x {n_items} distinct pairs")
    # per rating: keys drawn with slack and sorted copies, rows, cols, score and value; per entity:
    # weights, factors and biases
    refuse_unless_fits(
        f"{n_users} users x {n_items} items with {n_ratings} ratings at rank {rank}",
        64.0 * n_ratings + 8.0 * (n_users + n_items) * (rank + 4),
    )
    model = spec.model if noise is None else replace(spec.model, noise=float(noise))
    if not model.noise >= 0:
        raise InputError(f"noise must be >= 0, got {noise}")
    return model


def _draw_pairs(rng, spec: Preset):
    """Return (rows, cols, item weights): spec.ratings distinct pairs drawn by user and item activity."""
    n_users, n_items, n_ratings = spec.users, spec.items, spec.ratings
    user_weights = capped(
        activity_weights(n_users, spec.user_activity_shape, rng, spec.user_activity_law),
        MAX_FILL * n_items / n_ratings,
    )
    item_weights = capped(
        activity_weights(n_items, spec.item_activity_shape, rng), MAX_FILL * n_users / n_ratings
    )
    keys = _sample_pairs(
        rng, n_users, n_items, n_ratings, user_weights, item_weights, spec.min_user_ratings
    )
    return (keys // n_items).astype(np.int32), (keys % n_items).astype(np.int32), item_weights


def _planted_model(rng, spec: Preset, model, rank: int, item_weights) -> dict:
    """Return the planted factors and biases (item biases correlated with popularity), as notes name them."""
    user_factors = rng.standard_normal((spec.users, rank)) * (model.factors / np.sqrt(rank))
    item_factors = rng.standard_normal((spec.items, rank))
    user_bias = model.user_bias * rng.standard_normal(spec.users)
    item_bias = model.item_bias * correlated_normal(
        rng, np.log(item_weights), model.popularity_corr
    )
    return {
        "planted_user_factors": user_factors,
        "planted_item_factors": item_factors,
        "planted_user_bias": user_bias,
        "planted_item_bias": item_bias,
    }


def _planted_scores(rng, rows, cols, planted: dict, noise: float) -> np.ndarray:
    """Return b_u + b_i + u.v + N(0, noise^2) of every pair, PAIRS_PER_CHUNK pairs at a time."""
    U, V = planted["planted_user_factors"], planted["planted_item_factors"]
    user_bias, item_bias = planted["planted_user_bias"], planted["planted_item_bias"]
    scores = np.empty(rows.size)
    for start in range(0, rows.size, PAIRS_PER_CHUNK):
        part = slice(start, min(start + PAIRS_PER_CHUNK, rows.size))
        r, c = rows[part], cols[part]
        scores[part] = (
            user_bias[r]
            + item_bias[c]
            + np.einsum("ij,ij->i", U[r], V[c])
            + noise * rng.standard_normal(r.size)
        )
    return scores


def _resolve_shape(preset, users, items, ratings) -> Preset:
    """Return the Preset to generate: the named one with any explicit count overriding it."""
    if preset is None:
        if users is None or items is None or ratings is None:
            raise InputError("give a preset or all of users, items and ratings")
        return Preset(
            int(users),
            int(items),
            int(ratings),
            DEFAULT_ACTIVITY_SHAPE,
            DEFAULT_ACTIVITY_SHAPE,
            STAR_SHARES,
            PLANTED_MODEL,
            MIN_RATINGS_PER_USER,
        )
    if preset not in PRESETS:
        raise InputError(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
    spec = PRESETS[preset]
    return replace(
        spec,
        users=int(spec.users if users is None else users),
        items=int(spec.items if items is None else items),
        ratings=int(spec.ratings if ratings is None else ratings),
    )


def activity_weights(
    count: int, shape: float, rng: np.random.Generator, law: str = "gamma"
) -> np.ndarray:
    """Return probabilities proportional to the gamma(shape) quantiles at (k - 1/2)/count, shuffled.

    Quantiles instead of draws fix the extremes (the busiest user is not left to chance); a
    gamma shape below 1 gives MovieLens's many light and few very heavy raters. law="lognormal"
    takes the quantiles of exp(shape * N(0, 1)) instead: a heavier top for the same median
    (the long-tail set's busiest user rates 34x the median one, beyond any gamma shape).
    law="weibull" takes the Weibull(shape) quantiles (-log(1 - level))^(1/shape): a top between
    the two for the same median and mean.
    """
    levels = (np.arange(count) + 0.5) / count
    if law == "lognormal":
        weights = np.exp(shape * ndtri(levels))
    elif law == "weibull":
        weights = (-np.log1p(-levels)) ** (1.0 / shape)
    else:
        weights = gamma_distribution.ppf(levels, shape)
    rng.shuffle(weights)
    return weights / weights.sum()


def correlated_normal(rng: np.random.Generator, covariate: np.ndarray, corr: float) -> np.ndarray:
    """Return standard normal draws whose correlation with `covariate` is about `corr`."""
    spread = covariate.std()
    standardized = (covariate - covariate.mean()) / (spread if spread > 0 else 1.0)
    return corr * standardized + np.sqrt(1.0 - corr * corr) * rng.standard_normal(covariate.size)


def capped(weights: np.ndarray, cap: float) -> np.ndarray:
    """Return probabilities with no entry above `cap`, the excess spread over the others.

    Water-filling: clipped entries stay at the cap while the rest are rescaled; it stops when
    nothing exceeds the cap (at most one pass per clipped entry). A cap below the uniform
    share is impossible to meet and leaves the weights unchanged.
    """
    if cap * weights.size <= 1.0:
        return weights
    weights = weights.copy()
    while weights.max() > cap * (1 + 1e-12):
        at_cap = weights >= cap
        free = ~at_cap
        weights[at_cap] = cap
        weights[free] *= (1.0 - cap * at_cap.sum()) / weights[free].sum()
    return weights


def stars_from_scores(scores: np.ndarray, shares: dict[float, float]) -> np.ndarray:
    """Return star ratings cutting standardized scores at normal quantiles of the `shares`."""
    levels = np.array(list(shares), dtype=np.float64)
    cumulative = np.cumsum(list(shares.values()))[:-1]
    spread = scores.std()
    standardized = (scores - scores.mean()) / (spread if spread > 0 else 1.0)
    return levels[np.searchsorted(ndtri(cumulative), standardized)]


def _sample_pairs(
    rng, n_users, n_items, n_ratings, user_weights, item_weights, min_user_ratings
) -> np.ndarray:
    """Return exactly n_ratings sorted distinct keys user * n_items + item (see module doc)."""
    user_floor = min(min_user_ratings, n_items, n_ratings // n_users)
    keys = _fill_user_floor(rng, n_users, n_items, user_floor, item_weights)
    rated = np.zeros(n_items, dtype=bool)
    rated[keys % n_items] = True
    unrated = np.flatnonzero(~rated)
    if keys.size + unrated.size <= n_ratings:
        # An item without ratings cannot collide with an existing pair, so one draw suffices.
        owners = _draw(rng, user_weights, unrated.size)
        keys = np.sort(np.concatenate((keys, owners * n_items + unrated)))

    # Widen the item distribution toward uniform when collisions stall progress, which happens
    # only when a dense corner of popular pairs is exhausted.
    uniform_share = 0.0
    while keys.size < n_ratings:
        missing = n_ratings - keys.size
        drawn = _draw_keys(
            rng, n_items, user_weights, item_weights, int(missing * 1.1) + 64, uniform_share
        )
        fresh = drawn[~_sorted_contains(keys, drawn)]
        if fresh.size < 0.1 * missing:
            uniform_share = min(1.0, uniform_share + 0.25)
        if fresh.size > missing:
            fresh = np.sort(rng.choice(fresh, size=missing, replace=False))
        keys = merged(keys, fresh)
    return keys


def _fill_user_floor(rng, n_users, n_items, floor, item_weights) -> np.ndarray:
    """Return sorted distinct keys giving every user exactly `floor` items."""
    keys = np.zeros(0, dtype=np.int64)
    if floor == 0:
        return keys
    need = np.full(n_users, floor, dtype=np.int64)
    uniform_share = 0.0
    while need.any():
        users = np.repeat(np.arange(n_users, dtype=np.int64), need)
        items = _draw(rng, item_weights, users.size, uniform_share)
        fresh = sorted_distinct(users * n_items + items)
        fresh = fresh[~_sorted_contains(keys, fresh)]
        keys = merged(keys, fresh)
        need = floor - np.bincount(keys // n_items, minlength=n_users)
        uniform_share = min(1.0, uniform_share + 0.25)
    return keys


def _draw_keys(rng, n_items, user_weights, item_weights, count, uniform_share) -> np.ndarray:
    """Return sorted distinct keys of `count` pairs drawn ∝ user weight * item weight."""
    chunks = []
    for start in range(0, count, PAIRS_PER_CHUNK):
        size = min(PAIRS_PER_CHUNK, count - start)
        users = _draw(rng, user_weights, size, shuffled=False)
        items = _draw(rng, item_weights, size, uniform_share)
        chunks.append(sorted_distinct(users * n_items + items))
    return sorted_distinct(np.concatenate(chunks)) if len(chunks) > 1 else chunks[0]


def merged(keys: np.ndarray, fresh: np.ndarray) -> np.ndarray:
    """Return the sorted union of two sorted int64 arrays of distinct keys with none in common.

    The same array as np.sort(np.concatenate(...)) in one linear pass: a dense set (joke-like,
    72 % of the pairs) tops up its keys in dozens of small rounds, and sorting all of them again
    every round took most of its generation time.
    """
    return np.insert(keys, np.searchsorted(keys, fresh), fresh)


def sorted_distinct(keys: np.ndarray) -> np.ndarray:
    """Return the sorted distinct values of an int64 array.

    Same result as np.unique; written out because NumPy 2.3+ routes np.unique of integers
    through a hash table that is several times slower than sorting for tens of millions of keys.
    """
    keys = np.sort(keys)
    if keys.size < 2:
        return keys
    first = np.empty(keys.size, dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return keys[first]


def _draw(rng, weights, size, uniform_share=0.0, shuffled=True) -> np.ndarray:
    """Return `size` int64 indices drawn with probabilities `weights` (mixed with uniform).

    Multinomial counts expanded by np.repeat and then shuffled: several times faster than
    inverse-CDF sampling with searchsorted, whose random lookups miss the cache. With
    shuffled=False the indices come sorted, which is fine for one side of a pair.
    """
    probabilities = weights * (1.0 - uniform_share) + uniform_share / weights.size
    counts = rng.multinomial(size, probabilities / probabilities.sum())
    drawn = np.repeat(np.arange(weights.size, dtype=np.int64), counts)
    if shuffled:
        rng.shuffle(drawn)
    return drawn


def _sorted_contains(sorted_keys: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Return a mask of candidates present in the sorted array sorted_keys."""
    if sorted_keys.size == 0:
        return np.zeros(candidates.size, dtype=bool)
    position = np.minimum(np.searchsorted(sorted_keys, candidates), sorted_keys.size - 1)
    return sorted_keys[position] == candidates
