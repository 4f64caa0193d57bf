"""The `Ratings` container: a sparse rating matrix in coordinate form with its id maps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hamsi.errors import InputError

DUPLICATE_POLICIES = ("error", "keep-last", "mean")

# Above this many distinct candidate ids per rating a lookup table wastes memory, so
# dense_index falls back to sorting.
LOOKUP_SLACK = 4


@dataclass(eq=False)
class Ratings:
    """Observed entries (rows[i], cols[i]) = values[i] of a users x items matrix.

    rows and cols are dense 0-based int32 indices; user_ids[r] and item_ids[c] give the
    original ids (MovieLens ids are sparse and 1-based). Each (row, col) pair occurs once.
    `notes` carries provenance (e.g. how many duplicates a reader merged); it is reported by
    `summary()` and not copied by `subset()`.
    """

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    shape: tuple[int, int]
    user_ids: np.ndarray | None = None
    item_ids: np.ndarray | None = None
    source: str = "<memory>"
    notes: dict = field(default_factory=dict)

    def __post_init__(self):
        self.rows = np.ascontiguousarray(self.rows, dtype=np.int32)
        self.cols = np.ascontiguousarray(self.cols, dtype=np.int32)
        self.values = np.ascontiguousarray(self.values, dtype=np.float64)
        self.shape = (int(self.shape[0]), int(self.shape[1]))
        n = self.rows.shape[0]
        if self.cols.shape[0] != n or self.values.shape[0] != n:
            raise InputError(
                f"{self.source}: rows, cols and values have different lengths "
                f"({n}, {self.cols.shape[0]}, {self.values.shape[0]})"
            )
        if self.user_ids is None:
            self.user_ids = np.arange(self.shape[0], dtype=np.int64)
        if self.item_ids is None:
            self.item_ids = np.arange(self.shape[1], dtype=np.int64)

    @property
    def nnz(self) -> int:
        """Number of observed ratings."""
        return int(self.rows.shape[0])

    def __len__(self) -> int:
        return self.nnz

    def __repr__(self) -> str:
        return f"Ratings({self.shape[0]} users x {self.shape[1]} items, {self.nnz} ratings, source={self.source!r})"

    def subset(self, index: np.ndarray) -> Ratings:
        """Return the ratings at `index`, keeping the full shape and id maps."""
        return Ratings(
            self.rows[index],
            self.cols[index],
            self.values[index],
            self.shape,
            self.user_ids,
            self.item_ids,
            self.source,
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_ids(
        cls,
        user_ids,
        item_ids,
        values,
        *,
        source: str = "<memory>",
        duplicates: str = "error",
        locate: Callable[[int], str] | None = None,
    ) -> Ratings:
        """Return Ratings built from original (possibly sparse) ids, validated.

        Ids must be non-negative integers and values finite. `duplicates` says what to do
        with a repeated (user, item) pair: "error" (default) raises InputError, "keep-last"
        keeps the last occurrence, "mean" averages; the number of merged entries is stored
        in ``notes["duplicates_merged"]``. `locate(k)` turns the index of the k-th record
        into "file:line" for error messages.
        """
        if duplicates not in DUPLICATE_POLICIES:
            raise InputError(f"duplicates must be one of {DUPLICATE_POLICIES}, got {duplicates!r}")
        where = locate or (lambda k: f"{source}: record {k}")
        values = np.asarray(values, dtype=np.float64)
        users = as_integer_ids(user_ids, "user id", where)
        items = as_integer_ids(item_ids, "item id", where)
        bad = ~np.isfinite(values)
        if bad.any():
            k = int(np.argmax(bad))
            raise InputError(f"{where(k)}: rating is not a finite number: {float(values[k])}")
        user_map, rows = dense_index(users)
        item_map, cols = dense_index(items)
        return cls.from_indices(
            rows,
            cols,
            values,
            (len(user_map), len(item_map)),
            user_ids=user_map,
            item_ids=item_map,
            source=source,
            duplicates=duplicates,
            locate=where,
            checked=True,
        )

    @classmethod
    def from_indices(
        cls,
        rows,
        cols,
        values,
        shape,
        *,
        user_ids=None,
        item_ids=None,
        source: str = "<memory>",
        duplicates: str = "error",
        locate: Callable[[int], str] | None = None,
        checked: bool = False,
    ) -> Ratings:
        """Return Ratings from dense 0-based indices within `shape`, validated like from_ids.

        `checked=True` skips the index and value checks (the caller has done them).
        """
        if duplicates not in DUPLICATE_POLICIES:
            raise InputError(f"duplicates must be one of {DUPLICATE_POLICIES}, got {duplicates!r}")
        where = locate or (lambda k: f"{source}: record {k}")
        values = np.asarray(values, dtype=np.float64)
        if not checked:
            for index, bound, what in ((rows, shape[0], "row"), (cols, shape[1], "column")):
                index = as_integer_ids(index, f"{what} index", where)
                outside = index >= bound
                if outside.any():
                    k = int(np.argmax(outside))
                    raise InputError(
                        f"{where(k)}: {what} index {int(index[k])} is not below {bound}"
                    )
            bad = ~np.isfinite(values)
            if bad.any():
                k = int(np.argmax(bad))
                raise InputError(f"{where(k)}: rating is not a finite number: {float(values[k])}")
        rows = np.asarray(rows, dtype=np.int32)
        cols = np.asarray(cols, dtype=np.int32)
        shape = (int(shape[0]), int(shape[1]))
        show_users = user_ids if user_ids is not None else np.arange(shape[0])
        show_items = item_ids if item_ids is not None else np.arange(shape[1])
        rows, cols, values, merged = _resolve_duplicates(
            rows,
            cols,
            values,
            shape,
            duplicates,
            where,
            lambda k: show_users[rows[k]],
            lambda k: show_items[cols[k]],
        )
        notes = {"duplicates_merged": merged} if merged else {}
        return cls(rows, cols, values, shape, user_ids, item_ids, source, notes)

    # ------------------------------------------------------------------ splits
    def split(self, test_fraction: float = 0.2, seed=None) -> tuple[Ratings, Ratings]:
        """Return (train, test): a uniformly random `test_fraction` of ratings held out.

        Both parts keep the full shape and id maps; the ratings keep their original order.
        """
        if not 0.0 < float(test_fraction) < 1.0:
            raise InputError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
        rng = np.random.default_rng(seed)
        n_test = int(round(self.nnz * float(test_fraction)))
        in_test = np.zeros(self.nnz, dtype=bool)
        in_test[rng.choice(self.nnz, size=n_test, replace=False)] = True
        return self.subset(np.flatnonzero(~in_test)), self.subset(np.flatnonzero(in_test))

    def split_by_hash(
        self, test_fraction: float, seed=None, *, stream: int = 0
    ) -> tuple[Ratings, Ratings]:
        """Return (train, test): the pairs whose `heldout_mask` hash falls below test_fraction go to test.

        Which pairs are held out depends only on their raw ids, the seed and the stream (0: the
        validation split; TEST_STREAM: the test split of ratings kept on the Dask workers), never
        on the order or the partitioning of the ratings: the Dask data path (cluster.dataset)
        applies the same rule to each partition on the workers and holds out the same pairs.
        """
        if not 0.0 < float(test_fraction) < 1.0:
            raise InputError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
        in_test = heldout_mask(
            self.user_ids[self.rows], self.item_ids[self.cols], test_fraction, seed, stream=stream
        )
        return self.subset(np.flatnonzero(~in_test)), self.subset(np.flatnonzero(in_test))

    def holdout_per_user(self, n_per_user: int | float = 1, seed=None) -> tuple[Ratings, Ratings]:
        """Return (train, test) with ratings of every user held out at random.

        An int holds out that many ratings per user, a float in (0, 1) that fraction (rounded
        down) of each user's ratings. Every user keeps at least one rating in train, so a user
        with fewer than n_per_user + 1 ratings contributes fewer to test.
        """
        counts = np.bincount(self.rows, minlength=self.shape[0])
        if isinstance(n_per_user, (int, np.integer)) and not isinstance(n_per_user, bool):
            if n_per_user < 0:
                raise InputError(f"n_per_user must be >= 0, got {n_per_user}")
            held = np.full(self.shape[0], int(n_per_user))
        elif isinstance(n_per_user, float) and 0.0 < n_per_user < 1.0:
            held = np.floor(counts * n_per_user).astype(np.int64)
        else:
            raise InputError(
                f"n_per_user must be an int >= 0 or a float in (0, 1), got {n_per_user!r}"
            )
        held = np.minimum(held, np.maximum(counts - 1, 0))
        rng = np.random.default_rng(seed)
        # A random permutation followed by a stable sort on the user gives each user's ratings
        # in random order; the first `held[user]` of each group go to test.
        shuffled = rng.permutation(self.nnz)
        order = shuffled[np.argsort(self.rows[shuffled], kind="stable")]
        group_start = np.concatenate(([0], np.cumsum(counts)[:-1]))
        sorted_rows = self.rows[order]
        rank_in_user = np.arange(self.nnz) - group_start[sorted_rows]
        in_test = np.zeros(self.nnz, dtype=bool)
        in_test[order[rank_in_user < held[sorted_rows]]] = True
        return self.subset(np.flatnonzero(~in_test)), self.subset(np.flatnonzero(in_test))

    # ------------------------------------------------------------------ statistics
    def summary(self) -> dict:
        """Return summary statistics: sizes, density, rating histogram, activity quantiles."""
        users, items = self.shape
        user_counts = np.bincount(self.rows, minlength=users)
        item_counts = np.bincount(self.cols, minlength=items)
        stats = {
            "source": self.source,
            "users": users,
            "items": items,
            "ratings": self.nnz,
            "density": self.nnz / (users * items) if users and items else 0.0,
            "duplicates_merged": int(self.notes.get("duplicates_merged", 0)),
            "users_without_ratings": int(np.count_nonzero(user_counts == 0)),
            "items_without_ratings": int(np.count_nonzero(item_counts == 0)),
        }
        if self.nnz:
            stats.update(
                rating_min=float(self.values.min()),
                rating_max=float(self.values.max()),
                rating_mean=float(self.values.mean()),
                rating_std=float(self.values.std()),
            )
        stats["rating_histogram"] = rating_histogram(self.values)
        stats["user_activity"] = activity_quantiles(user_counts)
        stats["item_activity"] = activity_quantiles(item_counts)
        return stats


QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)


def activity_quantiles(counts: np.ndarray) -> dict:
    """Return {"min", "p5", "p25", "median", "p75", "p95", "max", "mean"} of ratings per entity."""
    names = ("min", "p5", "p25", "median", "p75", "p95", "max")
    if counts.size == 0:
        return {name: 0.0 for name in names + ("mean",)}
    levels = np.quantile(counts, QUANTILES)
    result = {name: float(level) for name, level in zip(names, levels)}
    result["mean"] = float(counts.mean())
    return result


def rating_histogram(values: np.ndarray) -> dict:
    """Return {rating: count} for half-star grids, else counts in 10 equal-width bins."""
    if values.size == 0:
        return {}
    doubled = values * 2.0
    low, high = float(doubled.min()), float(doubled.max())
    # Counting on the half-star grid is O(n) with bincount instead of an O(n log n) unique.
    if low >= 0 and high <= 40 and np.array_equal(doubled, np.round(doubled)):
        counts = np.bincount(doubled.astype(np.int64))
        return {float(level) / 2.0: int(c) for level, c in enumerate(counts) if c}
    counts, edges = np.histogram(values, bins=10)
    return {f"[{edges[i]:.3g}, {edges[i + 1]:.3g})": int(c) for i, c in enumerate(counts)}


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x: np.ndarray) -> np.ndarray:
    """Return splitmix64's finalizer of uint64 x (Steele et al. 2014): a bijection that scrambles every bit."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _id_bits(ids) -> np.ndarray:
    """Return raw ids as uint64: integers as their two's complement bits, anything else hashed by pandas."""
    ids = np.asarray(ids)
    if ids.dtype.kind in "iub":
        return ids.astype(np.int64).view(np.uint64)
    # why lazy: pandas loads only for ids that are not integers
    import pandas as pd

    return pd.util.hash_array(ids.astype(object), categorize=False)


