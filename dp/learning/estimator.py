"""PrivateLogisticRegression: a scikit-learn estimator around minimize_private."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from dp._random import SharedRandomState, as_random_bits
from dp.covariance import clip_rows
from dp.learning.accounting import check_run_epsilon
from dp.learning.api import ALL_METHODS, minimize_private, run_budget
from dp.learning.defaults import (
    GRAM_FRACTION,
    INTERCEPT_COLUMN,
    SCALE_FRACTION,
    private_gram_bound,
    private_row_scale,
    public_bounds,
    with_intercept_column,
)
from dp.validation import PrivacyLeakWarning, PrivacyParameterError, check_delta


@dataclass
class LogisticFit:
    """What `fit_logistic` returns: one row of coef / intercept per target, in the caller's units."""

    coef: np.ndarray  # (targets, d): the weights on the rows as given
    intercept: np.ndarray  # (targets,)
    results: list  # one PrivateMinimizeResult per target (its x on `design`)
    design: np.ndarray  # the rows the runs saw: scaled, projected, the intercept column appended
    data_norm: float  # the bound the runs used (that of `design`'s rows)
    row_scale: float  # s: the rows were divided by s (the private row scale, or R)
    gram_bound: (
        float | None
    )  # G: the private bound on lambda_max of design'design / n (None: bound^2)
    privacy_spent: tuple[float, float]


def design_matrix(X, row_scale: float, data_norm: float, fit_intercept: bool):
    """Return (rows projected onto the ball of radius R, divided by s and projected onto the unit
    ball, with the intercept column b = 1/2 when asked; b or 0; the bound of those rows).

    All of it is public arithmetic on the rows (the projections are the mechanism's clipping);
    s is either R (public) or the private row scale (a release).
    """
    scaled = clip_rows(clip_rows(np.asarray(X, dtype=np.float64), data_norm)[0] / row_scale, 1.0)[0]
    if not fit_intercept:
        return scaled, 0.0, 1.0
    return with_intercept_column(scaled, 1.0)


def uses_full_gradients(method, batch_size) -> bool:
    """Return whether the run reads every record each iteration (the default plan's DP-MAG does)."""
    needs = "optional" if method is None else ALL_METHODS.get(method, (None, None, "yes"))[2]
    return needs == "no" or (needs == "optional" and batch_size is None)


def _private_design(X, epsilon, data_norm, fit_intercept, scale_fraction, full, budget, bits):
    """Return (design, b, its row bound, s, G or None, the epsilon left for the runs): the private
    row scale s and, for full-gradient runs, the private gram bound G, each charged to `budget`
    (fit_logistic's docstring says what each costs); scale_fraction = 0 releases neither."""
    run_epsilon, row_scale, gram = epsilon, data_norm, None
    gram_epsilon = GRAM_FRACTION * epsilon if scale_fraction > 0 and full else 0.0
    if scale_fraction > 0:
        scale_epsilon = scale_fraction * epsilon
        row_scale = private_row_scale(X, data_norm, scale_epsilon, budget, bits)
        run_epsilon = epsilon if math.isinf(epsilon) else epsilon - scale_epsilon - gram_epsilon
    design, constant, bound = design_matrix(X, row_scale, data_norm, fit_intercept)
    if gram_epsilon > 0:
        # a public floor: the intercept column b alone gives lambda_max >= b^2
        floor = max(INTERCEPT_COLUMN**2 if fit_intercept else 0.0, bound**2 / design.shape[1])
        gram = private_gram_bound(design, bound, floor, gram_epsilon, budget, bits)
    return design, constant, bound, row_scale, gram, run_epsilon


def fit_logistic(
    X,
    targets,
    *,
    epsilon,
    delta,
    data_norm,
    fit_intercept=True,
    scale_fraction=SCALE_FRACTION,
    accountant=None,
    random_state=None,
    history_every=None,
    **run_options,
) -> LogisticFit:
    """Fit one private logistic regression per label vector in `targets` (each in {-1, +1}).

    The privacy of the whole fit, for replace-one neighbours (n, d, the bound R = data_norm and
    every argument public): the budget (`accountant`, or a fresh one of (epsilon, delta)) is
    checked for all of (epsilon, delta) before anything is released; then scale_fraction of
    epsilon buys the private row scale s (dp.learning.defaults.private_row_scale, 0.7 of a noisy mean
    row norm, sensitivity R / n), GRAM_FRACTION of epsilon buys, on the rows so scaled (a
    function of the data and the released s), the private bound G on their largest curvature
    lambda_max(D'D/n) (dp.learning.defaults.private_gram_bound, sensitivity bound^2 / n) that
    sets the runs' steps (full-gradient runs only: the sampled methods spend nothing on G), and
    the rest is split evenly over the K runs (dp.minimize_private at
    ((1 - scale_fraction - GRAM_FRACTION) epsilon / K, delta / K) each, on the rows divided by s
    and projected onto the unit ball, plus the intercept column). Sequential composition:
    (epsilon, delta)-DP. scale_fraction = 0 spends nothing on s or G and uses s = R and
    G = bound^2 (the public bounds). epsilon = inf (no accountant) is the non-private limit with
    the exact s and G.
    The runs' weights w are on the scaled rows, so coef = w / s and intercept = b w_b.
    """
    if not (isinstance(scale_fraction, (int, float)) and 0.0 <= scale_fraction < 1 - GRAM_FRACTION):
        raise PrivacyParameterError(
            f"scale_fraction must lie in [0, {1 - GRAM_FRACTION:g}) (the gram bound takes "
            f"{GRAM_FRACTION:g} of epsilon), got {scale_fraction!r}"
        )
    X = np.asarray(X, dtype=np.float64)
    budget = run_budget(accountant, epsilon, delta)  # refuses a relation other than replace-one
    if budget is not None:
        budget.check(epsilon, delta)  # every part fits, or none is released
    first_charge = len(budget.ledger) if budget is not None else 0
    bits = as_random_bits(random_state, stacklevel=4)  # one source for every release
    # the steps of the sampled methods follow their noise ((4.21), (4.59)) more than L: no G for them
    full = uses_full_gradients(run_options.get("method"), run_options.get("batch_size"))
    design, constant, bound, row_scale, gram, run_epsilon = _private_design(
        X, epsilon, data_norm, fit_intercept, scale_fraction, full, budget, bits
    )
    results = [
        minimize_private(
            design,
            labels,
            epsilon=run_epsilon / len(targets),
            delta=delta / len(targets),
            data_norm=bound,
            loss="logistic",
            accountant=budget,
            random_state=bits,
            history_every=history_every,
            gram_bound=gram,
            **run_options,
        )
        for labels in targets
    ]
    weights = np.vstack([r.x for r in results])
    d = X.shape[1]
    return LogisticFit(
        coef=weights[:, :d] / row_scale,
        intercept=constant * weights[:, d] if fit_intercept else np.zeros(len(targets)),
        results=results,
        design=design,
        data_norm=bound,
        row_scale=row_scale,
        gram_bound=gram,
        privacy_spent=(
            budget.cost(budget.ledger[first_charge:]) if budget is not None else (0.0, 0.0)
        ),
    )


