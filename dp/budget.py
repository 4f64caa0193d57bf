"""A privacy budget with basic sequential composition (Dwork-Roth Thm 3.16)."""

from __future__ import annotations

from dataclasses import dataclass

from dp.validation import check_delta, check_epsilon

# Charges are summed in floating point; this slack only absorbs rounding when a budget is split
# into parts that add back to the total (e.g. 0.1 + 0.2 against 0.3), never a real overspend.
_ROUNDING_SLACK = 1e-12


class BudgetExceededError(ValueError):
    """A charge would exceed the privacy budget; nothing was released."""


@dataclass(frozen=True)
class Charge:
    """One entry of the ledger: what was spent and for what."""

    epsilon: float
    delta: float
    label: str


class PrivacyBudget:
    """Total (epsilon, delta) that mechanisms may spend; an overspend raises before any release.

    Sequential composition: k mechanisms that are (eps_i, delta_i)-DP on the same data are
    (sum eps_i, sum delta_i)-DP together. Once spent, the budget refuses every further charge.
    """

    def __init__(self, epsilon: float, delta: float = 0.0):
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self.ledger: list[Charge] = []

    @property
    def spent(self) -> tuple[float, float]:
        """Return (epsilon, delta) charged so far."""
        return (sum(c.epsilon for c in self.ledger), sum(c.delta for c in self.ledger))

    @property
    def remaining(self) -> tuple[float, float]:
        """Return (epsilon, delta) still available (never negative)."""
        eps, delta = self.spent
        return (max(self.epsilon - eps, 0.0), max(self.delta - delta, 0.0))

    def check(self, epsilon: float, delta: float = 0.0) -> None:
        """Raise BudgetExceededError if (epsilon, delta) cannot be charged; charge nothing."""
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        eps_spent, delta_spent = self.spent
        if eps_spent + epsilon > self.epsilon * (1 + _ROUNDING_SLACK):
            raise BudgetExceededError(
                f"privacy budget exceeded: epsilon {epsilon:g} requested, "
                f"{max(self.epsilon - eps_spent, 0.0):g} of {self.epsilon:g} left"
            )
        if delta > 0 and delta_spent + delta > self.delta * (1 + _ROUNDING_SLACK):
            raise BudgetExceededError(
                f"privacy budget exceeded: delta {delta:g} requested, "
                f"{max(self.delta - delta_spent, 0.0):g} of {self.delta:g} left"
            )

    def spend(self, epsilon: float, delta: float = 0.0, label: str = "") -> Charge:
        """Charge (epsilon, delta) and return the ledger entry; raise if it does not fit."""
        self.check(epsilon, delta)
        charge = Charge(float(epsilon), float(delta), label)
        self.ledger.append(charge)
        return charge

    def __repr__(self) -> str:
        eps, delta = self.spent
        return f"PrivacyBudget(epsilon={self.epsilon:g}, delta={self.delta:g}; spent=({eps:g}, {delta:g}))"