# heldout_mask's streams: the validation split (early stopping, the search) and the test split
VALIDATION_STREAM, TEST_STREAM = 0, 1


def heldout_mask(users, items, fraction: float, seed=None, *, stream: int = 0) -> np.ndarray:
    """Return a boolean mask: True for the (user, item) pairs held out, about `fraction` of them.

    u = mix(mix(user ^ s) + golden ^ item) / 2^64 is uniform in [0, 1) for every pair and depends
    only on the raw ids and the seed (None means 0); the pair is held out when u < fraction.
    s = mix(seed) for stream 0 (VALIDATION_STREAM); another stream k takes s = mix(mix(seed) ^ k
    golden), an independent hash: the TEST_STREAM's pairs and the validation ones are drawn apart,
    so validation is about `fraction` of the pairs left after the test pairs.
    """
    seed_bits = _mix64(
        np.array([0 if seed is None else int(seed)], dtype=np.int64).view(np.uint64)
    )[0]
    if stream:
        with np.errstate(over="ignore"):
            seed_bits = _mix64(np.array([seed_bits ^ (np.uint64(stream) * _GOLDEN)]))[0]
    with np.errstate(over="ignore"):
        h = _mix64((_mix64(_id_bits(users) ^ seed_bits) + _GOLDEN) ^ _id_bits(items))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53 < float(fraction)


