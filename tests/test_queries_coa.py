"""COA (Yuan et al. Alg. 1-3), its exact-direction variant and the duality-gap certificate."""

import numpy as np
import pytest
from scipy.linalg import cholesky
from scipy.optimize import minimize

from dp import queries as q
from dp.queries.coa import (
    Costs,
    armijo_step,
    cholesky_point,
    coa_strategy,
    gradient_parts,
    hessian_product,
    newton_direction,
)
from dp.queries.dual import nuclear_norm_squared_over_sum
from dp.queries.hierarchical import hierarchical_matrix
from dp.queries.schur_direction import schur_newton_direction
from dp.queries.wavelet import haar_matrix

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")


def _feasible_X(n, seed):
    B = np.random.default_rng(seed).standard_normal((n + 3, n))
    X = B.T @ B
    d = 1 / np.sqrt(np.diag(X))
    return d[:, None] * X * d[None, :]


def _problem(n=7, m=15, seed=0):
    W = q.wdiscrete(m, n, p=0.3, random_state=seed)
    V = W.T @ W + 0.1 * np.eye(n)
    return W, V, cholesky(V, lower=True)


def test_hessian_operator_matches_finite_differences_of_the_gradient():
    _, V, Q = _problem()
    X = _feasible_X(7, 1)
    D = np.random.default_rng(2).standard_normal((7, 7))
    D = D + D.T

    def gradient(Y):
        Z = np.linalg.inv(Y)
        return -Z @ V @ Z

    h = 1e-6
    numeric = (gradient(X + h * D) - gradient(X - h * D)) / (2 * h)
    Z, P = gradient_parts(cholesky_point(X, Q))
    np.testing.assert_allclose(P, -gradient(X), rtol=1e-9)
    np.testing.assert_allclose(
        hessian_product(Z, P, D), numeric, rtol=1e-5, atol=1e-7 * np.abs(numeric).max()
    )


def test_schur_direction_equals_the_cg_newton_direction():
    _, V, Q = _problem()
    point = cholesky_point(_feasible_X(7, 3), Q)
    Z, P = gradient_parts(point)
    by_cg, _ = newton_direction(Z, P, max_cg=500, rtol=1e-13)
    exact, _ = schur_newton_direction(point.X, point.L, point.U, max_cg=500, rtol=1e-13)
    assert np.all(np.diag(exact) == 0) and np.all(np.diag(by_cg) == 0)
    np.testing.assert_allclose(exact, by_cg, rtol=1e-6, atol=1e-9 * np.abs(exact).max())
    residual = hessian_product(Z, P, exact) - P  # stationarity: off-diagonal of H(D) + G vanishes
    np.fill_diagonal(residual, 0)
    assert np.abs(residual).max() < 1e-8 * np.abs(P).max()


def test_cholesky_test_refuses_a_step_that_leaves_the_pd_cone():
    _, V, Q = _problem()
    X = _feasible_X(7, 4)
    lam, E = np.linalg.eigh(X)
    D = -2 * lam[0] * np.outer(E[:, 0], E[:, 0])  # X + D has eigenvalue -lam[0] < 0
    assert cholesky_point(X + D, Q) is None
    point = cholesky_point(X, Q)
    Z, P = gradient_parts(point)
    newton, _ = newton_direction(Z, P, max_cg=100, rtol=1e-10)
    D = 1e3 * newton  # a descent direction far too long: zero trace, so X + D is indefinite
    assert np.linalg.eigvalsh(X + D).min() < 0 and cholesky_point(X + D, Q) is None
    slope = -float(np.sum(D * P))
    new, alpha, trials = armijo_step(
        point, D, slope, Q, beta=0.5, sigma=1e-4, max_trials=60, costs=Costs()
    )
    assert trials >= 2 and alpha <= 0.5 and np.linalg.eigvalsh(new.X).min() > 0
    assert new.value <= point.value + 1e-4 * alpha * slope


def _generic_optimum(W):
    """min tr(X^-1 W'W) over X = N B'B N (N normalizes the diagonal) by scipy BFGS."""
    n = W.shape[1]
    G = W.T @ W
    tri = np.tril_indices(n)

    def objective(params):
        B = np.zeros((n, n))
        B[tri] = params
        X = B @ B.T
        d = 1 / np.sqrt(np.diag(X))
        return np.trace(np.linalg.solve(d[:, None] * X * d[None, :], G))

    best = min(
        (
            minimize(
                objective,
                np.eye(n)[tri] + 0.1 * np.random.default_rng(s).standard_normal(tri[0].size),
                method="BFGS",
                options={"gtol": 1e-10, "maxiter": 5000},
            )
            for s in range(3)
        ),
        key=lambda r: r.fun,
    )
    return best.fun


