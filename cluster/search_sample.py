"""The search's ratings when the data stays on the workers: a seeded sample of users, on one worker.

hamsi.search runs each trial in one process (cluster.search), so its fit and validation parts must
each fit one worker. This module builds them there, from the partitions the workers read, without
the client ever holding a rating:

1. sample  every partition keeps the training ratings (no test pair of a TestSplit) of the users
           whose seeded hash falls below `fraction` (hamsi.data.ratings.heldout_mask of
           (user, 0): all of a user's ratings or none, so
           every kept user's profile is whole). fraction = 1 when the ratings number at most
           SAMPLE_RATINGS: the sample is then all of them.
2. gather  one task concatenates the kept parts in partition order and indexes them as the in-memory
           estimator indexes a DataFrame (hamsi.recommender.as_ratings), then cuts the search's
           validation split (hamsi.search.validation_split, seeded by random_state).

With fraction 1 the two parts are the very Ratings the in-memory search reads from the same rows
in the same order, so the search makes the same choice on the workers as in memory. The client
receives only the parts' sizes and the spread of the ratings (hamsi.search.candidate_grid's unit).
"""

from __future__ import annotations

import numpy as np

from cluster.indexing import outside_test
from cluster.sources import TestSplit, over_partitions, partition_readers
from hamsi import search
from hamsi.auto_values import SearchSample
from hamsi.data.ratings import heldout_mask
from hamsi.recommender import DEFAULT_COLUMNS, as_ratings

# The most ratings a trial holds in one process (a 1M-rating MovieLens set is 16 MB as Ratings;
# every worker keeps one copy of each part, and each trial its own arrangement of the fit part).
SAMPLE_RATINGS = 5_000_000


def users_kept(frame, fraction: float, seed, test_fraction: float = 0.0, test_seed=None):
    """Return the training rows of `frame` whose user falls in the seeded `fraction` of users (a task).

    Training rows: outside the test split of a TestSplit source (cluster.indexing.outside_test).
    """
    frame = outside_test(frame, test_fraction, test_seed)
    if fraction >= 1.0:
        return frame
    users = frame["user"].to_numpy()
    return frame[heldout_mask(users, np.zeros_like(users), fraction, seed=seed)]


def gathered_parts(seed, *frames):
    """Return (fit part, validation part, spread) of the concatenated frames (a task on one worker)."""
    # why lazy: pandas is imported by the read tasks on the workers, never by the client for this
    import pandas as pd

    ratings = as_ratings(
        pd.concat(frames, ignore_index=True), None, DEFAULT_COLUMNS, what="the search's sample"
    )
    fit_part, validation = search.validation_split(ratings, seed=seed)
    return fit_part, validation, search.spread_of(ratings)


def _part(parts, k):
    return parts[k]


def _sizes(parts) -> tuple[int, int, float]:
    return int(parts[0].nnz), int(parts[1].nnz), float(parts[2])


def search_sample(client, source, *, columns, n_ratings: int, seed) -> SearchSample:
    """Return the SearchSample of `source` (module steps 1-2); trials fetch its parts worker to worker."""
    fraction = min(1.0, SAMPLE_RATINGS / max(1, int(n_ratings)))
    test = dict(test_fraction=0.0, test_seed=None)
    if isinstance(source, TestSplit):  # the test pairs never reach the search
        source, test = source.source, dict(test_fraction=source.fraction, test_seed=source.seed)
    readers, _ = partition_readers(source, columns)
    kept = over_partitions(client, readers, users_kept, fraction=fraction, seed=seed, **test)
    parts = client.submit(gathered_parts, seed, *kept, pure=False)
    fit_part = client.submit(_part, parts, 0, pure=False)
    validation = client.submit(_part, parts, 1, pure=False)
    fit_nnz, validation_nnz, spread = client.submit(_sizes, parts, pure=False).result()
    note = (
        ", on the workers"
        if fraction >= 1.0
        else f", a {fraction:.0%} sample of users on the workers"
    )
    return SearchSample(
        fit_part, validation, fit_nnz, validation_nnz, spread, int(n_ratings), note, fraction
    )