class PrivateLogisticRegression(SharedRandomState, ClassifierMixin, BaseEstimator):
    """L2-regularized logistic regression trained by a private gradient method (thesis ch. 4).

    `classes` is the public label set (as diffprivlib's): classes_, the shape of coef_, the number
    of one-vs-rest runs and every per-class epsilon come from it alone, and a label outside it is
    refused. classes=None takes the labels from the data, which is not private (one record with a
    new label changes all of the above): it warns with dp.PrivacyLeakWarning, as diffprivlib does.
    Two classes: one private run. K > 2 classes: one-vs-rest, K runs, so the fit is
    (epsilon, delta)-DP by sequential composition (the thesis treats MNIST as one class vs the
    rest). How epsilon is split and what is released: `fit_logistic`.

    Rows are projected onto the ball of the public radius R = data_norm, then divided by a row
    scale s and projected onto the unit ball: s is private (scale_fraction of epsilon buys a
    noisy mean row norm, s is 0.7 of it: dp.learning.defaults.private_row_scale), so that the
    step sizes fit rows much shorter than R; scale_fraction=0 takes s = R. fit_intercept=True (the default, as
    scikit-learn's and diffprivlib's) appends the public constant b = 1/2 to every scaled row
    (dp.learning.defaults.with_intercept_column says why): the privacy analysis is unchanged but
    for the row bound sqrt(1 + b^2) = 1.118, which then sets the default clip, the smoothness
    bound and every noise scale. The intercept b w_b is penalized like the other weights (as
    liblinear's): the objective stays 2 reg-strongly convex in every coordinate, which DP-MAG's
    kappa and stage plan need. fit_intercept=False is the thesis' model.
    clip, method=None, n_iter=None and reg=None as in dp.minimize_private (defaults chosen from
    n, d, epsilon and delta by dp.learning.defaults, on the scaled rows). `accountant` is a
    dp.PrivacyAccountant shared across clones and refits (each fit charges it; epsilon=inf refuses
    it); None gives every fit a fresh budget of (epsilon, delta). random_state=None draws fresh
    OS entropy for every fit; a numpy Generator is shared by reference with every clone; an
    integer seed warns (dp._random). Fitted: coef_, intercept_, classes_, row_scale_ (s, a
    release), gram_bound_ (G, a release: the runs' steps use L = G / 4 + 2 reg), privacy_spent_,
    n_iter_, results_ (per class, on the scaled rows).
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
        scale_fraction=SCALE_FRACTION,
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
        self.scale_fraction = scale_fraction
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
        """Fit on (X, y); sets coef_, intercept_, classes_, privacy_spent_, n_iter_, row_scale_,
        results_ and returns self."""
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_ = self._public_classes(y)
        targets = self.classes_[1:] if len(self.classes_) == 2 else self.classes_
        epsilon = check_run_epsilon(self.epsilon, self.accountant)
        delta = 0.0 if self.delta is None else check_delta(self.delta)
        data_norm = public_bounds(self.clip, self.data_norm, stacklevel=3)[1]
        fitted = fit_logistic(
            X,
            [np.where(y == target, 1.0, -1.0) for target in targets],
            epsilon=epsilon,
            delta=delta,
            data_norm=data_norm,
            fit_intercept=self.fit_intercept,
            scale_fraction=self.scale_fraction,
            accountant=self.accountant,
            random_state=self.random_state,
            method=self.method,
            n_iter=self.n_iter,
            beta=self.beta,
            batch_size=self.batch_size,
            clip=self.clip,
            reg=self.reg,
        )
        self.coef_, self.intercept_ = fitted.coef, fitted.intercept
        self.row_scale_ = fitted.row_scale
        self.gram_bound_ = fitted.gram_bound
        self.n_iter_ = fitted.results[0].n_iter
        self.privacy_spent_ = fitted.privacy_spent
        self.results_ = fitted.results
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
