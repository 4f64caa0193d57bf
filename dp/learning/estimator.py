"""PrivateLogisticRegression: a scikit-learn estimator around minimize_private."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from dp._random import as_random_bits
from dp.budget import PrivacyBudget
from dp.learning.api import minimize_private
from dp.validation import check_delta, check_epsilon


class PrivateLogisticRegression(ClassifierMixin, BaseEstimator):
    """L2-regularized logistic regression trained by a private gradient method (thesis ch. 4).

    Two classes: one private run. K > 2 classes: one-vs-rest, K runs at (epsilon/K, delta/K) each,
    so the fit is (epsilon, delta)-DP by sequential composition (the thesis treats MNIST as one
    class vs the rest). No intercept (as the thesis' model): add a constant column if you need one.
    `accountant` is a dp.PrivacyBudget shared across clones and refits (each fit charges it); None
    gives every fit a fresh budget of (epsilon, delta). `history_` is f at each iterate of the
    (first) run, computed on the training data without noise: for plots and f - f*, not release.
    """

    def __init__(self, method="dp-gdws", epsilon=1.0, delta=None, beta=0.1, n_iter=1000,
                 batch_size=None, clip=2.0, reg=0.01, accountant=None, random_state=None):
        self.method = method
        self.epsilon = epsilon
        self.delta = delta
        self.beta = beta
        self.n_iter = n_iter
        self.batch_size = batch_size
        self.clip = clip
        self.reg = reg
        self.accountant = accountant
        self.random_state = random_state

    def fit(self, X, y):
        """Fit on (X, y); sets coef_, classes_, history_, privacy_spent_, n_iter_ and returns self."""
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) < 2:
            raise ValueError(f"need samples of at least 2 classes; got {len(self.classes_)} class")
        targets = self.classes_[1:] if len(self.classes_) == 2 else self.classes_
        epsilon = self.epsilon if self.epsilon == math.inf else check_epsilon(self.epsilon)
        delta = 0.0 if self.delta is None else check_delta(self.delta)
        budget = self.accountant
        if budget is None and epsilon != math.inf:
            budget = PrivacyBudget(epsilon, delta)
        bits = as_random_bits(self.random_state)  # one source for all K runs: independent noise
        results = [
            minimize_private(
                X, np.where(y == target, 1.0, -1.0), method=self.method, epsilon=epsilon / len(targets),
                delta=delta / len(targets), n_iter=self.n_iter, beta=self.beta, batch_size=self.batch_size,
                clip=self.clip, reg=self.reg, loss="logistic", accountant=budget, random_state=bits,
            )
            for target in targets
        ]
        self.coef_ = np.vstack([r.x for r in results])
        self.intercept_ = np.zeros(len(targets))
        self.history_ = results[0].history
        self.n_iter_ = results[0].n_iter
        self.privacy_spent_ = (sum(r.privacy_spent.epsilon for r in results),
                               sum(r.privacy_spent.delta for r in results))
        self.results_ = results
        return self

    def decision_function(self, X):
        """Return X @ coef_.T (one column per class for K > 2, a vector for two classes)."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        scores = X @ self.coef_.T
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
