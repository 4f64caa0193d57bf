"""Data-driven defaults (hamsi.defaults) and the count-weighted (ALS-WR) penalty they use."""

import numpy as np
import pytest
from helpers import finite_difference_gradient

import partition
from hamsi.data import Ratings
from hamsi.data.synth import make_ratings
from hamsi.defaults import (
    REG_PER_SD,
    choose_hyperparameters,
    gradient_eta,
    optimizer_options,
    problem_options,
)
from hamsi.errors import InputError
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization


def small_ratings(seed=0, m=7, n=9, count=30, scale=1.0):
    rng = np.random.default_rng(seed)
    flat = rng.choice(m * n, size=count, replace=False)
    rows, cols = np.divmod(flat, n)
    return Ratings(rows, cols, scale * rng.integers(1, 6, size=count).astype(float), (m, n))


def arranged(ratings, rank=3, **options):
    problem = MatrixFactorization(ratings, rank=rank, biases=True, **options)
    problem.arrange(partition.make("strata-b", ratings, blocks=2))
    return problem


@pytest.mark.parametrize("damping", [0.0, 3.0])
def test_count_weighted_objective_is_the_als_wr_closed_form(damping):
    rated = small_ratings(3)
    ratings = Ratings(
        rated.rows, rated.cols, rated.values, (8, 10)
    )  # a user and an item without ratings
    problem = arranged(ratings, rank=2, reg=0.4, reg_weighting="count", reg_damping=damping)
    x = problem.initial_point(np.random.default_rng(0))
    U, V = problem.factors(x)
    U[:, 2] = 0.3
    prediction = (
        np.sum(U[ratings.rows, :2] * V[ratings.cols, :2], axis=1)
        + U[ratings.rows, 2]
        + V[ratings.cols, 2]
        + ratings.values.mean()
    )
    sse = np.sum((ratings.values - prediction) ** 2)
    # ALS-WR: every rating (a, b) carries reg (|U_a|^2 + |V_b|^2); damping d adds reg d |U_a|^2 per
    # user with ratings (same for items), the rows without ratings carry nothing
    penalty = 0.4 * np.sum(
        np.sum(U[ratings.rows] ** 2, axis=1) + np.sum(V[ratings.cols] ** 2, axis=1)
    )
    rated_users, rated_items = np.unique(ratings.rows), np.unique(ratings.cols)
    assert rated_users.size < 8 and rated_items.size < 10
    penalty += 0.4 * damping * (np.sum(U[rated_users] ** 2) + np.sum(V[rated_items] ** 2))
    assert problem.evaluate(x)[1] == pytest.approx((sse + penalty) / (2 * ratings.nnz), rel=1e-12)


@pytest.mark.parametrize("damping", [0.0, 4.0])
def test_count_weighted_gradient_matches_finite_differences(damping):
    problem = arranged(small_ratings(1), reg=0.7, reg_weighting="count", reg_damping=damping)
    x = problem.initial_point(np.random.default_rng(1))
    x += 0.1 * np.random.default_rng(2).standard_normal(x.size)
    np.testing.assert_allclose(
        problem.gradient(x), finite_difference_gradient(problem, x), rtol=1e-6, atol=1e-8
    )


def test_uniform_weighting_and_unit_start_are_unchanged():
    ratings = small_ratings(2)
    default = arranged(ratings, reg=0.5)
    explicit = arranged(ratings, reg=0.5, reg_weighting="uniform", init_scale=1.0)
    x = default.initial_point(np.random.default_rng(4))
    assert np.array_equal(x, explicit.initial_point(np.random.default_rng(4)))
    assert default.evaluate(x) == explicit.evaluate(x)
    small = arranged(ratings, init_scale=0.01).initial_point(np.random.default_rng(4))
    np.testing.assert_allclose(small, 0.01 * x, rtol=1e-15)
    with pytest.raises(ValueError, match="reg_weighting"):
        MatrixFactorization(ratings, rank=2, reg_weighting="per-user")
    with pytest.raises(ValueError, match="reg_damping=2.0 applies to reg_weighting='count' only"):
        MatrixFactorization(ratings, rank=2, reg=1.0, reg_damping=2.0)
    with pytest.raises(ValueError, match="reg_damping must be a finite number >= 0"):
        MatrixFactorization(ratings, rank=2, reg=1.0, reg_weighting="count", reg_damping=-1.0)


