"""The recommender API of MatrixFactorizer: raw ids, fallback, clipping, top-N, save/load, GridSearchCV."""

import numpy as np
import pandas as pd
import pytest
from sklearn.model_selection import GridSearchCV, KFold

from hamsi import InputError, MatrixFactorizer
from hamsi.data.synth import make_ratings

FAST = dict(rank=3, blocks=2, threads=1, max_cycles=8, random_state=0)


@pytest.fixture(scope="module")
def frame():
    """Ratings with sparse raw ids (users 1000 + 7k, items 5 + 3k), so ids never equal positions."""
    ratings = make_ratings(users=40, items=50, ratings=900, rank=3, seed=5)
    return pd.DataFrame(
        {"user": 1000 + 7 * ratings.rows, "item": 5 + 3 * ratings.cols, "rating": ratings.values}
    )


@pytest.fixture(scope="module")
def model(frame):
    return MatrixFactorizer(**FAST).fit(frame)


def brute_force(model, user, item):
    """Return the model's unclipped rating of one known (user, item) pair from its fitted arrays."""
    a = int(np.flatnonzero(model.user_ids_ == user)[0])
    b = int(np.flatnonzero(model.item_ids_ == item)[0])
    return (
        model.user_factors_[a] @ model.item_factors_[b]
        + model.global_mean_
        + model.user_bias_[a]
        + model.item_bias_[b]
    )


def test_predict_on_raw_ids_is_dot_product_plus_biases(frame, model):
    users, items = frame["user"].to_numpy()[:50], frame["item"].to_numpy()[:50]
    expected = np.array([brute_force(model, u, i) for u, i in zip(users, items)])
    np.testing.assert_allclose(model.predict(users, items, clip=False), expected, rtol=1e-12)
    assert model.n_unknown_ == 0
    np.testing.assert_array_equal(model.predict(frame.iloc[:50]), model.predict(users, items))


def test_unknown_ids_fall_back_to_mean_plus_known_bias_and_are_counted(frame, model):
    known_user, known_item = model.user_ids_[0], model.item_ids_[0]
    a = 0
    b = 0
    got = model.predict(
        [known_user, 999_999, 999_999, known_user],
        [888_888, known_item, 888_888, known_item],
        clip=False,
    )
    assert got[0] == pytest.approx(model.global_mean_ + model.user_bias_[a], rel=1e-12)
    assert got[1] == pytest.approx(model.global_mean_ + model.item_bias_[b], rel=1e-12)
    assert got[2] == model.global_mean_
    assert got[3] == pytest.approx(brute_force(model, known_user, known_item), rel=1e-12)
    assert model.n_unknown_ == 3


def test_predictions_are_clipped_to_the_training_range(frame, model):
    unclipped = model.predict(frame, clip=False)
    clipped = model.predict(frame)
    low, high = frame["rating"].min(), frame["rating"].max()
    assert (unclipped > high).any() or (
        unclipped < low
    ).any()  # the test can fail: something is clipped
    np.testing.assert_array_equal(clipped, np.clip(unclipped, low, high))
    assert model.rmse(frame) == pytest.approx(
        np.sqrt(np.mean((clipped - frame["rating"]) ** 2)), rel=1e-12
    )
    assert model.score(frame) == -model.rmse(frame)


def test_recommend_excludes_seen_items_and_ranks_by_score(frame, model):
    user = frame["user"].iloc[0]
    seen = set(frame.loc[frame["user"] == user, "item"])
    ids, ratings = model.recommend(user, n=7)
    everything = model.item_ids_
    scores = model.predict(np.full(everything.size, user), everything, clip=False)
    order = [i for i in everything[np.argsort(-scores, kind="stable")] if i not in seen]
    assert list(ids) == order[:7] and not seen & set(ids)
    np.testing.assert_array_equal(ratings, model.predict(np.full(7, user), ids))
    with_seen, _ = model.recommend(user, n=7, exclude_seen=False)
    assert list(with_seen) == list(everything[np.argsort(-scores, kind="stable")][:7])
    newcomer, _ = model.recommend(123_456_789, n=3)  # unknown user: largest item bias
    assert list(newcomer) == list(everything[np.argsort(-model.item_bias_, kind="stable")][:3])
    with pytest.raises(InputError, match="n must be"):
        model.recommend(user, n=0)


def test_save_load_round_trips_bit_for_bit(frame, model, tmp_path):
    path = tmp_path / "model.npz"
    model.save(path)
    loaded = MatrixFactorizer.load(path)
    assert loaded.get_params() == model.get_params()
    for name in (
        "user_ids_",
        "item_ids_",
        "user_factors_",
        "item_factors_",
        "user_bias_",
        "item_bias_",
    ):
        assert (
            np.array_equal(getattr(loaded, name), getattr(model, name))
            and getattr(loaded, name).dtype == getattr(model, name).dtype
        )
    for name in ("reg_", "eta_", "global_mean_", "rating_min_", "rating_max_", "n_iter_"):
        assert getattr(loaded, name) == getattr(model, name)
    assert np.array_equal(np.array(loaded.trace_.rows), np.array(model.trace_.rows), equal_nan=True)
    users, items = frame["user"].to_numpy(), frame["item"].to_numpy()
    assert np.array_equal(
        loaded.predict(users, items, clip=False), model.predict(users, items, clip=False)
    )
    user = users[3]
    assert all(
        np.array_equal(x, y)
        for x, y in zip(loaded.recommend(user, n=5), model.recommend(user, n=5))
    )


