"""Scoring on the workers: predictions for a Dask DataFrame of pairs and every user's top-n items.

The fitted factors travel once: they are one key of the task graph (a single `dask.delayed`
object) that every partition's task depends on, so each worker receives them once, however many
partitions it scores. The pairs and the top-n lists never pass through the client.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

from hamsi.data.readers import ITEM_COLUMN_NAMES, USER_COLUMN_NAMES
from hamsi.errors import InputError
from hamsi.recommender import best_items, pair_scores

# the top-n task of a block of users scores every item for each user; blocks this many users
USERS_PER_TASK = 2048


@dataclass(frozen=True)
class Scorer:
    """What a worker needs to score raw (user, item) ids: the id indexes, factor arrays and rating range."""

    user_index: object
    item_index: object
    arrays: object
    item_ids: np.ndarray
    user_ids: np.ndarray
    rating_min: float
    rating_max: float

    def predict(self, users, items, clip: bool = True) -> np.ndarray:
        """Return MatrixFactorizer.predict's values for raw ids (same fallback for unknown ids)."""
        scores, _ = pair_scores(
            self.arrays, self.user_index.lookup(users), self.item_index.lookup(items)
        )
        return np.clip(scores, self.rating_min, self.rating_max) if clip else scores


def scorer_of(model) -> Scorer:
    """Return the Scorer of a fitted MatrixFactorizer (or DaskMatrixFactorizer)."""
    model._check_fitted()
    return Scorer(
        model._user_index,
        model._item_index,
        model._arrays,
        np.asarray(model.item_ids_),
        np.asarray(model.user_ids_),
        float(model.rating_min_),
        float(model.rating_max_),
    )


def _predict_partition(part, scorer: Scorer, user, item, clip):
    # why lazy: pandas and dask.dataframe load in seconds, only when scores are written
    import pandas as pd

    return pd.Series(
        scorer.predict(part[user].to_numpy(), part[item].to_numpy(), clip),
        index=part.index,
        name="prediction",
    )


def predict(model, pairs, *, clip: bool = True):
    """Return a Dask Series of model.predict for the (user, item) pairs of a Dask DataFrame, computed on the workers.

    The columns are the model's user_col / item_col (MovieLens names are recognised with the
    defaults, as in fit); the Series has the partitions and index of `pairs`.
    """
    # why lazy: pandas and dask.dataframe load in seconds, only when scores are written
    import dask
    import pandas as pd

    names = [str(c) for c in pairs.columns]
    user, item = (
        _column(names, wanted, known)
        for wanted, known in (
            (model.user_col, USER_COLUMN_NAMES),
            (model.item_col, ITEM_COLUMN_NAMES),
        )
    )
    scorer = dask.delayed(scorer_of(model), pure=True)
    return pairs.map_partitions(
        _predict_partition,
        scorer,
        user,
        item,
        clip,
        meta=pd.Series([], dtype=np.float64, name="prediction"),
    )


def _column(names: list, wanted: str, known) -> str:
    """Return `wanted` if it is a column, else the first recognised name; InputError otherwise."""
    if wanted in names:
        return wanted
    lowered = {n.lower(): n for n in names}
    found = next((lowered[k] for k in known if k in lowered), None)
    if found is None:
        raise InputError(f"Dask DataFrame has no column {wanted!r}; columns are {names}")
    return found


def _top_block(scorer: Scorer, lo: int, hi: int, n: int, seen):
    """Return the top-n rows (user, rank, item, rating, score) of model rows lo..hi-1 (`best_items` per user)."""
    # why lazy: pandas and dask.dataframe load in seconds, only when scores are written
    import pandas as pd

    columns = {"user": [], "rank": [], "item": [], "rating": [], "score": []}
    for row in range(lo, hi):
        mine = None if seen is None else seen[1][seen[0][row - lo] : seen[0][row - lo + 1]]
        best, scores = best_items(scorer.arrays, row, n, mine)
        columns["user"].append(np.repeat(scorer.user_ids[row : row + 1], best.size))
        columns["rank"].append(np.arange(1, best.size + 1, dtype=np.int32))
        columns["item"].append(scorer.item_ids[best])
        columns["rating"].append(np.clip(scores, scorer.rating_min, scorer.rating_max))
        columns["score"].append(scores)
    return pd.DataFrame({k: np.concatenate(v) if v else np.zeros(0) for k, v in columns.items()})


