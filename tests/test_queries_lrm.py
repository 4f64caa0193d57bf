"""The Low-Rank Mechanism's solver: the ALM decomposition, its finish and the strategy (LRM paper)."""

import re

import numpy as np
import pytest

import dp
from dp import queries
from dp.queries.l1_ball import project_columns_l1
from dp.queries.lrm import low_rank_decomposition
from dp.validation import DataError

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")


def _range_workload(m, n, seed):
    rng = np.random.default_rng(seed)
    W = np.zeros((m, n))
    for i in range(m):
        a, b = sorted(rng.integers(0, n, 2))
        W[i, a : b + 1] = 1.0
    return W


def test_decomposition_reaches_W_equals_BL_within_gamma():
    W = _range_workload(24, 32, seed=3)
    result = low_rank_decomposition(W, gamma=1e-3, random_state=0)
    assert result.converged, result.message
    assert np.linalg.norm(W - result.B @ result.L) <= 1e-3
    assert result.residual == pytest.approx(np.linalg.norm(W - result.B @ result.L))
    assert result.history[-1].residual == pytest.approx(result.residual)
    assert np.abs(result.L).sum(axis=0).max() <= 1 + 1e-12
    assert result.rank == int(np.ceil(1.2 * np.linalg.matrix_rank(W)))
    # the decomposition must beat the trivial feasible one B = W, L = I with r = n columns only
    # when it may use that many rows; with r < n it must at least beat noise on the queries
    workload_objective = W.shape[0] * np.abs(W).sum(axis=0).max() ** 2
    assert result.objective < workload_objective


def test_decomposition_is_reproducible_and_seeded():
    W = _range_workload(10, 16, seed=4)
    a = low_rank_decomposition(W, random_state=5, max_outer=30)
    b = low_rank_decomposition(W, random_state=5, max_outer=30)
    c = low_rank_decomposition(W, random_state=6, max_outer=30)
    assert np.array_equal(a.B, b.B) and np.array_equal(a.L, b.L)
    assert not np.array_equal(a.L, c.L)


def test_decomposition_reports_why_it_stopped():
    W = _range_workload(10, 16, seed=4)
    result = low_rank_decomposition(W, gamma=1e-12, max_outer=3)
    assert result.status == "iteration limit" and not result.converged
    assert "iteration limit after 3 outer iterations" in result.message
    assert len(result.history) == 3
    assert set(result.phase_seconds) == {
        "B update (Eq. 9)",
        "L update (Alg. 2)",
        "residual and multiplier",
        "of which projected step",
    }
    assert (
        result.phase_seconds["of which projected step"] <= result.phase_seconds["L update (Alg. 2)"]
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rank": 0}, "rank"),
        ({"rank": 2.5}, "rank"),
        ({"gamma": -1.0}, "gamma"),
        ({"beta0": np.inf}, "beta0"),
        ({"max_outer": 0}, "max_outer must be a positive integer"),
        ({"max_outer": 2.0}, "max_outer"),
    ],
)
def test_decomposition_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        low_rank_decomposition(np.ones((2, 2)), **kwargs)


@pytest.mark.parametrize(
    ("W", "match"), [(np.full((2, 2), np.nan), "non-finite"), (np.zeros((2, 3)), "all zeros")]
)
def test_optimize_rejects_bad_workloads_for_lrm(W, match):
    with pytest.raises(DataError, match=match):
        queries.optimize(W, method="lrm")


def test_registry_entry_gives_a_laplace_strategy_with_A_L_and_R_B():
    W = queries.wrange(12, 20, random_state=2)
    strategy = queries.optimize(
        W, method="lrm", solver="alm", rank=None, gamma=0.01, random_state=1
    )
    direct = low_rank_decomposition(W, gamma=0.01, random_state=1)
    assert strategy.method == "lrm" and strategy.noise == "laplace"
    assert np.array_equal(strategy.matrix, direct.L) and np.array_equal(
        strategy.reconstruction, direct.B
    )
    assert strategy.sensitivity == pytest.approx(np.abs(direct.L).sum(axis=0).max())
    assert strategy.objective == pytest.approx(direct.objective)
    assert strategy.status == "converged" and len(strategy.history) == direct.n_outer


