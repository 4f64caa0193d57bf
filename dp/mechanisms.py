"""Laplace and Gaussian mechanisms that release values on a fine grid with exact discrete noise.

How noise is drawn (and why it resists Mironov's 2012 floating-point attack)
---------------------------------------------------------------------------
Textbook samplers compute ``b * log(U)`` from a floating-point uniform U. The set of doubles such
a formula can produce depends on the input value, so a single output can reveal it (Mironov 2012).
OpenDP avoids this with exact discrete samplers (CKS 2020) on integers or rationals; diffprivlib
samples continuous noise with extra care. We follow the discrete route:

1. Pick a power-of-two grid step ``gamma`` from public quantities only (the noise scale): about
   2**-30 of the Laplace scale, 2**-24 of the Gaussian sigma.
2. Round the true values to the grid: ``k = rint(f / gamma)`` (exact, since gamma is a power of
   two). Rounding moves each coordinate by at most gamma/2, so neighbouring inputs yield integer
   vectors whose distance is at most ``Delta + d * gamma`` (L1) or ``Delta + sqrt(d) * gamma``
   (L2); the noise is calibrated to these inflated sensitivities, in grid units.
3. Add integer noise drawn exactly (dp.discrete, CKS Alg. 1-3, uniform words + integer
   arithmetic only) and release ``(k + Z) * gamma``: a pure function of the integer k + Z (exact in
   float64 below 2**53 grid steps; above, the nearest double of that integer, still a function of
   it alone, so post-processing). Values up to 2**61 grid steps (about 2**31 noise scales for
   Laplace, 2**37 sigmas for Gaussian) are accepted, so a sum over millions of records fits.

Guarantees (neighbouring relation: whatever relation the caller's `sensitivity` is valid for)
- Laplace: the discrete Laplace with integer scale ``s >= (Delta_1 + d gamma) / (epsilon gamma)``
  makes the released vector exactly epsilon-DP (delta = 0; CKS Thm 2 style argument, the privacy
  loss |z - a| - |z - b| <= |a - b| holds coordinate-wise).
- Gaussian: noise is the discrete Gaussian with integer ``sigma_int`` (grid units). Let R be the
  *rounded continuous* Gaussian with the same sigma; R is (epsilon, delta_main)-DP by the chosen
  continuous calibration (post-processing of the Gaussian mechanism on the integer vector). Per
  coordinate the total-variation distance between the discrete Gaussian and R is below
  ``0.021 / sigma_int**2`` (checked numerically; Euler-Maclaurin bound 1/(16 sigma^2)), so for d
  coordinates it is at most ``eta = d / (8 sigma_int**2)``. A mechanism eta-close in TV to an
  (epsilon, delta_main)-DP one is (epsilon, delta_main + (1 + e^epsilon) eta)-DP; we calibrate
  with ``delta_main = delta - (1 + e^epsilon) eta``, so the release is (epsilon, delta)-DP.
  It is also ``rho = Delta'^2 / (2 sigma^2)`` zero-concentrated DP exactly (CKS Thm 14).
- zCDP Gaussian (`gaussian_mechanism_zcdp`): calibrated to rho directly, ``sigma_int >=
  Delta' / (gamma sqrt(2 rho))``, which is rho-zCDP exactly (CKS Thm 14; no TV slack is needed)
  and is charged as rho to the accountant, where zCDP charges compose by adding rho.

Every mechanism charges the accountant (dp.accounting) before any noise is drawn; an overspend
raises BudgetExceededError and releases nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dp._random import as_random_bits
from dp.accounting import PrivacyAccountant, check_rho
from dp.calibration import gaussian_sigma
from dp.discrete import discrete_gaussian, discrete_laplace
from dp.validation import check_delta, check_epsilon, check_positive

LAPLACE_GRID_BITS = 30  # grid step ~ scale * 2**-30: rounding inflation ~1e-9 * d of the noise
GAUSSIAN_GRID_BITS = 24  # keeps sigma_int < 2**25 so the CKS acceptance stays cheap
_GRID_LIMIT = float(2**61)  # |k| below this, so k + Z stays far inside int64 (noise is << 2**61)


@dataclass(frozen=True)
class Release:
    """A noisy release and what was paid for it."""

    values: np.ndarray
    mechanism: str
    epsilon: float
    delta: float
    sensitivity: float  # as declared by the caller (L1 for Laplace, L2 for Gaussian)
    noise_scale: float  # Laplace scale b or Gaussian sigma, in data units, after grid inflation
    granularity: float  # grid step gamma; every released value is an integer multiple of it
    guarantee: str
    rho: float = 0.0  # zCDP parameter of a zCDP release (epsilon and delta are then nan)


def _grid_step(scale: float, bits: int) -> float:
    """Return the power of two 2**(floor(log2 scale) - bits)."""
    return math.ldexp(1.0, math.floor(math.log2(scale)) - bits)


def _to_grid(values: np.ndarray, gamma: float) -> np.ndarray:
    """Return rint(values / gamma) as int64, refusing values too large for an exact release.

    The message states the public limit (2**61 grid steps, from the noise scale alone), never
    the values: an error message is output too, and quoting the data would release them.
    """
    scaled = values / gamma  # exact: gamma is a power of two
    if values.size and np.max(np.abs(scaled)) >= _GRID_LIMIT:
        raise ValueError(
            "a value to be released is too large for an exact grid release at this noise scale: "
            f"every |value| must stay below {_GRID_LIMIT * gamma:g} (2**61 grid steps of {gamma:g}); "
            "bound the data (clip) before the release. Nothing was released."
        )
    return np.rint(scaled).astype(np.int64)


def _from_grid(k: np.ndarray, noise: np.ndarray, gamma: float) -> np.ndarray:
    total = k + noise
    if total.size and np.max(np.abs(total)) >= 2 * _GRID_LIMIT:  # int64 holds 2**63: never reached
        raise ValueError("noisy value left the representable range; nothing released")
    return total.astype(np.float64) * gamma


def _check_values(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError("values to be released must be finite (which are not is not reported)")
    return values


def laplace_mechanism(
    values,
    l1_sensitivity: float,
    epsilon: float,
    random_state=None,
    budget: PrivacyAccountant | None = None,
    label: str = "laplace",
) -> Release:
    """Return values + discrete Laplace noise on a grid: epsilon-DP (Dwork et al. 2006; CKS 2020).

    `l1_sensitivity` bounds ||f(D) - f(D')||_1 over neighbours. The budget is charged before
    any noise is drawn, so an overspend raises and releases nothing.
    """
    epsilon = check_epsilon(epsilon)
    sensitivity = check_positive(l1_sensitivity, "l1_sensitivity")
    values = _check_values(values)
    d = values.size
    gamma = _grid_step(sensitivity / epsilon, LAPLACE_GRID_BITS)
    inflated = sensitivity + d * gamma
    scale_int = math.ceil(inflated / (epsilon * gamma))
    k = _to_grid(values, gamma)
    bits = as_random_bits(random_state)
    if budget is not None:
        budget.spend(epsilon, 0.0, label)
    noise = discrete_laplace(scale_int, d, bits).reshape(values.shape)
    return Release(
        values=_from_grid(k, noise, gamma),
        mechanism="laplace",
        epsilon=epsilon,
        delta=0.0,
        sensitivity=sensitivity,
        noise_scale=scale_int * gamma,
        granularity=gamma,
        guarantee=(
            f"{epsilon:g}-DP for neighbours with L1 distance <= {sensitivity:g} "
            "(discrete Laplace on a 2^-30-scale grid, CKS 2020 Alg. 2)"
        ),
    )


def gaussian_mechanism(
    values,
    l2_sensitivity: float,
    epsilon: float,
    delta: float,
    calibration: str = "analytic",
    random_state=None,
    budget: PrivacyAccountant | None = None,
    label: str = "gaussian",
) -> Release:
    """Return values + discrete Gaussian noise on a grid: (epsilon, delta)-DP (CKS 2020 Alg. 3).

    sigma comes from `calibration` ("analytic": Balle-Wang 2018; "classical": Dwork-Roth, only
    for epsilon < 1; "paper": classical below epsilon = 1 as Su et al., analytic above), with the
    grid rounding and the discrete-vs-continuous gap accounted for (see the module docstring).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    sensitivity = check_positive(l2_sensitivity, "l2_sensitivity")
    values = _check_values(values)
    d = values.size
    gamma = _grid_step(gaussian_sigma(epsilon, delta, sensitivity, calibration), GAUSSIAN_GRID_BITS)
    inflated = sensitivity + math.sqrt(d) * gamma
    # sigma / gamma >= 2**GAUSSIAN_GRID_BITS because inflation only increases sigma
    eta = d / (8.0 * float(2**GAUSSIAN_GRID_BITS) ** 2)
    delta_main = delta - (1.0 + math.exp(epsilon)) * eta
    if delta_main <= delta / 2:
        raise ValueError(
            f"delta={delta:g} is too small for a discrete Gaussian release of {d} values; "
            "use a larger delta or the Laplace mechanism"
        )
    sigma = gaussian_sigma(epsilon, delta_main, inflated, calibration)
    sigma_int = math.ceil(sigma / gamma)
    k = _to_grid(values, gamma)
    bits = as_random_bits(random_state)
    if budget is not None:
        budget.spend(epsilon, delta, label)
    return Release(
        values=_from_grid(k, discrete_gaussian(sigma_int, d, bits).reshape(values.shape), gamma),
        mechanism="gaussian",
        epsilon=epsilon,
        delta=delta,
        sensitivity=sensitivity,
        noise_scale=sigma_int * gamma,
        granularity=gamma,
        guarantee=(
            f"({epsilon:g}, {delta:g})-DP for neighbours with L2 distance <= {sensitivity:g} "
            f"({calibration} calibration; discrete Gaussian on a 2^-24-sigma grid, CKS 2020 Alg. 3)"
        ),
    )


def gaussian_mechanism_zcdp(
    values,
    l2_sensitivity: float,
    rho: float,
    random_state=None,
    budget: PrivacyAccountant | None = None,
    label: str = "gaussian (zCDP)",
) -> Release:
    """Return values + discrete Gaussian noise on a grid: rho-zCDP (CKS 2020 Thm 14, Alg. 3).

    sigma = Delta' / sqrt(2 rho) with Delta' the grid-inflated L2 sensitivity (module docstring);
    the accountant is charged rho (before any noise is drawn) and converts the composed total
    to (epsilon, delta) at its delta.
    """
    rho = check_rho(rho)
    sensitivity = check_positive(l2_sensitivity, "l2_sensitivity")
    values = _check_values(values)
    d = values.size
    gamma = _grid_step(sensitivity / math.sqrt(2.0 * rho), GAUSSIAN_GRID_BITS)
    inflated = sensitivity + math.sqrt(d) * gamma
    sigma_int = math.ceil(inflated / (gamma * math.sqrt(2.0 * rho)))
    k = _to_grid(values, gamma)
    bits = as_random_bits(random_state)
    if budget is not None:
        budget.spend_zcdp(rho, label)
    return Release(
        values=_from_grid(k, discrete_gaussian(sigma_int, d, bits).reshape(values.shape), gamma),
        mechanism="gaussian-zcdp",
        epsilon=math.nan,
        delta=math.nan,
        sensitivity=sensitivity,
        noise_scale=sigma_int * gamma,
        granularity=gamma,
        guarantee=(
            f"{rho:g}-zCDP for neighbours with L2 distance <= {sensitivity:g} "
            "(discrete Gaussian on a 2^-24-sigma grid, CKS 2020 Thm 14)"
        ),
        rho=rho,
    )
