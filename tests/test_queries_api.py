"""dp.queries: workloads, strategies, answer and the closed-form expected error."""

import numpy as np
import pytest

import dp
from dp import queries as q
from dp.validation import DataError

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")


def test_workload_shapes_and_values():
    W = q.wrange(50, 20, random_state=1)
    assert W.shape == (50, 20)
    for row in W:  # every range query is one contiguous run of ones
        ones = np.flatnonzero(row)
        assert ones.size >= 1 and np.all(np.diff(ones) == 1) and set(np.unique(row)) <= {0.0, 1.0}
    D = q.wdiscrete(400, 50, random_state=1)
    assert set(np.unique(D)) == {-1.0, 1.0} and 0.01 < np.mean(D == 1) < 0.03
    R = q.wrelated(30, 20, s=5, random_state=1)
    assert np.linalg.matrix_rank(R) == 5
    M = q.wmarginal(40, 16, random_state=1)  # four binary attributes: each query covers 4 cells
    assert np.all(M.sum(axis=1) == 4)
    np.testing.assert_array_equal(q.wrange(5, 9, random_state=3), q.wrange(5, 9, random_state=3))


def test_synthetic_histograms_have_the_stated_moments():
    for kind in ("laplace", "gaussian", "uniform"):
        x = q.synthetic_histogram(kind, 200_000, random_state=0)
        assert abs(x.mean()) < 0.05 and abs(x.var() - 10) < 0.2
    alt = q.synthetic_histogram("alternating", 8, random_state=0)
    assert set(alt) == {0.0, 10.0} and np.all(alt[1:] != alt[:-1])
    assert q.power_law_histogram(100, total=5000, random_state=0).sum() == 5000


def test_identity_and_workload_objectives_in_closed_form():
    W = q.wrange(30, 12, random_state=2)
    ident = q.optimize(W, "identity")
    assert ident.objective == pytest.approx(np.sum(W**2))  # sensitivity 1, R = W
    work = q.optimize(W, "workload")
    assert work.objective == pytest.approx(np.max(np.sum(W**2, axis=0)) * W.shape[0])
    sigma = dp.analytic_gaussian_sigma(0.5, 1e-4, 1.0)
    assert q.expected_error(W, ident, 0.5, 1e-4) == pytest.approx(sigma**2 * np.sum(W**2))
    lap = q.optimize(W, "identity", noise="laplace")
    assert q.expected_error(W, lap, 0.5) == pytest.approx(2 * (1 / 0.5) ** 2 * np.sum(W**2))


@pytest.mark.parametrize("method,noise", [("identity", "gaussian"), ("workload", "laplace")])
def test_expected_error_matches_monte_carlo(method, noise):
    W = q.wrange(12, 8, random_state=4)
    x = q.random_histogram(8, random_state=5)
    strategy = q.optimize(W, method, noise=noise)
    rng = np.random.default_rng(6)
    errors = np.array(
        [
            np.sum((q.answer(W, x, strategy, 1.0, 1e-3, random_state=rng).values - W @ x) ** 2)
            for _ in range(400)
        ]
    )
    expected = q.expected_error(W, strategy, 1.0, 1e-3)
    stderr = errors.std(ddof=1) / np.sqrt(errors.size)
    assert abs(errors.mean() - expected) < 4 * stderr


def test_answer_spends_the_budget_and_refuses_overspending():
    W = q.wrange(5, 4, random_state=1)
    strategy = q.optimize(W, "identity")
    budget = dp.PrivacyAccountant(1.0, 1e-3)
    q.answer(W, np.ones(4), strategy, 0.6, 5e-4, random_state=1, budget=budget)
    with pytest.raises(dp.BudgetExceededError):
        q.answer(W, np.ones(4), strategy, 0.6, 5e-4, random_state=1, budget=budget)


