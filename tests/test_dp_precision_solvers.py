"""The non-private solvers under the precision estimators: the ridge map, graphical-lasso ADMM, its path and cross-validation."""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.covariance import graphical_lasso

import dp
from dp.simulation import model_precision, normalize_rows_by_max_norm, sample_gaussian

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")


@pytest.fixture(scope="module")
def ar2_data():
    X = sample_gaussian(model_precision(3, 8), 300, random_state=0)
    return normalize_rows_by_max_norm(X)


def test_ridge_precision_matches_brute_force_minimisation():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 3))
    S = A @ A.T / 3 - 0.4 * np.eye(3)  # indefinite, as a noisy S can be
    alpha = 0.3
    tril = np.tril_indices(3)

    def objective(v):
        L = np.zeros((3, 3))
        L[tril] = v
        return dp.ridge_objective(L @ L.T, S, alpha)

    best = minimize(
        objective,
        np.eye(3)[tril],
        method="Nelder-Mead",
        options=dict(xatol=1e-10, fatol=1e-12, maxiter=20000, maxfev=40000),
    )
    L = np.zeros((3, 3))
    L[tril] = best.x
    theta = dp.ridge_precision(S, alpha)
    assert np.allclose(theta, L @ L.T, atol=1e-4)
    # stationarity of eq. (1.3): -Theta^-1 + S + 2 alpha Theta = 0
    assert np.allclose(-np.linalg.inv(theta) + S + 2 * alpha * theta, 0, atol=1e-10)
    assert np.all(np.linalg.eigvalsh(theta) > 0)


def test_ridge_eigenvalue_map_is_stable_for_very_negative_eigenvalues():
    phi = np.array([-1e8, -1.0, 0.0, 1.0, 1e8])
    out = dp.ridge_precision(np.diag(phi), 1e-6)
    with np.errstate(divide="ignore"):
        expected = 2 / (phi + np.sqrt(phi**2 + 8e-6))  # naive form: fine where no cancellation
    assert np.allclose(np.diag(out)[1:], expected[1:], rtol=1e-9)
    assert np.diag(out)[0] == pytest.approx(1e8 / 2e-6, rel=1e-9)


def test_non_private_ridge_estimator_equals_closed_form(ar2_data):
    est = dp.PrivateRidgePrecision(alpha=0.05, epsilon=None).fit(ar2_data)
    S = ar2_data.T @ ar2_data / ar2_data.shape[0]
    assert np.allclose(est.precision_, dp.ridge_precision(S, 0.05))
    assert est.privacy_spent_ == (0.0, 0.0)
    assert np.allclose(est.covariance_ @ est.precision_, np.eye(8), atol=1e-8)


@pytest.mark.parametrize("p", [50, 100])
def test_admm_matches_sklearn_graphical_lasso_objective(p):
    X = sample_gaussian(model_precision(1, p, random_state=1), 4 * p, random_state=2)
    S = X.T @ X / X.shape[0]
    alpha = 0.05
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, prec_sk = graphical_lasso(S, alpha, tol=1e-8, max_iter=500)
    f_sk = dp.glasso_objective(prec_sk, S, alpha)
    res = dp.admm_graphical_lasso(S, alpha, tol=1e-6)
    assert res.converged, res.message
    assert abs(res.objective - f_sk) <= 1e-5 * abs(f_sk)
    assert res.objective == pytest.approx(dp.glasso_objective(res.precision, S, alpha))


def _kkt_violation(Z, S, alpha, penalize_diagonal):
    """Max violation of S - Z^-1 + alpha * G = 0 with G in the subdifferential of the l1 norm."""
    G = -(S - np.linalg.inv(Z)) / alpha
    mask = ~np.eye(len(Z), dtype=bool) if not penalize_diagonal else np.ones_like(Z, dtype=bool)
    nz = (np.abs(Z) > 0) & mask
    viol = np.zeros_like(Z)
    viol[nz] = np.abs(G[nz] - np.sign(Z[nz]))
    zero = (Z == 0) & mask
    viol[zero] = np.maximum(np.abs(G[zero]) - 1, 0)
    if not penalize_diagonal:
        viol[np.eye(len(Z), dtype=bool)] = np.abs(G[np.eye(len(Z), dtype=bool)])
    return viol.max() * alpha


