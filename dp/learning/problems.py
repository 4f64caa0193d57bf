"""Smooth, strongly convex empirical risks for the private gradient methods (thesis ch. 4).

The objective is the mean of per-record terms, f(x) = (1/n) sum_i [loss_i(x) + reg ||x||^2]; the
thesis (4.60) writes the sum, which only rescales f, its gradient and every sensitivity by n. The
private methods see a record only through its loss gradient, clipped to norm <= `clip` (thesis
section 4.4, after Abadi et al.); the regularizer's gradient 2 reg x is the same for every record
and carries no information about the data. Replacing one record of a batch of m moves the clipped
mean gradient by at most 2 clip / m in the clipping norm: that is the sensitivity S / m with
S = 2 clip (thesis (4.61): S1 = 2 sup |z|_1, S2 = 2 sup |z|_2, here after clipping).

Every row is also scaled to L2 norm <= `data_norm` = R, a public radius (as diffprivlib's
`data_norm`). The step rules need the smoothness constant L of f; lambda_max of the private X'X/n
would be a release, so they use the public bound of `smoothness_bound` instead: the Hessian is
X' W X / n + 2 reg I with 0 <= W_ii <= curvature, and lambda_max(X'X/n) <= max_i |x_i|^2 <= R^2
(the operator norm of a mean of rank-one x_i x_i' is at most the mean of their norms), so
L <= curvature R^2 + 2 reg. A caller that knows a tighter bound G on lambda_max(X'X/n) (public,
or released privately and charged, as dp.learning.defaults.private_gram_bound) passes it as
`gram_bound`: L <= curvature G + 2 reg. Step sizes never enter a sensitivity, so G moves only
the steps, never the privacy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from scipy import optimize
from scipy.special import expit

from dp.covariance import clip_rows
from dp.validation import DataError, check_positive


@dataclass
class RegularizedProblem:
    """Mean loss + reg ||x||^2 over the rows of X; subclasses give the per-record loss."""

    X: np.ndarray
    y: np.ndarray
    reg: float
    clip: float
    clip_norm: int = 2  # 1 for the Laplace methods (L1 sensitivity), 2 for the Gaussian ones
    data_norm: float = 1.0  # public radius R: every row is scaled to L2 norm <= R
    gram_bound: float | None = None  # a public bound on lambda_max(X'X/n); None: R^2
    curvature: ClassVar[float] = 1.0  # sup of the loss' second derivative along the margin
    _row_norms: np.ndarray | None = field(init=False, default=None, repr=False)

    def __post_init__(self):
        check_positive(self.clip, "clip")
        check_positive(self.data_norm, "data_norm")
        # scaled rows change the data; how many were scaled is private and is not kept
        self.X = clip_rows(self.X, self.data_norm)[0]
        if not (self.reg > 0 and math.isfinite(self.reg)):
            raise ValueError(
                f"reg must be a finite number > 0 (strong convexity), got {self.reg!r}"
            )
        if self.clip_norm not in (1, 2):
            raise ValueError(f"clip_norm must be 1 or 2, got {self.clip_norm!r}")
        if self.gram_bound is not None:
            check_positive(self.gram_bound, "gram_bound")

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    # --- per-record loss, given by subclasses -------------------------------------------------
    def losses(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def loss_slopes(self, x: np.ndarray, rows) -> np.ndarray:
        """Return dloss_i/d(margin) for the given rows (the loss gradient is slope * X_i)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def loss_curvatures(self, x: np.ndarray) -> np.ndarray:
        """Return the second derivative of every loss_i along its margin."""
        raise NotImplementedError  # pragma: no cover - abstract

    # --- objective, exact gradient and Hessian (non-private: for f*, history and tests) --------
    def objective(self, x: np.ndarray) -> float:
        """Return f(x) = mean_i loss_i(x) + reg ||x||^2 (thesis (4.60), divided by n)."""
        return float(np.mean(self.losses(x)) + self.reg * x @ x)

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """Return the exact (unclipped) gradient of f."""
        return self.X.T @ self.loss_slopes(x, slice(None)) / self.n + self.regularizer_gradient(x)

    def hessian(self, x: np.ndarray) -> np.ndarray:
        """Return the Hessian of f."""
        weights = self.loss_curvatures(x)
        return (self.X.T * weights) @ self.X / self.n + 2 * self.reg * np.eye(self.d)

    # --- what a private method sees ------------------------------------------------------------
    def _clip_factors(self, slopes: np.ndarray, rows) -> np.ndarray:
        """Return min(1, clip / |grad_i|) for the rows; |grad_i| = |slope_i| |X_i| for these losses."""
        if self._row_norms is None:
            self._row_norms = np.linalg.norm(self.X, ord=self.clip_norm, axis=1)
        norms = np.abs(slopes) * self._row_norms[rows]
        return np.minimum(1.0, self.clip / np.maximum(norms, 1e-300))

    def per_example_gradients(self, x: np.ndarray, rows) -> np.ndarray:
        """Return the loss gradients of the given rows, each clipped to norm <= clip."""
        slopes = self.loss_slopes(x, rows)
        return self.X[rows] * (slopes * self._clip_factors(slopes, rows))[:, None]

    def clipped_loss_gradient(
        self, x: np.ndarray, rows, divisor: float | None = None
    ) -> np.ndarray:
        """Return the sum of clipped loss gradients over `rows` / divisor (default divisor: |rows|)."""
        slopes = self.loss_slopes(x, rows)
        weights = slopes * self._clip_factors(slopes, rows)
        count = weights.shape[0] if divisor is None else divisor
        return self.X[rows].T @ weights / count

    def regularizer_gradient(self, x: np.ndarray) -> np.ndarray:
        """Return 2 reg x, the same for every record: it carries nothing about the data."""
        return 2 * self.reg * x

    def clipped_gradient(self, x: np.ndarray, rows, divisor: float | None = None) -> np.ndarray:
        """Return the clipped mean loss gradient over `rows` plus 2 reg x."""
        return self.clipped_loss_gradient(x, rows, divisor) + self.regularizer_gradient(x)

    def sensitivity(self, norm: int, batch_size: float) -> float:
        """Return the replace-one sensitivity, in the given norm, of the clipped mean over a batch."""
        per_record = 2.0 * self.clip
        if norm == 1 and self.clip_norm == 2:
            per_record *= math.sqrt(self.d)  # |v|_1 <= sqrt(d) |v|_2
        return per_record / batch_size

    # --- public constants the step rules use -------------------------------------------------
    def gram_norm_bound(self) -> float:
        """Return the bound on lambda_max(X'X/n) the steps use: gram_bound if given (at most R^2), else R^2."""
        worst = self.data_norm**2
        return worst if self.gram_bound is None else min(worst, self.gram_bound)

    def smoothness_bound(self) -> float:
        """Return the public bound L = curvature G + 2 reg on the smoothness of f, G the bound on
        lambda_max(X'X/n) (R^2, or a tighter public or privately released one; module docstring)."""
        return float(self.curvature * self.gram_norm_bound() + 2 * self.reg)

    def strong_convexity(self) -> float:
        """Return mu = 2 reg, a data-independent lower bound on the curvature of f."""
        return 2.0 * self.reg

    def initial_gap_bound(self) -> float:  # pragma: no cover - abstract
        """Return a public upper bound on f(0) - f*."""
        raise NotImplementedError

    def solve(self, tol: float = 1e-10) -> tuple[np.ndarray, float]:
        """Return (x*, f*) from a non-private Newton trust-region solve to gradient norm <= tol."""
        res = optimize.minimize(
            self.objective,
            np.zeros(self.d),
            jac=self.gradient,
            hess=self.hessian,
            method="trust-exact",
            options={"gtol": tol, "maxiter": 1000},
        )
        x = res.x
        for _ in range(5):  # Newton polish: trust-exact can stop a little short of gtol
            g = self.gradient(x)
            if np.linalg.norm(g) <= tol:
                break
            x = x - np.linalg.solve(self.hessian(x), g)
        return x, self.objective(x)