def dense_index(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (sorted distinct ids, dense int32 index of each id), like np.unique(return_inverse).

    MovieLens ids are small non-negative integers, so a presence table and a cumulative sum
    do the job in O(n + max id) instead of the O(n log n) sort of np.unique.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    low, high = int(ids.min()), int(ids.max())
    if low >= 0 and high < LOOKUP_SLACK * ids.size + (1 << 20):
        present = np.zeros(high + 1, dtype=bool)
        present[ids] = True
        distinct = np.flatnonzero(present).astype(np.int64)
        lookup = np.cumsum(present, dtype=np.int32) - 1
        return distinct, lookup[ids]
    distinct, inverse = np.unique(ids, return_inverse=True)
    return distinct, inverse.astype(np.int32)


def as_integer_ids(ids, what: str, where: Callable[[int], str]) -> np.ndarray:
    """Return ids as int64 after checking they are non-negative whole numbers."""
    ids = np.asarray(ids)
    if ids.dtype.kind == "f":
        bad = ~np.isfinite(ids) | (ids != np.round(ids))
        if bad.any():
            k = int(np.argmax(bad))
            raise InputError(f"{where(k)}: {what} is not an integer: {ids[k].item()}")
    elif ids.dtype.kind not in "iub":
        raise InputError(f"{where(0)}: {what}s must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64, copy=False)
    negative = ids < 0
    if negative.any():
        k = int(np.argmax(negative))
        raise InputError(f"{where(k)}: {what} is negative: {int(ids[k])}")
    return ids


def _resolve_duplicates(rows, cols, values, shape, policy, where, user_of, item_of):
    """Return (rows, cols, values, merged_count) with repeated pairs handled per `policy`."""
    if rows.size < 2:
        return rows, cols, values, 0
    keys = rows.astype(np.int64) * shape[1] + cols
    sorted_keys = np.sort(keys)
    if not (sorted_keys[1:] == sorted_keys[:-1]).any():
        return rows, cols, values, 0
    del sorted_keys
    # Only inputs that do contain duplicates pay for the argsort below.
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts_group = np.concatenate(([True], ordered[1:] != ordered[:-1]))
    merged = int(rows.size - np.count_nonzero(starts_group))
    if policy == "error":
        repeats = order[~starts_group]
        k = int(repeats.min())  # the earliest record that repeats an earlier pair
        raise InputError(
            f"{where(k)}: duplicate (user, item) pair ({user_of(k)}, {item_of(k)}); "
            "merge repeated pairs with --duplicates keep-last or --duplicates mean "
            "(hamsi factorize, hamsi data info/convert; the duplicates= argument in Python)"
        )
    group = np.cumsum(starts_group) - 1
    if policy == "keep-last":
        ends_group = np.concatenate((starts_group[1:], [True]))
        keep = np.sort(order[ends_group])
        return rows[keep], cols[keep], values[keep], merged
    sums = np.bincount(group, weights=values[order])
    counts = np.bincount(group)
    firsts = order[starts_group]  # stable sort: first occurrence of each pair
    position = np.argsort(firsts, kind="stable")
    return rows[firsts][position], cols[firsts][position], (sums / counts)[position], merged
