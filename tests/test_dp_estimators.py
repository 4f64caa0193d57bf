"""DP-RP and DP-AGL: closed forms, ADMM vs scikit-learn, KKT conditions, estimator contract."""

import math
import warnings

import numpy as np
import pytest
from sklearn.base import clone

import dp
from dp.simulation import model_precision, normalize_rows_by_max_norm, sample_gaussian

# the integer seeds here are deliberate (reproducible tests): their PrivacyLeakWarning is expected
pytestmark = pytest.mark.filterwarnings("ignore:random_state is an integer seed:UserWarning")


@pytest.fixture(scope="module")
def ar2_data():
    X = sample_gaussian(model_precision(3, 8), 300, random_state=0)
    return normalize_rows_by_max_norm(X)


@pytest.mark.parametrize("cls", [dp.PrivateRidgePrecision, dp.PrivateGraphicalLasso])
@pytest.mark.parametrize("mechanism,delta", [("laplace", 0.0), ("gaussian", 1e-3)])
def test_private_estimators_report_spend_and_are_reproducible(ar2_data, cls, mechanism, delta):
    X = ar2_data * 3  # some rows exceed the clipping bound
    est = cls(
        alpha=0.01, epsilon=0.8, delta=delta, mechanism=mechanism, clip=1.0, random_state=5
    ).fit(X)
    again = clone(est).fit(X)
    assert np.array_equal(est.precision_, again.precision_)
    assert est.privacy_spent_ == (0.8, delta)
    assert np.all(np.linalg.eigvalsh(est.precision_) > 0)
    assert np.allclose(est.sample_covariance_, est.sample_covariance_.T)
    assert est.get_params()["epsilon"] == 0.8
    assert est.set_params(epsilon=2.0).epsilon == 2.0


def test_estimators_share_a_budget_and_refuse_overspend(ar2_data):
    budget = dp.PrivacyAccountant(1.0)
    dp.PrivateRidgePrecision(alpha=0.01, epsilon=0.6, budget=budget, random_state=0).fit(ar2_data)
    est = dp.PrivateGraphicalLasso(alpha=0.01, epsilon=0.6, budget=budget, random_state=0)
    with pytest.raises(dp.BudgetExceededError):
        est.fit(ar2_data)
    assert not hasattr(est, "precision_")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(alpha=-0.1),
        dict(alpha=float("nan")),
        dict(alpha="cv", epsilon=1.0),
        dict(alpha="auto"),
        dict(epsilon=0.0),
        dict(epsilon=-2.0),
        dict(epsilon=1.0, delta=1.0),
        dict(epsilon=1.0, delta=-1e-9),
        dict(epsilon=1.0, mechanism="gaussian"),
        dict(epsilon=1.0, mechanism="exponential"),
        dict(epsilon=1.0, delta=1e-5),
        dict(epsilon=1.0, neighbouring="swap"),
        dict(epsilon=1.0, budget=dp.PrivacyAccountant(5.0), neighbouring="add-remove"),
    ],
)
def test_bad_parameters_raise_and_release_nothing(ar2_data, kwargs):
    params = dict(alpha=0.01)
    params.update(kwargs)
    est = dp.PrivateGraphicalLasso(**params)
    with pytest.raises(ValueError):
        est.fit(ar2_data)
    assert not hasattr(est, "precision_") and not hasattr(est, "sample_covariance_")


def test_ridge_needs_positive_alpha(ar2_data):
    with pytest.raises(ValueError, match="alpha > 0"):
        dp.PrivateRidgePrecision(alpha=0.0, epsilon=None).fit(ar2_data)


def test_non_finite_data_is_refused(ar2_data):
    X = ar2_data.copy()
    X[4, 2] = np.inf
    with pytest.raises(dp.DataError, match="row 4, column 2"):
        dp.PrivateRidgePrecision(alpha=0.1, epsilon=None).fit(X)
    # a private fit says what is wrong, not where (the message is a release too)
    with pytest.raises(dp.DataError, match="non-finite") as info:
        dp.PrivateRidgePrecision(alpha=0.1, epsilon=1.0, clip=1.0).fit(X)
    assert "row 4" not in str(info.value) and "column 2" not in str(info.value)


def test_score_is_gaussian_log_likelihood(ar2_data):
    est = dp.PrivateRidgePrecision(alpha=0.05, epsilon=None).fit(ar2_data)
    from scipy.stats import multivariate_normal

    ll = multivariate_normal(np.zeros(8), est.covariance_).logpdf(ar2_data).mean()
    assert est.score(ar2_data) == pytest.approx(ll)


