"""MatrixFactorizer: the scikit-learn contract, predictions, validation, divergence, bad input."""

import warnings

import numpy as np
import pytest
from sklearn.base import clone

from hamsi import DivergenceError, InputError, MatrixFactorizer
from hamsi.data import Ratings
from hamsi.data.synth import make_ratings


@pytest.fixture(scope="module")
def ratings():
    return make_ratings(users=60, items=80, ratings=1500, rank=3, seed=3)


def test_fit_predict_score(ratings):
    model = MatrixFactorizer(
        rank=4, blocks=2, threads=1, max_cycles=30, random_state=0, biases=False, reg=0.0, eta=0.06
    ).fit(ratings)
    assert model.user_factors_.shape == (60, 4) and model.item_factors_.shape == (80, 4)
    manual = np.sum(model.user_factors_[ratings.rows] * model.item_factors_[ratings.cols], axis=1)
    users, items = (
        ratings.user_ids[ratings.rows],
        ratings.item_ids[ratings.cols],
    )  # raw ids (1-based)
    np.testing.assert_allclose(model.predict(users, items, clip=False), manual, rtol=1e-12)
    assert np.sqrt(
        np.mean((model.predict(users, items, clip=False) - ratings.values) ** 2)
    ) == pytest.approx(model.trace_.column("train_rmse")[-1], rel=1e-9)
    clipped = np.clip(manual, ratings.values.min(), ratings.values.max())
    assert model.score(ratings) == pytest.approx(
        -np.sqrt(np.mean((clipped - ratings.values) ** 2)), rel=1e-12
    )
    assert model.result_.reason == "epoch_limit" and model.result_.success
    assert len(model.trace_) == 31


def test_trace_test_rmse_is_the_score_of_the_served_predictions(ratings):
    train, test = ratings.split(0.2, seed=1)
    known = (np.bincount(train.rows, minlength=60)[test.rows] > 0) & (
        np.bincount(train.cols, minlength=80)[test.cols] > 0
    )
    validation = test.subset(
        np.flatnonzero(known)
    )  # pairs predict scores by the factors, as the engine does
    model = MatrixFactorizer(
        rank=3, blocks=2, biases=True, reg=0.0, eta=0.2, threads=1, max_cycles=20, random_state=0
    ).fit(train, validation=validation)
    # no patience: the last cycle's factors are the model's, whichever cycle validated best
    assert model.result_.n_cycles == len(model.trace_) - 1 == 20
    unclipped = model.predict(validation, clip=False)
    assert np.any(
        (unclipped < model.rating_min_) | (unclipped > model.rating_max_)
    )  # clipping matters here
    assert model.trace_.column("validation_rmse")[-1] == pytest.approx(
        -model.score(validation), rel=1e-12
    )
    assert (
        model.trace_.column("validation_rmse")[-1]
        < np.sqrt(np.mean((unclipped - validation.values) ** 2)) - 1e-4
    )


def test_biases_and_validation_column(ratings):
    train, test = ratings.split(0.2, seed=1)
    model = MatrixFactorizer(
        rank=3, blocks=2, biases=True, reg=0.5, eta=0.2, threads=1, max_cycles=20, random_state=0
    ).fit(train, validation=test)
    assert model.user_bias_.shape == (60,) and model.global_mean_ == pytest.approx(
        train.values.mean()
    )
    # the engine scores every test pair with the factors; predict falls back for users and items
    # without training ratings, so compare where both are known
    model.predict(test)
    assert model.n_unknown_ > 0
    known = (np.bincount(train.rows, minlength=60)[test.rows] > 0) & (
        np.bincount(train.cols, minlength=80)[test.cols] > 0
    )
    unclipped = model.predict(test.subset(np.flatnonzero(known)), clip=False)
    U, V = model.user_factors_, model.item_factors_
    by_factors = (
        np.sum(U[test.rows] * V[test.cols], axis=1)
        + model.global_mean_
        + model.user_bias_[test.rows]
        + model.item_bias_[test.cols]
    )
    np.testing.assert_allclose(unclipped, by_factors[known], rtol=1e-12)
    served = np.clip(
        by_factors, train.values.min(), train.values.max()
    )  # the trace scores served predictions
    assert model.trace_.column("validation_rmse")[-1] == pytest.approx(
        np.sqrt(np.mean((served - test.values) ** 2)), rel=1e-9
    )


def test_get_set_params_and_clone(ratings):
    model = MatrixFactorizer(rank=7, schedule="stoc", reg=0.1)
    params = model.get_params()
    assert params["biases"] is True and params["eta"] == "auto" and MatrixFactorizer().reg == "auto"
    assert params["rank"] == 7 and params["schedule"] == "stoc" and params["memory"] == 5
    assert params["partitioner"] == "strata-b" and params["gamma"] == 0.51
    model.set_params(rank=3, max_cycles=5)
    assert clone(model).get_params()["rank"] == 3


