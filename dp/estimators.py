"""scikit-learn style estimators for private precision matrices (Su et al. Alg. 1 DP-RP, Alg. 2 DP-AGL).

Privacy: every private fit charges its (epsilon, delta) to a PrivacyAccountant before any noise
is drawn: the `budget` given (shared, never copied: sklearn's clone and cross-validation keep the
same object, so k fits charge it k times and a spent budget refuses the next fit) or, without
one, a fresh accountant of exactly (epsilon, delta). `privacy_spent_` is what the fit charged.
The number of clipped rows is data and is not exposed (dp.covariance).
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import BaseEstimator

from dp.accounting import PrivacyAccountant, resolve_neighbouring
from dp.covariance import private_covariance, project_psd
from dp.graphical_lasso import admm_graphical_lasso
from dp.model_selection import cross_validate_alpha, neg_log_likelihood
from dp.ridge_precision import ridge_precision
from dp.validation import (
    DataWarning, check_alpha, check_data, check_epsilon, check_mechanism_delta, check_positive, constant_columns,
)


class _PrivatePrecision(BaseEstimator):
    """Shared fit: check everything, release a private S~ once, then post-process it."""

    _estimator_name = ""

    def _check_params(self):
        """Return (alpha or 'cv', epsilon, delta); raises before anything is computed or released."""
        if isinstance(self.alpha, str):
            if self.alpha != "cv":
                raise ValueError(f"alpha must be a number >= 0 or 'cv', got {self.alpha!r}")
            if self.epsilon is not None:
                raise ValueError(
                    "alpha='cv' is only available without privacy (epsilon=None): choosing alpha "
                    "on the private data would spend budget; choose it on public data instead"
                )
            alpha = "cv"
        else:
            alpha = check_alpha(self.alpha)
        if self.epsilon is None:
            return alpha, None, 0.0
        epsilon = check_epsilon(self.epsilon)
        delta = check_mechanism_delta(self.mechanism, self.delta)
        check_positive(self.clip, "clip")
        resolve_neighbouring(self.neighbouring, self.budget)
        return alpha, epsilon, delta

    def _budget(self, epsilon, delta):
        """Return the accountant this fit charges: the shared `budget` or a fresh (epsilon, delta) one."""
        if self.budget is not None:
            return self.budget
        return PrivacyAccountant(epsilon, delta, neighbouring=resolve_neighbouring(self.neighbouring, None))

    def fit(self, X, y=None):
        """Fit on rows of X (records); sets precision_, covariance_, privacy_spent_, ... and returns self."""
        alpha, epsilon, delta = self._check_params()
        X = check_data(X, min_rows=2)
        for col in constant_columns(X):
            warnings.warn(f"column {col} of X is constant: the estimators assume zero-mean columns, and "
                          "a constant zero column leaves the graphical lasso unbounded", DataWarning, stacklevel=2)
        if alpha == "cv":
            alpha, _, _ = cross_validate_alpha(X, estimator=self._estimator_name, **self._cv_kwargs())
        self._check_alpha_value(alpha)
        budget = self._budget(epsilon, delta) if epsilon is not None else None
        first_charge = len(budget.ledger) if budget is not None else 0
        released = private_covariance(
            X, epsilon, delta, mechanism=self.mechanism, clip=self.clip, calibration=self.calibration,
            random_state=self.random_state, budget=budget,
        )
        self.alpha_ = alpha
        self.sample_covariance_ = released.covariance
        self.noise_scale_ = released.release.noise_scale if released.release else 0.0
        self.privacy_spent_ = budget.cost(budget.ledger[first_charge:]) if budget is not None else (0.0, 0.0)
        self.precision_ = self._solve(released.covariance, alpha)
        self.covariance_ = np.linalg.inv(self.precision_)
        return self

    def score(self, X, y=None):
        """Return the mean Gaussian log-likelihood of rows of X under precision_ (zero mean)."""
        X = check_data(X)
        S = X.T @ X / X.shape[0]
        p = S.shape[0]
        return -0.5 * (neg_log_likelihood(self.precision_, S) + p * np.log(2 * np.pi))


class PrivateRidgePrecision(_PrivatePrecision):
    """DP-RP (Su et al. Alg. 1): ridge precision (eq. 3.1) of a privately released S~.

    epsilon=None gives the non-private estimator. Laplace noise is epsilon-DP, Gaussian noise
    (epsilon, delta)-DP, under `neighbouring` ("replace-one", the paper's, or "add-remove"; the
    budget's relation when a budget is given) with rows clipped to L2 norm <= clip.
    """

    _estimator_name = "ridge"

    def __init__(self, alpha=0.01, epsilon=None, delta=0.0, mechanism="laplace", clip=1.0,
                 calibration="analytic", random_state=None, budget=None, neighbouring=None):
        self.alpha = alpha
        self.epsilon = epsilon
        self.delta = delta
        self.mechanism = mechanism
        self.clip = clip
        self.calibration = calibration
        self.random_state = random_state
        self.budget = budget
        self.neighbouring = neighbouring

    def _cv_kwargs(self):
        return {}

    def _check_alpha_value(self, alpha):
        if alpha <= 0:
            raise ValueError(f"the ridge precision needs alpha > 0, got {alpha!r}")

    def _solve(self, S, alpha):
        self.n_iter_ = 0  # closed form
        return ridge_precision(S, alpha)


class PrivateGraphicalLasso(_PrivatePrecision):
    """DP-AGL (Su et al. Alg. 2): graphical lasso by ADMM on a privately released S~.

    epsilon=None gives the non-private estimator; the l1 penalty skips the diagonal unless
    penalize_diagonal=True (scikit-learn's convention). See PrivateRidgePrecision for privacy.

    A noisy S~ is often indefinite, and then the graphical lasso can be unbounded below (e.g. a
    negative diagonal entry with an unpenalized diagonal): ADMM never converges. With
    project_psd=True (default) S~ is first projected onto {S >= floor I} (dp.covariance.project_psd),
    a post-processing that costs no privacy. project_psd=False runs Alg. 2 literally, as the paper.
    """

    _estimator_name = "glasso"

    def __init__(self, alpha=0.01, epsilon=None, delta=0.0, mechanism="laplace", clip=1.0,
                 calibration="analytic", rho=None, tol=1e-5, max_iter=1000, penalize_diagonal=False,
                 adaptive_rho=True, project_psd=True, random_state=None, budget=None, neighbouring=None):
        self.alpha = alpha
        self.epsilon = epsilon
        self.delta = delta
        self.mechanism = mechanism
        self.clip = clip
        self.calibration = calibration
        self.rho = rho
        self.tol = tol
        self.max_iter = max_iter
        self.penalize_diagonal = penalize_diagonal
        self.adaptive_rho = adaptive_rho
        self.project_psd = project_psd
        self.random_state = random_state
        self.budget = budget
        self.neighbouring = neighbouring

    def _solver_kwargs(self):
        return dict(rho=self.rho, tol=self.tol, max_iter=self.max_iter,
                    penalize_diagonal=self.penalize_diagonal, adaptive_rho=self.adaptive_rho)

    def _cv_kwargs(self):
        return self._solver_kwargs()

    def _check_alpha_value(self, alpha):
        pass

    def _solve(self, S, alpha):
        if self.project_psd and self.epsilon is not None:
            S = project_psd(S)
        result = admm_graphical_lasso(S, alpha, **self._solver_kwargs())
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.solver_message_ = result.message
        self.objective_ = result.objective
        return result.precision
