"""Synthetic MovieLens-shaped ratings: heavy-tailed activity and a planted low-rank model.

How a matrix is made (`make_ratings`):

1. Users and items get Zipf-Mandelbrot weights ``w_k ∝ (k + q)**-a`` over a random ranking
   (a = ZIPF_EXPONENT, q = ZIPF_OFFSET_SHARE * count). With a = 1 and q = 2 % of the count the
   busiest entity has about 12 times the mean activity and the median about half of it, close
   to MovieLens 100K and 1M for users and items alike. No entity is expected to fill more than
   MAX_FILL of its row or column, so the heaviest users do not saturate.
2. Every user first gets MIN_RATINGS_PER_USER distinct items (MovieLens keeps only users with
   at least 20 ratings) and every item at least one rating, when N allows it.
3. The remaining pairs are sampled in chunks with probability ∝ w_user * w_item, encoded as
   int64 keys ``user * items + item``, deduplicated by sorting and topped up until there are
   exactly N distinct pairs (a random subset of the last draw is kept).
4. Each rating is a planted score ``b_u + c_i + <x_u, y_i>`` (rank-`rank` factors) plus Gaussian
   noise, cut at normal quantiles into stars so the histogram resembles MovieLens (mode 4).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri

from hamsi.data.ratings import Ratings
from hamsi.errors import InputError

PRESETS = {
    "ml-100k-like": (943, 1682, 100_000),
    "ml-1m-like": (6040, 3706, 1_000_209),
    "ml-10m-like": (69878, 10677, 10_000_054),
    "ml-20m-like": (138493, 26744, 20_000_263),
}
MIN_RATINGS_PER_USER = 20
ZIPF_EXPONENT = 1.0
ZIPF_OFFSET_SHARE = 0.02
MAX_FILL = 0.5
PAIRS_PER_CHUNK = 1 << 22
# Star shares of MovieLens 100K (1..5) and a half-star grid (1, 1.5, ..., 5) shaped like ML-20M.
STAR_SHARES = {1.0: 0.061, 2.0: 0.114, 3.0: 0.271, 4.0: 0.341, 5.0: 0.213}
HALF_STAR_SHARES = {1.0: 0.04, 1.5: 0.02, 2.0: 0.09, 2.5: 0.05, 3.0: 0.22, 3.5: 0.12,
                    4.0: 0.27, 4.5: 0.07, 5.0: 0.12}


def make_ratings(preset: str | None = None, users: int | None = None, items: int | None = None,
                 ratings: int | None = None, rank: int = 10, seed=0, *, half_stars: bool = False,
                 noise: float = 0.5) -> Ratings:
    """Return a synthetic Ratings with exactly `ratings` distinct (user, item) pairs.

    Parameters
    ----------
    preset : {"ml-100k-like", "ml-1m-like", "ml-10m-like", "ml-20m-like"}, optional
        Shape and size of the MovieLens release; explicit users/items/ratings override it.
    users, items, ratings : int
        Matrix shape and number of observed entries (needed when no preset is given).
    rank : int
        Rank of the planted factor model.
    seed : int or None
        Seed of numpy's default_rng; the same seed gives the same matrix.
    half_stars : bool
        Ratings on 1, 1.5, ..., 5 instead of 1..5.
    noise : float
        Standard deviation of the Gaussian noise added to the planted score (signal variance
        is about 1.5).

    The ids are 1-based like MovieLens; ``notes`` holds the planted user and item factors
    (``planted_user_factors``, ``planted_item_factors``) and biases.
    """
    if preset is not None:
        if preset not in PRESETS:
            raise InputError(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
        default_users, default_items, default_ratings = PRESETS[preset]
        users = default_users if users is None else users
        items = default_items if items is None else items
        ratings = default_ratings if ratings is None else ratings
    if users is None or items is None or ratings is None:
        raise InputError("give a preset or all of users, items and ratings")
    n_users, n_items, n_ratings, rank = int(users), int(items), int(ratings), int(rank)
    if n_users < 1 or n_items < 1 or n_ratings < 1 or rank < 1:
        raise InputError(f"users, items, ratings and rank must be positive, got "
                         f"{n_users}, {n_items}, {n_ratings}, {rank}")
    if n_ratings > n_users * n_items:
        raise InputError(f"{n_ratings} ratings do not fit in {n_users} x {n_items} distinct pairs")
    if noise < 0:
        raise InputError(f"noise must be >= 0, got {noise}")

    rng = np.random.default_rng(seed)
    user_weights = capped(zipf_weights(n_users, rng), MAX_FILL * n_items / n_ratings)
    item_weights = capped(zipf_weights(n_items, rng), MAX_FILL * n_users / n_ratings)
    keys = _sample_pairs(rng, n_users, n_items, n_ratings, user_weights, item_weights)
    rows = (keys // n_items).astype(np.int32)
    cols = (keys % n_items).astype(np.int32)
    del keys

    user_factors = rng.standard_normal((n_users, rank)) / np.sqrt(rank)
    item_factors = rng.standard_normal((n_items, rank))
    user_bias = 0.4 * rng.standard_normal(n_users)
    item_bias = 0.6 * rng.standard_normal(n_items)
    scores = np.empty(n_ratings)
    for start in range(0, n_ratings, PAIRS_PER_CHUNK):
        part = slice(start, min(start + PAIRS_PER_CHUNK, n_ratings))
        r, c = rows[part], cols[part]
        scores[part] = (user_bias[r] + item_bias[c]
                        + np.einsum("ij,ij->i", user_factors[r], item_factors[c])
                        + noise * rng.standard_normal(r.size))
    values = stars_from_scores(scores, HALF_STAR_SHARES if half_stars else STAR_SHARES)
    del scores
    notes = {"generator": "hamsi.data.synth.make_ratings", "preset": preset, "seed": seed,
             "rank": rank, "noise": noise, "planted_user_factors": user_factors,
             "planted_item_factors": item_factors, "planted_user_bias": user_bias,
             "planted_item_bias": item_bias}
    return Ratings(rows, cols, values, (n_users, n_items),
                   user_ids=np.arange(1, n_users + 1, dtype=np.int64),
                   item_ids=np.arange(1, n_items + 1, dtype=np.int64),
                   source=f"synthetic {preset or f'{n_users}x{n_items}'} seed={seed}", notes=notes)


def zipf_weights(count: int, rng: np.random.Generator, exponent: float = ZIPF_EXPONENT,
                 offset_share: float = ZIPF_OFFSET_SHARE) -> np.ndarray:
    """Return probabilities ∝ (rank + offset)**-exponent given to `count` entities in random order."""
    ranks = np.arange(1, count + 1, dtype=np.float64)
    weights = (ranks + offset_share * count) ** -exponent
    rng.shuffle(weights)
    return weights / weights.sum()


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


def _sample_pairs(rng, n_users, n_items, n_ratings, user_weights, item_weights) -> np.ndarray:
    """Return exactly n_ratings sorted distinct keys user * n_items + item (see module doc)."""
    user_floor = min(MIN_RATINGS_PER_USER, n_items, n_ratings // n_users)
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
        drawn = _draw_keys(rng, n_items, user_weights, item_weights, int(missing * 1.1) + 64,
                           uniform_share)
        fresh = drawn[~_sorted_contains(keys, drawn)]
        if fresh.size < 0.1 * missing:
            uniform_share = min(1.0, uniform_share + 0.25)
        if fresh.size > missing:
            fresh = rng.choice(fresh, size=missing, replace=False)
        keys = np.sort(np.concatenate((keys, fresh)))
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
        keys = np.sort(np.concatenate((keys, fresh)))
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
