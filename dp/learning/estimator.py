"""PrivateLogisticRegression: a scikit-learn estimator around minimize_private."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from dp.learning.api import minimize_private


class PrivateLogisticRegression(ClassifierMixin, BaseEstimator):
    """Binary L2-regularized logistic regression trained by a private gradient method (thesis ch. 4).

    No intercept (as the thesis' model): add a constant column if you need one. `accountant` is a
    dp.PrivacyBudget shared across clones and refits (each fit charges it); None gives every fit
    a fresh budget of (epsilon, delta). `history_` is f at each iterate, computed on the training
    data without noise: for plots and f - f*, not for release.
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
        """Fit on (X, y) with two classes; sets coef_, classes_, history_, privacy_spent_; returns self."""
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2:
            raise ValueError(f"PrivateLogisticRegression is binary; y has {len(self.classes_)} classes "
                             "(use sklearn's OneVsRestClassifier for more)")
        signs = np.where(y == self.classes_[1], 1.0, -1.0)
        result = minimize_private(
            X, signs, method=self.method, epsilon=self.epsilon,
            delta=0.0 if self.delta is None else self.delta, n_iter=self.n_iter, beta=self.beta,
            batch_size=self.batch_size, clip=self.clip, reg=self.reg, loss="logistic",
            accountant=self.accountant, random_state=self.random_state,
        )
        self.coef_ = result.x.reshape(1, -1)
        self.intercept_ = np.zeros(1)
        self.history_ = result.history
        self.n_iter_ = result.n_iter
        self.privacy_spent_ = (result.privacy_spent.epsilon, result.privacy_spent.delta)
        self.result_ = result
        return self

    def decision_function(self, X):
        """Return x . coef for each row."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_[0]

    def predict_proba(self, X):
        """Return [P(class 0), P(class 1)] for each row."""
        p = 1.0 / (1.0 + np.exp(-np.clip(self.decision_function(X), -700, 700)))
        return np.column_stack([1 - p, p])

    def predict(self, X):
        """Return the more probable class of each row."""
        return self.classes_[(self.decision_function(X) > 0).astype(int)]
