"""scikit-learn style estimators for private precision matrices (Su et al. Alg. 1 DP-RP, Alg. 2 DP-AGL).

Privacy: every private fit charges its (epsilon, delta) to a PrivacyAccountant before any noise
is drawn: the `budget` given (shared, never copied: sklearn's clone and cross-validation keep the
same object, so k fits charge it k times and a spent budget refuses the next fit) or, without
one, a fresh accountant of exactly (epsilon, delta). `privacy_spent_` is what the fit charged.
The number of clipped rows is data and is not exposed (dp.covariance).

Defaults a practitioner can rely on:
- epsilon defaults to 1.0 and warns (PrivacyLeakWarning) when left implicit, as diffprivlib
  does; epsilon=None, given explicitly, is the non-private estimator (no noise, no clipping) and
  refuses a budget (it would charge nothing).
- clip left at its default (1.0) warns: the bound should come from public knowledge.
- Fits without a shared budget: each spends from a fresh accountant, so several fits on the same
  rows (a refit, cross-validation, a grid search: sklearn clones the estimator for each) add up
  and are recorded nowhere. The second and every later such fit in a process warns
  (PrivacyLeakWarning); pass one `budget=dp.PrivacyAccountant(total)` to every fit on the same rows.
- `score(X)` is the Gaussian log-likelihood of X computed exactly, i.e. a non-private statistic
  of X: a private estimator refuses it unless told the rows are public (`score(X, public=True)`).
  That also stops GridSearchCV from choosing a hyper-parameter by a non-private score.
All these warnings and refusals depend on the arguments only, never on the data.
"""

from __future__ import annotations

import math
import threading
import warnings

import numpy as np
from sklearn.base import BaseEstimator

from dp._random import SharedRandomState
from dp.accounting import PrivacyAccountant, resolve_neighbouring
from dp.covariance import private_covariance, project_psd
from dp.graphical_lasso import admm_graphical_lasso
from dp.model_selection import cross_validate_alpha, neg_log_likelihood
from dp.ridge_precision import ridge_precision
from dp.validation import (
    DEFAULT_CLIP,
    DEFAULT_EPSILON,
    DataWarning,
    PrivacyLeakWarning,
    PrivacyParameterError,
    check_alpha,
    check_data,
    check_epsilon,
    check_mechanism_delta,
    check_positive,
    constant_columns,
    is_implicit,
    warn_implicit_clip,
)

# fits that charged a fresh accountant (no shared budget) in this process; see the module docstring
_unshared_fits = 0
_unshared_lock = threading.Lock()


def _note_unshared_fit(refit: bool, epsilon: float, stacklevel: int) -> None:
    """Count a fit without a shared budget; warn from the second one on (data-independent)."""
    global _unshared_fits
    with _unshared_lock:
        _unshared_fits += 1
        count = _unshared_fits
    if refit or count > 1:
        what = (
            "this estimator was fitted before"
            if refit
            else f"this is private fit number {count} in this process"
        )
        warnings.warn(
            f"{what} without a shared budget: each such fit spends its epsilon ({epsilon:g} here) from "
            "a fresh accountant, so fits on the same rows (a refit, cross-validation, a grid search) "
            "add up and are recorded nowhere; pass budget=dp.PrivacyAccountant(total) to every fit on "
            "the same data",
            PrivacyLeakWarning,
            stacklevel=stacklevel,
        )


