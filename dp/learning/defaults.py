"""Defaults of the private gradient methods, chosen from public quantities only.

`public_bounds` resolves the two bounds every step rule and noise scale rests on and
`default_clip` the gradient bound C of each noise; `with_intercept_column` turns R into the bound
of rows augmented by a public constant; `default_reg` picks lambda and `default_plan` the method
and the iteration count T from (n, d, epsilon, delta, C, R), never from the data.
`private_row_scale` and `private_gram_bound` are the defaults that read the data, each paid from
the budget: a noisy mean row norm that rescales the rows when the public bound R is loose, and a
noisy largest curvature of the rows that sets the steps when R^2 overstates it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from dp.covariance import clip_rows
from dp.learning.accounting import zcdp_rho
from dp.learning.mag import first_stage_length
from dp.mechanisms import laplace_mechanism
from dp.validation import PrivacyLeakWarning, check_positive

DEFAULT_DATA_NORM = 1.0


@dataclass(frozen=True)
class Plan:
    """A method and an iteration count chosen before the data is read."""

    method: str
    n_iter: int


def public_bounds(clip, data_norm, stacklevel: int = 2) -> tuple[float | None, float]:
    """Return (clip, data_norm): the gradient bound C (None: `default_clip` once the noise is
    known) and the row radius R, both public.

    data_norm=None warns with dp.PrivacyLeakWarning (the message depends on the arguments only)
    and takes R = 1: the caller has not said how large a record can be, and no bound may be
    read off the private rows.
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
    return (None if clip is None else check_positive(clip, "clip")), data_norm


L1_CLIP_FRACTION = 0.3  # the Laplace methods' default C, in units of the largest L1 norm sqrt(d) R


def default_clip(noise: str, d: int, data_norm: float) -> float:
    """Return the default gradient bound C for `noise` ('laplace': L1 clipping, 'gaussian': L2).

    Gaussian (L2): C = R, which every logistic-loss gradient |slope_i| |x_i|_2 <= R meets: nothing
    is clipped. Laplace (L1): a gradient's L1 norm reaches sqrt(d) R, and C = R (the old default)
    scaled every gradient of a spread-out row by up to 1 / sqrt(d), so that the noise-free fixed
    point moved: on digits 0-vs-rest (d = 65) it was the majority classifier at every T, while
    C = sqrt(d) R (no clipping) reaches 0.99. C = max(R, 0.3 sqrt(d) R): a dense row of norm R
    has L1 norm about sqrt(2 / pi) sqrt(d) R = 0.8 sqrt(d) R (Gaussian-like coordinates), so at
    the start (|slope| = 1/2) its gradient's is about 0.4 sqrt(d) R and is clipped a little, with
    the noise 0.3 of the unclipped one's. Much tighter clips cut the gradients of the rows the
    model gets wrong (|slope| -> 1), the minority class's under imbalance, and move the fixed point
    to the majority. Chosen with the row scale ROW_SCALE_OF_MEAN (docs/privacy.md, "Defaults").
    """
    if noise == "gaussian":
        return float(data_norm)
    return float(max(data_norm, L1_CLIP_FRACTION * math.sqrt(d) * data_norm))


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
    Measured (training accuracy, 10 seeds, eps 0.5 / 1 / 4, before the row scale and the L1 clip default):
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


NOISE_RULE_DIVISOR = 9.0  # default_plan's T: accumulated noise <= clip / this


def default_plan(
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    clip: float,
    data_norm: float,
    reg: float,
    curvature: float = 0.25,
    gram_bound: float | None = None,
) -> Plan:
    """Return the default method and T for n records of d features, from public quantities only.

    Method: DP-MAG (Alg. 5; its Gaussian variant when delta > 0), the accelerated method. T: the
    smallest of three counts, all public:
    - noise: the largest count (at least 1) whose accumulated noise, sqrt(T) release_noise_norm(T)
      (T releases adding up like a random walk), stays below clip / 9, a ninth of the largest
      mean gradient. The noise of each release grows with T (T / epsilon for Laplace), so at
      small n epsilon few steps win (clip / 6 gave digits 0-vs-rest max-norm at eps 0.5 T = 2
      and a per-split spread of 0.04, one split in ten at 0.78; clip / 9 gives T = 1, spread 0.017);
    - conditioning: ceil(sqrt(d)), Nesterov's sqrt(kappa) steps for the condition that the public
      bound itself implies: the step is 1 / L with L from R^2, while rows of norm R spread over d
      directions give a typical curvature R^2 / d, so kappa ~ d along them. More steps than that
      only add noise (breast cancer, d = 31: T = 6 at epsilon 4, accuracy 0.945; the noise rule
      alone gave 8, 0.937; the synthetic set, d = 11: 4 instead of 28);
    - the first stage of (4.38), ceil(2 sqrt(kappa) log sqrt(kappa)), with the public
      kappa = (curvature G + 2 reg) / (2 reg) (curvature 1/4 for the logistic loss, G = gram_bound
      or R^2, the bound on lambda_max(X'X/n) the steps use): within it
      DP-MAG is Nesterov's method at the step min((4.43), 1/L); further stages split epsilon again.
    Breast cancer (n = 398 training rows, d = 31 with the intercept column) gets T = 1 at
    epsilon 0.5, 1 at 1, 4 at 4 (benchmarks/bench_dp_learning.py --sections defaults).
    """
    method = "dp-mag-gauss" if delta > 0 else "dp-mag"
    gram = data_norm**2 if gram_bound is None else min(gram_bound, data_norm**2)
    first_stage = first_stage_length((curvature * gram + 2 * reg) / (2 * reg))  # L / mu
    if math.isinf(epsilon) or n <= 0 or d <= 0:
        return Plan(method, first_stage)
    n_iter = 1
    while (
        n_iter < min(first_stage, math.ceil(math.sqrt(d)))
        and math.sqrt(n_iter + 1) * release_noise_norm(n, d, epsilon, delta, n_iter + 1, clip)
        <= clip / NOISE_RULE_DIVISOR
    ):
        n_iter += 1
    return Plan(method, n_iter)


