"""Private gradient methods (thesis ch. 4): noise formulas, non-private limits, charges, clipping, audit."""

import math

import numpy as np
import pytest
from scipy import optimize
from sklearn.linear_model import LogisticRegression

import dp
from dp.learning import make_problem, minimize_private
from dp.learning.accounting import ReleaseGroup, amplified_base_epsilon
from dp.learning.mag import nesterov_momentum, stage_lengths

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")

C = 2.0
R = 10.0  # public row radius: above every row norm of these fixtures, so no row is scaled


def run(X, y, *args, **kwargs):
    """minimize_private with the bounds and lambda given explicitly (clip C, data_norm R, reg 0.01) unless a test sets them."""
    return minimize_private(X, y, *args, **{"clip": C, "data_norm": R, "reg": 0.01, **kwargs})


def logistic_data(n=400, d=4, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    X = scale * rng.standard_normal((n, d))
    w = rng.standard_normal(d)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ w)), 1.0, -1.0)
    return X, y


# --- the problem: objective, gradients, clipping, f* ------------------------------------------


@pytest.mark.parametrize("loss", ["logistic", "least-squares"])
def test_gradient_and_hessian_match_finite_differences(loss):
    X, y = logistic_data(60, 3)
    problem = make_problem(
        loss, X, y * 0.7 if loss == "least-squares" else y, 0.05, C, 2, data_norm=R
    )
    x = np.array([0.3, -0.2, 0.5])
    assert optimize.check_grad(problem.objective, problem.gradient, x) < 1e-6
    numeric = optimize.approx_fprime(x, problem.gradient, 1e-7)
    np.testing.assert_allclose(problem.hessian(x), numeric, atol=1e-5)


def test_solve_matches_sklearn_logistic_regression():
    X, y = logistic_data(300, 4)
    reg = 0.01
    problem = make_problem("logistic", X, y, reg, C, 2, data_norm=R)
    x_star, f_star = problem.solve()
    # mean loss + reg |w|^2 has the minimizer of sum loss + |w|^2 / (2 C_sk) with C_sk = 1/(2 n reg)
    sk = LogisticRegression(
        C=1 / (2 * len(y) * reg), fit_intercept=False, tol=1e-12, max_iter=10_000
    ).fit(X, y)
    np.testing.assert_allclose(x_star, sk.coef_[0], atol=1e-6)
    assert np.linalg.norm(problem.gradient(x_star)) < 1e-9
    assert f_star == pytest.approx(problem.objective(sk.coef_[0]), abs=1e-10)


@pytest.mark.parametrize("norm", [1, 2])
def test_clipping_bounds_every_per_example_gradient(norm):
    X, y = logistic_data(200, 5, scale=3.0)  # large rows: most gradients exceed C
    problem = make_problem("logistic", X, y, 0.01, C, norm, data_norm=100.0)
    x = np.full(5, 0.1)
    clipped = problem.per_example_gradients(x, slice(None))
    raw = X * problem.loss_slopes(x, slice(None))[:, None]
    norms = np.linalg.norm(clipped, ord=norm, axis=1)
    assert norms.max() <= C * (1 + 1e-12)
    small = np.linalg.norm(raw, ord=norm, axis=1) <= C
    assert 0 < small.sum() < len(y)  # both cases occur
    np.testing.assert_allclose(clipped[small], raw[small])  # untouched below C
    np.testing.assert_allclose(norms[~small], C)  # scaled onto the sphere, same direction
    np.testing.assert_allclose(
        clipped[~small] / norms[~small, None],
        raw[~small] / np.linalg.norm(raw[~small], ord=norm, axis=1)[:, None],
    )
    rows = np.array([3, 7, 11])
    np.testing.assert_allclose(
        problem.clipped_gradient(x, rows), clipped[rows].mean(axis=0) + 0.02 * x
    )


# --- noise scales equal the thesis' formulas -------------------------------------------------


def test_dp_gdws_noise_is_beta_s1_t_over_eps():
    X, y = logistic_data(500, 4)
    eps, T, beta = 0.8, 40, 0.1
    res = run(X, y, "dp-gdws", epsilon=eps, n_iter=T, beta=beta, random_state=0)
    s1 = 2 * C / 500  # (4.17) on the mean gradient: S1 = 2C over n records
    assert res.noise_scales[0] == pytest.approx(s1 * beta * T / eps, rel=1e-6)
    # and the step of (4.21)
    spread = ((2 * C / 500) ** 2 / (4 * 4) + 2 * (s1 * T / eps) ** 2) * beta / (2 - beta)
    assert res.step_sizes[0] == pytest.approx(0.25 / math.sqrt(spread) / math.sqrt(T + 1), rel=1e-5)