@pytest.mark.parametrize("penalize_diagonal", [False, True])
def test_admm_solution_satisfies_kkt(ar2_data, penalize_diagonal):
    S = ar2_data.T @ ar2_data / ar2_data.shape[0]
    alpha = 0.02 * np.abs(S).max()
    res = dp.admm_graphical_lasso(
        S, alpha, tol=1e-9, max_iter=5000, penalize_diagonal=penalize_diagonal
    )
    assert res.converged
    assert _kkt_violation(res.precision, S, alpha, penalize_diagonal) < 1e-5 * np.abs(S).max()
    assert np.any(res.precision == 0)  # sparsity is exact


def test_penalizing_the_diagonal_shrinks_it():
    S = np.array([[1.0, 0.3], [0.3, 1.0]])
    free = dp.admm_graphical_lasso(S, 0.1, tol=1e-10, max_iter=5000).precision
    pen = dp.admm_graphical_lasso(
        S, 0.1, tol=1e-10, max_iter=5000, penalize_diagonal=True
    ).precision
    assert np.all(np.diag(pen) < np.diag(free))
    # 2x2 closed form with unpenalized diagonal: W = S + alpha * sign, Theta = W^-1
    W = S + np.array([[0, 0.1], [0.1, 0]]) * np.sign(np.linalg.inv(S)[0, 1])
    assert np.allclose(free, np.linalg.inv(W), atol=1e-7)


def test_path_warm_starts_reach_the_same_solutions_faster(ar2_data):
    S = ar2_data.T @ ar2_data / ar2_data.shape[0]
    alphas = dp.alpha_grid(S, 6)
    path = dp.graphical_lasso_path(S, alphas, tol=1e-7)
    cold = [dp.admm_graphical_lasso(S, a, tol=1e-7) for a in alphas]
    for w, c in zip(path, cold):
        assert w.objective == pytest.approx(c.objective, rel=1e-5)
    assert sum(r.n_iter for r in path) < sum(r.n_iter for r in cold)
    # sparsity grows as alpha grows
    nnz = [np.count_nonzero(r.precision) for r in path]
    assert nnz == sorted(nnz)


def test_cross_validation_picks_the_argmin_of_held_out_likelihood(ar2_data):
    alpha, alphas, scores = dp.cross_validate_alpha(ar2_data, estimator="ridge", cv=3)
    assert alpha == alphas[np.argmin(scores)]
    # brute-force the same folds for one alpha
    folds = np.array_split(np.random.default_rng(0).permutation(len(ar2_data)), 3)
    manual = []
    for test in folds:
        train = np.setdiff1d(np.arange(len(ar2_data)), test)
        P = dp.ridge_precision(ar2_data[train].T @ ar2_data[train] / len(train), alphas[2])
        manual.append(dp.neg_log_likelihood(P, ar2_data[test].T @ ar2_data[test] / len(test)))
    assert scores[2] == pytest.approx(np.mean(manual))
    est = dp.PrivateGraphicalLasso(alpha="cv", epsilon=None).fit(ar2_data)
    assert est.alpha_ > 0


@pytest.mark.parametrize("scale", [1.0, "unit-ball", 1e-3])
def test_non_private_glasso_matches_sklearn_on_raw_and_unit_ball_data(scale):
    from sklearn.covariance import GraphicalLasso

    X = sample_gaussian(model_precision(2, 40), 40, random_state=2)
    X = normalize_rows_by_max_norm(X) if scale == "unit-ball" else X * scale
    S = X.T @ X / len(X)
    alpha = 0.02 * np.abs(S - np.diag(np.diag(S))).max()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = GraphicalLasso(
            alpha=alpha, assume_centered=True, tol=1e-9, enet_tol=1e-9, max_iter=2000
        ).fit(X)
    f_sk = dp.glasso_objective(sk.precision_, S, alpha)
    est = dp.PrivateGraphicalLasso(alpha=alpha, epsilon=None).fit(X)
    assert est.converged_, est.solver_message_
    assert abs(est.objective_ - f_sk) <= 1e-5 * abs(f_sk)


def test_admm_stops_at_the_same_iterate_whatever_the_data_scale(ar2_data):
    S = ar2_data.T @ ar2_data / len(ar2_data)
    alpha = 0.02 * np.abs(S).max()
    base = dp.admm_graphical_lasso(S, alpha, tol=1e-6)
    for c in (1e-4, 1e3):
        scaled = dp.admm_graphical_lasso(c * S, c * alpha, tol=1e-6)
        assert scaled.n_iter == base.n_iter
        assert np.allclose(
            scaled.precision * c,
            base.precision,
            rtol=1e-6,
            atol=1e-9 * np.abs(base.precision).max(),
        )
