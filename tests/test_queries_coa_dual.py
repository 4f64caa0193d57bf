"""coa-dual: projected Newton on the n-variable dual of COA's program (dp.queries.dual_newton)."""

import numpy as np
import pytest

from dp import queries as q
from dp.queries.coa import Costs
from dp.queries.dual import nuclear_norm_squared_over_sum
from dp.queries.dual_newton import coa_dual_strategy, dual_point, gram_factor, newton_direction

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")


def _phi(F, y):
    """phi(y) = 2 tr((F Y F')^1/2) - sum(y) from the singular values (independent of dual_point)."""
    return 2 * np.sum(np.linalg.svd(F * np.sqrt(y), compute_uv=False)) - np.sum(y)


@pytest.mark.parametrize("shape", [(15, 9), (6, 11)])
def test_gram_factor_reproduces_the_workload_with_orthonormal_T(shape):
    W = q.wrelated(*shape, s=4, random_state=3)
    T, F = gram_factor(W)
    assert F.shape == (4, shape[1])  # rank 4
    np.testing.assert_allclose(T.T @ T, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(T @ F, W, atol=1e-12)


def test_gradient_and_newton_direction_match_finite_differences():
    W = q.wdiscrete(20, 8, p=0.3, random_state=2)
    _, F = gram_factor(W)
    y = np.random.default_rng(4).uniform(0.5, 2.0, 8)
    point = dual_point(F, y, Costs())
    h = 1e-6
    numeric = np.array([(_phi(F, y + h * e) - _phi(F, y - h * e)) / (2 * h) for e in np.eye(8)])
    np.testing.assert_allclose(point.d - 1, numeric, rtol=1e-6, atol=1e-8)
    assert point.value == pytest.approx(_phi(F, y), rel=1e-12)
    # the Newton direction solves -hess(phi) Delta = grad(phi): check with differences of the gradient
    delta, _ = newton_direction(point, np.ones(8, bool), rtol=1e-12, max_cg=200, costs=Costs())
    plus, minus = dual_point(F, y + h * delta, Costs()), dual_point(F, y - h * delta, Costs())
    np.testing.assert_allclose(-(plus.d - minus.d) / (2 * h), point.d - 1, rtol=1e-5, atol=1e-7)


def test_more_cells_than_queries_sets_weights_to_zero_and_certifies():
    W = q.wrange(12, 30, random_state=1)  # rank <= 12 < n: part of the optimal weights vanish
    strategy = q.optimize(W, "coa-dual", gap_tol=1e-8)
    y = strategy.info["weights"]
    assert (
        strategy.status == "converged"
        and strategy.certificate.gap <= 1e-8
        and np.any(y[np.any(W, axis=0)] == 0)
    )
    np.testing.assert_allclose(strategy.reconstruction @ strategy.matrix, W, atol=1e-10)
    assert strategy.sensitivity == pytest.approx(1.0)
    A, R = strategy.matrix, strategy.reconstruction
    assert strategy.certificate.objective == pytest.approx(
        np.max(np.sum(A**2, axis=0)) * np.sum(R**2), rel=1e-12
    )
    # the solver's own closed form max(d) sum(s) agrees with the matrices it returns
    assert strategy.history[-1].objective == pytest.approx(strategy.certificate.objective, rel=1e-9)
    # KKT: cells with weight 0 have column norm <= 1; weighted cells sit at exactly 1
    norms = np.sum(strategy.matrix**2, axis=0)
    assert np.all(norms <= 1 + 1e-6) and np.allclose(norms[y > 0], 1, atol=1e-4)
    # the bound is the dual at the returned per-cell weights, computed independently
    assert strategy.certificate.lower_bound == pytest.approx(
        nuclear_norm_squared_over_sum(W, np.maximum(y, 1e-300)), rel=1e-9
    )
    # and coa-schur (primal, theta homotopy) cannot beat it
    assert q.optimize(W, "coa-schur").objective >= strategy.certificate.lower_bound * (1 - 1e-12)


def test_agrees_with_coa_schur_on_a_rank_deficient_workload():
    W = q.wrelated(40, 16, s=4, random_state=2)
    dual, primal = q.optimize(W, "coa-dual", gap_tol=1e-6), q.optimize(W, "coa-schur", gap_tol=1e-4)
    assert dual.matrix.shape == (4, 16) and dual.certificate.gap <= 1e-6
    assert dual.objective <= primal.objective * (1 + 1e-6)
    assert dual.objective >= primal.certificate.lower_bound * (1 - 1e-12)


def test_unused_cell_gets_a_zero_column_and_bad_options_are_refused():
    W = q.wdiscrete(30, 10, p=0.3, random_state=6)
    W[:, 3] = 0
    strategy = q.optimize(W, "coa-dual")
    assert np.all(strategy.matrix[:, 3] == 0) and strategy.status == "converged"
    np.testing.assert_allclose(strategy.reconstruction @ strategy.matrix, W, atol=1e-10)
    assert coa_dual_strategy(W, max_time=0.0).status in ("time_limit", "converged")
    assert coa_dual_strategy(W, max_iter=0).status in ("max_iter", "converged")
    with pytest.raises(ValueError, match="shrink"):
        coa_dual_strategy(W, shrink=1.5)


def test_equal_columns_are_solved_once_and_get_equal_strategy_columns():
    W = q.wdiscrete(25, 7, p=0.3, random_state=8)
    wide = W[:, [0, 1, 1, 2, 3, 3, 3, 4, 5, 6]]  # cells 1-2 and 4-6 are indistinguishable
    strategy = q.optimize(wide, "coa-dual", gap_tol=1e-8)
    assert strategy.info["distinct_cells"] == 7
    np.testing.assert_allclose(strategy.matrix[:, 4], strategy.matrix[:, 6])
    np.testing.assert_allclose(strategy.reconstruction @ strategy.matrix, wide, atol=1e-10)
    # the bound holds for the full domain: the same number from the per-cell weights
    y = strategy.info["weights"]
    nuclear = np.sum(np.linalg.svd(wide * np.sqrt(y), compute_uv=False))
    assert strategy.certificate.lower_bound == pytest.approx(nuclear**2 / y.sum(), rel=1e-9)
    assert strategy.certificate.gap <= 1e-8
