"""Raw ids in, raw ids out: rating input conversion, id lookup, fallback predictions and top-N.

The recommender habits of scikit-surprise and implicit, on the arrays of a fitted factor model:
- `as_ratings` turns what a user hands to `fit` (a pandas DataFrame, an (n, 3) array, an (n, 2)
  array with y, or a `Ratings`) into `Ratings` whose id maps hold the raw ids;
- `IdIndex` maps raw ids back to the model's rows and columns (-1 for an id it never saw);
- `pair_scores` is the model's rating for (user, item) pairs with the documented fallback for
  unknown ids: the global mean plus whichever biases are known;
- `top_items` ranks the items of one user.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from hamsi.data import Ratings
from hamsi.data.readers import ITEM_COLUMN_NAMES, RATING_COLUMN_NAMES, USER_COLUMN_NAMES
from hamsi.errors import InputError

DEFAULT_COLUMNS = ("user", "item", "rating")


def as_ratings(X, y=None, columns=DEFAULT_COLUMNS, *, what: str = "X") -> Ratings:
    """Return `Ratings` (raw ids in user_ids / item_ids) from a DataFrame, an array or Ratings.

    X: a pandas DataFrame with the (user, item, rating) `columns` (default names: any the file
    readers recognise, e.g. user/userId, item/movieId, rating), an (n, 3) array of
    (user, item, rating), an (n, 2) array of (user, item) with the ratings in y, or a Ratings.
    Ids may be non-negative integers or strings. A repeated (user, item) pair is an error.
    """
    if isinstance(X, Ratings):
        if y is not None:
            raise InputError(f"{what} is a Ratings; pass y=None (its values are the ratings)")
        return X
    users, items, values = _id_columns(X, y, columns, what)
    if values is None:
        raise InputError(
            f"{what} holds (user, item) pairs but no ratings: pass y or a '{columns[2]}' column"
        )
    values = _as_float(values, what)
    if users.size == 0:
        raise InputError(f"cannot fit on empty ratings ({what} has 0 rows)")
    if users.dtype.kind in "iu" and items.dtype.kind in "iu":
        return Ratings.from_ids(users, items, values, source=what)
    user_ids, rows = np.unique(users.astype(str), return_inverse=True)
    item_ids, cols = np.unique(items.astype(str), return_inverse=True)
    return Ratings.from_indices(
        rows,
        cols,
        values,
        (user_ids.size, item_ids.size),
        user_ids=user_ids,
        item_ids=item_ids,
        source=what,
        checked=True,
    )


def as_pairs(X, y=None, columns=DEFAULT_COLUMNS, *, what: str = "X"):
    """Return (raw users, raw items, ratings or None) of the pairs in X (+ y), read as `as_ratings` does."""
    if isinstance(X, Ratings):
        return X.user_ids[X.rows], X.item_ids[X.cols], X.values
    users, items, values = _id_columns(X, y, columns, what)
    return users, items, None if values is None else _as_float(values, what)


def _id_columns(X, y, columns, what: str):
    """Return (users, items, ratings or None) as arrays from a DataFrame or a 2-D array (+ y)."""
    if hasattr(X, "columns") and hasattr(X, "iloc"):
        users, items, values = _frame_columns(X, columns, what)
    else:
        array = np.asarray(X)
        if array.ndim != 2 or array.shape[1] not in (2, 3):
            raise InputError(
                f"{what} must be a DataFrame, an (n, 3) array of (user, item, rating) or an "
                f"(n, 2) array of (user, item) with y; got shape {array.shape}"
            )
        users, items = _ids(array[:, 0]), _ids(array[:, 1])
        values = array[:, 2] if array.shape[1] == 3 else None
    if y is not None:
        if values is not None:
            raise InputError(f"{what} already holds ratings; pass y=None")
        values = np.asarray(y)
        if values.shape != users.shape:
            raise InputError(
                f"y has {values.shape[0] if values.ndim else 0} values for {users.size} pairs in {what}"
            )
    return users, items, values


def _frame_columns(frame, columns, what: str):
    """Return the (user, item, rating or None) columns of a DataFrame, by name or recognised name."""
    names = list(frame.columns)
    lowered = {str(name).lower(): name for name in names}
    picked = []
    for wanted, known in zip(columns, (USER_COLUMN_NAMES, ITEM_COLUMN_NAMES, RATING_COLUMN_NAMES)):
        if wanted in names:
            picked.append(wanted)
        elif tuple(columns) == DEFAULT_COLUMNS:  # default names: accept what the readers recognise
            picked.append(next((lowered[name] for name in known if name in lowered), None))
        else:
            picked.append(None)
    for position, name in enumerate(picked[:2]):
        if name is None:
            raise InputError(
                f"{what} has no {('user', 'item')[position]} column {columns[position]!r}; columns "
                f"are {[str(n) for n in names]} (set user_col / item_col / rating_col)"
            )
    values = None if picked[2] is None else frame[picked[2]].to_numpy()
    return _ids(frame[picked[0]].to_numpy()), _ids(frame[picked[1]].to_numpy()), values


def _ids(ids) -> np.ndarray:
    """Return ids as int64 when they are whole numbers (floats from a CSV included), else as str."""
    ids = np.asarray(ids)
    if ids.dtype.kind in "iub":
        return ids.astype(np.int64)
    if ids.dtype.kind == "f" and np.all(np.isfinite(ids)) and np.array_equal(ids, np.round(ids)):
        return ids.astype(np.int64)
    if ids.dtype.kind == "O" and all(isinstance(v, (int, np.integer)) for v in ids):
        return ids.astype(np.int64)
    return ids.astype(str)


def _as_float(values, what: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"ratings in {what} must be numbers") from None


def integer_ids(raw: np.ndarray) -> np.ndarray:
    """Return string ids as integers where the string is one's decimal form ("196"), -1 elsewhere.

    A model fitted on integer ids asked about "196" means 196; "0196", "1e2" or "abc" are not
    written like any integer id, so they stay unknown, and a UserWarning says how many.
    """
    text = np.char.strip(raw.astype(str))
    digits = np.char.isdigit(text) & ((np.char.str_len(text) == 1) | ~np.char.startswith(text, "0"))
    converted = np.full(raw.shape, -1, dtype=np.int64)
    converted[digits] = text[digits].astype(np.int64)
    if not digits.all():
        example = str(raw[np.flatnonzero(~digits)[0]])
        warnings.warn(
            f"{np.count_nonzero(~digits)} string id(s) such as {example!r} are not integers written "
            "plainly, and the model was fitted on integer ids: they are treated as unknown",
            UserWarning,
            stacklevel=4,
        )
    return converted


class IdIndex:
    """Map raw ids to positions in `ids` (-1 for an id not among them) by binary search."""

    def __init__(self, ids: np.ndarray):
        self.ids = np.asarray(ids)
        self._order = np.argsort(self.ids, kind="stable")
        self._sorted = self.ids[self._order]

    def lookup(self, raw) -> np.ndarray:
        """Return the int64 position of every raw id, -1 where it is unknown."""
        raw = _ids(np.atleast_1d(np.asarray(raw)))
        if (raw.dtype.kind == "U") != (self._sorted.dtype.kind == "U"):
            if self._sorted.dtype.kind != "U":
                return self.lookup(integer_ids(raw))
            raw = raw.astype(str)
        if self._sorted.size == 0:
            return np.full(raw.shape, -1, dtype=np.int64)
        where = np.searchsorted(self._sorted, raw)
        where = np.minimum(where, self._sorted.size - 1)
        found = self._sorted[where] == raw
        return np.where(found, self._order[where], -1).astype(np.int64)


@dataclass(frozen=True)
class FactorArrays:
    """The arrays a prediction needs: factors, biases (None without), offset, known rows and columns."""

    user_factors: np.ndarray
    item_factors: np.ndarray
    user_bias: np.ndarray | None
    item_bias: np.ndarray | None
    offset: float
    global_mean: float
    user_known: np.ndarray
    item_known: np.ndarray


def pair_scores(
    model: FactorArrays, rows: np.ndarray, cols: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return (unclipped scores, unknown mask) for model rows and columns (-1: unknown id).

    Known pairs: U_a . V_b + offset (+ bu_a + bv_b), as MatrixFactorization.predict. A pair with
    an unknown user or item (never seen, or without training ratings) gets the global mean plus
    the biases of whichever side is known (0 without biases).
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    user_ok = rows >= 0
    item_ok = cols >= 0
    user_ok[user_ok] = model.user_known[rows[user_ok]]
    item_ok[item_ok] = model.item_known[cols[item_ok]]
    both = user_ok & item_ok
    scores = np.full(rows.shape, model.global_mean, dtype=np.float64)
    a, b = rows[both], cols[both]
    scores[both] = (
        np.einsum("ij,ij->i", model.user_factors[a], model.item_factors[b]) + model.offset
    )
    if model.user_bias is not None:
        scores[both] += model.user_bias[a] + model.item_bias[b]
        user_only, item_only = user_ok & ~item_ok, item_ok & ~user_ok
        scores[user_only] += model.user_bias[rows[user_only]]
        scores[item_only] += model.item_bias[cols[item_only]]
    return scores, ~both


def top_items(scores: np.ndarray, n: int, excluded: np.ndarray | None = None) -> np.ndarray:
    """Return the positions of the n highest scores, best first (ties: lower position first)."""
    scores = np.array(scores, dtype=np.float64)
    if excluded is not None and excluded.size:
        scores[excluded] = -np.inf
    order = np.argsort(-scores, kind="stable")
    kept = order[np.isfinite(scores[order])] if excluded is not None else order
    return kept[:n]


def best_items(model: FactorArrays, row: int, n: int, seen: np.ndarray | None = None) -> tuple:
    """Return (item positions, unclipped scores) of the n best items for model row `row` (-1: unknown user).

    Items without training ratings are never ranked; `seen` (the user's rated items) are left out.
    One implementation for `MatrixFactorizer.recommend` and the workers' `cluster.scoring.recommend_all`.
    """
    cols = np.arange(model.item_known.size)
    scores, _ = pair_scores(model, np.full(cols.size, row), cols)
    excluded = [np.flatnonzero(~model.item_known)]
    if seen is not None:
        excluded.append(seen)
    best = top_items(scores, int(n), np.concatenate(excluded))
    return best, scores[best]


def seen_lists(rows: np.ndarray, cols: np.ndarray, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (indptr, items) in CSR form: the items user a rated are items[indptr[a]:indptr[a + 1]]."""
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_users), out=indptr[1:])
    return indptr, np.asarray(cols, dtype=np.int32)[order]
