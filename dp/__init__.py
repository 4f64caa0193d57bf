"""dp: differential privacy, from exact noise to private estimators. Its library stands alone: only
`dp.commands` (its `hamsi` sub-commands) imports hamsi, for the CLI helpers.

- Mechanisms and accounting: Laplace and Gaussian mechanisms (also zCDP) that add exact discrete
  Laplace / discrete Gaussian noise on a fine grid (dp.mechanisms, dp.discrete; Canonne, Kamath
  and Steinke 2020), their calibration (dp.calibration: classical and analytic Gaussian), and one
  shared, read-only ledger that every release charges before drawing noise
  (dp.PrivacyAccountant: pure, (epsilon, delta) and zCDP charges;
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

import importlib
import warnings

# Loaded now: the function has its module's name, and importing the module dp.ridge_precision
# (first, at any later time) would bind dp.ridge_precision to the module instead of a lazy function.
from dp.ridge_precision import ridge_objective, ridge_precision

# Every other public name loads on first use (PEP 562), so `import dp.commands.glasso` (which the
# CLI does to list its commands) does not pay for SciPy, scikit-learn and dp_accounting.
_LAZY = {
    "BudgetExceededError": "dp.accounting",
    "Charge": "dp.accounting",
    "PrivacyAccountant": "dp.accounting",
    "contribution_sensitivity": "dp.accounting",
    "sensitivity_for": "dp.accounting",
    "zcdp_epsilon": "dp.accounting",
    "zcdp_rho": "dp.accounting",
    "analytic_gaussian_sigma": "dp.calibration",
    "classical_gaussian_sigma": "dp.calibration",
    "gaussian_delta": "dp.calibration",
    "gaussian_sigma": "dp.calibration",
    "PrivateCovariance": "dp.covariance",
    "clip_rows": "dp.covariance",
    "covariance_sensitivity": "dp.covariance",
    "private_covariance": "dp.covariance",
    "project_psd": "dp.covariance",
    "PrivateGraphicalLasso": "dp.estimators",
    "PrivateRidgePrecision": "dp.estimators",
    "GraphicalLassoResult": "dp.graphical_lasso",
    "admm_graphical_lasso": "dp.graphical_lasso",
    "glasso_objective": "dp.graphical_lasso",
    "graphical_lasso_path": "dp.graphical_lasso",
    "Release": "dp.mechanisms",
    "gaussian_mechanism": "dp.mechanisms",
    "gaussian_mechanism_zcdp": "dp.mechanisms",
    "laplace_mechanism": "dp.mechanisms",
    "alpha_grid": "dp.model_selection",
    "cross_validate_alpha": "dp.model_selection",
    "neg_log_likelihood": "dp.model_selection",
    "DataError": "dp.validation",
    "PrivacyLeakWarning": "dp.validation",
    "PrivacyParameterError": "dp.validation",
    "PrivateLogisticRegression": "dp.learning",
    "minimize_private": "dp.learning",
    "queries": "dp.queries",
}


def __getattr__(name):
    if name == "PrivacyBudget":  # deprecated: the ledger has one name
        warnings.warn(
            "dp.PrivacyBudget is deprecated; use dp.PrivacyAccountant (the same class)",
            FutureWarning,
            stacklevel=2,
        )
        return __getattr__("PrivacyAccountant")
    if name not in _LAZY:
        raise AttributeError(f"module 'dp' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    value = module if _LAZY[name] == f"dp.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [*_LAZY, "ridge_objective", "ridge_precision"]
