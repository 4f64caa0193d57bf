"""The privacy accountant: basic composition, zCDP with its conversion, neighbour relations, sharing."""

import copy
import importlib
import math
import pickle

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from sklearn.base import clone

import dp
from dp.accounting import zcdp_epsilon

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")


def _cks_epsilon(rho, delta):
    """Continuous minimum over alpha > 1 of CKS 2020 Prop. 12 for (alpha, alpha rho)-RDP."""

    def eps(log_am1):
        a = 1 + math.exp(log_am1)
        return a * rho + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1)

    return minimize_scalar(eps, bounds=(-8, 14), method="bounded", options={"xatol": 1e-10}).fun


def test_pure_charges_compose_by_summing_and_refuse_before_overspend():
    b = dp.PrivacyAccountant(1.0)
    b.spend(0.1, label="a")
    b.spend(0.2, label="b")
    assert b.spent == pytest.approx((0.3, 0.0))
    b.spend(0.7)  # 0.1 + 0.2 + 0.7 adds back to the total: rounding must not refuse it
    assert b.remaining == (pytest.approx(0.0, abs=1e-12), 0.0)
    with pytest.raises(dp.BudgetExceededError, match="epsilon"):
        b.spend(1e-6)
    assert len(b.ledger) == 3 and [c.label for c in b.ledger] == ["a", "b", ""]


def test_approximate_charges_add_delta_and_refuse_too_much_delta():
    b = dp.PrivacyAccountant(2.0, 1e-5)
    b.spend(0.5, 4e-6)
    b.spend(0.5, 4e-6)
    assert b.spent == pytest.approx((1.0, 8e-6))
    with pytest.raises(dp.BudgetExceededError, match="delta"):
        b.check(0.1, 4e-6)
    assert len(b.ledger) == 2  # check charges nothing


@pytest.mark.parametrize("rho,delta", [(1e-4, 1e-6), (0.01, 1e-5), (0.5, 1e-3), (3.0, 1e-8)])
def test_zcdp_conversion_is_the_cks_bound_and_beats_bun_steinke(rho, delta):
    eps = zcdp_epsilon(rho, delta)
    exact = _cks_epsilon(rho, delta)
    # the order grid can only lose a little against the continuous minimum, never win
    assert exact - 1e-9 <= eps <= exact * (1 + 1e-4)
    assert eps < rho + 2 * math.sqrt(rho * math.log(1 / delta))  # Bun-Steinke Prop. 1.3


@pytest.mark.parametrize("sigma_over_d", [0.5, 2.0, 10.0])
def test_zcdp_of_a_gaussian_is_never_below_its_exact_privacy_curve(sigma_over_d):
    # a rho-zCDP bound must cover the Gaussian mechanism's own (epsilon, delta) curve (Balle-Wang)
    rho = dp.zcdp_rho(1.0, sigma_over_d)
    assert rho == pytest.approx(1 / (2 * sigma_over_d**2))
    for delta in (1e-3, 1e-6):
        eps = zcdp_epsilon(rho, delta)
        assert dp.gaussian_delta(sigma_over_d, eps, 1.0) <= delta * (1 + 1e-9)


def test_zcdp_charges_add_rho_and_convert_once():
    b = dp.PrivacyAccountant(1.0, 1e-5)
    for _ in range(4):
        b.spend_zcdp(0.005)
    assert b.spent_rho == pytest.approx(0.02)
    assert b.spent == pytest.approx((zcdp_epsilon(0.02, 1e-5), 1e-5))
    # composing in zCDP beats basic composition of four separately converted releases
    assert b.spent[0] < 4 * zcdp_epsilon(0.005, 1e-5 / 4)


def test_pure_and_zcdp_parts_compose_basically():
    b = dp.PrivacyAccountant(2.0, 1e-5)
    b.spend(0.5)
    b.spend(0.1, 2e-6)
    b.spend_zcdp(0.01)
    eps, delta = b.spent
    assert eps == pytest.approx(0.6 + zcdp_epsilon(0.01, 8e-6))
    assert delta == pytest.approx(1e-5)
    # a later delta charge shrinks the delta left for the zCDP part, so its epsilon grows
    b.spend(0.1, 2e-6)
    assert b.spent[0] == pytest.approx(0.7 + zcdp_epsilon(0.01, 6e-6))


def test_remaining_rho_is_the_largest_rho_that_fits():
    b = dp.PrivacyAccountant(1.0, 1e-5)
    b.spend(0.4)
    r = b.remaining_rho
    assert 0.4 + zcdp_epsilon(r, 1e-5) == pytest.approx(1.0, rel=1e-9)
    b.check_zcdp(r)
    with pytest.raises(dp.BudgetExceededError, match="rho"):
        b.check_zcdp(r * 1.001)
    b.spend_zcdp(r)
    assert b.remaining_rho == 0.0 or b.remaining_rho < 1e-12


def test_zcdp_needs_delta_to_convert():
    with pytest.raises(dp.BudgetExceededError, match="needs delta > 0"):
        dp.PrivacyAccountant(1.0).spend_zcdp(1e-6)
    b = dp.PrivacyAccountant(1.0, 1e-5)
    b.spend(0.1, 1e-5)
    with pytest.raises(dp.BudgetExceededError, match="needs delta > 0"):
        b.check_zcdp(1e-6)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "0.1", True])
def test_bad_rho_is_refused(bad):
    with pytest.raises(ValueError, match="rho"):
        dp.PrivacyAccountant(1.0, 1e-5).spend_zcdp(bad)


