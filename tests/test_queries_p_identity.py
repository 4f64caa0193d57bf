"""p-Identity strategies (HDMM's OPT_0 family) and LRM's choice between them and Alg. 1."""

from __future__ import annotations

import re

import numpy as np
import pytest

from dp import queries
from dp.queries.p_identity import optimize_p_identity, p_identity_matrix, p_identity_objective

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")


@pytest.mark.parametrize(("m", "n", "p"), [(7, 5, 2), (4, 9, 3)])
def test_woodbury_objective_and_gradient_match_the_dense_formula_and_finite_differences(m, n, p):
    rng = np.random.default_rng(m * n)
    W, theta = rng.standard_normal((m, n)), rng.random((p, n))
    L = p_identity_matrix(theta)
    assert L.shape == (n + p, n) and np.allclose(np.abs(L).sum(axis=0), 1.0)
    value, gradient = p_identity_objective(theta, W)
    assert value == pytest.approx(np.sum((W @ np.linalg.pinv(L)) ** 2), rel=1e-10)
    through_gram = p_identity_objective(theta, W, W.T @ W)
    assert through_gram[0] == pytest.approx(value, rel=1e-12) and np.allclose(
        through_gram[1], gradient, rtol=1e-10
    )
    step = 1e-6
    numeric = np.zeros_like(theta)
    for index in np.ndindex(theta.shape):
        bump = np.zeros_like(theta)
        bump[index] = step
        numeric[index] = (
            p_identity_objective(theta + bump, W)[0] - p_identity_objective(theta - bump, W)[0]
        ) / (2 * step)
    assert np.allclose(gradient, numeric, rtol=1e-5, atol=1e-7 * np.abs(gradient).max())


def test_tall_workloads_go_through_their_gram_matrix():
    W = queries.wrange(40, 12, random_state=3)
    fit = optimize_p_identity(W, max_iter=30, random_state=1)
    assert fit.scale == pytest.approx(np.sum((W @ np.linalg.pinv(fit.L)) ** 2), rel=1e-9)
    assert np.all(fit.theta >= 0) and fit.iterations <= 30


def test_optimization_lowers_the_noise_from_its_start_and_is_seeded():
    W = queries.wrange(64, 32, random_state=5)
    start = p_identity_objective(np.random.default_rng(0).random((2, 32)), W)[0]
    fit = optimize_p_identity(W, random_state=0)
    assert fit.status == "converged" and fit.scale < 0.8 * start and fit.scale < np.sum(W**2)
    assert np.array_equal(fit.theta, optimize_p_identity(W, random_state=0).theta)
    with pytest.raises(ValueError, match="start must be one of"):
        optimize_p_identity(W, start="ones")


def test_the_total_start_finds_the_total_query_wdiscrete_needs():
    """WDiscrete is -1 but for 2 % of +1: the total query answers most of it (HDMM's weighted total)."""
    W = queries.wdiscrete(1024, 256, random_state=1)
    total = optimize_p_identity(W, start="total", random_state=0)
    random = optimize_p_identity(
        W, start="random", random_state=0
    )  # p = 16: falls back to Theta = 0
    zero = p_identity_objective(np.zeros((1, 256)), W)[0]  # the identity
    assert zero == pytest.approx(np.sum(W**2)) and total.theta.shape == (1, 256)
    assert random.scale == pytest.approx(zero, rel=1e-3)
    assert total.scale < 0.25 * zero  # HDMM's OPT_0: 0.196 x identity


def test_auto_solver_uses_p_identity_on_full_rank_and_is_no_noisier_than_alm():
    W = queries.wrange(96, 32, random_state=4)  # rank 32 = n
    auto = queries.optimize(W, method="lrm", random_state=0)
    alm = queries.optimize(W, method="lrm", solver="alm", random_state=0)
    assert auto.info["solver"] == "p-Identity" and "outer" not in auto.info  # Alg. 1 not run
    assert auto.objective <= alm.objective * (1 + 1e-9)
    assert np.allclose(auto.reconstruction @ auto.matrix, W, atol=1e-8)
    assert np.abs(auto.matrix).sum(axis=0).max() == pytest.approx(1.0)


def test_auto_solver_on_a_low_rank_workload_runs_both_and_keeps_the_less_noisy():
    W = queries.wrelated(
        40, 48, s=3, random_state=6
    )  # rank 3 << n: the low-rank case LRM was made for
    auto = queries.optimize(W, method="lrm", random_state=0)
    alm = queries.optimize(W, method="lrm", solver="alm", random_state=0)
    p_identity = queries.optimize(W, method="lrm", solver="p-identity", random_state=0)
    assert "ALM Phi Delta^2" in auto.message and "p-Identity Phi Delta^2" in auto.message
    assert auto.objective == pytest.approx(min(alm.objective, p_identity.objective))
    assert auto.info["solver"] == "ALM" and alm.objective < 0.7 * p_identity.objective


def test_solver_options_are_checked():
    W = queries.wrange(8, 6, random_state=1)
    with pytest.raises(ValueError, match="solver must be one of"):
        queries.optimize(W, method="lrm", solver="newton")
    with pytest.raises(ValueError, match="solver='alm'"):
        queries.optimize(W, method="lrm", finish=False)


def test_the_sweep_gives_the_same_fits_in_threads_as_in_sequence():
    from dp.queries.p_identity import sweep_sizes, the_best_p_identity

    assert sweep_sizes(64, 32) == [1, 2, 4, 8] and sweep_sizes(3, 3) == [1, 2]
    assert sweep_sizes(1024, 1024) == sweep_sizes(512, 1024) == [1, 2, 4, 8, 16, 32, 64]
    assert sweep_sizes(1024, 2048) == [1, 2, 4, 8, 16] and sweep_sizes(256, 8192) == [
        1,
        2,
        4,
        8,
        16,
    ]
    W = queries.wrange(80, 40, random_state=9)
    best, fits = the_best_p_identity(W, random_state=3, n_jobs=2)
    best_serial, fits_serial = the_best_p_identity(W, random_state=3, n_jobs=1)
    assert [(fit.start, fit.theta.shape[0]) for fit in fits] == [
        ("total", 1),
        ("random", 1),
        ("random", 2),
        ("random", 4),
        ("random", 8),
    ]
    assert all(np.array_equal(a.theta, b.theta) for a, b in zip(fits, fits_serial))
    assert best.scale == min(fit.scale for fit in fits) == best_serial.scale


def test_cli_chooses_the_lrm_solver(capsys):
    from hamsi.cli import main

    code = main(
        [
            "queries",
            "--workload",
            "range",
            "-m",
            "64",
            "-n",
            "32",
            "--method",
            "lrm",
            "--solver",
            "p-identity",
            "--repeats",
            "3",
            "--noise-seed",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "solver: p-Identity L = [I; Theta] D" in out and "strategy: " in out
    assert float(re.search(r"ratio to identity (\S+)\)", out).group(1)) < 1
    with pytest.raises(SystemExit):
        main(["queries", "--method", "lrm", "--solver", "newton"])
    assert "invalid choice: 'newton'" in capsys.readouterr().err
