"""dp: differentially private covariance and precision matrix estimation (Su, Guo and Zhang).

Stands alone: it never imports `hamsi`. Noise is exact discrete Laplace / discrete Gaussian on a
fine grid (see dp.mechanisms); privacy spending goes through one shared
dp.PrivacyAccountant (alias dp.PrivacyBudget).
"""

from dp.accounting import (
    BudgetExceededError, Charge, PrivacyAccountant, PrivacyBudget, contribution_sensitivity, sensitivity_for,
    zcdp_epsilon, zcdp_rho,
)
from dp.calibration import analytic_gaussian_sigma, classical_gaussian_sigma, gaussian_delta, gaussian_sigma
from dp.covariance import PrivateCovariance, clip_rows, covariance_sensitivity, private_covariance, project_psd
from dp.estimators import PrivateGraphicalLasso, PrivateRidgePrecision
from dp.learning import PrivateLogisticRegression, minimize_private  # thesis ch. 4 private gradient methods
from dp.graphical_lasso import GraphicalLassoResult, admm_graphical_lasso, glasso_objective, graphical_lasso_path
from dp.mechanisms import Release, gaussian_mechanism, gaussian_mechanism_zcdp, laplace_mechanism
from dp.model_selection import alpha_grid, cross_validate_alpha, neg_log_likelihood
from dp.ridge_precision import ridge_objective, ridge_precision
from dp.validation import DataError, PrivacyLeakWarning, PrivacyParameterError
from dp import queries  # batches of linear queries: strategies, COA (dp.queries.optimize / answer)

__all__ = [
    "BudgetExceededError", "Charge", "PrivacyAccountant", "PrivacyBudget", "contribution_sensitivity",
    "sensitivity_for", "zcdp_epsilon", "zcdp_rho", "analytic_gaussian_sigma", "classical_gaussian_sigma",
    "gaussian_delta", "gaussian_sigma", "PrivateCovariance", "clip_rows", "covariance_sensitivity",
    "private_covariance", "project_psd", "PrivateGraphicalLasso", "PrivateRidgePrecision", "GraphicalLassoResult",
    "admm_graphical_lasso", "glasso_objective", "graphical_lasso_path", "Release",
    "gaussian_mechanism", "gaussian_mechanism_zcdp", "laplace_mechanism", "alpha_grid", "cross_validate_alpha",
    "neg_log_likelihood", "ridge_objective", "ridge_precision", "DataError", "PrivacyLeakWarning", "PrivacyParameterError",
]
