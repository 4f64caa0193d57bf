"""Every user's top-n with the seen items read from the ratings on the workers: a join by Dask's shuffle.

A model saved after a fit on ratings kept on the workers has no seen lists (O(ratings), never in
the client), and once loaded it has no workers either. Its ratings still are where they were read:
`recommend_all_seen` reads them again on the workers (cluster.sources: a Dask DataFrame, or
Parquet / CSV files and their pieces), turns each pair into (model row, model column), drops pairs
the model does not know, and lets Dask's own shuffle (`set_index` on the row with the user blocks
as divisions) bring each block of users' pairs to one partition. Each partition then ranks its
block's users beside their pairs with the function `recommend` uses (cluster.scoring._top_block).
The client sends the model once and receives nothing of the pairs.

Every rated pair of the source is left out, the test and validation pairs too: what a user rated
is not recommended back (the in-memory model leaves out its training pairs only).
"""

from __future__ import annotations

import numpy as np

from cluster.scoring import USERS_PER_TASK, Scorer, _top_block, output_meta, scorer_of
from cluster.sources import partition_readers
from hamsi.errors import InputError
from hamsi.recommender import DEFAULT_COLUMNS, seen_lists


def _model_pairs(frame, scorer: Scorer):
    """Return the (row, col) of a checked partition's pairs the model knows, as model positions."""
    # why lazy: pandas loads with the read tasks on the workers
    import pandas as pd

    rows = scorer.user_index.lookup(frame["user"].to_numpy())
    cols = scorer.item_index.lookup(frame["item"].to_numpy())
    known = (rows >= 0) & (cols >= 0)
    return pd.DataFrame({"row": rows[known], "col": cols[known].astype(np.int32)})


def _top_of_block(pairs, scorer: Scorer, n: int, divisions: tuple, partition_info=None):
    """Return `_top_block` of the users of one shuffled partition (rows divisions[i] .. divisions[i + 1] - 1)."""
    i = partition_info["number"]
    lo = int(divisions[i])
    hi = int(divisions[i + 1]) if i + 2 < len(divisions) else scorer.user_ids.size
    rows = pairs.index.to_numpy().astype(np.int64) - lo
    return _top_block(scorer, lo, hi, n, seen_lists(rows, pairs["col"].to_numpy(), hi - lo))


def recommend_all_seen(model, source, n: int = 10, *, users_per_task: int = USERS_PER_TASK):
    """Return a Dask DataFrame (user, rank, item, rating, score) of every known user's n best items,
    leaving out every item the user rated in `source` (read, indexed and joined on the workers).

    source: the model's ratings as a Dask DataFrame, or a path, directory or glob of Parquet / CSV
    files (the columns the model was fitted with). The rows equal model.recommend(user, n) of a
    model whose seen lists are the source's pairs.
    """
    # why lazy: pandas and dask.dataframe load in seconds, only when scores are written
    import dask
    import dask.dataframe as dd
    import pandas as pd

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"n must be a positive integer; got {n!r}")
    scorer = scorer_of(model)
    n_users = scorer.user_ids.size
    step = max(1, int(users_per_task))
    columns = (model.user_col, model.item_col, model.rating_col)
    readers, _ = partition_readers(source, None if tuple(columns) == DEFAULT_COLUMNS else columns)
    shared = dask.delayed(scorer, pure=True)
    index = dask.delayed(_model_pairs, pure=True)
    meta = pd.DataFrame(
        {"row": pd.Series([], dtype=np.int64), "col": pd.Series([], dtype=np.int32)}
    )
    pairs = dd.from_delayed([index(r, shared) for r in readers], meta=meta, verify_meta=False)
    # partition i holds rows divisions[i] .. divisions[i + 1] - 1 (the last one: to the end)
    divisions = tuple(range(0, n_users, step))
    divisions = divisions + (max(n_users - 1, divisions[-1] + 1),)
    joined = pairs.set_index("row", divisions=list(divisions), sort=True)
    return joined.map_partitions(
        _top_of_block, shared, int(n), divisions, meta=output_meta(scorer), align_dataframes=False
    )