@pytest.mark.parametrize("method", ["coa", "coa-schur", "coa-dual"])
def test_optimum_matches_a_generic_solver_and_the_certificate_holds(method):
    W = q.wrange(20, 6, random_state=3)
    strategy = q.optimize(W, method, gap_tol=1e-6)
    reference = _generic_optimum(W)
    assert strategy.status == "converged"
    assert strategy.objective == pytest.approx(reference, rel=1e-5)
    cert = strategy.certificate
    assert cert.lower_bound <= reference * (1 + 1e-9) and cert.gap <= 1e-6
    assert cert.objective == pytest.approx(strategy.objective, rel=1e-9)


def test_dual_bound_is_below_every_feasible_objective():
    W = q.wrelated(12, 8, s=3, random_state=5)
    G = W.T @ W
    rng = np.random.default_rng(6)
    for seed in range(20):
        X = _feasible_X(8, seed)
        primal = np.trace(np.linalg.solve(X, G))
        assert nuclear_norm_squared_over_sum(W, rng.uniform(0.1, 2, 8)) <= primal * (1 + 1e-12)
    # for n > m the bound comes from the m x m Gram matrix: the same number
    wide = q.wrange(5, 9, random_state=1)
    w = rng.uniform(0.5, 1.5, 9)
    expected = np.sum(np.linalg.svd(wide * np.sqrt(w), compute_uv=False)) ** 2 / w.sum()
    assert nuclear_norm_squared_over_sum(wide, w) == pytest.approx(expected, rel=1e-10)


def test_coa_beats_identity_and_hierarchical_on_wrange():
    W = q.wrange(128, 32, random_state=1)
    coa = q.optimize(W, "coa")
    for other in ("identity", "hierarchical", "wavelet"):
        assert coa.objective < q.optimize(W, other).objective
    assert coa.certificate.gap <= 1e-3 and coa.sensitivity == pytest.approx(1.0)
    np.testing.assert_allclose(coa.reconstruction @ coa.matrix, W, atol=1e-8)
    ratios = [h.error_ratio for h in coa.history]
    assert ratios[-1] <= ratios[0]


def test_rank_deficient_workload_needs_the_homotopy():
    W = q.wrelated(40, 16, s=4, random_state=2)
    strategy = q.optimize(W, "coa-schur")
    assert strategy.status == "converged" and strategy.info["theta"] < 1e-3
    thetas = [h.theta for h in strategy.history]
    assert thetas == sorted(thetas, reverse=True) and len(set(thetas)) >= 2


def test_coa_expected_error_matches_monte_carlo():
    W = q.wrange(16, 8, random_state=4)
    x = q.random_histogram(8, random_state=5)
    strategy = q.optimize(W, "coa-schur")
    rng = np.random.default_rng(7)
    errors = np.array(
        [
            np.sum((q.answer(W, x, strategy, 1.0, 1e-3, random_state=rng).values - W @ x) ** 2)
            for _ in range(300)
        ]
    )
    stderr = errors.std(ddof=1) / np.sqrt(errors.size)
    assert abs(errors.mean() - q.expected_error(W, strategy, 1.0, 1e-3)) < 4 * stderr


@pytest.mark.parametrize("n", [8, 13])
def test_tree_strategies_reconstruct_the_workload_exactly(n):
    W = q.wrange(30, n, random_state=n)
    for method, A in (("hierarchical", hierarchical_matrix(n)), ("wavelet", haar_matrix(n))):
        strategy = q.optimize(W, method)
        np.testing.assert_array_equal(strategy.matrix, A)
        np.testing.assert_allclose(strategy.reconstruction @ strategy.matrix, W, atol=1e-10)
    depth = int(np.ceil(np.log2(8))) + 1
    assert q.optimize(q.wrange(3, 8, random_state=0), "wavelet").sensitivity == pytest.approx(
        np.sqrt(depth)
    )


def test_time_limit_and_bad_options_are_reported():
    W = q.wdiscrete(64, 24, random_state=1)
    strategy = coa_strategy(W, max_time=0.0)
    assert strategy.status == "time_limit" and strategy.certificate is not None
    with pytest.raises(ValueError, match="direction"):
        coa_strategy(W, direction="newton")


def test_sqrt_start_is_optimal_for_a_circulant_workload():
    base = np.random.default_rng(8).standard_normal(10)
    W = np.array(
        [np.roll(base, k) for k in range(10)]
    )  # W'W circulant: V^1/2 has a constant diagonal
    strategy = q.optimize(
        W, "coa-schur", theta=0.0, gap_tol=1e-8
    )  # W'W is nonsingular: no homotopy needed
    assert strategy.certificate.gap <= 1e-8 and len(strategy.history) <= 2
    # the optimum of a circulant workload: (sum of singular values)^2 / n
    assert strategy.objective == pytest.approx(
        np.sum(np.linalg.svd(W, compute_uv=False)) ** 2 / 10, rel=1e-8
    )
