"""Deprecated module: the accountant lives in dp.accounting as `PrivacyAccountant`.

`PrivacyBudget` (the seeds' name for the same class) still resolves here, with a FutureWarning.
"""

import warnings

from dp.accounting import BudgetExceededError, Charge, PrivacyAccountant

__all__ = ["BudgetExceededError", "Charge", "PrivacyAccountant"]


def __getattr__(name: str):
    if name == "PrivacyBudget":  # the ledger has one name: PrivacyAccountant
        warnings.warn(
            "PrivacyBudget is deprecated; use dp.PrivacyAccountant (the same class)",
            FutureWarning,
            stacklevel=2,
        )
        return PrivacyAccountant
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
