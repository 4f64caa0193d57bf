"""Defaults of the private gradient methods, chosen from public quantities only.

`public_bounds` resolves the two bounds every step rule and noise scale rests on,
`with_intercept_column` turns R into the bound of rows augmented by a public constant; `default_reg`
picks lambda and `default_plan` the method and the iteration count T from (n, d, epsilon, delta,
C, R), never from the data.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from dp.covariance import clip_rows
from dp.learning.accounting import zcdp_rho
from dp.learning.mag import first_stage_length
from dp.validation import PrivacyLeakWarning, check_positive

DEFAULT_DATA_NORM = 1.0


@dataclass(frozen=True)
class Plan:
    """A method and an iteration count chosen before the data is read."""

    method: str
    n_iter: int


def public_bounds(clip, data_norm, stacklevel: int = 2) -> tuple[float, float]:
    """Return (clip, data_norm): the gradient bound C and the row radius R, both public.

    data_norm=None warns with dp.PrivacyLeakWarning (the message depends on the arguments only)
    and takes R = 1: the caller has not said how large a record can be, and no bound may be
    read off the private rows. clip=None takes C = R, which every logistic-loss gradient
    |slope_i| |x_i| <= |x_i|_2 <= R already meets in L2 norm (the Gaussian methods' clipping norm);
    the Laplace methods clip in L1, where |v|_1 <= sqrt(d) |v|_2, so C = R clips some gradients.
    """
    if data_norm is None:
        warnings.warn(
            f"data_norm (the public bound R on the L2 norm of a row) was not given: rows are scaled "
            f"to norm <= {DEFAULT_DATA_NORM:g}; give data_norm explicitly (a bound known without "
            "looking at the data) to silence this warning",
            PrivacyLeakWarning,
            stacklevel=stacklevel,
        )
        data_norm = DEFAULT_DATA_NORM
    data_norm = check_positive(data_norm, "data_norm")
    clip = data_norm if clip is None else check_positive(clip, "clip")
    return clip, data_norm


INTERCEPT_COLUMN = 0.5  # the public constant b appended to every row, in units of R


def with_intercept_column(X: np.ndarray, data_norm: float) -> tuple[np.ndarray, float, float]:
    """Return ([X scaled to row norm <= R, b], b, sqrt(R^2 + b^2)) with the public constant b = R / 2.

    The appended column is the same on every record, so it adds nothing to any sensitivity beyond
    the row-norm bound: |(x, b)|_2 = sqrt(|x|_2^2 + b^2) <= sqrt(R^2 + b^2). The caller passes that
    bound on as data_norm, so clipping (C defaults to it), the smoothness bound
    curvature (R^2 + b^2) + 2 reg and every noise scale use it. Rows are scaled to R first: scaling
    the augmented row instead would shrink the constant of long rows. b trades speed for noise: a
    gradient step moves the intercept b w_b by ~ b^2 times the step, and the default plans take
    2-25 steps, while the bound, and with it every noise scale, grows by sqrt(1 + (b / R)^2).
    Measured (benchmarks/bench_dp_learning.py --sections defaults, 10 seeds, eps 0.5 / 1 / 4):
    b = R (noise x 1.41) breast cancer 0.896 / 0.905 / 0.943; b = R / sqrt(d) (x 1.02) digits
    0-vs-rest 0.731 / 0.751 / 0.785, below the majority class 0.901; b = R / 2 (x 1.12)
    0.937 / 0.938 / 0.945 and 0.902 / 0.904 / 0.901.
    """
    scaled = clip_rows(np.asarray(X, dtype=np.float64), data_norm)[0]
    constant = INTERCEPT_COLUMN * float(data_norm)
    return (
        np.hstack([scaled, np.full((scaled.shape[0], 1), constant)]),
        constant,
        math.hypot(data_norm, constant),
    )


def default_batch_size(n: int) -> int:
    """Return ceil(sqrt(n)) (< n): the thesis' m = 100 at n = 1e4, a balance of sampling noise and steps."""
    return max(1, min(n - 1, math.ceil(math.sqrt(n))))


def release_noise_norm(
    n: int, d: int, epsilon: float, delta: float, n_iter: int, clip: float
) -> float:
    """Return the expected-size norm sqrt(d) * std of the noise on one release of a T-release,
    single-stage full-gradient run, in units of the mean clipped gradient (sensitivity 2 clip / n).

    Laplace at epsilon / T per release (thesis (4.17), L1 clipping): sqrt(2 d) 2 clip T / (n epsilon).
    Gaussian at rho / T per release (zCDP): sqrt(d) 2 clip sqrt(T / (2 rho)) / n.
    """
    if delta > 0:
        return math.sqrt(d) * 2 * clip * math.sqrt(n_iter / (2 * zcdp_rho(epsilon, delta))) / n
    return math.sqrt(2 * d) * 2 * clip * n_iter / (n * epsilon)


def default_reg(n: int, d: int, epsilon: float) -> float:
    """Return the default L2 penalty lambda = sqrt(d) / (n epsilon), clamped to [3e-3, 1e-2].

    For a lambda-strongly convex objective the noise costs ~ d / (lambda (n epsilon)^2) in excess
    risk and the penalty ~ lambda |w*|^2 (Chaudhuri, Monteleoni and Sarwate 2011; Bassily, Smith
    and Thakurta 2014); they balance at lambda ~ sqrt(d) / (n epsilon |w*|), with |w*| ~ 1 for rows
    of norm <= 1. 1e-2 is the thesis' lambda; 3e-3 keeps kappa <= 43 at R = 1 (the first stage of
    (4.38), and so the default T, at most 25 iterations).
    """
    if math.isinf(epsilon) or n <= 0 or d <= 0:
        return 1e-2
    return min(1e-2, max(3e-3, math.sqrt(d) / (n * epsilon)))


def default_plan(
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    clip: float,
    data_norm: float,
    reg: float,
    curvature: float = 0.25,
) -> Plan:
    """Return the default method and T for n records of d features, from public quantities only.

    Method: DP-MAG (Alg. 5; its Gaussian variant when delta > 0), the accelerated method. T: the
    largest count (at least 1) whose accumulated noise, sqrt(T) release_noise_norm(T) (T releases
    adding up like a random walk), stays below clip / 4, a quarter of the largest mean gradient,
    and at most the first stage of (4.38), ceil(2 sqrt(kappa) log sqrt(kappa)), with the public
    kappa = (curvature R^2 + 2 reg) / (2 reg) (curvature 1/4 for the logistic loss): within it
    DP-MAG is Nesterov's method at the step min((4.43), 1/L); further stages split epsilon again. The noise of each release grows with
    T (T / epsilon for Laplace), so at small n epsilon few steps win: breast cancer (n = 569, d = 30,
    with the intercept column d = 31 and R = 1.118) gets T = 2 at epsilon 0.5, 4 at 1, 10 at 4
    (benchmarks/bench_dp_learning.py --sections defaults).
    """
    method = "dp-mag-gauss" if delta > 0 else "dp-mag"
    first_stage = first_stage_length((curvature * data_norm**2 + 2 * reg) / (2 * reg))  # L / mu
    if math.isinf(epsilon) or n <= 0 or d <= 0:
        return Plan(method, first_stage)
    n_iter = 1
    while (
        n_iter < first_stage
        and math.sqrt(n_iter + 1) * release_noise_norm(n, d, epsilon, delta, n_iter + 1, clip)
        <= clip / 4
    ):
        n_iter += 1
    return Plan(method, n_iter)