def test_noise_scale_is_the_largest_column_L1_norm_of_L_over_epsilon():
    W = queries.wdiscrete(10, 24, random_state=3)
    strategy = queries.optimize(W, method="lrm", random_state=0)
    delta_L = np.abs(strategy.matrix).sum(axis=0).max()
    for epsilon in (0.1, 1.0):
        release = queries.answer(W, np.arange(24.0), strategy, epsilon, random_state=4).release
        assert release.mechanism == "laplace" and release.delta == 0.0
        # the exact discrete sampler rounds the scale up to its grid: relative change < 1e-6
        assert delta_L / epsilon <= release.noise_scale <= delta_L / epsilon * (1 + 1e-6)


def test_release_is_charged_to_the_budget_before_noise_and_an_overspend_is_refused():
    W = queries.wrange(8, 16, random_state=5)
    strategy = queries.optimize(W, method="lrm")
    budget = dp.PrivacyAccountant(0.15)
    queries.answer(W, np.ones(16), strategy, 0.1, random_state=1, budget=budget)
    assert budget.spent == (pytest.approx(0.1), 0.0) and budget.ledger[0].label == "queries:lrm"
    with pytest.raises(dp.BudgetExceededError):
        queries.answer(W, np.ones(16), strategy, 0.1, random_state=1, budget=budget)
    assert len(budget.ledger) == 1


def test_lrm_beats_the_laplace_mechanism_on_a_low_rank_workload():
    """WRelated with s << min(m, n): noise on W x pays m * (max column L1 norm of W)^2."""
    W = queries.wrelated(48, 64, s=4, random_state=6)
    lrm = queries.optimize(W, method="lrm", random_state=0)
    laplace = queries.optimize(W, method="workload", noise="laplace")
    identity = queries.optimize(W, method="identity", noise="laplace")
    lrm_error = queries.expected_error(W, lrm, 0.1)
    assert lrm_error < 0.2 * queries.expected_error(W, laplace, 0.1)
    assert lrm_error < queries.expected_error(W, identity, 0.1)


@pytest.mark.parametrize("method", ["lrm", "hierarchical"])
def test_monte_carlo_error_equals_the_closed_form_within_its_standard_error(method):
    """E ||R (A x + Lap) - W x||^2 = 2 (Delta / eps)^2 ||R||_F^2 + ||(W - R A) x||^2 (Lemma 1, Thm 3)."""
    W = queries.wrange(6, 8, random_state=7)
    x = queries.random_histogram(8, random_state=8)
    options = (
        {"gamma": 0.3, "random_state": 0, "solver": "alm", "finish": False}
        if method == "lrm"
        else {"noise": "laplace"}
    )
    strategy = queries.optimize(W, method=method, **options)
    expected = queries.expected_error(W, strategy, 0.5, x=x)
    if method == "lrm":
        bias = np.sum(((W - strategy.reconstruction @ strategy.matrix) @ x) ** 2)
        assert (
            0.2 * expected < bias < 0.8 * expected
        )  # gamma = 0.3: noise and data-dependent bias both count
    rng = np.random.default_rng(9)
    errors = np.array(
        [
            np.sum((queries.answer(W, x, strategy, 0.5, random_state=rng).values - W @ x) ** 2)
            for _ in range(500)
        ]
    )
    standard_error = errors.std(ddof=1) / np.sqrt(errors.size)
    assert abs(errors.mean() - expected) < 4 * standard_error