@pytest.mark.parametrize(
    "weighting, reg, damping",
    [
        ("count", 0.1, 0.0),
        ("count", 30.0, 0.0),
        ("count", 0.1, 20.0),
        ("uniform", 0.0, 0.0),
        ("uniform", None, 0.0),
    ],
)
def test_first_gradient_step_is_one_over_the_busiest_rows_curvature(weighting, reg, damping):
    ratings = small_ratings(5, m=6, n=8, count=30)
    params = choose_hyperparameters(
        ratings, rank=3, subsets=1, reg=reg, reg_weighting=weighting, reg_damping=damping
    )
    problem = arranged(ratings, reg=params["reg"], reg_weighting=weighting, reg_damping=damping)
    x = 0.1 * np.random.default_rng(0).standard_normal(problem.n_params)
    # curvature of F in every bias coordinate, by differencing the gradient
    curvatures = []
    for factors in (0, 1):
        for row in range(problem.shape[factors]):
            index = (row if factors == 0 else problem.shape[0] + row) * problem.width + problem.rank
            step = np.zeros_like(x)
            step[index] = 1e-3
            curvatures.append(
                (problem.gradient(x + step)[index] - problem.gradient(x)[index]) / 1e-3
            )
    first_step = 1.0 / params["eta_gd"] ** params["gamma"]
    assert first_step == pytest.approx(1.0 / max(curvatures), rel=1e-6)
    # a row's ratings spread over K subsets: a K times longer step
    assert gradient_eta(ratings, params["reg"], weighting, 3, params["gamma"], damping) ** -params[
        "gamma"
    ] == pytest.approx(3 * first_step, rel=1e-9)


def test_rescaled_ratings_rescale_the_penalty_and_nothing_else():
    stars = choose_hyperparameters(small_ratings(0), rank=10)
    assert stars["reg"] == pytest.approx(REG_PER_SD * small_ratings(0).values.std(), rel=1e-12)
    percent = choose_hyperparameters(small_ratings(0, scale=20.0), rank=10)
    assert percent["reg"] == pytest.approx(20.0 * stars["reg"], rel=1e-12)
    assert percent["init_scale"] == pytest.approx(np.sqrt(20.0) * stars["init_scale"], rel=1e-12)
    for key in ("eta", "gamma", "memory", "biases", "reg_weighting", "patience"):
        assert percent[key] == stars[key]
    with pytest.raises(InputError, match="rank"):
        choose_hyperparameters(small_ratings(0), rank=0)


def test_defaults_fit_better_than_the_bias_free_mean_and_do_not_diverge():
    ratings = make_ratings("ml-100k-like", seed=3, users=300, items=400, ratings=12_000)
    train, test = ratings.split(0.2, seed=0)
    for rank in (5, 100):
        params = choose_hyperparameters(train, rank)
        problem = MatrixFactorization(train, rank, **problem_options(params))
        cover = partition.make("strata-b", train, blocks=2)
        result = minimize_hamsi(
            problem,
            cover,
            random_state=0,
            max_cycles=60,
            validation=test,
            threads=1,
            **optimizer_options(params),
        )
        frame = result.trace.to_frame()
        assert result.reason == "epoch_limit" and np.isfinite(frame.validation_rmse).all()
        mean_rmse = np.sqrt(np.mean((test.values - train.values.mean()) ** 2))
        assert frame.validation_rmse.iloc[-1] < 0.95 * mean_rmse


@pytest.mark.parametrize(
    "weighting, reg, damping",
    [("count", 0.3, 0.0), ("count", 0.3, 5.0), ("uniform", 2.0, 0.0), ("uniform", 0.0, 0.0)],
)
def test_ridge_biases_are_the_penalized_least_squares_fit(weighting, reg, damping):
    ratings = small_ratings(7, m=8, n=10, count=45)
    problem = arranged(
        ratings,
        rank=2,
        reg=reg,
        reg_weighting=weighting,
        reg_damping=damping,
        init_scale=0.0,
        init_biases=True,
    )
    x = problem.initial_point(np.random.default_rng(0))
    U, V = problem.factors(x)
    assert not U[:, :2].any() and not V[:, :2].any()
    np.testing.assert_array_equal(U[:, 2], problem.ridge_biases()[0])
    U[:, 2], V[:, 2] = problem.ridge_biases(sweeps=2000)
    # with the factors at 0 the gradient vanishes exactly at the penalized least-squares biases
    assert np.abs(problem.gradient(x)).max() < 1e-12
    # and the ten default sweeps already start close to it
    assert np.abs(problem.ridge_biases()[0] - U[:, 2]).max() < 0.05