class _PrivatePrecision(SharedRandomState, BaseEstimator):
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
            if self.budget is not None:
                raise PrivacyParameterError(
                    "a budget was given to a non-private fit (epsilon=None): it would charge nothing; "
                    "give an epsilon, or drop the budget"
                )
            return alpha, None, 0.0
        if (
            isinstance(self.epsilon, (int, float))
            and not isinstance(self.epsilon, bool)
            and math.isinf(self.epsilon)
        ):
            raise PrivacyParameterError(
                "epsilon=inf is not a private fit; use epsilon=None for the non-private estimator "
                "(it refuses a budget: nothing would be charged)"
            )
        epsilon = check_epsilon(self.epsilon)
        delta = check_mechanism_delta(self.mechanism, self.delta)
        check_positive(self.clip, "clip")
        resolve_neighbouring(self.neighbouring, self.budget)
        if is_implicit(self.epsilon):
            warnings.warn(
                f"epsilon not given: fitting privately with epsilon={float(self.epsilon):g}, the default "
                "(an earlier release defaulted to epsilon=None, a NON-private fit: pass epsilon=None "
                "for that); pass epsilon explicitly to silence this warning",
                PrivacyLeakWarning,
                stacklevel=3,
            )
        warn_implicit_clip(self.clip, stacklevel=4)
        return alpha, epsilon, delta

    def _budget(self, epsilon, delta):
        """Return the accountant this fit charges: the shared `budget` or a fresh (epsilon, delta) one."""
        if self.budget is not None:
            return self.budget
        return PrivacyAccountant(
            epsilon, delta, neighbouring=resolve_neighbouring(self.neighbouring, None)
        )

    def fit(self, X, y=None):
        """Fit on rows of X (records); sets precision_, covariance_, privacy_spent_, ... and returns self.

        Preconditions of a private fit (checked, but the refusal is not private, and nothing
        warns about the values): X is a finite 2-D array with at least 2 rows; columns are
        centred (zero mean) and none is constant, which the caller ensures from public knowledge.
        """
        alpha, epsilon, delta = self._check_params()
        private = epsilon is not None
        X = check_data(X, min_rows=2, private=private)
        if not private:  # a non-private fit may talk about the data; a private one may not
            for col in constant_columns(X):
                warnings.warn(
                    f"column {col} of X is constant: the estimators assume zero-mean columns, "
                    "and a constant zero column leaves the graphical lasso unbounded",
                    DataWarning,
                    stacklevel=2,
                )
        if alpha == "cv":
            alpha, _, _ = cross_validate_alpha(
                X, estimator=self._estimator_name, **self._cv_kwargs()
            )
        self._check_alpha_value(alpha)
        if private and self.budget is None:
            _note_unshared_fit(
                hasattr(self, "privacy_spent_") and self.privacy_spent_ != (0.0, 0.0),
                epsilon,
                stacklevel=3,
            )
        budget = self._budget(epsilon, delta) if private else None
        first_charge = len(budget.ledger) if budget is not None else 0
        released = (
            private_covariance(
                X,
                epsilon,
                delta,
                mechanism=self.mechanism,
                clip=float(self.clip),
                calibration=self.calibration,
                random_state=self.random_state,
                budget=budget,
                neighbouring=self.neighbouring,
                public_n=self.public_n,
                count_fraction=self.count_fraction,
            )
            if private
            else private_covariance(X, None)
        )
        self.alpha_ = alpha
        self.sample_covariance_ = released.covariance
        self.noise_scale_ = released.noise_scale
        self.privacy_spent_ = (
            budget.cost(budget.ledger[first_charge:]) if budget is not None else (0.0, 0.0)
        )
        self.precision_ = self._solve(released.covariance, alpha)
        self.covariance_ = np.linalg.inv(self.precision_)
        return self

    def score(self, X, y=None, public=False):
        """Return the mean Gaussian log-likelihood of rows of X under precision_ (zero mean).

        The value is an exact (non-private) function of X. A private estimator (epsilon not None)
        refuses unless public=True says the rows of X are public, e.g. a public held-out set;
        scikit-learn's model selection (GridSearchCV, cross_val_score) calls score on the private
        rows, so it is refused there: choose hyper-parameters on public data.
        """
        if self.epsilon is not None and not public:
            raise PrivacyParameterError(
                "score() is an exact, non-private log-likelihood of X; a private estimator refuses it "
                "unless the rows are public: call score(X, public=True) on public data (choosing "
                "hyper-parameters by score on the private rows would leak them unpaid)"
            )
        X = check_data(X)
        S = X.T @ X / X.shape[0]
        p = S.shape[0]
        return -0.5 * (neg_log_likelihood(self.precision_, S) + p * np.log(2 * np.pi))


class PrivateRidgePrecision(_PrivatePrecision):
    """DP-RP (Su et al. Alg. 1): ridge precision (eq. 3.1) of a privately released S~.

    epsilon defaults to 1.0 (with a PrivacyLeakWarning); epsilon=None, given explicitly, is the
    non-private estimator. Laplace noise is epsilon-DP, Gaussian noise (epsilon, delta)-DP, under
    `neighbouring` ("replace-one", the paper's, or "add-remove"; the budget's relation when a
    budget is given) with rows clipped to L2 norm <= clip. Under add-remove the row count is
    private: S~ is the noisy sum X^T X over `public_n` if given, else over a noisy count that takes
    `count_fraction` of epsilon (dp.covariance). See the module docstring for what warns.
    """

    _estimator_name = "ridge"

    def __init__(
        self,
        alpha=0.01,
        epsilon=DEFAULT_EPSILON,
        delta=0.0,
        mechanism="laplace",
        clip=DEFAULT_CLIP,
        calibration="analytic",
        random_state=None,
        budget=None,
        neighbouring=None,
        public_n=None,
        count_fraction=0.1,
    ):
        self.alpha = alpha
        self.epsilon = epsilon
        self.delta = delta
        self.mechanism = mechanism
        self.clip = clip
        self.calibration = calibration
        self.random_state = random_state
        self.budget = budget
        self.neighbouring = neighbouring
        self.public_n = public_n
        self.count_fraction = count_fraction

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

    epsilon=None (explicit) gives the non-private estimator; the l1 penalty skips the diagonal unless
    penalize_diagonal=True (scikit-learn's convention). See PrivateRidgePrecision for privacy.

    A noisy S~ is often indefinite, and then the graphical lasso can be unbounded below (e.g. a
    negative diagonal entry with an unpenalized diagonal): ADMM never converges. With
    project_psd=True (default) S~ is first projected onto {S >= floor I} (dp.covariance.project_psd),
    a post-processing that costs no privacy. project_psd=False runs Alg. 2 literally, as the paper.
    """

    _estimator_name = "glasso"

    def __init__(
        self,
        alpha=0.01,
        epsilon=DEFAULT_EPSILON,
        delta=0.0,
        mechanism="laplace",
        clip=DEFAULT_CLIP,
        calibration="analytic",
        rho=None,
        tol=1e-5,
        max_iter=1000,
        penalize_diagonal=False,
        adaptive_rho=True,
        project_psd=True,
        random_state=None,
        budget=None,
        neighbouring=None,
        public_n=None,
        count_fraction=0.1,
    ):
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
        self.public_n = public_n
        self.count_fraction = count_fraction

    def _solver_kwargs(self):
        return dict(
            rho=self.rho,
            tol=self.tol,
            max_iter=self.max_iter,
            penalize_diagonal=self.penalize_diagonal,
            adaptive_rho=self.adaptive_rho,
        )

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
