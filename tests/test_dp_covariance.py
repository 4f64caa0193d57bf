"""Private covariance: sensitivities (derived bound vs random and adversarial pairs), clipping, budget."""

import math
import re
import warnings

import numpy as np
import pytest

import dp
from dp.covariance import covariance_sensitivity

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")


def _triangle_diff(x, x_prime, n):
    A = (np.outer(x, x) - np.outer(x_prime, x_prime)) / n
    return A[np.triu_indices(len(x))]


def _random_unit_rows(rng, k, p):
    v = rng.standard_normal((k, p)) * rng.random((k, 1)) ** 3  # varied norms and directions
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1.0)


@pytest.mark.parametrize("p", [1, 2, 5, 30])
def test_sensitivity_bounds_hold_for_random_neighbouring_pairs(p):
    rng = np.random.default_rng(p)
    n = 50
    l1 = covariance_sensitivity(p, n, 1.0, "l1")
    l2 = covariance_sensitivity(p, n, 1.0, "l2")
    X = _random_unit_rows(rng, 2000, p)
    Y = _random_unit_rows(rng, 2000, p)
    # also unit-norm rows, where the bounds bite
    Y[:1000] /= np.linalg.norm(Y[:1000], axis=1, keepdims=True)
    X[:1000] /= np.linalg.norm(X[:1000], axis=1, keepdims=True)
    worst1 = max(np.abs(_triangle_diff(x, y, n)).sum() for x, y in zip(X, Y))
    worst2 = max(np.linalg.norm(_triangle_diff(x, y, n)) for x, y in zip(X, Y))
    assert worst1 <= l1 * (1 + 1e-12)
    assert worst2 <= l2 * (1 + 1e-12)


def test_sensitivity_of_the_whole_mechanism_input_uses_replace_one_neighbours():
    rng = np.random.default_rng(0)
    n, p = 20, 4
    D = _random_unit_rows(rng, n, p)
    D_prime = D.copy()
    D_prime[3] = _random_unit_rows(rng, 1, p)[0]
    S, S_prime = D.T @ D / n, D_prime.T @ D_prime / n
    iu = np.triu_indices(p)
    assert np.abs(S[iu] - S_prime[iu]).sum() <= covariance_sensitivity(p, n, 1.0, "l1")
    assert np.linalg.norm(S[iu] - S_prime[iu]) <= covariance_sensitivity(p, n, 1.0, "l2")


@pytest.mark.parametrize("p", [16, 64])
def test_adversarial_pairs_come_close_to_the_bounds(p):
    n = 10
    # orthogonal unit vectors attain the L2 bound exactly
    e1, e2 = np.eye(p)[0], np.eye(p)[1]
    assert np.linalg.norm(_triangle_diff(e1, e2, n)) == pytest.approx(
        covariance_sensitivity(p, n, 1.0, "l2")
    )
    # x ~ cos(w i), x' ~ sin(w i) spreads the difference over every entry (L1)
    best = 0.0
    i = np.arange(p)
    for w in np.linspace(0.05, math.pi, 200):
        x, y = np.cos(w * i), np.sin(w * i)
        x, y = x / np.linalg.norm(x), y / np.linalg.norm(y)
        best = max(best, np.abs(_triangle_diff(x, y, n)).sum())
    bound = covariance_sensitivity(p, n, 1.0, "l1")
    assert best <= bound
    assert best >= 0.8 * bound


def test_sensitivity_scales_with_clip_squared():
    assert covariance_sensitivity(10, 100, 3.0, "l2") == pytest.approx(9 * math.sqrt(2) / 100)
    assert covariance_sensitivity(10, 100, 2.0, "l1") == pytest.approx(
        4 * covariance_sensitivity(10, 100, 1.0, "l1")
    )


def test_clip_rows_counts_and_scales_only_long_rows():
    X = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [1.0, 0.0]])
    clipped, count = dp.clip_rows(X, 1.0)
    assert count == 1
    assert np.allclose(clipped[0], [0.6, 0.8])
    assert np.array_equal(clipped[1:], X[1:])


def test_private_covariance_is_symmetric_and_centred_on_s():
    rng = np.random.default_rng(1)
    X = _random_unit_rows(rng, 400, 6)
    S = X.T @ X / 400
    draws = np.stack(
        [dp.private_covariance(X, 2.0, clip=1.0, random_state=s).covariance for s in range(300)]
    )
    assert np.all(draws == np.transpose(draws, (0, 2, 1)))
    sd = dp.private_covariance(X, 2.0, clip=1.0, random_state=0).release.noise_scale * math.sqrt(2)
    assert np.all(np.abs(draws.mean(axis=0) - S) < 5 * sd / math.sqrt(300))
    # the noise is calibrated to the L1 sensitivity derived in dp.covariance
    rel = dp.private_covariance(X, 2.0, clip=1.0, random_state=0).release
    assert rel.sensitivity == covariance_sensitivity(6, 400, 1.0, "l1")