def test_cli_runs_lrm_and_compares_with_the_laplace_identity(capsys):
    from hamsi.cli import main

    code = main(
        [
            "queries",
            "--workload",
            "related",
            "-m",
            "24",
            "-n",
            "32",
            "-s",
            "3",
            "--method",
            "lrm",
            "--epsilon",
            "0.1",
            "--repeats",
            "5",
            "--noise-seed",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "noise: laplace" in out and "status: converged" in out
    ratio = float(re.search(r"ratio to identity (\S+)\)", out).group(1))
    expected = float(re.search(r"expected error: (\S+) total", out).group(1))
    empirical = float(re.search(r"empirical error: (\S+) total", out).group(1))
    assert ratio < 1 and 0.3 < empirical / expected < 3 and "bias ||(W - B L) x||^2" in out


def test_amm_is_the_l2_optimal_strategy_paid_for_with_laplace_noise():
    """The LRM paper's App. B: Formula (12) optimizes the L2 sensitivity; the release is Laplace (L1)."""
    W = queries.wrange(16, 12, random_state=11)
    amm = queries.optimize(W, method="amm")
    l2 = queries.optimize(W, method="coa-schur")
    assert amm.noise == "laplace" and amm.method == "amm"
    assert np.allclose(amm.matrix, l2.matrix) and np.allclose(
        np.linalg.norm(amm.matrix, axis=0), 1.0
    )
    assert amm.sensitivity == pytest.approx(np.abs(amm.matrix).sum(axis=0).max())
    assert amm.objective == pytest.approx(amm.sensitivity**2 * np.sum(amm.reconstruction**2))
    assert np.allclose(amm.reconstruction @ amm.matrix, W)


@pytest.mark.parametrize(("s", "bound"), [(4, 0.5), (32, 1.05)])
def test_lrm_is_never_worse_than_the_identity_strategy_on_wrelated(s, bound):
    """s << n: clearly below identity; s = n/2 (where the old solver ended at 18-261 x identity): not above it."""
    W = queries.wrelated(48, 64, s=s, random_state=6)
    lrm = queries.optimize(W, method="lrm", random_state=0, max_outer=300)
    identity = queries.optimize(W, method="identity", noise="laplace")
    x = queries.power_law_histogram(64, random_state=2)
    assert queries.expected_error(W, lrm, 0.1, x=x) < bound * queries.expected_error(
        W, identity, 0.1
    )
    if lrm.status == "identity fallback":
        assert "identity fallback: ALM" in lrm.message and np.array_equal(lrm.reconstruction, W)


def test_svd_start_is_an_exact_feasible_factorization_with_live_padding_rows():
    from dp.queries.lrm import svd_feasible_L

    W = queries.wrelated(12, 20, s=5, random_state=3)
    L = svd_feasible_L(W, 8, random_state=0)
    assert L.shape == (8, 20) and np.abs(L).sum(axis=0).max() == pytest.approx(1.0)
    assert np.allclose(
        W @ np.linalg.pinv(L) @ L, W
    )  # W's row space lies in L's: B0 = W L^+ is exact
    assert np.all(np.abs(L[5:]).sum(axis=1) > 0)  # rows beyond rank(W) are small but not zero
    with pytest.raises(ValueError, match="init"):
        low_rank_decomposition(W, init="zeros")


def test_finish_makes_B_exact_or_falls_back_to_identity_with_a_status():
    from dataclasses import replace

    from dp.queries.lrm import exact_reconstruction, finished_decomposition

    W = queries.wrange(10, 16, random_state=4)
    spanning = 0.05 * np.random.default_rng(1).standard_normal(
        (16, 16)
    )  # inside the ball, full rank
    B = exact_reconstruction(W, spanning)
    assert np.allclose(B @ spanning, W, atol=1e-9) and exact_reconstruction(W, spanning[:9]) is None
    result = low_rank_decomposition(W, rank=16, gamma=1e-3, random_state=0)
    # exact but noisier than identity (tiny rows need huge columns of B): identity replaces it
    tiny = replace(result, L=np.vstack([result.L[:8], spanning[8:] * 1e-3]))
    B, L, status, message = finished_decomposition(W, tiny)
    assert status == "identity fallback" and "Phi Delta^2" in message and np.array_equal(B, W)
    assert (
        finished_decomposition(W, result)[2] == "converged"
    )  # better than identity: kept as it is
    stopped = low_rank_decomposition(
        W, rank=3, max_outer=2, random_state=0
    )  # rank 3 < rank(W): cannot fit
    B, L, status, message = finished_decomposition(W, stopped)
    assert status == "identity fallback" and np.array_equal(L, np.eye(16)) and np.array_equal(B, W)


def test_dead_rows_of_L_are_revived_along_the_directions_the_product_misses():
    from dp.queries.lrm import revive_dead_rows

    rng = np.random.default_rng(2)
    W = rng.standard_normal((12, 9))
    L = 0.05 * rng.standard_normal((6, 9))
    L[[1, 4]] = 0.0
    B = W @ np.linalg.pinv(L)
    gap = W - B @ L
    revived = revive_dead_rows(L, gap)
    assert np.abs(revived).sum(axis=0).max() <= 1 + 1e-12
    assert np.allclose(
        revived[[0, 2, 3, 5]], L[[0, 2, 3, 5]]
    )  # inside the ball: projection leaves them
    top = np.linalg.svd(gap)[2][:2]  # the two directions of R^9 the product B L misses most
    for row, direction in zip(revived[[1, 4]], top):
        assert abs(row @ direction) == pytest.approx(np.linalg.norm(row))
    assert np.linalg.matrix_rank(revived) == 6 and np.array_equal(
        revive_dead_rows(revived, gap), revived
    )


def test_revival_lets_the_alm_reach_gamma_where_rows_die_without_it():
    """WRange with m > n: the L1 projection zeroes rows until rank L < rank W = n (the stall)."""
    W = queries.wrange(96, 48, random_state=1)
    stalled = low_rank_decomposition(W, max_outer=150, random_state=0, revive=False)
    revived = low_rank_decomposition(W, max_outer=150, random_state=0, revive=True)
    assert np.linalg.matrix_rank(stalled.L) < 48 and not stalled.converged
    assert revived.converged and np.linalg.norm(W - revived.B @ revived.L) <= revived.gamma


def test_paper_schedule_without_revival_and_ours_with_it():
    """revive=False is Alg. 1 as printed (10 Alg. 2 steps, beta doubling every 10); revive=True: 20 and 5."""
    W = queries.wrange(20, 30, random_state=3)
    for revive, (inner, period) in ((False, (10, 10)), (True, (20, 5))):
        default = low_rank_decomposition(W, max_outer=25, random_state=0, revive=revive)
        explicit = low_rank_decomposition(
            W, max_outer=25, random_state=0, revive=revive, max_inner=inner, beta_period=period
        )
        assert np.array_equal(default.L, explicit.L) and np.array_equal(default.B, explicit.B)
        betas = [h.beta for h in default.history]
        assert betas[period] == 2 * betas[0] and len(set(betas[:period])) == 1
        assert max(h.inner_iterations for h in default.history) <= inner


def test_exact_fit_is_the_pseudo_inverse_reconstruction_and_refuses_a_missing_row_space():
    from dp.queries.lrm_refine import exact_fit

    rng = np.random.default_rng(3)
    W = queries.wrange(20, 12, random_state=3)
    for rows in (12, 15):  # r = n and r > n: every L of rank n holds W's rows
        L = 0.02 * rng.standard_normal((rows, 12))  # inside the ball, of rank 12
        fit = exact_fit(W, L)
        assert fit.scale == pytest.approx(np.sum((W @ np.linalg.pinv(L)) ** 2), rel=1e-10)
    assert exact_fit(W, 0.02 * rng.standard_normal((8, 12))) is None  # rank 8 < rank W
    low = queries.wrelated(20, 12, s=3, random_state=1)
    top = np.linalg.svd(low)[2][:3] / 4  # W's row space, columns inside the ball
    assert (
        exact_fit(low, np.vstack([top, np.zeros((2, 12))])) is None
    )  # singular Gram: refused, not inverted
    assert exact_fit(low, top) is not None and exact_fit(low, top[:2]) is None


@pytest.mark.parametrize("rows", [10, 8, 5])
def test_refinement_gradient_matches_finite_differences(rows):
    """r > n, r = n (the R^n formulas) and r < n with W in L's row space (moves along X L keep it)."""
    from dp.queries.lrm_refine import exact_fit

    rng = np.random.default_rng(4)
    L = 0.05 * rng.standard_normal((rows, 8))
    W = (
        rng.standard_normal((15, rows)) @ L
        if rows < 8
        else queries.wdiscrete(15, 8, random_state=4)
    )
    gradient = exact_fit(W, L).gradient
    for _ in range(5):
        direction = (
            rng.standard_normal((rows, rows)) @ L if rows < 8 else rng.standard_normal(L.shape)
        )
        h = 1e-6 * np.linalg.norm(L) / np.linalg.norm(direction)
        numeric = (
            exact_fit(W, L + h * direction).scale - exact_fit(W, L - h * direction).scale
        ) / (2 * h)
        assert np.sum(gradient * direction) == pytest.approx(numeric, rel=1e-5)


def test_refinement_is_never_worse_than_its_start_and_keeps_W_equal_to_BL():
    from dp.queries.lrm_refine import exact_fit, refine_decomposition

    W = queries.wrange(40, 24, random_state=5)
    start = project_columns_l1(np.random.default_rng(5).standard_normal((29, 24)))
    refined = refine_decomposition(W, start, max_iter=300)
    assert refined.start_scale == pytest.approx(exact_fit(W, start).scale)
    assert refined.scale <= refined.start_scale and refined.scale < 0.5 * refined.start_scale
    assert (
        min(refined.history) == pytest.approx(refined.scale)
        and refined.history[0] == refined.start_scale
    )
    assert (
        np.allclose(refined.B @ refined.L, W, atol=1e-8)
        and np.abs(refined.L).sum(axis=0).max() <= 1 + 1e-12
    )
    assert refined.scale == pytest.approx(np.sum((W @ np.linalg.pinv(refined.L)) ** 2), rel=1e-8)
    # the identity is a stationary point (its columns are vertices of the ball): kept, not worsened
    at_identity = refine_decomposition(W, np.eye(24), max_iter=50)
    assert at_identity.scale <= np.sum(W**2) * (1 + 1e-12)
    with pytest.raises(ValueError, match="exact start"):
        refine_decomposition(W, start[:10])


def test_finish_refines_and_finish_false_keeps_the_paper_result():
    W = queries.wrange(
        60, 24, random_state=6
    )  # rank 24 = n: r = 29 rows, every L of rank n is exact
    paper = queries.optimize(W, method="lrm", solver="alm", finish=False, random_state=0)
    unrefined = queries.optimize(W, method="lrm", solver="alm", refine=False, random_state=0)
    refined = queries.optimize(W, method="lrm", solver="alm", random_state=0)
    direct = low_rank_decomposition(W, random_state=0)
    assert np.array_equal(paper.matrix, direct.L) and np.array_equal(paper.reconstruction, direct.B)
    assert (
        paper.info["alm_objective"]
        == pytest.approx(direct.objective)
        == pytest.approx(refined.info["alm_objective"])
    )
    assert refined.objective <= unrefined.objective <= np.sum(W**2)
    assert "refinement" in refined.message and np.allclose(
        refined.reconstruction @ refined.matrix, W, atol=1e-8
    )


def test_an_ill_conditioned_exact_L_is_mixed_with_the_identity_before_refining():
    from dp.queries.lrm import CONDITIONING_MIX, refinement_start
    from dp.queries.lrm_refine import exact_fit

    rng = np.random.default_rng(8)
    W = queries.wrange(30, 10, random_state=8)
    L = 0.02 * rng.standard_normal((12, 10))
    assert np.array_equal(
        refinement_start(W, L), L / np.abs(L).sum(axis=0).max()
    )  # well conditioned: as is
    L[:, 0] = L[:, 1] * (1 + 1e-10)  # rank 10 in exact arithmetic, beyond a Cholesky solve of L'L
    assert exact_fit(W, L / np.abs(L).sum(axis=0).max()) is None
    start = refinement_start(W, L)
    t = CONDITIONING_MIX[0]
    expected = (1 - t) * L / np.abs(L).sum(axis=0).max()
    expected[:10] += t * np.eye(10)
    assert np.allclose(start, expected) and exact_fit(W, start) is not None
    assert np.abs(start).sum(axis=0).max() <= 1 + 1e-12
    assert refinement_start(W, L[:8]) is None  # r < n: nothing to mix in