def test_load_refuses_wrong_and_old_files(tmp_path, model):
    text = tmp_path / "notes.npz"
    text.write_text("hello")
    with pytest.raises(InputError, match="not a hamsi model file"):
        MatrixFactorizer.load(text)
    old = tmp_path / "factors.npz"
    np.savez(old, user_factors=np.zeros((2, 2)), item_factors=np.zeros((2, 2)))
    with pytest.raises(InputError, match="no format version"):
        MatrixFactorizer.load(old)
    model.save(tmp_path / "m.npz")
    contents = dict(np.load(tmp_path / "m.npz"))
    contents["format_version"] = np.array(99)
    np.savez(tmp_path / "future.npz", **contents)
    with pytest.raises(InputError, match="version 99 is newer"):
        MatrixFactorizer.load(tmp_path / "future.npz")
    with pytest.raises(InputError, match="no such model file"):
        MatrixFactorizer.load(tmp_path / "missing.npz")


def test_every_input_form_gives_the_same_model(frame):
    reference = MatrixFactorizer(**FAST).fit(frame)
    renamed = frame.rename(columns={"user": "who", "item": "what", "rating": "stars"})
    movielens = frame.rename(columns={"user": "userId", "item": "movieId"})
    array3 = frame.to_numpy()
    forms = [
        MatrixFactorizer(**FAST, user_col="who", item_col="what", rating_col="stars").fit(renamed),
        MatrixFactorizer(**FAST).fit(movielens),
        MatrixFactorizer(**FAST).fit(array3),
        MatrixFactorizer(**FAST).fit(array3[:, :2], frame["rating"].to_numpy()),
    ]
    for model in forms:
        assert np.array_equal(model.user_ids_, reference.user_ids_)
        assert np.array_equal(model.user_factors_, reference.user_factors_)
    with pytest.raises(InputError, match="no user column 'who'"):
        MatrixFactorizer(**FAST, user_col="who").fit(frame)
    with pytest.raises(InputError, match="no ratings"):
        MatrixFactorizer(**FAST).fit(array3[:, :2])


def test_string_ids(frame):
    named = frame.assign(
        user="u" + frame["user"].astype(str), item="film-" + frame["item"].astype(str)
    )
    model = MatrixFactorizer(**FAST).fit(named)
    assert model.user_ids_.dtype.kind == "U"
    first = named.iloc[0]
    assert model.predict([first["user"]], [first["item"]], clip=False)[0] == pytest.approx(
        brute_force(model, first["user"], first["item"]), rel=1e-12
    )
    ids, _ = model.recommend(first["user"], n=3)
    assert all(i.startswith("film-") for i in ids)


def test_patience_cuts_a_validation_fraction(frame):
    model = MatrixFactorizer(**dict(FAST, max_cycles=30), patience=2, validation_fraction=0.2).fit(
        frame
    )
    heldout = model.trace_.column("validation_rmse")
    assert np.isfinite(heldout).all()
    assert model.result_.reason in ("early_stop", "epoch_limit")
    # the validation pairs are those of the seeded pair hash (the rule the Dask data path applies too)
    from hamsi.data.ratings import heldout_mask

    held = heldout_mask(frame["user"].to_numpy(), frame["item"].to_numpy(), 0.2, model.random_state)
    assert model._seen_items.size == np.count_nonzero(~held) and 0.1 < held.mean() < 0.3
    with pytest.raises(InputError, match="patience needs validation"):
        MatrixFactorizer(**FAST, patience=2, validation_fraction=0.0).fit(frame)


def test_validation_with_unknown_ids_is_aligned(frame):
    train, test = frame.iloc[:700], frame.iloc[700:]
    model = MatrixFactorizer(**FAST).fit(train, validation=test)
    known = test[test["user"].isin(train["user"]) & test["item"].isin(train["item"])]
    unclipped = model.predict(known, clip=False)
    assert model.trace_.column("validation_rmse")[-1] == pytest.approx(
        np.sqrt(np.mean((unclipped - known["rating"]) ** 2)), rel=1e-9
    )


def test_grid_search_on_a_dataframe(frame):
    search = GridSearchCV(
        MatrixFactorizer(**dict(FAST, max_cycles=5)),
        {"reg": [0.5, 5.0], "rank": [2, 3]},
        cv=KFold(3, shuffle=True, random_state=0),
    )
    search.fit(frame)
    scores = search.cv_results_["mean_test_score"]
    assert scores.shape == (4,) and np.all(scores < 0)
    train_index, test_index = next(KFold(3, shuffle=True, random_state=0).split(frame))
    fold = MatrixFactorizer(**dict(FAST, max_cycles=5, reg=0.5, rank=2)).fit(
        frame.iloc[train_index]
    )
    assert search.cv_results_["split0_test_score"][0] == pytest.approx(
        -fold.rmse(frame.iloc[test_index])
    )


def test_string_ids_on_an_integer_id_model_are_converted_when_unambiguous():
    ratings = make_ratings(users=30, items=40, ratings=600, rank=2, seed=8)
    model = MatrixFactorizer(
        rank=2, reg=1.0, max_cycles=3, threads=1, blocks=2, random_state=0
    ).fit(ratings)
    users, items = ratings.user_ids[ratings.rows[:5]], ratings.item_ids[ratings.cols[:5]]
    as_text = model.predict([str(u) for u in users], [str(i) for i in items])
    np.testing.assert_array_equal(as_text, model.predict(users, items))
    assert model.n_unknown_ == 0
    np.testing.assert_array_equal(
        model.recommend(str(users[0]))[0], model.recommend(int(users[0]))[0]
    )
    with pytest.warns(UserWarning, match="'07'.*treated as unknown"):
        model.predict(["07", "abc"], [str(items[0]), str(items[1])])
    assert model.n_unknown_ == 2
