"""The seeds' name for the accountant: `PrivacyBudget` is `dp.accounting.PrivacyAccountant`."""

from dp.accounting import BudgetExceededError, Charge, PrivacyAccountant, PrivacyBudget

__all__ = ["BudgetExceededError", "Charge", "PrivacyAccountant", "PrivacyBudget"]
