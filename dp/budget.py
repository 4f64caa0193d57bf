"""Deprecated module: the accountant lives in dp.accounting as `PrivacyAccountant`.

`PrivacyBudget` (the seeds' name for the same class) still resolves here, with a FutureWarning.
"""

from dp import accounting
from dp.accounting import BudgetExceededError, Charge, PrivacyAccountant

__all__ = ["BudgetExceededError", "Charge", "PrivacyAccountant"]


def __getattr__(name: str):
    if name == "PrivacyBudget":  # dp.accounting's deprecation, one message for both modules
        return accounting.__getattr__(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