def test_dp_package_does_not_import_hamsi():
    import subprocess
    import sys

    code = "import sys, dp; dp.PrivateGraphicalLasso; assert not any(m == 'hamsi' or m.startswith('hamsi.') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- budgets shared across fits, released attributes, scale-free stopping -------------------------


def _released_only(estimator, X, y=None):
    """A scorer that reads only the released estimate (post-processing), never the held-out rows."""
    return float(np.trace(estimator.precision_))


def test_cross_validation_charges_the_shared_budget_once_per_fit(ar2_data):
    from sklearn.model_selection import cross_val_score

    b = dp.PrivacyAccountant(5.0)
    est = dp.PrivateRidgePrecision(alpha=0.05, epsilon=1, clip=1.0, budget=b, random_state=0)
    scores = cross_val_score(est, ar2_data, cv=5, scoring=_released_only)
    assert np.all(np.isfinite(scores))
    assert len(b.ledger) == 5 and b.spent == pytest.approx((5.0, 0.0))
    # the budget is spent: the next cross-validation is refused, not run on a copy
    with pytest.raises(dp.BudgetExceededError):
        cross_val_score(est, ar2_data, cv=5, scoring=_released_only, error_score="raise")
    # with sklearn's default error_score the refused fits fail (nan), they are never free
    b3 = dp.PrivacyAccountant(3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = cross_val_score(
            clone(est).set_params(budget=b3), ar2_data, cv=5, scoring=_released_only
        )
    assert np.isnan(scores).sum() == 2 and len(b3.ledger) == 3


def test_privacy_spent_reports_what_the_fit_charged(ar2_data):
    b = dp.PrivacyAccountant(2.0, 1e-4)
    b.spend(0.5)
    est = dp.PrivateGraphicalLasso(
        alpha=0.01, epsilon=0.7, delta=5e-5, mechanism="gaussian", budget=b, random_state=0
    ).fit(ar2_data)
    assert est.privacy_spent_ == (0.7, 5e-5)
    assert b.spent == pytest.approx((1.2, 5e-5))
    assert b.ledger[-1].label == "covariance (gaussian)"


def test_no_fitted_attribute_tells_neighbours_apart_by_clipping(ar2_data):
    # neighbours: one row replaced by a row far outside the clipping bound
    X = ar2_data * 0.9
    X2 = X.copy()
    X2[0] = 10.0
    fits = [
        dp.PrivateRidgePrecision(alpha=0.05, epsilon=1.0, random_state=3).fit(D) for D in (X, X2)
    ]
    for est in fits:
        assert not hasattr(est, "n_clipped_")
    exact = {
        k for k, v in vars(fits[0]).items() if k.endswith("_") and not isinstance(v, np.ndarray)
    }
    assert exact  # alpha_, noise_scale_, privacy_spent_: public or paid for
    for key in exact:
        assert getattr(fits[0], key) == getattr(fits[1], key), key


def test_constant_column_is_named_in_a_warning_only_when_not_private(ar2_data):
    X = ar2_data.copy()
    X[:, 2] = 0.0
    with pytest.warns(dp.validation.DataWarning, match="column 2 of X is constant"):
        dp.PrivateRidgePrecision(alpha=0.05, epsilon=None).fit(X)
    # a private fit does not look: no constant column is a documented precondition
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dp.PrivateRidgePrecision(
            alpha=0.05, epsilon=1.0, clip=1.0, budget=dp.PrivacyAccountant(1.0)
        ).fit(X)


def test_laplace_refuses_a_delta_it_would_ignore(ar2_data):
    est = dp.PrivateRidgePrecision(alpha=0.05, epsilon=1.0, delta=1e-5)
    with pytest.raises(dp.PrivacyParameterError, match="delta=1e-05 is not used by the laplace"):
        est.fit(ar2_data)
    assert not hasattr(est, "precision_")


def test_add_remove_noise_never_depends_on_the_private_row_count(ar2_data):
    # calibrating the noise to c^2 / n with the data's own n (a scale
    # that differs between neighbours) would put it sqrt(2) below replace-one
    kw = dict(alpha=0.05, epsilon=1.0, delta=1e-5, mechanism="gaussian", clip=1.0, random_state=0)
    n = len(ar2_data)
    fits = {
        m: dp.PrivateRidgePrecision(**kw, neighbouring="add-remove", budget=None).fit(ar2_data[:m])
        for m in (n // 3, n)
    }
    sums = [
        dp.covariance.private_covariance(
            ar2_data[:m],
            0.9,
            1e-5,
            mechanism="gaussian",
            clip=1.0,
            neighbouring="add-remove",
            random_state=0,
        ).release
        for m in (n // 3, n)
    ]
    assert (
        sums[0].noise_scale == sums[1].noise_scale
    )  # the noisy sum's noise: p, c and epsilon only
    for est in fits.values():
        assert est.privacy_spent_ == pytest.approx((1.0, 1e-5))  # count and sum together
    # a public n (known without looking at the data) divides the sum instead: c^2 / public_n in L2
    replace = dp.PrivateRidgePrecision(**kw).fit(ar2_data)
    public = dp.PrivateRidgePrecision(**kw, neighbouring="add-remove", public_n=n).fit(ar2_data)
    assert replace.noise_scale_ / public.noise_scale_ == pytest.approx(math.sqrt(2), rel=1e-5)
    assert dp.PrivateRidgePrecision(**kw, neighbouring="add-remove", public_n=10 * n).fit(
        ar2_data
    ).noise_scale_ == pytest.approx(public.noise_scale_ / 10, rel=1e-5)
    shared = dp.PrivacyAccountant(3.0, 1e-4, neighbouring="add-remove")
    est = dp.PrivateRidgePrecision(**kw, budget=shared).fit(ar2_data)
    assert [c.label for c in shared.ledger] == [
        "covariance row count (laplace)",
        "covariance sum (gaussian)",
    ]
    assert est.privacy_spent_ == pytest.approx((1.0, 1e-5)) and shared.ledger[
        0
    ].epsilon == pytest.approx(0.1)


def test_public_n_is_refused_where_it_means_nothing(ar2_data):
    with pytest.raises(dp.PrivacyParameterError, match="public_n is for add-remove"):
        dp.PrivateRidgePrecision(alpha=0.05, epsilon=1.0, clip=1.0, public_n=300).fit(ar2_data)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(dp.PrivacyParameterError, match="public_n"):
            dp.PrivateRidgePrecision(
                alpha=0.05, epsilon=1.0, clip=1.0, neighbouring="add-remove", public_n=bad
            ).fit(ar2_data)
    with pytest.raises(dp.PrivacyParameterError, match="count_fraction"):
        dp.PrivateRidgePrecision(
            alpha=0.05, epsilon=1.0, clip=1.0, neighbouring="add-remove", count_fraction=1.0
        ).fit(ar2_data)


# --- defaults and habits that must not leak without a word ----------------------------------------


@pytest.mark.parametrize("cls", [dp.PrivateRidgePrecision, dp.PrivateGraphicalLasso])
def test_a_private_estimator_is_private_by_default_and_says_so(ar2_data, cls):
    # item 7: the default used to be epsilon=None: no noise, no clipping, no warning
    with pytest.warns(dp.PrivacyLeakWarning, match="epsilon not given") as record:
        est = cls(alpha=0.05, budget=dp.PrivacyAccountant(1.0)).fit(ar2_data)
    assert est.privacy_spent_ == (1.0, 0.0) and est.noise_scale_ > 0
    assert any("clip not given" in str(w.message) for w in record)  # item 8
    assert est.get_params()["epsilon"] == 1.0 and repr(est.get_params()["epsilon"]) == "1.0"
    # the implicit default survives clone (it still warns); an explicit 1.0 does not warn
    with pytest.warns(dp.PrivacyLeakWarning, match="epsilon not given"):
        clone(est).set_params(budget=dp.PrivacyAccountant(1.0)).fit(ar2_data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cls(alpha=0.05, epsilon=1.0, clip=1.0, budget=dp.PrivacyAccountant(1.0)).fit(ar2_data)
        cls(alpha=0.05, epsilon=None).fit(ar2_data)  # explicitly non-private: no privacy warning


def test_the_clip_warning_does_not_depend_on_the_data(ar2_data):
    messages = []
    for X in (ar2_data * 0.01, ar2_data * 100):  # all rows inside the bound, all far outside
        with pytest.warns(dp.PrivacyLeakWarning) as record:
            dp.PrivateRidgePrecision(
                alpha=0.05, epsilon=1.0, budget=dp.PrivacyAccountant(1.0), random_state=0
            ).fit(X)
        messages.append(sorted(str(w.message) for w in record))
    assert messages[0] == messages[1] and any("clip not given" in m for m in messages[0])
    with pytest.warns(dp.PrivacyLeakWarning, match="clip not given"):
        dp.private_covariance(ar2_data, 1.0, random_state=0)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(epsilon=None, budget="budget"), "non-private fit"),
        (dict(epsilon=float("inf"), budget="budget"), "epsilon=inf"),
        (dict(epsilon=float("inf")), "epsilon=inf"),
    ],
)
def test_a_budget_with_a_non_private_run_is_refused(ar2_data, kwargs, match):
    budget = dp.PrivacyAccountant(1.0)
    kwargs = {k: (budget if v == "budget" else v) for k, v in kwargs.items()}
    est = dp.PrivateRidgePrecision(alpha=0.05, clip=1.0, **kwargs)
    with pytest.raises(dp.PrivacyParameterError, match=match):
        est.fit(ar2_data)
    assert budget.ledger == () and not hasattr(est, "precision_")
    with pytest.raises(dp.PrivacyParameterError, match="non-private release"):
        dp.private_covariance(ar2_data, None, budget=budget)


def test_refits_without_a_shared_budget_warn(ar2_data, monkeypatch):
    # item 6: each fit without a budget spends from a fresh accountant, recorded nowhere
    import dp.estimators as estimators

    monkeypatch.setattr(estimators, "_unshared_fits", 0)
    est = dp.PrivateRidgePrecision(alpha=0.05, epsilon=1.0, clip=1.0)  # no seed: no seed warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.fit(ar2_data)  # the first unshared fit of the process: nothing to say
    with pytest.warns(dp.PrivacyLeakWarning, match="fitted before without a shared budget"):
        est.fit(ar2_data)
    with pytest.warns(dp.PrivacyLeakWarning, match="private fit number 3 in this process"):
        clone(est).fit(ar2_data)
    # a shared budget records every fit: no warning
    shared = dp.PrivacyAccountant(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clone(est).set_params(budget=shared).fit(ar2_data)
        clone(est).set_params(budget=shared).fit(ar2_data)
    assert len(shared.ledger) == 2


def test_grid_search_on_private_rows_is_stopped(ar2_data, monkeypatch):
    # item 6: GridSearchCV(PrivateRidgePrecision(epsilon=1)) gave 10 fits fresh budgets and chose by
    # a non-private score; now the unshared fits warn and the score is refused
    from sklearn.model_selection import GridSearchCV

    import dp.estimators as estimators

    monkeypatch.setattr(estimators, "_unshared_fits", 0)
    est = dp.PrivateRidgePrecision(epsilon=1.0, clip=1.0)
    with pytest.raises(dp.PrivacyParameterError, match="score"):
        GridSearchCV(est, {"alpha": [0.01, 0.1]}, cv=2, error_score="raise").fit(ar2_data)
    # even with a scorer that reads only the released estimates, four fits on fresh budgets warn
    with pytest.warns(dp.PrivacyLeakWarning, match="without a shared budget"):
        GridSearchCV(est, {"alpha": [0.01, 0.1]}, cv=2, scoring=_released_only, refit=False).fit(
            ar2_data
        )


def test_score_refuses_private_rows_unless_told_they_are_public(ar2_data):
    est = dp.PrivateRidgePrecision(
        alpha=0.05, epsilon=1.0, clip=1.0, budget=dp.PrivacyAccountant(1.0), random_state=0
    ).fit(ar2_data[:200])
    with pytest.raises(dp.PrivacyParameterError, match="public=True"):
        est.score(ar2_data[200:])
    public = ar2_data[200:]  # say, a public held-out set
    from scipy.stats import multivariate_normal

    ll = multivariate_normal(np.zeros(8), est.covariance_).logpdf(public).mean()
    assert est.score(public, public=True) == pytest.approx(ll)


@pytest.mark.parametrize("state", ["unset", "generator"])
def test_clones_fitted_on_two_folds_never_share_noise(ar2_data, state):
    # the same noise in two folds would release the exact difference of their clipped second moments
    A, B = ar2_data[: len(ar2_data) // 2], ar2_data[len(ar2_data) // 2 : 2 * (len(ar2_data) // 2)]
    exact = A.T @ A / len(A) - B.T @ B / len(B)  # rows already within the clip bound below
    clip = float(np.linalg.norm(ar2_data, axis=1).max()) + 1.0

    def fold_difference(random_state):
        base = dp.PrivateRidgePrecision(
            alpha=0.1,
            epsilon=1.0,
            clip=clip,
            budget=dp.PrivacyAccountant(2.0),
            random_state=random_state,
        )
        return clone(base).fit(A).sample_covariance_ - clone(base).fit(B).sample_covariance_

    with pytest.warns(dp.PrivacyLeakWarning, match="the same seed gives the same noise"):
        assert np.allclose(fold_difference(5), exact)  # what an integer seed gives away
    shared = np.random.default_rng()
    for _ in range(3):
        difference = fold_difference(shared if state == "generator" else None)
        assert not np.allclose(difference, exact, atol=1e-9)