class LogisticProblem(RegularizedProblem):
    """L2-regularized logistic regression, labels z in {-1, +1} (thesis (4.60))."""

    curvature: ClassVar[float] = 0.25  # sigma'(m) = p (1 - p) <= 1/4

    def __post_init__(self):
        super().__post_init__()
        if not np.all(np.isin(self.y, (-1.0, 1.0))):
            raise DataError("logistic regression needs labels in {-1, +1}")

    def losses(self, x):
        return np.logaddexp(0.0, -self.y * (self.X @ x))

    def loss_slopes(self, x, rows):
        z = self.y[rows]
        return -z * expit(-z * (self.X[rows] @ x))

    def loss_curvatures(self, x):
        p = expit(self.X @ x)
        return p * (1 - p)

    def initial_gap_bound(self):
        """f(0) = log 2 for every data set and f* >= 0, so log 2 bounds f(0) - f*."""
        return math.log(2.0)


class LeastSquaresProblem(RegularizedProblem):
    """Ridge least squares, loss_i = (X_i x - y_i)^2 / 2, targets clipped to [-1, 1] (public range)."""

    def __post_init__(self):
        super().__post_init__()
        self.y = np.clip(self.y, -1.0, 1.0)

    def losses(self, x):
        return 0.5 * (self.X @ x - self.y) ** 2

    def loss_slopes(self, x, rows):
        return self.X[rows] @ x - self.y[rows]

    def loss_curvatures(self, x):
        return np.ones(self.n)

    def initial_gap_bound(self):
        """f(0) = mean y^2 / 2 <= 1/2 for targets in [-1, 1], and f* >= 0."""
        return 0.5


PROBLEMS = {"logistic": LogisticProblem, "least-squares": LeastSquaresProblem}


def loss_problem(loss: str) -> type[RegularizedProblem]:
    """Return the problem class of `loss` ('logistic' or 'least-squares')."""
    if loss not in PROBLEMS:
        raise ValueError(f"loss must be one of {sorted(PROBLEMS)}, got {loss!r}")
    return PROBLEMS[loss]


def make_problem(
    loss: str,
    X,
    y,
    reg: float,
    clip: float,
    clip_norm: int,
    data_norm: float,
    gram_bound: float | None = None,
) -> RegularizedProblem:
    """Return the problem for `loss` ('logistic' or 'least-squares') on float64 copies of X, y,
    the rows of X scaled to L2 norm <= data_norm; gram_bound bounds lambda_max(X'X/n) (None: R^2)."""
    problem_type = loss_problem(loss)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).ravel()
    if X.ndim != 2 or y.shape[0] != X.shape[0]:
        raise DataError(f"X must be 2-D with one target per row, got X {X.shape} and y {y.shape}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise DataError("X and y must be finite")
    return problem_type(
        X,
        y,
        float(reg),
        float(clip),
        clip_norm,
        float(data_norm),
        None if gram_bound is None else float(gram_bound),
    )