@pytest.mark.parametrize("m, T, case", [(20, 200, "thm 4.1.5"), (5, 20, "thm 4.1.4")])
def test_dp_sgdws_noise_uses_the_subsampling_amplification_cases(m, T, case):
    n, eps, beta = 500, 1.0, 0.2
    X, y = logistic_data(n, 4)
    res = run(X, y, "dp-sgdws", epsilon=eps, n_iter=T, beta=beta, batch_size=m, random_state=0)
    ratio = n * eps / (2 * m * T)
    assert (ratio <= 1) == (case == "thm 4.1.5")
    eps0 = ratio if ratio <= 1 else math.log1p(ratio)  # (4.52), or Thm 4.1.4 inverted
    assert res.noise_scales[0] == pytest.approx(beta * (2 * C / m) / eps0, rel=1e-6)


def test_amplification_inverts_the_two_theorems():
    n, m = 1000, 10
    small = amplified_base_epsilon(0.01, m, n)
    assert 2 * (m / n) * small == pytest.approx(0.01)  # Thm 4.1.5, eps0 <= 1
    large = amplified_base_epsilon(0.1, m, n)
    assert large > 1 and 2 * (math.exp(large) - 1) * m / n == pytest.approx(0.1)  # Thm 4.1.4
    assert amplified_base_epsilon(0.3, n, n) == 0.3  # no sample, no amplification


def test_dp_mag_divides_epsilon_over_stages_then_iterations():
    X, y = logistic_data(400, 3)
    eps, T = 1.0, 120
    res = run(X, y, "dp-mag", epsilon=eps, n_iter=T, random_state=0, data_norm=1.0)
    problem = make_problem("logistic", X, y, 0.01, C, 1, data_norm=1.0)
    lengths = stage_lengths(problem.smoothness_bound() / problem.strong_convexity(), T)
    K = len(lengths)
    assert sum(lengths) == T and len(res.noise_scales) == K > 1
    for n_k, scale in zip(lengths, res.noise_scales):  # (4.41): S1 / (eps / (K n_k))
        assert scale == pytest.approx((2 * C / 400) * K * n_k / eps, rel=1e-6)
    assert max(res.step_sizes) <= 1 / problem.smoothness_bound() * (1 + 1e-12)


def test_online_buckets_spend_the_whole_epsilon_on_each_release():
    X, y = logistic_data(300, 3)
    res = run(X, y, "dp-onlinegdws", epsilon=0.5, batch_size=10, beta=0.1, random_state=0)
    assert res.n_iter == 30  # one pass over disjoint buckets
    assert res.noise_scales[0] == pytest.approx(0.1 * (2 * C / 10) / 0.5, rel=1e-6)


def test_zcdp_variant_sigma_matches_rho_split():
    X, y = logistic_data(400, 3)
    budget = dp.PrivacyAccountant(1.0, 1e-5)
    res = run(
        X, y, "dp-gdws-gauss", epsilon=1.0, delta=1e-5, n_iter=50, accountant=budget, random_state=0
    )
    rho = res.privacy_spent.rho
    # each release: L2 sensitivity beta * 2C / n, rho / T of the budget: sigma = Delta / sqrt(2 rho / T)
    formula = 0.1 * (2 * C / 400) / math.sqrt(2 * rho / 50)
    assert (
        formula <= res.noise_scales[0] <= formula * (1 + 1e-5)
    )  # + the grid's sqrt(d) gamma inflation
    assert budget.spent_rho == pytest.approx(rho)


# --- epsilon -> infinity: the non-private method ---------------------------------------------


def _smoothed_gd_literal(problem, alpha, beta, T):
    """Thesis (4.14)-(4.15) written out: the smoothed gradient recursion, no noise."""
    x = np.zeros(problem.d)
    smoothed = None
    for _ in range(T):
        g = problem.clipped_gradient(x, slice(None))
        smoothed = beta * g if smoothed is None else (1 - beta) * smoothed + beta * g
        x = x - alpha * smoothed
    return x