SCALE_FRACTION = 0.1  # the share of epsilon PrivateLogisticRegression spends on the row scale
SMALLEST_SCALE = 1.0 / 64  # in units of R: a floor for a noisy mean near or below zero
ROW_SCALE_OF_MEAN = 0.7  # s is this fraction of the noisy mean row norm (public constant)


def private_row_scale(X, data_norm: float, epsilon: float, budget, bits) -> float:
    """Return a private row scale s in [R / 64, R]: 0.7 times the noisy mean row norm.

    Rows are first projected onto the ball of radius R (public), so each norm lies in [0, R] and
    the mean of the n norms moves by at most R / n when one record is replaced (n is public under
    replace-one): Laplace noise of scale R / (n epsilon) (dp.laplace_mechanism, exact, charged to
    `budget` first) makes it epsilon-DP, and s = min(R, max(ROW_SCALE_OF_MEAN * noisy mean,
    R / 64)) is post-processing with public constants. epsilon = inf uses the exact mean (the
    non-private limit, nothing charged).

    Why: every step size and noise scale rests on the bound of the rows the runs see (the unit
    ball after division by s): the noise is calibrated for rows at the bound, the gradient signal
    grows with the rows' norms. Rows much shorter than R (scaled by the largest row norm, say)
    make the public bound loose: breast cancer so scaled held 0.68 at epsilon 1 with s = R.
    Dividing by a fraction of the mean norm puts most rows on the unit sphere (those longer than s
    are projected: their direction is kept, their length clipped), so that the signal uses the
    bound the noise pays for. The fit's coef = w / s: on a row longer than s the decision is
    steeper than on the projected row the run saw, which under noisy, early-stopped weights
    (shrunk towards 0 while the intercept has converged) is where most of the gain on digits
    comes from. At epsilon = inf on rows of equal norm coef is therefore 1 / 0.7 times the exact
    fit's (scale_fraction=0 keeps s = R and the exact fit). With the L1 clip 0.3 sqrt(d) R and the
    noise rule C / 9 of default_plan, against the mean itself, 0.35 and C / 6 (held out, 40
    splits, eps 0.5 / 1 / 4): digits 0-vs-rest max-norm 0.901 / 0.908 / 0.962 -> 0.908 / 0.923 /
    0.980; breast cancer max-norm 0.919 / 0.921 / 0.943 -> 0.927 / 0.933 / 0.945
    (docs/privacy.md, "Defaults", for every cell and the checks on other splits and digits).
    """
    norms = np.linalg.norm(clip_rows(np.asarray(X, dtype=np.float64), data_norm)[0], axis=1)
    mean = float(norms.mean())
    if not math.isinf(epsilon):
        mean = float(
            laplace_mechanism(
                np.array([mean]),
                data_norm / norms.size,
                epsilon,
                random_state=bits,
                budget=budget,
                label="learning: mean row norm (laplace)",
            ).values[0]
        )
    return min(data_norm, max(ROW_SCALE_OF_MEAN * mean, SMALLEST_SCALE * data_norm))


GRAM_FRACTION = 0.05  # the share of epsilon PrivateLogisticRegression spends on the gram bound


def private_gram_bound(design, bound: float, floor: float, epsilon: float, budget, bits) -> float:
    """Return a private bound G in [floor, bound^2] on lambda_max(D'D/n): its noisy value plus twice
    its noise scale.

    Every row of `design` has L2 norm <= bound (public). Replacing one record changes D'D/n by
    (d d' - e e') / n, a difference of two PSD rank-one matrices whose operator norm is at most
    max(|d|^2, |e|^2) / n <= bound^2 / n; lambda_max moves by no more (Weyl), so Laplace noise of
    scale bound^2 / (n epsilon) (dp.laplace_mechanism, exact, charged to `budget` first) makes it
    epsilon-DP under replace-one (n public). `floor` is a public lower bound (b^2 for a design with
    the intercept column b: e_b' D'D/n e_b = b^2); clamping to it and to bound^2 is post-processing.
    epsilon = inf returns the exact value (the non-private limit, nothing charged).

    Why: the steps rest on L = curvature bound^2 + 2 lambda, the curvature of rows that all point
    one way. Rows spread over d directions curve far less: on digits 0-vs-rest the design has
    lambda_max 0.25 (the intercept column's b^2) against bound^2 = 1.25, so the public steps were
    five times too short and the default T ended noise-free at the majority classifier
    (docs/privacy.md, "Defaults").
    """
    design = np.asarray(design, dtype=np.float64)
    n, d = design.shape
    small = design.T @ design if d <= n else design @ design.T
    value = float(np.linalg.eigvalsh(small / n)[-1])
    if math.isinf(epsilon):
        return min(bound**2, max(value, floor))
    released = laplace_mechanism(
        np.array([value]),
        bound**2 / n,
        epsilon,
        random_state=bits,
        budget=budget,
        label="learning: largest curvature of the rows (laplace)",
    )
    upper = float(released.values[0]) + 2.0 * released.noise_scale
    return min(bound**2, max(upper, floor))