def recommend_all(
    model, n: int = 10, *, exclude_seen: bool = True, users_per_task: int = USERS_PER_TASK
):
    """Return a Dask DataFrame (user, rank, item, rating, score) of every known user's n best items.

    Each task ranks a block of users on a worker with the function `recommend` uses, so the rows
    equal model.recommend(user, n, exclude_seen) for every user. exclude_seen reads the model's
    seen lists: a model fitted in memory (or loaded) sends each block's slice with its task once;
    a model fitted on ratings kept on the workers ranks each row shard's users beside the shard's
    own lists (cluster.kept), which never leave their host: compute the frame with the client
    that fitted it, while it is open. A loaded model of worker data has no lists (InputError).
    """
    # why lazy: pandas and dask.dataframe load in seconds, only when scores are written
    import dask
    import dask.dataframe as dd

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"n must be a positive integer; got {n!r}")
    scorer = scorer_of(model)
    shared = dask.delayed(scorer, pure=True)
    step = max(1, int(users_per_task))
    kept = getattr(model, "_kept", None) if exclude_seen else None
    if exclude_seen and model._seen_items is None and kept is not None:
        parts = _kept_blocks(kept, shared, int(n), step)
    else:
        parts = []
        for lo in range(0, scorer.user_ids.size, step):
            hi = min(scorer.user_ids.size, lo + step)
            seen = None
            if exclude_seen:
                model.seen_items(lo)  # InputError when the model keeps no seen lists
                indptr = model._seen_indptr[lo : hi + 1]
                seen = (indptr - indptr[0], model._seen_items[indptr[0] : indptr[-1]])
            parts.append(dask.delayed(_top_block, pure=True)(shared, lo, hi, int(n), seen))
    return dd.from_delayed(parts, meta=output_meta(scorer), verify_meta=False)


def output_meta(scorer: Scorer):
    """Return the empty frame of recommend_all's columns (user, rank, item, rating, score)."""
    # why lazy: pandas loads in seconds, only when scores are written
    import pandas as pd

    return pd.DataFrame(
        {
            "user": pd.Series([], dtype=scorer.user_ids.dtype),
            "rank": pd.Series([], dtype=np.int32),
            "item": pd.Series([], dtype=scorer.item_ids.dtype),
            "rating": pd.Series([], dtype=float),
            "score": pd.Series([], dtype=float),
        }
    )


def _top_seen_block(scorer: Scorer, lo: int, hi: int, n: int, seen):
    """Return `_top_block` of model rows lo..hi-1 with their seen items from a row shard's SeenLists."""
    return _top_block(scorer, lo, hi, n, seen.block(lo, hi))


def _kept_blocks(kept, shared, n: int, step: int) -> list:
    """Return the Delayed top-n blocks of every row shard's users, each beside the shard's SeenLists."""
    # why lazy: dask loads with the scoring of a model, not with this module
    import dask

    kept.check_open()
    rank = dask.delayed(_top_seen_block, pure=True)
    bounds = kept.row_bounds
    return [
        rank(shared, lo, min(int(bounds[s + 1]), lo + step), n, seen)
        for s, seen in enumerate(kept.seen)
        for lo in range(int(bounds[s]), int(bounds[s + 1]), step)
    ]


def test_rmse(model) -> float:
    """Return the RMSE of model's clipped predictions on the test split it was fitted with, computed on the workers.

    The model was fitted on a cluster.sources.TestSplit of ratings kept on the workers; its test
    pairs never left them, and only a sum and a count per partition reach the client. Equal (up to
    the order of the sums) to model.rmse on the same pairs in memory.
    """
    model._check_fitted()
    kept = getattr(model, "_kept", None)
    if kept is None:
        raise InputError(
            "test_rmse needs a model fitted on ratings kept on the workers with a test split "
            "(cluster.sources.TestSplit), in the session that fitted it"
        )
    return kept.test_rmse(model._arrays, float(model.rating_min_), float(model.rating_max_))


test_rmse.__test__ = False  # type: ignore[attr-defined]  # not for pytest to collect


def write_parquet(frame, path) -> None:
    """Write a Dask DataFrame to the Parquet directory `path` from the workers, all or nothing.

    The parts go to a temporary directory beside `path`, renamed over it only when every part is
    written: a failed run leaves no partial output.
    """
    parent = os.path.dirname(os.path.abspath(path))
    staging = tempfile.mkdtemp(dir=parent, prefix=".hamsi-parquet-")
    try:
        frame.to_parquet(staging, write_index=False)
        if os.path.isdir(path):
            shutil.rmtree(path)
        os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