def test_neighbour_relation_is_explicit_and_checked():
    assert dp.PrivacyAccountant(1.0).neighbouring == "replace-one"
    assert dp.PrivacyAccountant(1.0, neighbouring="add-remove").neighbouring == "add-remove"
    with pytest.raises(ValueError, match="neighbouring"):
        dp.PrivacyAccountant(1.0, neighbouring="swap")
    with pytest.raises(TypeError):
        dp.PrivacyAccountant(1.0, 0.0, "add-remove")  # keyword only
    assert dp.contribution_sensitivity(3.0, "add-remove") == 3.0
    assert dp.contribution_sensitivity(3.0, "replace-one") == 6.0
    assert dp.sensitivity_for("add-remove", replace_one=2.0, add_remove=1.0) == 1.0


def test_a_ledger_is_shared_never_copied():
    b = dp.PrivacyAccountant(1.0)
    assert copy.copy(b) is b and copy.deepcopy(b) is b
    est = dp.PrivateRidgePrecision(alpha=0.1, epsilon=0.5, budget=b)
    assert clone(est).budget is b
    assert copy.deepcopy({"budget": b})["budget"] is b
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(b)


def test_mechanisms_charge_before_noise_and_refuse_when_spent():
    b = dp.PrivacyAccountant(1.0, 1e-5)
    dp.laplace_mechanism(np.zeros(3), 1.0, 0.5, random_state=0, budget=b)
    rel = dp.gaussian_mechanism_zcdp(np.zeros(3), 1.0, 0.005, random_state=0, budget=b)
    assert rel.rho == 0.005 and b.ledger[-1].rho == 0.005
    with pytest.raises(dp.BudgetExceededError):
        dp.gaussian_mechanism_zcdp(
            np.zeros(3), 1.0, b.remaining_rho * 1.01, random_state=0, budget=b
        )
    with pytest.raises(dp.BudgetExceededError):
        dp.laplace_mechanism(np.zeros(3), 1.0, 0.5, random_state=0, budget=b)
    assert len(b.ledger) == 2


def test_zcdp_gaussian_noise_scale_is_sensitivity_over_sqrt_two_rho():
    rel = dp.gaussian_mechanism_zcdp(np.zeros(20_000), 2.0, 0.125, random_state=3)
    assert rel.noise_scale == pytest.approx(2.0 / math.sqrt(0.25), rel=1e-4)
    assert rel.noise_scale >= 2.0 / math.sqrt(0.25)  # rounding only adds noise
    from scipy import stats

    assert stats.kstest(rel.values, stats.norm(scale=rel.noise_scale).cdf).pvalue > 1e-3


# --- a ledger nobody can rewrite, scoped to its process -------------------------------------------


def test_totals_and_ledger_are_read_only():
    b = dp.PrivacyAccountant(1.0, 1e-5)
    b.spend(0.6, label="first")
    for name, value in (
        ("epsilon", 100.0),
        ("delta", 0.5),
        ("neighbouring", "add-remove"),
        ("ledger", []),
    ):
        with pytest.raises(AttributeError):
            setattr(b, name, value)
    with pytest.raises(AttributeError):
        b.ledger.clear()  # a tuple copy: the old `acc.ledger.clear()` reopened a spent budget
    with pytest.raises(AttributeError):
        b.ledger.append(dp.Charge(-5.0, 0.0, "refund"))
    with pytest.raises(AttributeError):
        b.spent_eps = 0.0  # no new attributes either
    assert b.ledger == (dp.Charge(0.6, 0.0, "first"),) and b.epsilon == 1.0 and b.delta == 1e-5
    with pytest.raises(dp.BudgetExceededError):
        b.spend(0.5)


def test_the_ledger_is_not_an_attribute_anyone_can_reach_or_reset():
    b = dp.PrivacyAccountant(1.0)
    b.spend(1.0, label="all of it")
    for name in ("_charges", "_epsilon", "_lock", "_owner_pid", "__dict__"):
        with pytest.raises(AttributeError):
            getattr(b, name)  # the old `b._charges.clear()` reset a spent budget
    for name in ("_read", "_record", "_charges", "_epsilon"):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(b, name, lambda *args: ())  # nor can the odometer be swapped out
        with pytest.raises(AttributeError):
            delattr(b, name)
    assert b.spent == (1.0, 0.0) and b.remaining == (0.0, 0.0)
    with pytest.raises(dp.BudgetExceededError):
        b.spend(1e-6)
    with pytest.raises(dp.BudgetExceededError):
        b._record(dp.Charge(1e-6, 0.0, "behind spend's back"))  # the only way in checks too


def test_a_forked_child_cannot_spend_from_its_copy_of_the_ledger():
    import multiprocessing

    b = dp.PrivacyAccountant(1.0)
    b.spend(0.25)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()

    def child():
        try:
            b.spend(0.5)
            queue.put("spent")
        except dp.BudgetExceededError as exc:
            queue.put(str(exc))
        queue.put(b.spent)  # reading is fine: the child sees the ledger as it was at the fork

    proc = ctx.Process(target=child)
    proc.start()
    message, seen = queue.get(timeout=60), queue.get(timeout=60)
    proc.join(timeout=60)
    assert "belongs to process" in message and "forked child" in message
    assert seen == (0.25, 0.0)
    b.spend(0.5)  # the owner still spends
    assert b.spent == (0.75, 0.0) and len(b.ledger) == 2


@pytest.mark.parametrize("module", ["dp", "dp.accounting", "dp.budget"])
def test_privacy_budget_is_a_deprecated_name_of_the_accountant(module):
    namespace = importlib.import_module(module)
    with pytest.warns(FutureWarning, match="PrivacyAccountant"):
        alias = namespace.PrivacyBudget
    assert alias is dp.PrivacyAccountant
    budget = alias(1.0)
    budget.spend(0.4)
    assert budget.spent == pytest.approx((0.4, 0.0))