def test_bad_input_is_named():
    W = q.wrange(5, 4, random_state=1)
    with pytest.raises(ValueError, match="unknown method"):
        q.optimize(W, "nope")
    with pytest.raises(DataError, match="shape"):
        q.answer(W, np.ones(3), q.optimize(W, "identity"), 1.0, 1e-5)
    with pytest.raises(DataError, match="non-finite"):
        q.optimize(np.array([[1.0, np.nan]]), "identity")
    with pytest.raises(DataError, match="prime"):
        q.wmarginal(3, 7)


# --- the relation of the release follows the budget's ---------------------------------------------


@pytest.mark.parametrize(
    "method", ["identity", "hierarchical", "wavelet", "coa-dual", "lrm", "workload"]
)
def test_replace_one_sensitivity_is_the_largest_difference_of_two_columns(method):
    W = q.wrange(24, 12, random_state=3)
    strategy = q.optimize(W, method)
    A, order = strategy.matrix, (2 if strategy.noise == "gaussian" else 1)
    brute = max(
        np.linalg.norm(A[:, i] - A[:, j], ord=order) for i in range(12) for j in range(12) if i != j
    )
    got = strategy.sensitivity_for("replace-one")
    assert brute <= got <= brute * (1 + 1e-8)
    assert got <= 2 * strategy.sensitivity * (1 + 1e-8)
    assert strategy.sensitivity_for("add-remove") == strategy.sensitivity
    # above the work limit the bound (two largest column norms) is used: valid, never below the truth
    import dp.queries.strategy as strategy_module
    from dp.queries.strategy import replace_one_sensitivity

    limits = dict(strategy_module._PAIRWISE_WORK)
    try:
        strategy_module._PAIRWISE_WORK.update(gaussian=0, laplace=0)
        assert got <= replace_one_sensitivity(A, strategy.noise) * (1 + 1e-8)
    finally:
        strategy_module._PAIRWISE_WORK.update(limits)


@pytest.mark.parametrize("method,delta", [("identity", 1e-3), ("coa-dual", 1e-3), ("lrm", 0.0)])
def test_answer_calibrates_to_the_relation_of_its_budget(method, delta):
    W = q.wrange(16, 8, random_state=1)
    strategy = q.optimize(W, method)
    x = np.arange(8.0)
    free = q.answer(W, x, strategy, 0.5, delta, random_state=1)  # no budget: the papers' add-remove
    assert free.neighbouring == "add-remove" and free.release.sensitivity == strategy.sensitivity
    replace = q.answer(
        W, x, strategy, 0.5, delta, random_state=1, budget=dp.PrivacyAccountant(1.0, 1e-2)
    )
    assert replace.neighbouring == "replace-one"
    assert (
        replace.release.sensitivity
        == strategy.sensitivity_for("replace-one")
        > strategy.sensitivity
    )
    added = q.answer(
        W,
        x,
        strategy,
        0.5,
        delta,
        random_state=1,
        budget=dp.PrivacyAccountant(1.0, 1e-2, neighbouring="add-remove"),
    )
    assert added.release.sensitivity == strategy.sensitivity
    explicit = q.answer(W, x, strategy, 0.5, delta, random_state=1, neighbouring="replace-one")
    assert explicit.release.noise_scale == replace.release.noise_scale
    with pytest.raises(dp.PrivacyParameterError, match="differs from the budget"):
        q.answer(
            W,
            x,
            strategy,
            0.5,
            delta,
            budget=dp.PrivacyAccountant(1.0, 1e-2),
            neighbouring="add-remove",
        )
    # expected_error follows the same relation
    ratio = q.expected_error(
        W, strategy, 0.5, delta, neighbouring="replace-one"
    ) / q.expected_error(W, strategy, 0.5, delta)
    assert ratio == pytest.approx(
        (strategy.sensitivity_for("replace-one") / strategy.sensitivity) ** 2, rel=1e-6
    )


def test_histogram_errors_do_not_say_which_count():
    W = q.wrange(5, 4, random_state=1)
    with pytest.raises(DataError, match="non-finite") as info:
        q.answer(W, np.array([1.0, 2.0, np.nan, 4.0]), q.optimize(W, "identity"), 1.0, 1e-5)
    assert "cell 2" not in str(info.value)