def test_dp_gdws_without_noise_is_the_smoothed_recursion_and_large_eps_approaches_it():
    X, y = logistic_data(300, 3)
    T, beta = 60, 0.3
    exact = run(X, y, "dp-gdws", epsilon=math.inf, n_iter=T, beta=beta)
    problem = make_problem("logistic", X, y, 0.01, C, 1, data_norm=R)
    literal = _smoothed_gd_literal(problem, exact.step_sizes[0], beta, T)
    np.testing.assert_allclose(exact.x, literal, rtol=1e-10, atol=1e-12)
    noisy = run(X, y, "dp-gdws", epsilon=1e5, n_iter=T, beta=beta, random_state=3)
    assert exact.step_sizes == pytest.approx(noisy.step_sizes)  # the cap binds at both
    np.testing.assert_allclose(noisy.x, exact.x, atol=1e-3)
    assert not np.allclose(noisy.x, exact.x, atol=1e-12)


def test_dp_nag_without_noise_is_nesterov():
    X, y = logistic_data(300, 3)
    T = 40
    res = run(X, y, "dp-nag", epsilon=math.inf, n_iter=T)
    problem = make_problem("logistic", X, y, 0.01, C, 1, data_norm=R)
    L, kappa = problem.smoothness_bound(), problem.smoothness_bound() / problem.strong_convexity()
    b = (math.sqrt(kappa) - 1) / (math.sqrt(kappa) + 1)
    assert b == pytest.approx(nesterov_momentum(kappa))
    x_prev = x = np.zeros(3)
    for _ in range(T):  # (4.6)
        z = (1 + b) * x - b * x_prev
        x_prev, x = x, z - problem.clipped_gradient(z, slice(None)) / L
    np.testing.assert_allclose(res.x, x, rtol=1e-10)
    big = run(X, y, "dp-nag", epsilon=1e5, n_iter=T, random_state=1)
    np.testing.assert_allclose(big.x, x, atol=1e-4)


# --- the accountant ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, batch",
    [
        ("dp-gdws", None),
        ("dp-mag", None),
        ("dp-sgdws", 20),
        ("dp-smag", 20),
        ("dp-onlinegdws", 25),
        ("m-asg*", None),
        ("dp-gd", 20),
    ],
)
def test_pure_methods_charge_exactly_epsilon(method, batch):
    X, y = logistic_data(300, 3)
    budget = dp.PrivacyAccountant(2.0)
    run(X, y, method, epsilon=0.7, n_iter=40, batch_size=batch, accountant=budget, random_state=0)
    assert budget.spent == (0.7, 0.0)
    assert len(budget.ledger) == 1 and method in budget.ledger[0].label


@pytest.mark.parametrize(
    "method, batch", [("dp-sgdws-gauss", 20), ("dp-sgd", 20), ("dp-mag-gauss", None)]
)
def test_gaussian_methods_charge_exactly_epsilon_delta(method, batch):
    X, y = logistic_data(300, 3)
    budget = dp.PrivacyAccountant(1.0, 1e-5)
    run(
        X,
        y,
        method,
        epsilon=1.0,
        delta=1e-5,
        n_iter=30,
        batch_size=batch,
        accountant=budget,
        random_state=0,
    )
    eps, delta = budget.spent
    assert eps == pytest.approx(1.0, rel=1e-9) and delta == pytest.approx(1e-5)
    with pytest.raises(dp.BudgetExceededError):
        run(
            X,
            y,
            method,
            epsilon=0.1,
            delta=1e-7,
            n_iter=30,
            batch_size=batch,
            accountant=budget,
            random_state=0,
        )


def test_an_exhausted_budget_is_refused_before_any_release():
    X, y = logistic_data(100, 2)
    budget = dp.PrivacyAccountant(0.5)
    run(X, y, "dp-gdws", epsilon=0.5, n_iter=10, accountant=budget, random_state=0)
    with pytest.raises(dp.BudgetExceededError):
        run(X, y, "dp-gdws", epsilon=0.5, n_iter=10, accountant=budget, random_state=0)
    assert len(budget.ledger) == 1


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "dp-foo"}, "unknown method"),
        ({"method": "dp-gdws", "batch_size": 10}, "full gradients"),
        ({"method": "dp-sgdws", "batch_size": 1000}, "at most n"),
        ({"beta": 0.0}, "beta"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"method": "dp-gdws-gauss"}, "delta > 0"),
        ({"n_iter": 0}, "n_iter"),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_message(kwargs, match):
    X, y = logistic_data(100, 2)
    with pytest.raises(ValueError, match=match):
        run(X, y, **{"n_iter": 5, **kwargs})


def test_an_epsilon_below_the_float_grid_is_refused_from_public_numbers_before_the_loop():
    X, y = logistic_data(300, 3)
    with pytest.raises(ValueError, match="epsilon is too large for an exact release"):
        run(X, y, "dp-nag", epsilon=1e12, n_iter=40, random_state=1)