def test_private_covariance_gaussian_uses_l2_sensitivity_and_hides_clipping():
    X = np.vstack([np.full((5, 3), 2.0), np.full((95, 3), 0.1)])
    out = dp.private_covariance(X, 0.5, 1e-3, mechanism="gaussian", clip=1.0, random_state=0)
    assert not hasattr(out, "n_clipped")  # how many rows were clipped is data, not released
    assert out.release.sensitivity == pytest.approx(math.sqrt(2) / 100)
    assert out.release.delta == 1e-3


def test_non_private_covariance_is_exact():
    X = np.random.default_rng(2).standard_normal((30, 4))
    out = dp.private_covariance(X, None)
    assert np.allclose(out.covariance, X.T @ X / 30) and out.release is None


def test_budget_composes_and_refuses_overspend_before_release(monkeypatch):
    X = np.random.default_rng(3).random((50, 3)) / 3
    budget = dp.PrivacyAccountant(1.0, 1e-3)
    dp.private_covariance(X, 0.4, clip=1.0, budget=budget, random_state=0)
    dp.private_covariance(
        X, 0.3, 5e-4, mechanism="gaussian", clip=1.0, budget=budget, random_state=1
    )
    assert budget.spent == pytest.approx((0.7, 5e-4))
    drawn = []
    import dp.mechanisms as mech

    monkeypatch.setattr(mech, "discrete_laplace", lambda *a: drawn.append(a))
    with pytest.raises(dp.BudgetExceededError):
        dp.private_covariance(X, 0.5, clip=1.0, budget=budget)
    assert drawn == []  # no noise was even drawn
    assert budget.spent == pytest.approx((0.7, 5e-4))


def test_spent_budget_is_refused_not_warned():
    budget = dp.PrivacyAccountant(0.5)
    budget.spend(0.2)
    budget.spend(0.3)
    assert budget.remaining == (0.0, 0.0)
    with pytest.raises(dp.BudgetExceededError):
        budget.spend(1e-9)
    with pytest.raises(dp.BudgetExceededError):
        dp.laplace_mechanism([0.0], 1.0, 0.01, budget=budget)
    assert len(budget.ledger) == 2


def test_budget_rejects_delta_overspend_and_bad_totals():
    budget = dp.PrivacyAccountant(5.0, 1e-5)
    with pytest.raises(dp.BudgetExceededError, match="delta"):
        budget.spend(1.0, 1e-4)
    for bad in [(0.0, 0.0), (-1.0, 0.0), (1.0, 1.0)]:
        with pytest.raises(ValueError):
            dp.PrivacyAccountant(*bad)


@pytest.mark.parametrize(
    "X,match",
    [
        (np.array([[1.0, np.nan], [0.0, 1.0]]), "row 0, column 1"),
        (np.array([[1.0, 2.0], [0.0, np.inf]]), "row 1, column 1"),
        (np.ones(5), "2-D"),
    ],
)
def test_bad_data_is_refused_with_location_when_not_private(X, match):
    with pytest.raises(dp.DataError, match=match):
        dp.private_covariance(X, None)


@pytest.mark.parametrize(
    "X",
    [
        np.array([[1.0, np.nan], [0.0, 1.0]]),
        np.array([[1.0, 2.0], [0.0, np.inf]]),
        np.array([[1.0, 2.0], [123456789.5, np.nan]]),
    ],
)
def test_a_private_release_refuses_bad_data_without_quoting_it(X):
    # the message of a private release says what is wrong, never where or which value
    with pytest.raises(dp.DataError, match="non-finite") as info:
        dp.private_covariance(X, 1.0, clip=1.0)
    text = str(info.value)
    assert (
        not re.search(r"(row|column|at) \d", text)
        and "123456789" not in text
        and "1 non-finite" not in text
    )


def test_bad_parameters_raise_before_anything_is_spent():
    X = np.random.default_rng(4).random((20, 3)) / 3
    budget = dp.PrivacyAccountant(10.0, 0.5)
    for kwargs in [
        dict(epsilon=0.0),
        dict(epsilon=1.0, delta=-0.1),
        dict(epsilon=1.0, delta=1.0),
        dict(epsilon=1.0, mechanism="cauchy"),
        dict(epsilon=1.0, clip=0.0),
        dict(epsilon=1.0, mechanism="gaussian", delta=0.0),
    ]:
        with pytest.raises(ValueError):
            dp.private_covariance(X, budget=budget, **{"clip": 1.0, **kwargs})
    assert budget.ledger == ()


# --- add-remove releases the sum, noise independent of the private n ------------------------------


