"""The defaults' search on ratings kept on the workers: same choice as in memory, no rating in the client."""

import numpy as np
import pytest
from helpers import N_ITEMS, N_USERS, dask_frame

pytestmark = pytest.mark.cluster

OPTIONS = dict(blocks=2, max_cycles=12, random_state=3, chunk_cycles=4)


def test_the_workers_search_chooses_and_refits_what_the_in_memory_search_does(client, frame):
    from cluster import DaskMatrixFactorizer

    memory = DaskMatrixFactorizer(client=client, **OPTIONS).fit(frame)
    on_workers = DaskMatrixFactorizer(client=client, **OPTIONS).fit(dask_frame(frame))
    assert on_workers.search_results_ is not None
    # the same trials, scored the same: the sample is every rating, split as in memory
    for key in (
        "rank",
        "reg",
        "reg_weighting",
        "cycles",
        "validation_rmse",
        "best_epoch",
        "chosen",
    ):
        assert on_workers.search_results_[key] == memory.search_results_[key], key
    assert (on_workers.rank_, on_workers.reg_) == (memory.rank_, memory.reg_)
    # the refit on the shards is the in-memory refit (STRATA-B: bitwise)
    assert np.array_equal(on_workers.user_factors_, memory.user_factors_)
    assert np.array_equal(on_workers.item_factors_, memory.item_factors_)


def test_a_searched_fit_on_the_workers_never_gives_the_client_a_rating(client, frame, gathered):
    from cluster import DaskMatrixFactorizer

    model = DaskMatrixFactorizer(client=client, **OPTIONS).fit(dask_frame(frame))
    assert model.search_results_ is not None
    assert gathered and max(gathered) <= max(N_USERS, N_ITEMS)


def test_ratings_beyond_one_worker_are_searched_on_a_sample_of_users(
    client, frame, monkeypatch, capsys
):
    from cluster import DaskMatrixFactorizer, search_sample

    monkeypatch.setattr(search_sample, "SAMPLE_RATINGS", len(frame) // 3)
    model = DaskMatrixFactorizer(client=client, verbose=1, **OPTIONS).fit(dask_frame(frame))
    said = capsys.readouterr().err
    assert "a 33% sample of users on the workers" in said
    fit_part = int(said.split("search: 8 candidates on ")[1].split(" ratings")[0].replace(",", ""))
    assert 0.2 * len(frame) < fit_part < 0.45 * len(frame)  # about a third, 90 % of it for fitting
    assert model.search_results_ is not None and model.user_factors_.shape[0] == N_USERS


def test_the_search_never_reads_the_test_pairs_of_a_test_split(client, frame, capsys):
    from cluster import DaskMatrixFactorizer
    from cluster.sources import TestSplit
    from hamsi.data.ratings import TEST_STREAM, heldout_mask

    DaskMatrixFactorizer(client=client, verbose=1, **OPTIONS).fit(
        TestSplit(dask_frame(frame), 0.2, seed=1)
    )
    said = capsys.readouterr().err.split("search: 8 candidates on ")[1]
    fit_part = int(said.split(" ratings")[0].replace(",", ""))
    validation = int(said.split("validation ")[1].split(",")[0].replace(",", ""))
    held = heldout_mask(
        frame["user"].to_numpy(), frame["item"].to_numpy(), 0.2, 1, stream=TEST_STREAM
    )
    assert fit_part + validation == len(frame) - int(held.sum()) < len(frame)


def test_a_trial_kept_for_lack_of_time_comes_back_without_its_seen_lists(
    client, frame, monkeypatch
):
    from cluster import DaskMatrixFactorizer
    from cluster.search import DaskTrialRunner
    from hamsi.auto_values import AutoValues
    from hamsi.errors import AdvisedWarning

    # as if max_time left no time for the refit: the search trial's model is the fit's result
    monkeypatch.setattr(AutoValues, "_no_time_to_refit", lambda *args: True)
    sent, fitted = [], DaskTrialRunner.fitted
    monkeypatch.setattr(
        DaskTrialRunner, "fitted", lambda self, c: sent.append(fitted(self, c)) or sent[-1]
    )
    with pytest.warns(AdvisedWarning, match="too little time to refit"):
        model = DaskMatrixFactorizer(client=client, max_time=600, **OPTIONS).fit(dask_frame(frame))
    # the trial's model came from its worker without its O(ratings) lists of seen items
    assert len(sent) == 1 and sent[0]._seen_items is None and sent[0]._item_known.any()
    assert model._seen_items is None  # the fit keeps the workers' lists (cluster.kept)
    assert model.user_factors_.shape[0] == N_USERS  # every user: the sample was every rating
    users = frame["user"].to_numpy()[:50]
    assert np.all(np.isfinite(model.predict(users, frame["item"].to_numpy()[:50])))
