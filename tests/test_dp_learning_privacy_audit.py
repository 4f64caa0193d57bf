"""Empirical privacy audits of the private learning methods on worst-case neighbours.

Each test runs a method many times on D and on D' (one record replaced), reduces the output to one
number and asks tests/privacy_audit.py's threshold test for a 95 % lower bound on epsilon: above
the claimed epsilon is a measured leak. The neighbours are the audit's worst cases: a record
replaced by 1000 e_1, which moved lambda_max(X'X/n) and with it every step size and stage plan
when those came from the private data (measured on the code before the fix: 4.23 DP-GDwS, 4.91
DP-MAG, 4.04 DP-SGD), and a record with a new label, which changed classes_ and coef_'s shape.
"""

import numpy as np
import pytest
from privacy_audit import epsilon_lower_bound

import dp
from dp._random import RandomBits
from dp.learning import ALL_METHODS, make_problem, minimize_private
from dp.learning.accounting import ReleaseGroup, amplified_base_epsilon
from dp.learning.noise import laplace_stream
from dp.learning.settings import RunSettings, calibrate

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")

EPSILON, N, D, RUNS = 1.0, 1000, 10, 500


def outlier_neighbours(n=N, d=D, seed=0):
    """Return (X, y, X', y'): rows of norm <= 1, and the same with record 0 replaced by (1000 e_1, -y_0)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) / np.sqrt(2 * d)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    X_prime, y_prime = X.copy(), y.copy()
    X_prime[0] = 0.0
    X_prime[0, 0] = 1000.0
    y_prime[0] = -y[0]
    return X, y, X_prime, y_prime


def first_coordinates(X, y, method, runs=RUNS, seed_base=0, **kwargs):
    """Return x_T[0] of `runs` independent private runs: the coordinate the outlier pulls on."""
    return np.array(
        [
            minimize_private(
                X, y, method, epsilon=EPSILON, data_norm=1.0, random_state=seed_base + r, **kwargs
            ).x[0]
            for r in range(runs)
        ]
    )


@pytest.mark.parametrize(
    "method, kwargs",
    [
        ("dp-gdws", {"n_iter": 10}),
        ("dp-mag", {"n_iter": 30}),  # before the fix: 3 stages on D' against 1 on D
        ("dp-sgd", {"n_iter": 10, "delta": 1e-5, "batch_size": 100}),
    ],
)
def test_a_far_outlier_moves_nothing_but_the_noisy_gradients(method, kwargs):
    X, y, X_prime, y_prime = outlier_neighbours()
    on_d = first_coordinates(X, y, method, **kwargs)
    on_d_prime = first_coordinates(X_prime, y_prime, method, seed_base=10_000, **kwargs)
    assert on_d.std() > 0 and on_d_prime.std() > 0  # noisy outputs, not a degenerate statistic
    bound = epsilon_lower_bound(on_d, on_d_prime, delta=kwargs.get("delta", 0.0))
    assert bound <= EPSILON, f"{method}: empirical epsilon >= {bound:.2f} for a claimed {EPSILON}"


@pytest.mark.parametrize("method", sorted(ALL_METHODS))
def test_public_step_sizes_and_noise_scales_are_the_same_on_both_neighbours(method):
    # exact equality: any dependence of a step, stage plan or noise scale on the data shows here
    X, y, X_prime, y_prime = outlier_neighbours(n=400)
    delta = 1e-5 if ALL_METHODS[method][1] == "gaussian" else 0.0
    runs = [
        minimize_private(
            A, b, method, epsilon=EPSILON, delta=delta, n_iter=40, data_norm=1.0, random_state=0
        )
        for A, b in ((X, y), (X_prime, y_prime))
    ]
    assert runs[0].step_sizes == runs[1].step_sizes and runs[0].noise_scales == runs[1].noise_scales
    assert (runs[0].n_iter, runs[0].status, runs[0].message) == (
        runs[1].n_iter,
        runs[1].status,
        runs[1].message,
    )


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("method", ["dp-mag", "dp-gdws-gauss", "dp-sgdws"])
def test_the_estimators_public_steps_and_noise_scales_are_the_same_on_both_neighbours(
    method, fit_intercept
):
    # scale_fraction=0: s = R and G = bound^2, nothing about the data is released before the run
    X, y, X_prime, y_prime = outlier_neighbours(n=400)
    delta = 1e-5 if ALL_METHODS[method][1] == "gaussian" else 0.0
    runs = [
        dp.PrivateLogisticRegression(
            method=method,
            epsilon=EPSILON,
            delta=delta,
            n_iter=40,
            data_norm=1.0,
            classes=[-1.0, 1.0],
            fit_intercept=fit_intercept,
            scale_fraction=0.0,
            random_state=0,
        )
        .fit(A, b)
        .results_[0]
        for A, b in ((X, y), (X_prime, y_prime))
    ]
    assert runs[0].step_sizes == runs[1].step_sizes and runs[0].noise_scales == runs[1].noise_scales
    assert (runs[0].n_iter, runs[0].status, runs[0].message) == (
        runs[1].n_iter,
        runs[1].status,
        runs[1].message,
    )


def test_the_default_steps_read_the_data_only_through_the_released_gram_bound():
    # with the defaults the steps follow the private G (a release): given the same G, both
    # neighbours get the same steps, noise scales and plan; the estimator passes its gram_bound_
    X, y, X_prime, y_prime = outlier_neighbours(n=400)
    model = dp.PrivateLogisticRegression(
        epsilon=EPSILON, data_norm=1.0, classes=[-1.0, 1.0], random_state=0
    ).fit(X, y)
    assert model.gram_bound_ is not None and 0.25 <= model.gram_bound_ < 1.25
    gram = model.gram_bound_
    runs = [
        minimize_private(A, b, epsilon=EPSILON, data_norm=1.0, gram_bound=gram, random_state=0)
        for A, b in ((X, y), (X_prime, y_prime))
    ]
    assert runs[0].step_sizes == runs[1].step_sizes and runs[0].noise_scales == runs[1].noise_scales
    assert runs[0].n_iter == runs[1].n_iter
    public = minimize_private(X, y, epsilon=EPSILON, data_norm=1.0, random_state=0)
    assert runs[0].step_sizes[0] > public.step_sizes[0]  # a G below R^2 lengthens the step


def test_the_intercept_column_raises_every_bound_from_1_to_sqrt_1_plus_b2():
    # rows divided by the row scale (here the public R: scale_fraction=0) lie in the unit ball;
    # b = 1/2: rows (x, b) have norm <= sqrt(1.25), the default L1 clip is max(1, 0.3 sqrt(d))
    # times that bound (d = 20: 0.3 sqrt(d) > 1 with and without the column), L = curvature
    # 1.25 + 2 reg
    d = 20
    X, y, _, _ = outlier_neighbours(n=400, d=d)
    R, reg, beta, T = 2.0, 0.01, 0.5, 20
    common = dict(
        method="dp-gdws",
        n_iter=T,
        beta=beta,
        reg=reg,
        data_norm=R,
        classes=[-1.0, 1.0],
        random_state=0,
        scale_fraction=0.0,
    )
    noisy = dp.PrivateLogisticRegression(epsilon=EPSILON, **common).fit(X, y).results_[0]
    clip = 0.3 * np.sqrt(d + 1) * np.sqrt(1.25)  # d + 1 columns with the intercept column
    # (4.17) with that C, equal up to the sampler's grid
    assert noisy.noise_scales[0] == pytest.approx(beta * 2 * clip / len(y) * T / EPSILON, rel=1e-6)
    exact = dp.PrivateLogisticRegression(epsilon=np.inf, **common).fit(X, y).results_[0]
    assert exact.step_sizes[0] == pytest.approx(1 / (beta * (0.25 * 1.25 + 2 * reg)), rel=1e-12)
    without = (
        dp.PrivateLogisticRegression(epsilon=EPSILON, fit_intercept=False, **common)
        .fit(X, y)
        .results_[0]
    )
    ratio = np.sqrt(1.25) * np.sqrt((d + 1) / d)  # the bound, and sqrt(d) in the default clip
    assert without.noise_scales[0] == pytest.approx(noisy.noise_scales[0] / ratio, rel=1e-6)


def test_a_record_with_a_new_label_changes_no_shape_and_stays_within_epsilon():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 3)) / 3
    labels = (X[:, 0] > 0).astype(int)
    new_label = labels.copy()
    new_label[0] = 2

    def statistic(target, seed):
        model = dp.PrivateLogisticRegression(
            method="dp-gdws",
            epsilon=EPSILON,
            n_iter=5,
            beta=1.0,
            data_norm=1.0,
            classes=[0, 1, 2],
            random_state=seed,
        ).fit(X, target)
        # the number of one-vs-rest fits, then the coefficient the new label pulls on
        return 1000.0 * model.coef_.shape[0] + model.coef_[-1, 0]

    on_d = [statistic(labels, seed) for seed in range(300)]
    on_d_prime = [statistic(new_label, 10_000 + seed) for seed in range(300)]
    assert epsilon_lower_bound(on_d, on_d_prime) <= EPSILON


def test_the_private_row_scale_keeps_its_epsilon_on_worst_case_neighbours():
    # the mean of the row norms (projected onto the ball of radius R = 1) moves by R / n at most:
    # all-zero rows against the same with one row of norm 1000 (projected to norm 1)
    from dp.learning.defaults import private_row_scale

    X = np.zeros((50, 3))
    X_prime = X.copy()
    X_prime[0, 0] = 1000.0
    on_d, on_d_prime = (
        [
            private_row_scale(rows, 1.0, EPSILON, None, RandomBits(seed_base + seed))
            for seed in range(3000)
        ]
        for rows, seed_base in ((X, 0), (X_prime, 10_000))
    )
    # s = min(1, max(0.7 noisy mean, 1/64)) is post-processing of the noisy mean (b = 1/50)
    on_d, on_d_prime = np.array(on_d), np.array(on_d_prime)
    assert on_d.std() > 0 and on_d_prime.mean() > on_d.mean()
    assert 0.5 < epsilon_lower_bound(on_d, on_d_prime) <= EPSILON  # near tight, never above


def test_the_private_gram_bound_keeps_its_epsilon_on_worst_case_neighbours():
    # lambda_max(D'D/n) moves by at most bound^2 / n: all-zero rows (lambda_max 0) against the
    # same with one row at the bound (lambda_max bound^2 / n), the largest move there is
    from dp.learning.defaults import private_gram_bound

    n, bound = 50, 1.0
    X = np.zeros((n, 3))
    X_prime = X.copy()
    X_prime[0, 0] = bound
    on_d, on_d_prime = (
        [
            private_gram_bound(rows, bound, 1e-6, EPSILON, None, RandomBits(seed_base + seed))
            for seed in range(3000)
        ]
        for rows, seed_base in ((X, 0), (X_prime, 10_000))
    )
    # G = min(bound^2, max(noisy lambda_max + 2 b, floor)) is post-processing (b = bound^2 / n)
    on_d, on_d_prime = np.array(on_d), np.array(on_d_prime)
    assert on_d.std() > 0 and on_d_prime.mean() > on_d.mean()
    assert 0.5 < epsilon_lower_bound(on_d, on_d_prime) <= EPSILON  # near tight, never above


# --- the audit has power: one release, the right noise and too little --------------------------


def _first_release(level_for, n=50, beta=0.5, n_draws=100_000):
    """Return DP-GDwS's first release on D and D' (one record's clipped gradient flips sign, so the
    releases beta g(0) are the L1 sensitivity apart), the Laplace noise at level_for(settings)."""
    X = np.full((n, 1), 10.0)
    y = np.ones(n)
    y_other = y.copy()
    y_other[0] = -1.0
    problems = [
        make_problem("logistic", X, labels, 0.01, 2.0, 1, data_norm=10.0) for labels in (y, y_other)
    ]
    settings = RunSettings(
        problems[0],
        EPSILON,
        0.0,
        1,
        beta,
        n,
        "laplace",
        RandomBits(5),
        np.random.default_rng(5),
        None,
        "audit",
    )
    values = [beta * p.clipped_loss_gradient(np.zeros(1), slice(None)) for p in problems]
    sensitivity = settings.sensitivity(beta)
    assert abs(values[0][0] - values[1][0]) == pytest.approx(sensitivity)  # the worst case
    stream_args = (sensitivity, level_for(settings), 1, n_draws)
    return [
        laplace_stream(*stream_args, RandomBits(seed)).release(np.arange(n_draws), v)[:, 0]
        for seed, v in zip((11, 12), values)
    ]


def test_a_calibrated_release_stays_within_epsilon_and_is_nearly_tight():
    releases = _first_release(lambda settings: calibrate(settings, [ReleaseGroup(1, 1.0)])[0][0])
    assert 0.8 < epsilon_lower_bound(*releases) <= EPSILON


def test_the_audit_catches_amplification_claimed_without_sampling():
    # an under-noised variant: DP-SGDwS's amplified epsilon (5 of 50 records) used on the full gradient
    releases = _first_release(
        lambda settings: amplified_base_epsilon(EPSILON, 5, settings.problem.n)
    )
    assert epsilon_lower_bound(*releases) > 1.5 * EPSILON
