"""PrivateLogisticRegression: sklearn compatibility, a shared accountant, accuracy in the non-private limit."""

import math

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

import dp


def blobs(n=400, d=4, seed=0, classes=2):
    rng = np.random.default_rng(seed)
    centres = 2.0 * rng.standard_normal((classes, d))
    labels = rng.integers(classes, size=n)
    return centres[labels] + rng.standard_normal((n, d)), labels


def test_passes_sklearns_estimator_checks():
    failures = [r for r in check_estimator(dp.PrivateLogisticRegression(n_iter=20), on_fail=None)
                if r["status"] == "failed"]
    assert not failures, [(r["check_name"], str(r["exception"])[:200]) for r in failures]


def test_clone_and_cross_validation_share_one_accountant():
    X, y = blobs()
    budget = dp.PrivacyBudget(1.0)
    model = dp.PrivateLogisticRegression(epsilon=0.2, n_iter=30, accountant=budget, random_state=0)
    assert clone(model).accountant is budget
    cross_val_score(model, X, y, cv=3)
    assert budget.spent[0] == pytest.approx(0.6)
    with pytest.raises(dp.BudgetExceededError):
        cross_val_score(model, X, y, cv=3, error_score="raise")


def test_non_private_limit_matches_sklearn_in_a_pipeline():
    X, y = blobs(600)
    reg = 0.01
    ours = make_pipeline(StandardScaler(), dp.PrivateLogisticRegression(
        method="dp-nag", epsilon=math.inf, n_iter=400, reg=reg, clip=1e6)).fit(X, y)
    sk = make_pipeline(StandardScaler(), LogisticRegression(C=1 / (2 * len(y) * reg), fit_intercept=False,
                                                          tol=1e-12)).fit(X, y)
    np.testing.assert_allclose(ours[-1].coef_, sk[-1].coef_, atol=1e-5)
    assert ours.score(X, y) == pytest.approx(sk.score(X, y))
    proba = ours.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert ours[-1].history_[-1] <= ours[-1].history_[0]


def test_multiclass_is_one_vs_rest_at_epsilon_over_k():
    X, y = blobs(600, classes=3)
    budget = dp.PrivacyBudget(3.0)
    model = dp.PrivateLogisticRegression(epsilon=1.5, n_iter=50, accountant=budget, random_state=0).fit(X, y)
    assert model.coef_.shape == (3, 4)
    assert [c.epsilon for c in budget.ledger] == pytest.approx([0.5, 0.5, 0.5])
    assert model.privacy_spent_ == pytest.approx((1.5, 0.0))
    exact = dp.PrivateLogisticRegression(method="dp-nag", epsilon=math.inf, n_iter=300).fit(X, y)
    assert model.score(X, y) > exact.score(X, y) - 0.1 > 0.5  # chance is 1/3


def test_privacy_spent_and_history_after_a_private_fit():
    X, y = blobs()
    model = dp.PrivateLogisticRegression(method="dp-sgdws-gauss", epsilon=1.0, delta=1e-5, batch_size=20,
                                         n_iter=100, random_state=0).fit(X, y)
    assert model.privacy_spent_ == pytest.approx((1.0, 1e-5))
    assert model.history_.shape == (101,) and model.n_iter_ == 100
    assert model.score(X, y) > 0.7
