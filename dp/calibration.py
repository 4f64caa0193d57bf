"""Noise scales for the Gaussian mechanism: classical (Dwork-Roth) and analytic (Balle-Wang 2018)."""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr

from dp.validation import check_delta, check_epsilon, check_positive


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Return sigma = Delta * sqrt(2 ln(1.25/delta)) / epsilon (Dwork-Roth Thm A.1; Su et al. Def. 2.3).

    The theorem only holds for 0 < epsilon < 1, so larger epsilon is refused.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    sensitivity = check_positive(sensitivity, "sensitivity")
    if epsilon >= 1.0:
        raise ValueError(
            f"the classical Gaussian calibration needs epsilon < 1 (got {epsilon}); "
            "use calibration='analytic' (Balle and Wang 2018)"
        )
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """Return the exact delta(epsilon) of the Gaussian mechanism with noise sigma (Balle-Wang Thm 8).

    delta = Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D), with D the L2 sensitivity.
    """
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    # the second term is formed in log space: e^eps times a tiny tail would overflow otherwise
    return float(ndtr(a - b) - math.exp(epsilon + log_ndtr(-a - b)))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Return the smallest sigma with gaussian_delta(sigma) <= delta (Balle-Wang 2018, Alg. 1).

    Valid for every epsilon > 0 (the classical formula is not), and never larger than it.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    sensitivity = check_positive(sensitivity, "sensitivity")

    # delta(sigma) decreases in sigma; work with sigma/Delta since delta only depends on it
    def excess(ratio: float) -> float:
        return gaussian_delta(ratio, epsilon, 1.0) - delta

    hi = 1.0
    while excess(hi) > 0:
        hi *= 2.0
    lo = hi / 2.0
    while excess(lo) <= 0 and lo > 1e-12:
        lo /= 2.0
    ratio = brentq(excess, lo, hi, xtol=1e-15, rtol=1e-15)
    # brentq may land a hair on the wrong side of the root; step up until the condition holds
    while excess(ratio) > 0:
        ratio = math.nextafter(ratio, math.inf) * (1 + 1e-15)
    return ratio * sensitivity


def gaussian_sigma(
    epsilon: float, delta: float, sensitivity: float, calibration: str = "analytic"
) -> float:
    """Return the Gaussian noise scale for (epsilon, delta)-DP under `calibration`.

    "analytic": Balle-Wang; "classical": Dwork-Roth (epsilon < 1 only); "paper": the classical
    formula where it is valid (epsilon < 1, as in Su et al.) and the analytic one otherwise.
    """
    if calibration == "analytic":
        return analytic_gaussian_sigma(epsilon, delta, sensitivity)
    if calibration == "classical":
        return classical_gaussian_sigma(epsilon, delta, sensitivity)
    if calibration == "paper":
        if check_epsilon(epsilon) < 1.0:
            return classical_gaussian_sigma(epsilon, delta, sensitivity)
        return analytic_gaussian_sigma(epsilon, delta, sensitivity)
    raise ValueError(f"calibration must be 'analytic', 'classical' or 'paper', got {calibration!r}")