@pytest.mark.parametrize("p", [1, 2, 5, 30])
def test_add_remove_sum_sensitivities_hold_and_are_attained(p):
    rng = np.random.default_rng(10 + p)
    X = _random_unit_rows(rng, 3000, p)
    X[:1500] /= np.linalg.norm(X[:1500], axis=1, keepdims=True)
    iu = np.triu_indices(p)
    moves = np.array(
        [np.outer(x, x)[iu] for x in X]
    )  # adding row x moves the sum's triangle by this
    l1 = covariance_sensitivity(p, 1, 1.0, "l1", "add-remove")
    l2 = covariance_sensitivity(p, 1, 1.0, "l2", "add-remove")
    assert l1 == (p + 1) / 2 and l2 == 1.0
    assert np.abs(moves).sum(axis=1).max() <= l1 * (1 + 1e-12)
    assert np.linalg.norm(moves, axis=1).max() <= l2 * (1 + 1e-12)
    flat = np.full(p, 1 / math.sqrt(p))  # attains the L1 bound; e_1 attains the L2 bound
    assert np.abs(np.outer(flat, flat)[iu]).sum() == pytest.approx(l1)
    assert np.linalg.norm(np.outer(np.eye(p)[0], np.eye(p)[0])[iu]) == pytest.approx(l2)


@pytest.mark.parametrize("mechanism,delta", [("laplace", 0.0), ("gaussian", 1e-5)])
def test_add_remove_noise_does_not_depend_on_the_private_row_count(mechanism, delta):
    rng = np.random.default_rng(5)
    X = _random_unit_rows(rng, 600, 4)
    kw = dict(mechanism=mechanism, clip=1.0, neighbouring="add-remove")
    small, large = (
        dp.private_covariance(X[:m], 1.0, delta, random_state=0, **kw) for m in (5, 600)
    )
    assert small.release.noise_scale == large.release.noise_scale  # the noisy sum's noise
    assert (
        small.count_release.noise_scale
        == large.count_release.noise_scale
        == pytest.approx(10.0, rel=1e-6)
    )
    assert small.release.sensitivity == covariance_sensitivity(
        4, 1, 1.0, "l1" if mechanism == "laplace" else "l2", "add-remove"
    )
    # n_samples is the released noisy count, not the data's n (private under add-remove)
    assert (
        small.n_samples == max(small.count_release.values[0], 1.0)
        and small.neighbouring == "add-remove"
    )
    assert np.allclose(
        small.covariance * small.n_samples,
        dp.covariance._symmetric_from_triangle(small.release.values, 4),
    )
    # with a public n the sum is divided by it and all of epsilon goes to the sum
    public = dp.private_covariance(X, 1.0, delta, public_n=1000, random_state=0, **kw)
    assert public.count_release is None and public.n_samples == 1000
    assert public.release.sensitivity == covariance_sensitivity(
        4, 1000, 1.0, "l1" if mechanism == "laplace" else "l2", "add-remove"
    )
    # the noisy count is centred on n: the divisor follows the data only through a paid release
    counts = [
        dp.private_covariance(X, 1.0, delta, random_state=s, **kw).count_release.values[0]
        for s in range(200)
    ]
    assert abs(np.mean(counts) - 600) < 5 * 10 * math.sqrt(2) / math.sqrt(200)


def test_add_remove_charges_count_and_sum_before_any_noise(monkeypatch):
    X = np.random.default_rng(3).random((50, 3)) / 3
    budget = dp.PrivacyAccountant(1.0, neighbouring="add-remove")
    dp.private_covariance(X, 0.6, clip=1.0, budget=budget, random_state=0, count_fraction=0.25)
    assert [c.label for c in budget.ledger] == [
        "covariance row count (laplace)",
        "covariance sum (laplace)",
    ]
    assert [c.epsilon for c in budget.ledger] == pytest.approx([0.15, 0.45])
    drawn = []
    import dp.mechanisms as mech

    monkeypatch.setattr(mech, "discrete_laplace", lambda *a: drawn.append(a))
    with pytest.raises(dp.BudgetExceededError):
        dp.private_covariance(X, 0.5, clip=1.0, budget=budget)  # 0.4 left: neither part is released
    assert drawn == [] and len(budget.ledger) == 2


def test_clip_rows_scales_huge_rows_without_a_warning_or_a_data_dependent_branch():
    X = np.array([[3e200, 4e200], [0.3, 0.4], [0.0, 0.0], [-3.0, 4.0], [1e-320, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # np.linalg.norm overflowed above ~1e154 with a warning
        clipped, count = dp.clip_rows(X, 1.0)
    assert np.allclose(clipped, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0], [-0.6, 0.8], [1e-320, 0.0]])
    assert count == 2
    rng = np.random.default_rng(4)
    Y = rng.standard_normal((200, 6))
    norms = np.linalg.norm(Y, axis=1)
    expected = Y * np.minimum(1.0, 1.5 / norms)[:, None]
    assert np.allclose(dp.clip_rows(Y, 1.5)[0], expected, rtol=1e-14, atol=0)
    # the same arithmetic whether or not a row is over the bound: never the input handed back
    inside, none = dp.clip_rows(Y, 100.0)
    assert none == 0 and inside is not Y and np.array_equal(inside, Y)
