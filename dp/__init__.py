"""dp: differential privacy, from exact noise to private estimators. Stands alone: it never imports `hamsi`.

- Mechanisms and accounting: Laplace and Gaussian mechanisms (also zCDP) that add exact discrete
  Laplace / discrete Gaussian noise on a fine grid (dp.mechanisms, dp.discrete; Canonne, Kamath
  and Steinke 2020), their calibration (dp.calibration: classical and analytic Gaussian), and one
  shared, read-only ledger that every release charges before drawing noise
  (dp.PrivacyAccountant, alias dp.PrivacyBudget: pure, (epsilon, delta) and zCDP charges;
  replace-one or add-remove neighbours; scoped to the process that made it).
- Covariance and precision matrices (Su, Guo and Zhang): the private second-moment matrix
  (dp.private_covariance) and the estimators built on it, DP-RP and DP-AGL
  (dp.PrivateRidgePrecision, dp.PrivateGraphicalLasso; private by default, epsilon 1.0).
- Private learning (Kuru's thesis ch. 4): private gradient methods for logistic regression and
  least squares (dp.minimize_private, dp.PrivateLogisticRegression; dp.learning).
- Linear queries: batches of linear queries over a histogram through an optimized strategy
  (dp.queries: COA, LRM, hierarchical, wavelet, ...; dp.queries.answer).

What each release reveals (its neighbour relation, sensitivity, what is public, and what result
objects hold that is not private) is listed in docs/privacy.md. Warnings about privacy
parameters left implicit are dp.PrivacyLeakWarning; they depend on the arguments, never on data.
"""

from dp import queries  # batches of linear queries: strategies, COA (dp.queries.optimize / answer)
from dp.accounting import (
    BudgetExceededError,
    Charge,
    PrivacyAccountant,
    PrivacyBudget,
    contribution_sensitivity,
    sensitivity_for,
    zcdp_epsilon,
    zcdp_rho,
)
from dp.calibration import (
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    gaussian_delta,
    gaussian_sigma,
)
from dp.covariance import (
    PrivateCovariance,
    clip_rows,
    covariance_sensitivity,
    private_covariance,
    project_psd,
)
from dp.estimators import PrivateGraphicalLasso, PrivateRidgePrecision
from dp.graphical_lasso import (
    GraphicalLassoResult,
    admm_graphical_lasso,
    glasso_objective,
    graphical_lasso_path,
)
from dp.learning import (  # thesis ch. 4 private gradient methods
    PrivateLogisticRegression,
    minimize_private,
)
from dp.mechanisms import Release, gaussian_mechanism, gaussian_mechanism_zcdp, laplace_mechanism
from dp.model_selection import alpha_grid, cross_validate_alpha, neg_log_likelihood
from dp.ridge_precision import ridge_objective, ridge_precision
from dp.validation import DataError, PrivacyLeakWarning, PrivacyParameterError

__all__ = [
    "BudgetExceededError",
    "Charge",
    "PrivacyAccountant",
    "PrivacyBudget",
    "contribution_sensitivity",
    "sensitivity_for",
    "zcdp_epsilon",
    "zcdp_rho",
    "analytic_gaussian_sigma",
    "classical_gaussian_sigma",
    "gaussian_delta",
    "gaussian_sigma",
    "PrivateCovariance",
    "clip_rows",
    "covariance_sensitivity",
    "private_covariance",
    "project_psd",
    "PrivateGraphicalLasso",
    "PrivateRidgePrecision",
    "GraphicalLassoResult",
    "admm_graphical_lasso",
    "glasso_objective",
    "graphical_lasso_path",
    "Release",
    "gaussian_mechanism",
    "gaussian_mechanism_zcdp",
    "laplace_mechanism",
    "alpha_grid",
    "cross_validate_alpha",
    "neg_log_likelihood",
    "ridge_objective",
    "ridge_precision",
    "DataError",
    "PrivacyLeakWarning",
    "PrivacyParameterError",
    "PrivateLogisticRegression",
    "minimize_private",
    "queries",
]