def test_same_random_state_same_factors(ratings):
    options = dict(rank=3, blocks=2, threads=1, max_cycles=10, schedule="stoc")
    first = MatrixFactorizer(random_state=4, **options).fit(ratings)
    second = MatrixFactorizer(random_state=4, **options).fit(ratings)
    np.testing.assert_array_equal(first.user_factors_, second.user_factors_)
    np.testing.assert_array_equal(
        first.trace_.column("objective"), second.trace_.column("objective")
    )


def test_mbgd_algorithm(ratings):
    model = MatrixFactorizer(
        rank=3, reg=1.0, algorithm="mbgd", blocks=2, threads=1, max_cycles=5, random_state=0
    )
    model.fit(ratings)
    assert model.n_iter_ == 10  # K = 2 subsets per epoch


def test_divergence_raises_by_default_and_warns_on_request(ratings):
    with pytest.raises(DivergenceError, match="diverged"):
        # mb-GD: HAMSI's safeguard (on by default) keeps these steps finite
        MatrixFactorizer(
            rank=3, algorithm="mbgd", blocks=2, threads=1, eta=1e-12, max_cycles=200
        ).fit(ratings)
    with pytest.warns(RuntimeWarning, match="diverged"):
        model = MatrixFactorizer(
            rank=3,
            algorithm="mbgd",
            blocks=2,
            threads=1,
            eta=1e-12,
            max_cycles=200,
            on_divergence="warn",
        ).fit(ratings)
    assert model.result_.reason == "diverged" and model.result_.status == 2


@pytest.mark.parametrize(
    "params,message",
    [
        ({"rank": 0}, "rank"),
        ({"rank": 2.5}, "rank"),
        ({"partitioner": "zigzag"}, "unknown partitioner"),
        ({"algorithm": "sgd"}, "unknown algorithm"),
        ({"schedule": "random"}, "unknown schedule"),
        ({"max_time": -1.0}, "max_time"),
        ({"reg": -0.1}, "reg"),
        ({"eta": 0.0}, "eta"),
        ({"memory": 0}, "memory"),
        ({"on_divergence": "ignore"}, "on_divergence"),
        ({"reg": "large"}, "reg must be a finite number >= 0 or 'auto'"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"patience": 0}, "patience"),
        ({"gamma": 1e9}, r"gamma must lie in \[0, 1\]"),
    ],
)
def test_bad_parameters(ratings, params, message):
    with pytest.raises(InputError, match=message):
        MatrixFactorizer(**params).fit(ratings)


def test_empty_ratings_and_bad_predict_input(ratings):
    empty = Ratings(np.zeros(0, int), np.zeros(0, int), np.zeros(0), (3, 3))
    with pytest.raises(InputError, match="empty"):
        MatrixFactorizer(rank=2).fit(empty)
    model = MatrixFactorizer(rank=2, blocks=2, threads=1, max_cycles=2).fit(ratings)
    with pytest.raises(InputError, match="same length"):
        model.predict([0, 1], [0])


def test_regularization_helps_on_held_out_ratings():
    """With an 80/20 split, reg > 0 gives a lower test RMSE than the unregularized fit (overfits)."""
    data = make_ratings(users=150, items=200, ratings=6000, rank=3, seed=11)
    train, test = data.split(0.2, seed=0)
    scores = {}
    for reg in (0.0, 1.0):
        model = MatrixFactorizer(
            rank=10,
            blocks=2,
            threads=1,
            reg=reg,
            reg_weighting="uniform",
            init_scale=1.0,
            biases=True,
            eta=0.2,
            max_cycles=150,
            random_state=1,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            scores[reg] = model.fit(train).rmse(test)
    assert scores[1.0] < 0.9 * scores[0.0]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"chunk_cycles": 0}, "chunk_cycles must be an integer >= 1; got 0"),
        ({"threads_per_worker": 1.5}, "threads_per_worker must be an integer >= 1; got 1.5"),
        ({"n_workers": -2}, "n_workers must be an integer >= 1; got -2"),
        ({"schedule": "random"}, "unknown schedule 'random'; choose one of det, stoc"),
    ],
)
def test_the_dask_estimator_checks_its_declared_parameters_before_any_cluster(params, message):
    from cluster import DaskMatrixFactorizer

    # a scheduler no one listens on: the check must fail before anything connects
    model = DaskMatrixFactorizer(scheduler="tcp://127.0.0.1:9", **params)
    with pytest.raises(InputError) as caught:
        model.fit(np.array([[0, 0, 1.0], [1, 1, 2.0]]))
    assert str(caught.value) == message