def test_stochastic_methods_default_to_a_batch_of_ceil_sqrt_n():
    X, y = logistic_data(400, 3)
    res = run(X, y, "dp-sgdws", epsilon=1.0, n_iter=20, beta=0.5, random_state=0)
    n, m, T = 400, 20, 20  # ceil(sqrt(400)) = 20
    eps0 = n * 1.0 / (2 * m * T)  # (4.52), <= 1
    assert res.noise_scales[0] == pytest.approx(0.5 * (2 * C / m) / eps0, rel=1e-6)
    assert run(X, y, "dp-smag", epsilon=1.0, random_state=0).n_iter == 20  # one pass: ceil(n / m)


def test_logistic_labels_must_be_signs():
    X, y = logistic_data(50, 2)
    with pytest.raises(ValueError, match="-1, \\+1"):
        run(X, (y + 1) / 2, "dp-gdws", n_iter=5)


def test_sampled_gaussian_calibration_meets_epsilon_by_an_independent_rdp_computation():
    import dp_accounting
    from dp_accounting import rdp

    from dp.learning.accounting import sampled_gaussian_multipliers

    groups = (ReleaseGroup(30, 0.5), ReleaseGroup(70, 0.5))
    z, cost = sampled_gaussian_multipliers(1.0, 1e-5, groups, 20, 1000, 3)
    accountant = rdp.RdpAccountant(
        orders=list(range(2, 65)),  # every integer order, not our list
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
    )
    for level, g in zip(z, groups):
        accountant.compose(
            dp_accounting.SelfComposedDpEvent(
                dp_accounting.SampledWithoutReplacementDpEvent(
                    1000, 20, dp_accounting.GaussianDpEvent(level)
                ),
                g.n_releases,
            )
        )
    assert accountant.get_epsilon(1e-5) <= 1.0 + 1e-6
    assert z[1] / z[0] == pytest.approx(math.sqrt(70 / 30))  # the zCDP split's proportions
    assert cost.epsilon == 1.0 and cost.delta == 1e-5


def test_least_squares_runs_through_the_same_methods():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((400, 3))
    y = np.clip(X @ np.array([0.3, -0.2, 0.1]) + 0.05 * rng.standard_normal(400), -1, 1)
    problem = make_problem(
        "least-squares", X, y, 0.1, C, 2, data_norm=5.0
    )  # kappa = 126: 300 steps reach f*
    x_star, f_star = problem.solve()
    exact = run(
        X,
        y,
        "dp-nag",
        epsilon=math.inf,
        n_iter=300,
        loss="least-squares",
        history_every=1,
        reg=0.1,
        data_norm=5.0,
    )
    assert exact.nonprivate_history[-1] - f_star < 1e-10
    private = run(
        X,
        y,
        "dp-smag",
        epsilon=50.0,
        n_iter=200,
        batch_size=40,
        loss="least-squares",
        random_state=0,
        history_every=1,
    )
    assert private.success
    assert private.nonprivate_history[-1] - f_star < private.nonprivate_history[0] - f_star


def test_defaults_are_functions_of_public_numbers_only():
    X, y = logistic_data(500, 4, seed=1)
    X_other, y_other = logistic_data(500, 4, seed=2, scale=3.0)
    runs = [
        minimize_private(A, b, epsilon=1.0, data_norm=2.0, random_state=0)
        for A, b in ((X, y), (X_other, y_other))
    ]
    assert runs[0].method == runs[1].method == "dp-mag"
    assert runs[0].n_iter == runs[1].n_iter and runs[0].step_sizes == runs[1].step_sizes
    assert runs[0].noise_scales == runs[1].noise_scales
    from dp.learning.defaults import default_plan, default_reg

    reg = default_reg(569, 30, 1.0)
    assert reg == pytest.approx(math.sqrt(30) / 569)  # inside the clamp [3e-3, 1e-2]
    assert (
        default_plan(569, 30, 1.0, 0.0, 1.0, 1.0, reg).n_iter == 2
    )  # breast cancer's shape (noise <= C / 9)
    assert default_plan(569, 30, 1.0, 1e-5, 1.0, 1.0, reg).method == "dp-mag-gauss"
    # with noise to spare: the first stage of (4.38) is 10, the conditioning cap ceil(sqrt(30)) = 6
    assert default_plan(10**6, 30, 1.0, 0.0, 1.0, 1.0, 0.01).n_iter == 6
    assert default_plan(10**6, 4, 1.0, 0.0, 1.0, 1.0, 0.01).n_iter == 2
