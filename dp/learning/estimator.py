"""PrivateLogisticRegression: a scikit-learn estimator around minimize_private."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from dp._random import SharedRandomState, as_random_bits
from dp.budget import PrivacyBudget
from dp.learning.accounting import check_run_epsilon
from dp.learning.api import minimize_private
from dp.learning.defaults import public_bounds, with_intercept_column
from dp.validation import PrivacyLeakWarning, check_delta


class PrivateLogisticRegression(SharedRandomState, ClassifierMixin, BaseEstimator):
    """L2-regularized logistic regression trained by a private gradient method (thesis ch. 4).

    `classes` is the public label set (as diffprivlib's): classes_, the shape of coef_, the number
    of one-vs-rest runs and every per-class epsilon come from it alone, and a label outside it is
    refused. classes=None takes the labels from the data, which is not private (one record with a
    new label changes all of the above): it warns with dp.PrivacyLeakWarning, as diffprivlib does.
    Two classes: one private run. K > 2 classes: one-vs-rest, K runs at (epsilon/K, delta/K) each,
    so the fit is (epsilon, delta)-DP by sequential composition (the thesis treats MNIST as one
    class vs the rest). fit_intercept=True (the default, as scikit-learn's and diffprivlib's)
    appends the public constant b = R / 2 to every row scaled to norm <= R
    (dp.learning.defaults.with_intercept_column, which says why R / 2): the privacy analysis is
    unchanged but for the row bound sqrt(R^2 + b^2) = 1.118 R, which then sets the default clip,
    the smoothness bound and every noise scale. The intercept b w_b is penalized like the other
    weights (as liblinear's): the objective stays 2 reg-strongly convex in every coordinate, which
    DP-MAG's kappa and stage plan need. fit_intercept=False is the thesis' model.
    data_norm (R), clip, method=None, n_iter=None and reg=None as in dp.minimize_private (defaults
    chosen from n, d, epsilon and delta by dp.learning.defaults; K > 2 classes: at epsilon / K). `accountant` is a dp.PrivacyBudget
    shared across clones and refits (each fit charges it); None gives every fit a fresh budget of
    (epsilon, delta). Fitted: coef_, intercept_, classes_, privacy_spent_, n_iter_, results_ (per class).
    """

    def __init__(
        self,
        method=None,
        epsilon=1.0,
        delta=None,
        beta=0.1,
        n_iter=None,
        batch_size=None,
        clip=None,
        data_norm=None,
        reg=None,
        classes=None,
        fit_intercept=True,
        accountant=None,
        random_state=None,
    ):
        self.method = method
        self.epsilon = epsilon
        self.delta = delta
        self.beta = beta
        self.n_iter = n_iter
        self.batch_size = batch_size
        self.clip = clip
        self.data_norm = data_norm
        self.reg = reg
        self.classes = classes
        self.fit_intercept = fit_intercept
        self.accountant = accountant
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # noise at epsilon / K per class is meant to cost accuracy: sklearn's 0.83 training bar does not apply
        tags.classifier_tags.poor_score = True
        return tags

    def _public_classes(self, y) -> np.ndarray:
        """Return the label set: `classes` (labels outside it refused) or, with a warning, y's own."""
        if self.classes is None:
            warnings.warn(
                "classes was not given: the label set is taken from the training labels, which "
                "is not private; pass classes=[...] (the labels known without looking at the data)",
                PrivacyLeakWarning,
                stacklevel=3,
            )
            classes = np.unique(y)
            if len(classes) < 2:
                raise ValueError(f"need samples of at least 2 classes; got {len(classes)} class")
            return classes
        classes = np.unique(np.asarray(self.classes))
        if len(classes) < 2 or len(classes) != len(self.classes):
            raise ValueError(f"classes must list at least 2 distinct labels, got {self.classes!r}")
        if not np.all(np.isin(y, classes)):
            # names the public classes only: which record or label is outside would be a release
            raise ValueError(f"y holds a label outside classes={classes.tolist()!r}")
        return classes

    def fit(self, X, y):
        """Fit on (X, y); sets coef_, intercept_, classes_, privacy_spent_, n_iter_, results_ and returns self."""
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_ = self._public_classes(y)
        targets = self.classes_[1:] if len(self.classes_) == 2 else self.classes_
        epsilon = check_run_epsilon(self.epsilon, self.accountant)
        delta = 0.0 if self.delta is None else check_delta(self.delta)
        data_norm = public_bounds(self.clip, self.data_norm, stacklevel=3)[1]
        if self.fit_intercept:
            X, constant, data_norm = with_intercept_column(X, data_norm)
        budget = self.accountant
        if budget is None and epsilon != math.inf:
            budget = PrivacyBudget(epsilon, delta)
        bits = as_random_bits(self.random_state)  # one source for all K runs: independent noise
        results = [
            minimize_private(
                X,
                np.where(y == target, 1.0, -1.0),
                method=self.method,
                epsilon=epsilon / len(targets),
                delta=delta / len(targets),
                n_iter=self.n_iter,
                beta=self.beta,
                batch_size=self.batch_size,
                clip=self.clip,
                data_norm=data_norm,
                reg=self.reg,
                loss="logistic",
                accountant=budget,
                random_state=bits,
            )
            for target in targets
        ]
        weights = np.vstack([r.x for r in results])
        self.coef_ = weights[:, : self.n_features_in_]
        self.intercept_ = (
            constant * weights[:, -1] if self.fit_intercept else np.zeros(len(targets))
        )
        self.n_iter_ = results[0].n_iter
        self.privacy_spent_ = (
            sum(r.privacy_spent.epsilon for r in results),
            sum(r.privacy_spent.delta for r in results),
        )
        self.results_ = results
        return self

    def decision_function(self, X):
        """Return X @ coef_.T + intercept_ (one column per class for K > 2, a vector for two classes)."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        scores = X @ self.coef_.T + self.intercept_
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_proba(self, X):
        """Return class probabilities (one-vs-rest scores normalized for K > 2)."""
        scores = self.decision_function(X)
        p = expit(scores)
        if p.ndim == 1:
            return np.column_stack([1 - p, p])
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X):
        """Return the most probable class of each row."""
        scores = self.decision_function(X)
        index = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[index]
