"""What a model fitted on worker data keeps on the workers: the test split (scored there) and seen lists."""

import numpy as np
import pytest
from helpers import N_ITEMS, N_USERS, WORKER_DATA_OPTIONS, dask_frame

from hamsi.data.ratings import TEST_STREAM, heldout_mask
from hamsi.errors import InputError

pytestmark = pytest.mark.cluster

# search=False: both paths take the unsearched values and agree to the bit (the search on the
# workers: test_cluster_search.py)
OPTIONS = WORKER_DATA_OPTIONS


@pytest.fixture(scope="module")
def fitted(client, frame):
    """(model fitted on a TestSplit of the Dask frame, the same fitted in memory on the hash-split train, test Ratings)."""
    import warnings

    import hamsi
    from cluster import DaskMatrixFactorizer
    from cluster.sources import TestSplit

    train, test = hamsi.load_ratings(frame).split_by_hash(0.2, 7, stream=TEST_STREAM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on_workers = DaskMatrixFactorizer(client=client, **OPTIONS).fit(
            TestSplit(dask_frame(frame), 0.2, 7)
        )
        memory = DaskMatrixFactorizer(client=client, **OPTIONS).fit(train)
    return on_workers, memory, test


def test_the_test_stream_is_independent_of_the_validation_split(frame):
    users, items = frame["user"].to_numpy(), frame["item"].to_numpy()
    validation = heldout_mask(users, items, 0.3, 5)
    test = heldout_mask(users, items, 0.3, 5, stream=TEST_STREAM)
    assert not np.array_equal(validation, test)
    # independent draws: the overlap is about 0.3 * 0.3 of the pairs (3000 pairs), not 0.3 or 0
    assert abs(np.mean(validation & test) - 0.09) < 0.03
    assert np.array_equal(validation, heldout_mask(users, items, 0.3, 5, stream=0))


def test_a_test_split_on_the_workers_trains_on_the_rest_and_scores_there(fitted, gathered):
    from cluster import scoring

    on_workers, memory, test = fitted
    # the test pairs were neither trained nor validated on: the in-memory fit on the other pairs
    # (its validation split drawn from them by the same hash) gives the same bits
    assert np.array_equal(on_workers.user_factors_, memory.user_factors_)
    assert [r[:2] + r[3:] for r in on_workers.trace_.rows] == [
        r[:2] + r[3:] for r in memory.trace_.rows
    ]
    assert on_workers._kept.n_test == test.nnz > 0
    gathered.clear()
    rmse = scoring.test_rmse(on_workers)
    assert abs(rmse - on_workers.rmse(test)) <= 1e-12 * rmse
    assert gathered and max(gathered) <= 1  # a sum and a count per partition, never the pairs
    with pytest.raises(InputError, match="test split"):
        scoring.test_rmse(memory)  # fitted in memory: nothing kept on the workers


def test_a_worker_data_model_leaves_out_seen_items_like_the_in_memory_one(fitted, gathered):
    from cluster import scoring

    on_workers, memory, _ = fitted
    assert on_workers._seen_items is None  # no O(ratings) list in the client
    for user in on_workers.user_ids_[[0, 17, N_USERS - 1]]:
        got, expected = on_workers.recommend(user, n=7), memory.recommend(user, n=7)
        assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    gathered.clear()
    top = scoring.recommend_all(on_workers, n=5, users_per_task=30).compute()
    assert max(gathered) == float("inf")  # the check can fail: the output frame itself is gathered
    reference = scoring.recommend_all(memory, n=5).compute()
    assert np.array_equal(top.to_numpy(), reference.to_numpy()) and len(top) == 5 * N_USERS
    # the check can fail: with the seen items ranked too, the lists differ
    everything = scoring.recommend_all(on_workers, n=5, exclude_seen=False).compute()
    assert not np.array_equal(everything.to_numpy(), top.to_numpy())


def test_a_loaded_worker_data_model_says_what_to_do(fitted, tmp_path):
    from cluster import DaskMatrixFactorizer, scoring

    on_workers, _, _ = fitted
    on_workers.save(tmp_path / "model.npz")
    loaded = DaskMatrixFactorizer.load(tmp_path / "model.npz")
    with pytest.raises(InputError, match="loaded without them.*--include-seen"):
        loaded.recommend(on_workers.user_ids_[0])
    with pytest.raises(InputError, match="--include-seen"):
        scoring.recommend_all(loaded)
    items, _ = loaded.recommend(on_workers.user_ids_[0], exclude_seen=False)
    assert items.size == 10


@pytest.mark.parametrize(
    "source, fraction, message",
    [
        ("ratings/*.parquet", 1.0, "in \\(0, 1\\)"),
        (np.zeros((3, 3)), 0.1, "Dask DataFrame or Parquet"),
    ],
)
def test_a_test_split_refuses_what_it_cannot_hold_out(source, fraction, message):
    from cluster.sources import TestSplit

    with pytest.raises(InputError, match=message):
        TestSplit(source, fraction)


def test_items_and_users_outside_the_training_pairs_keep_their_rows(fitted):
    on_workers, memory, _ = fitted
    assert on_workers.user_ids_.size == memory.user_ids_.size <= N_USERS
    assert on_workers.item_ids_.size == memory.item_ids_.size <= N_ITEMS


def test_cli_test_fraction_on_the_workers_prints_the_test_rmse(client, frame, tmp_path, capsys):
    from hamsi.cli import main

    data = tmp_path / "ratings"
    data.mkdir()
    for i in range(3):
        frame.iloc[i::3].to_parquet(data / f"part{i}.parquet")
    flags = ["--scheduler", client.scheduler.address, "--rank", "2", "--max-cycles", "2"]
    code = main(["factorize", str(data / "*.parquet"), *flags, "--test-fraction", "0.2", "--quiet"])
    assert code == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "; test RMSE " in line
    rmse = float(line.split("; test RMSE ")[1].split(";")[0])
    assert 0.3 < rmse < 2.0


def test_the_seen_items_joined_from_the_ratings_on_the_workers_equal_the_models_lists(
    client, fitted, gathered
):
    import pandas as pd

    from cluster import scoring
    from cluster.seen_join import recommend_all_seen

    _, memory, _ = fitted
    train_users = memory.user_ids_[
        np.repeat(np.arange(memory.user_ids_.size), np.diff(memory._seen_indptr))
    ]
    train = pd.DataFrame(
        {"user": train_users, "item": memory.item_ids_[memory._seen_items], "rating": 3.0}
    )
    gathered.clear()
    top = recommend_all_seen(memory, dask_frame(train), n=4, users_per_task=11)
    assert not gathered  # nothing computed yet: the frame is lazy
    got = top.compute()
    reference = scoring.recommend_all(memory, n=4).compute()
    assert np.array_equal(got.to_numpy(), reference.to_numpy())


def test_cli_recommend_all_of_a_worker_data_model_leaves_out_the_seen_items(
    client, frame, tmp_path
):
    import pandas as pd

    from cluster import scoring
    from hamsi import MatrixFactorizer
    from hamsi.cli import main
    from hamsi.recommender import IdIndex, seen_lists

    data = tmp_path / "ratings"
    data.mkdir()
    for i in range(3):
        frame.iloc[i::3].to_parquet(data / f"part{i}.parquet")
    address = client.scheduler.address
    model_file, top_dir = tmp_path / "model.npz", tmp_path / "top.parquet"
    flags = ["--scheduler", address, "--rank", "2", "--max-cycles", "2", "--quiet"]
    assert main(["factorize", str(data / "*.parquet"), *flags, "--out", str(model_file)]) == 0
    glob = str(data / "*.parquet")
    recommend = ["recommend", str(model_file), "--all", "-n", "3", "--out", str(top_dir)]
    assert main([*recommend, "--scheduler", address, "--seen", glob]) == 0
    assert main([*recommend, "--seen", glob, "--include-seen"]) == 2  # contradictory
    got = pd.read_parquet(top_dir).sort_values(["user", "rank"]).to_numpy()
    # the reference: the loaded model given its seen lists in memory
    model = MatrixFactorizer.load(model_file)
    rows = IdIndex(model.user_ids_).lookup(frame["user"].to_numpy())
    cols = IdIndex(model.item_ids_).lookup(frame["item"].to_numpy())
    model._seen_indptr, model._seen_items = seen_lists(rows, cols, model.user_ids_.size)
    with client.as_current():
        reference = scoring.recommend_all(model, n=3).compute().to_numpy()
    assert np.array_equal(got, reference)


@pytest.mark.parametrize("partitioner", ["strata", "color", "hogwild"])
def test_the_lists_on_the_workers_hold_each_users_training_items(client, frame, partitioner):
    from cluster import DaskMatrixFactorizer

    model = DaskMatrixFactorizer(
        client=client, partitioner=partitioner, rank=2, blocks=2, max_cycles=1, search=False
    ).fit(dask_frame(frame))
    users = frame["user"].to_numpy()
    for row in (0, 1, 40, model.user_ids_.size - 1):
        rated = frame["item"].to_numpy()[users == model.user_ids_[row]]
        got = model.item_ids_[model.seen_items(row)]
        assert sorted(got.tolist()) == sorted(rated.tolist()) and rated.size > 0


def test_a_model_whose_client_closed_says_what_to_do(client, frame):
    from cluster import DaskMatrixFactorizer, scoring

    # given a scheduler address, the fit opens its own client and closes it at the end
    model = DaskMatrixFactorizer(
        scheduler=client.scheduler.address, rank=2, blocks=2, max_cycles=1, search=False
    ).fit(dask_frame(frame))
    with pytest.raises(InputError, match="its Dask client is closed.*--include-seen"):
        model.recommend(model.user_ids_[0])
    with pytest.raises(InputError, match="its Dask client is closed"):
        scoring.recommend_all(model)
    assert model.recommend(model.user_ids_[0], exclude_seen=False)[0].size == 10
