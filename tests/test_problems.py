"""Problems: gradients against finite differences, block layout, shards, and a second problem."""

import numpy as np
import pytest
from helpers import block_least_squares, finite_difference_gradient, least_squares_cover

import partition
from hamsi.data import Ratings
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization, SparseLeastSquares


def small_ratings(seed=0, m=7, n=9, count=30):
    rng = np.random.default_rng(seed)
    flat = rng.choice(m * n, size=count, replace=False)
    rows, cols = np.divmod(flat, n)
    return Ratings(rows, cols, rng.integers(1, 6, size=count).astype(float), (m, n))


@pytest.mark.parametrize("reg,biases", [(0.0, False), (0.3, False), (0.0, True), (0.7, True)])
def test_mf_gradient_matches_finite_differences(reg, biases):
    ratings = small_ratings()
    problem = MatrixFactorization(ratings, rank=3, reg=reg, biases=biases)
    problem.arrange(partition.make("strata-b", ratings, blocks=2))
    x = problem.initial_point(np.random.default_rng(1))
    x += 0.1 * np.random.default_rng(2).standard_normal(x.size)  # nonzero biases too
    np.testing.assert_allclose(
        problem.gradient(x), finite_difference_gradient(problem, x), rtol=1e-6, atol=1e-8
    )


def test_mf_objective_closed_form():
    ratings = small_ratings(3)
    problem = MatrixFactorization(ratings, rank=2, reg=0.5, biases=True)
    problem.arrange(partition.make("strata", ratings, blocks=3))
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
    rated_u = np.unique(ratings.rows)
    rated_v = np.unique(ratings.cols)
    expected = (sse + 0.5 * (np.sum(U[rated_u] ** 2) + np.sum(V[rated_v] ** 2))) / (2 * ratings.nnz)
    rmse, objective = problem.evaluate(x)
    assert objective == pytest.approx(expected, rel=1e-12)
    assert rmse == pytest.approx(np.sqrt(sse / ratings.nnz), rel=1e-12)
    np.testing.assert_allclose(
        problem.predict(x, ratings.rows, ratings.cols), prediction, rtol=1e-12
    )


def test_heldout_error_scores_predictions_clipped_to_the_training_range_and_keeps_nan():
    train, test = small_ratings(6, m=8, n=10, count=50), small_ratings(7, m=8, n=10, count=25)
    train = Ratings(
        train.rows, train.cols, np.where(train.values < 2, 2.0, train.values), train.shape
    )  # 2..5
    clipped, unclipped = (
        MatrixFactorization(train, rank=2, biases=True, clip_heldout=flag) for flag in (True, False)
    )
    assert clipped.rating_range == (2.0, 5.0) and unclipped.heldout_range == (-np.inf, np.inf)
    x = 2.0 * clipped.initial_point(
        np.random.default_rng(0)
    )  # spread predictions well outside 2..5
    served = clipped.predict(x, test.rows, test.cols)
    below, above = served < 2.0, served > 5.0
    assert below.any() and above.any()
    served[below], served[above] = 2.0, 5.0
    assert clipped.heldout_error(x, test) == pytest.approx(
        np.sqrt(np.mean((test.values - served) ** 2)), rel=1e-12
    )
    raw = unclipped.predict(x, test.rows, test.cols)
    assert unclipped.heldout_error(x, test) == pytest.approx(
        np.sqrt(np.mean((test.values - raw) ** 2)), rel=1e-12
    )
    # the training SSE (the optimizer's objective) stays unclipped
    train_raw = clipped.predict(x, train.rows, train.cols)
    assert clipped.evaluate(x)[0] == pytest.approx(
        np.sqrt(np.mean((train.values - train_raw) ** 2)), rel=1e-12
    )
    U, _ = clipped.factors(x)
    U[test.rows[0], 0] = np.nan  # a NaN prediction is not clipped into range: the divergence shows
    assert np.isnan(clipped.heldout_error(x, test))


def test_arrange_makes_blocks_contiguous_and_shards_follow_strata():
    ratings = small_ratings(4, m=12, n=15, count=80)
    cover = partition.make("strata-b", ratings, blocks=3)
    problem = MatrixFactorization(ratings, rank=4, biases=True)
    layout = problem.arrange(cover)
    for k, blocks in enumerate(cover.subsets):
        for b, block in enumerate(blocks):
            lo, hi = layout.starts[k][b], layout.ends[k][b]
            np.testing.assert_array_equal(problem.rows[lo:hi], ratings.rows[block])
            np.testing.assert_array_equal(problem.vals[lo:hi], ratings.values[block])
    assert all(layout.disjoint)
    bounds = problem.shard_bounds(cover)
    assert bounds.size == 2 * 3 + 1 and bounds[0] == 0 and bounds[-1] == problem.n_params
    np.testing.assert_array_equal(bounds[:4], cover.row_bounds * 5)
    np.testing.assert_array_equal(bounds[3:], (12 + cover.col_bounds) * 5)


def test_hogwild_overlaps_are_detected():
    ratings = small_ratings(5, m=10, n=10, count=60)
    problem = MatrixFactorization(ratings, rank=2)
    layout = problem.arrange(partition.make("hogwild", ratings, blocks=3, subsets=2, seed=0))
    assert not all(layout.disjoint)


def test_least_squares_gradient_matches_closed_form():
    A, b = block_least_squares()
    problem = SparseLeastSquares(A, b)
    problem.arrange(least_squares_cover(A))
    x = np.random.default_rng(0).standard_normal(A.shape[1])
    np.testing.assert_allclose(problem.gradient(x), A.T @ (A @ x - b) / A.shape[0], rtol=1e-12)


def test_hamsi_solves_a_second_problem_through_the_same_interface():
    A, b = block_least_squares()
    problem = SparseLeastSquares(A, b)
    result = minimize_hamsi(
        problem, least_squares_cover(A), random_state=0, max_cycles=300, threads=1
    )
    exact = np.linalg.lstsq(A.toarray(), b, rcond=None)[0]
    start = problem.initial_point(np.random.default_rng(0))
    assert result.reason == "epoch_limit" and result.pairs_accepted > 250
    # incremental steps decay like t^-0.51, so the iterate approaches the minimizer slowly
    assert np.linalg.norm(problem.gradient(result.x)) < 0.01 * np.linalg.norm(
        problem.gradient(start)
    )
    assert np.abs(result.x - exact).max() < 0.02 * np.abs(start - exact).max()
