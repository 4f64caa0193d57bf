"""The privacy accountant: one shared ledger that every mechanism and estimator spends through.

Two kinds of charge compose in one ledger:

- (epsilon, delta) charges (pure DP when delta = 0; Laplace releases, Gaussian releases calibrated
  to (epsilon, delta)) add up by basic composition (Dwork-Roth Thm 3.16), the accounting of the
  seeds (Su et al.; Kuru's thesis ch. 4).
- zCDP charges rho (Gaussian releases: L2 sensitivity D, noise sd sigma give rho = D^2/(2 sigma^2),
  Bun-Steinke 2016 Prop. 1.6; also the discrete Gaussian, CKS 2020 Thm 14) add up as rho
  (Bun-Steinke Lemma 2.3) and are converted to (epsilon, delta) once, on the total, at the delta
  the (epsilon, delta) charges leave over. The conversion is the one of Canonne, Kamath and
  Steinke (2020), Prop. 12 / Cor. 13, minimized over a dense grid of Renyi orders, computed by
  Google's dp-accounting (RdpAccountant with a ZCDpEvent): tighter than rho + 2 sqrt(rho log 1/delta).

The two parts compose by basic composition, so the total is
    (sum eps_i + eps_z(rho, delta - sum delta_i),  sum delta_i + [delta - sum delta_i if rho > 0]).

The accountant is a ledger, never a value: copy.copy, copy.deepcopy (and so sklearn's `clone` of
an estimator that holds it, and cross-validation) return the same object, and pickling is refused
so that a copy spent on a Dask worker cannot silently leave the original unspent (diffprivlib's
BudgetAccountant and OpenDP's odometers are shared the same way). Every spend checks first and
raises BudgetExceededError before anything is released.

The neighbour relation (replace-one, the papers'; or add-remove) is an explicit argument and is
recorded here, so that every mechanism spending from the ledger calibrates to the same relation
(`sensitivity_for` picks the sensitivity that goes with it).

The totals, the relation and the ledger are read-only and out of reach: they live in a closure
made at construction (`_odometer`; OpenDP's odometers keep theirs behind an FFI handle), not in
attributes, and the instance refuses every attribute assignment. `epsilon`, `delta` and
`neighbouring` are properties without setters, and `ledger` is a tuple snapshot, so no caller can
raise the total or clear what was spent (`acc.ledger.clear()` and `acc._charges` fail; only
deliberate introspection of the closure's cells could reach it). The only way a charge enters the
ledger is `spend` / `spend_zcdp`, checked and appended under one lock (threads of one process
share the accountant safely).

Scope: one process. An accountant lives in the memory of the process that made it. After
`os.fork()` (multiprocessing's "fork" start method, a forked Dask worker) the child holds a copy
whose charges the parent never sees; so a charge made in any process other than the one that
created the accountant is refused (BudgetExceededError, nothing released), as pickling it to a
spawned process is. Spend in the owning process and hand workers only what has been released.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dp.validation import PrivacyParameterError, check_delta, check_epsilon

# Charges are summed in floating point; this slack only absorbs rounding when a budget is split
# into parts that add back to the total (e.g. 0.1 + 0.2 against 0.3), never a real overspend.
_ROUNDING_SLACK = 1e-12

NEIGHBOURING = ("replace-one", "add-remove")

# Renyi orders for the zCDP -> (epsilon, delta) conversion: dense near 1 (large rho) and up to
# 1e5 (tiny rho); the optimum of CKS Prop. 12 moves smoothly with rho, so a grid this fine loses
# under 1e-4 relative to the continuous minimum (tested).
_ORDERS = tuple(1.0 + np.geomspace(1e-3, 1e5, 1600))


class BudgetExceededError(ValueError):
    """A charge would exceed the privacy budget; nothing was released."""


@dataclass(frozen=True)
class Charge:
    """One entry of the ledger: what was spent and for what.

    An (epsilon, delta) charge has rho = 0; a zCDP charge has epsilon = delta = 0 and rho > 0.
    """

    epsilon: float
    delta: float
    label: str
    rho: float = 0.0

    @property
    def kind(self) -> str:
        return "zcdp" if self.rho > 0 else "approx"


def check_neighbouring(neighbouring) -> str:
    """Return the neighbour relation after checking it is 'replace-one' or 'add-remove'."""
    if neighbouring not in NEIGHBOURING:
        raise PrivacyParameterError(
            f"neighbouring must be 'replace-one' or 'add-remove', got {neighbouring!r}"
        )
    return neighbouring


def check_rho(rho) -> float:
    """Return rho as float after checking 0 < rho < inf."""
    if isinstance(rho, bool) or not isinstance(rho, (int, float, np.integer, np.floating)):
        raise PrivacyParameterError(f"rho must be a real number, got {rho!r}")
    value = float(rho)
    if not (value > 0 and math.isfinite(value)):
        raise PrivacyParameterError(f"rho must be a finite number > 0, got {rho!r}")
    return value


def resolve_neighbouring(neighbouring, budget, default: str = "replace-one") -> str:
    """Return the relation a release must be calibrated for: the explicit one, else the budget's,
    else `default` (replace-one, the papers' relation for records; dp.queries passes add-remove,
    the histogram papers' "one count changes by 1").

    An explicit relation that differs from the budget's is refused: the ledger's charges would
    otherwise mix guarantees for different neighbours.
    """
    if budget is None:
        return check_neighbouring(default if neighbouring is None else neighbouring)
    if neighbouring is not None and check_neighbouring(neighbouring) != budget.neighbouring:
        raise PrivacyParameterError(
            f"neighbouring={neighbouring!r} differs from the budget's {budget.neighbouring!r}; "
            "every charge of one budget must hold for the same neighbour relation"
        )
    return budget.neighbouring


def sensitivity_for(neighbouring: str, *, replace_one: float, add_remove: float) -> float:
    """Return the sensitivity that goes with `neighbouring`, given its value under each relation."""
    return replace_one if check_neighbouring(neighbouring) == "replace-one" else add_remove


def contribution_sensitivity(bound: float, neighbouring: str) -> float:
    """Return the sensitivity of a sum whose terms have norm <= bound (one term per record).

    Add-remove changes the sum by one term (bound); replace-one swaps a term for another
    (2 * bound, reached by opposite terms). Holds for any norm.
    """
    return sensitivity_for(neighbouring, replace_one=2.0 * bound, add_remove=bound)


def zcdp_rho(l2_sensitivity: float, sigma: float) -> float:
    """Return rho = D^2 / (2 sigma^2) of the Gaussian mechanism (Bun-Steinke 2016, Prop. 1.6)."""
    return l2_sensitivity * l2_sensitivity / (2.0 * sigma * sigma)


@lru_cache(maxsize=4096)
def zcdp_epsilon(rho: float, delta: float) -> float:
    """Return the smallest epsilon such that rho-zCDP implies (epsilon, delta)-DP (CKS 2020 Cor. 13).

    Computed by dp-accounting's RdpAccountant on a ZCDpEvent over a dense order grid; inf when
    delta = 0 and rho > 0 (zCDP alone never gives pure DP).
    """
    if rho <= 0:
        return 0.0
    if delta <= 0:
        return math.inf
    # why lazy: dp_accounting loads only for a zCDP -> (epsilon, delta) conversion
    from dp_accounting import ZCDpEvent
    from dp_accounting.rdp import RdpAccountant

    accountant = RdpAccountant(orders=_ORDERS)
    accountant.compose(ZCDpEvent(rho))
    return float(accountant.get_epsilon(delta))


def _charges_cost(total_delta: float, charges) -> tuple[float, float]:
    """Return the (epsilon, delta) that `charges` cost together against a budget of total delta."""
    eps = sum(c.epsilon for c in charges)
    delta = sum(c.delta for c in charges)
    rho = sum(c.rho for c in charges)
    if rho == 0:
        return (eps, delta)
    delta_z = total_delta - delta
    return (eps + zcdp_epsilon(rho, delta_z), delta + max(delta_z, 0.0))


def _overspend(epsilon: float, delta: float, charges) -> float:
    """Return how far `charges` exceed the budget (epsilon, delta) in epsilon (<= 0 when they fit)."""
    return _charges_cost(delta, charges)[0] - epsilon * (1 + _ROUNDING_SLACK)


def _refusal(epsilon: float, delta: float, owner: int, charges: tuple, charge: Charge):
    """Return the BudgetExceededError that adding `charge` to `charges` must raise, or None."""
    if os.getpid() != owner:
        return BudgetExceededError(
            f"this PrivacyAccountant belongs to process {owner}, not to this one "
            f"({os.getpid()}): a charge in a forked child would only reach the child's copy of "
            "the ledger, and the budget would never see it; spend from the owning process"
        )
    after = charges + (charge,)
    delta_total = sum(c.delta for c in after)
    eps_spent, delta_spent = _charges_cost(delta, charges)
    if delta_total > delta * (1 + _ROUNDING_SLACK):
        return BudgetExceededError(
            f"privacy budget exceeded: delta {charge.delta:g} requested, "
            f"{max(delta - delta_spent, 0.0):g} of {delta:g} left"
        )
    if charge.rho > 0 and delta - delta_total <= 0:
        return BudgetExceededError(
            f"a zCDP charge (rho {charge.rho:g}) needs delta > 0 left to convert to "
            f"(epsilon, delta)-DP; this budget has delta {delta:g} and "
            f"{max(delta - delta_total, 0.0):g} left"
        )
    if _overspend(epsilon, delta, after) > 0:
        asked = f"rho {charge.rho:g}" if charge.rho > 0 else f"epsilon {charge.epsilon:g}"
        return BudgetExceededError(
            f"privacy budget exceeded: {asked} requested, "
            f"{max(epsilon - eps_spent, 0.0):g} of epsilon {epsilon:g} left"
        )
    return None


def _odometer(epsilon: float, delta: float, neighbouring: str):
    """Return (read, record): the only two ways to the ledger of a new accountant.

    The totals, the owner process, the lock and the list of charges live in this closure and
    nowhere else (as an OpenDP odometer keeps its state behind its interface): `read` returns a
    snapshot (the totals and a tuple of the charges), `record` checks a charge against the totals
    and appends it under the lock, or raises BudgetExceededError. Nothing can remove a charge.
    """
    charges: list[Charge] = []
    lock = threading.Lock()
    owner = os.getpid()

    def read():
        with lock:
            return epsilon, delta, neighbouring, owner, tuple(charges)

    def record(charge: Charge) -> Charge:
        with lock:
            error = _refusal(epsilon, delta, owner, tuple(charges), charge)
            if error is not None:
                raise error
            charges.append(charge)
        return charge

    return read, record


class PrivacyAccountant:
    """A shared ledger of privacy charges against a total (epsilon, delta); refuses overspending.

    `spend` charges (epsilon, delta) by basic composition; `spend_zcdp` charges rho, composed in
    zCDP and converted at the delta left (module docstring). `neighbouring` ("replace-one" or
    "add-remove") is the relation every charge is valid for.

    The ledger is not an attribute: it lives in a closure (`_odometer`) that only `spend` and
    `spend_zcdp` append to, after the check; the instance holds nothing else and refuses new or
    changed attributes, so no caller can clear, shorten or rewrite what was spent.
    """

    __slots__ = ("_read", "_record")

    def __init__(self, epsilon: float, delta: float = 0.0, *, neighbouring: str = "replace-one"):
        read, record = _odometer(
            check_epsilon(epsilon), check_delta(delta), check_neighbouring(neighbouring)
        )
        object.__setattr__(self, "_read", read)
        object.__setattr__(self, "_record", record)

    def __setattr__(self, name, value):
        raise AttributeError(f"a {type(self).__name__} is read-only: {name!r} cannot be set")

    def __delattr__(self, name):
        raise AttributeError(f"a {type(self).__name__} is read-only: {name!r} cannot be deleted")

    # --- read-only totals and ledger -------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        """The total epsilon this accountant allows (fixed at construction)."""
        return self._read()[0]

    @property
    def delta(self) -> float:
        """The total delta this accountant allows (fixed at construction)."""
        return self._read()[1]

    @property
    def neighbouring(self) -> str:
        """The neighbour relation every charge holds for (fixed at construction)."""
        return self._read()[2]

    @property
    def ledger(self) -> tuple[Charge, ...]:
        """The charges so far, oldest first: a tuple snapshot (the ledger itself is unreachable)."""
        return self._read()[4]

    # --- a ledger is shared, never copied ------------------------------------------------------
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError(
            "a PrivacyAccountant is a shared ledger and cannot be pickled: spend from it in the "
            "process that owns it (e.g. the Dask client), not on a worker holding a copy"
        )

    # --- totals ----------------------------------------------------------------------------
    def cost(self, charges) -> tuple[float, float]:
        """Return the (epsilon, delta) that `charges` (Charge entries) cost together."""
        return _charges_cost(self.delta, tuple(charges))

    @property
    def spent(self) -> tuple[float, float]:
        """Return (epsilon, delta) charged so far, the zCDP part converted (module docstring)."""
        return self.cost(self.ledger)

    @property
    def spent_rho(self) -> float:
        """Return the total rho of the zCDP charges."""
        return sum(c.rho for c in self.ledger)

    @property
    def remaining(self) -> tuple[float, float]:
        """Return (epsilon, delta) still available (never negative)."""
        eps, delta = self.spent
        return (max(self.epsilon - eps, 0.0), max(self.delta - delta, 0.0))

    @property
    def remaining_rho(self) -> float:
        """Return the largest rho that `spend_zcdp` would still accept (0 if none)."""
        # why lazy: scipy.optimize loads only for this root search
        from scipy.optimize import brentq

        epsilon, delta, _, _, charges = self._read()
        if delta - sum(c.delta for c in charges) <= 0:
            return 0.0
        if _overspend(epsilon, delta, charges + (Charge(0.0, 0.0, "", 1e-300),)) > 0:
            return 0.0

        def slack(rho):
            return _overspend(epsilon, delta, charges + (Charge(0.0, 0.0, "", rho),))

        hi = 1.0
        while slack(hi) <= 0:
            hi *= 4.0
        rho = brentq(slack, 0.0, hi, xtol=1e-15, rtol=1e-12)
        while slack(rho) > 0:  # land on the feasible side of the root
            rho *= 1 - 1e-12
        return rho

    # --- checks and charges ------------------------------------------------------------------
    def _check(self, charge: Charge) -> None:
        epsilon, delta, _, owner, charges = self._read()
        error = _refusal(epsilon, delta, owner, charges, charge)
        if error is not None:
            raise error

    def check(self, epsilon: float, delta: float = 0.0) -> None:
        """Raise BudgetExceededError if (epsilon, delta) cannot be charged; charge nothing."""
        self._check(Charge(check_epsilon(epsilon), check_delta(delta), ""))

    def check_zcdp(self, rho: float) -> None:
        """Raise BudgetExceededError if a rho-zCDP charge cannot be made; charge nothing."""
        self._check(Charge(0.0, 0.0, "", check_rho(rho)))

    def spend(self, epsilon: float, delta: float = 0.0, label: str = "") -> Charge:
        """Charge (epsilon, delta) and return the ledger entry; raise if it does not fit."""
        return self._record(Charge(check_epsilon(epsilon), check_delta(delta), str(label)))

    def spend_zcdp(self, rho: float, label: str = "") -> Charge:
        """Charge rho (zCDP) and return the ledger entry; raise if it does not fit."""
        return self._record(Charge(0.0, 0.0, str(label), check_rho(rho)))

    def __repr__(self) -> str:
        eps, delta = self.spent
        return (
            f"{type(self).__name__}(epsilon={self.epsilon:g}, delta={self.delta:g}, "
            f"neighbouring={self.neighbouring!r}; spent=({eps:g}, {delta:g}))"
        )


def __getattr__(name: str):
    if name == "PrivacyBudget":  # the ledger has one name: PrivacyAccountant
        warnings.warn(
            "PrivacyBudget is deprecated; use PrivacyAccountant (the same class)",
            FutureWarning,
            stacklevel=2,
        )
        return PrivacyAccountant
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
