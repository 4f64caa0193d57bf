"""Privacy calibration of a run and its charge to the shared budget.

A run is a list of release groups (the stages of Alg. 5/7, or one group for Alg. 4/6), each a
number of releases sharing one noise level and a share of the budget (the thesis divides epsilon
equally over stages, eps_k = eps / K, Alg. 5 line 5). Three accountings:
- pure epsilon, Laplace noise, basic composition (thesis Thm 4.1.3), with the subsampling
  amplification of Thm 4.1.5 (base epsilon <= 1) or Thm 4.1.4 (otherwise) for sampled batches;
- zCDP for full-batch Gaussian noise (Bun-Steinke 2016: rho-zCDP composes additively), converted
  to (epsilon, delta) by the shared accountant's conversion (dp.accounting, CKS 2020 Prop. 12);
- RDP of the sampled Gaussian (Wang-Balle-Kasiviswanathan 2019 for sampling without replacement,
  replace-one; Mironov et al. 2019 for Poisson, add/remove-one), from Google's dp_accounting.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from scipy import optimize

from dp.accounting import zcdp_epsilon
from dp.learning.noise import gaussian_tv_slack
from dp.validation import PrivacyParameterError, check_epsilon

# Renyi orders searched: dp_accounting's default list has 156 up to 1024; orders above 64 cost
# most of the time for the sampled-without-replacement bound and are never optimal at our
# (epsilon <= 10, delta >= 1e-7) targets (any order gives a valid bound, so the list only trades
# tightness). Calibrations are cached: benchmarks repeat the same (epsilon, delta, schedule).
_ORDERS = (1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)


@dataclass(frozen=True)
class ReleaseGroup:
    """`n_releases` releases with one noise level, paid from `share` of the budget."""

    n_releases: int
    share: float


@dataclass(frozen=True)
class PrivacyCost:
    """What a run spends: (epsilon, delta), and rho when the guarantee is zCDP."""

    epsilon: float
    delta: float
    rho: float | None
    accounting: str


def amplified_base_epsilon(epsilon_release: float, batch_size: int, n: int) -> float:
    """Return the base epsilon eps0 whose release on a uniform m-of-n sample is epsilon_release-DP.

    Inverts thesis Thm 4.1.5 (eps' = 2 (m/n) eps0, valid for eps0 <= 1; Prop. 4.3.1's
    eps0 = n eps / (2 m T)) and, when that eps0 exceeds 1, Thm 4.1.4 (eps' = 2 (e^eps0 - 1) m/n).
    A sample is never less private than the full data, so eps0 >= epsilon_release.
    """
    if batch_size >= n or math.isinf(epsilon_release):
        return epsilon_release
    ratio = n * epsilon_release / (2.0 * batch_size)
    base = ratio if ratio <= 1.0 else math.log1p(ratio)
    return max(base, epsilon_release)


def laplace_epsilons(epsilon: float, groups: list[ReleaseGroup], batch_size: int, n: int):
    """Return (base epsilon per release of each group, cost): epsilon share_g / n_g each, amplified."""
    per_release = [
        amplified_base_epsilon(epsilon * g.share / g.n_releases, batch_size, n) for g in groups
    ]
    cost = PrivacyCost(
        epsilon,
        0.0,
        None,
        "pure epsilon, Laplace, basic composition"
        + (" with subsampling amplification (thesis Thm 4.1.4/4.1.5)" if batch_size < n else ""),
    )
    return per_release, cost


@functools.lru_cache(maxsize=256)
def zcdp_rho(epsilon: float, delta: float) -> float:
    """Return the largest rho whose zCDP implies (epsilon, delta)-DP by the shared accountant's
    conversion (dp.accounting.zcdp_epsilon, CKS 2020 Prop. 12), so a fresh budget is spent exactly."""

    def excess(rho):
        return zcdp_epsilon(rho, delta) - epsilon

    hi = epsilon
    while excess(hi) < 0:
        hi *= 4.0
    rho = optimize.brentq(excess, 1e-12 * epsilon, hi, xtol=1e-15, rtol=1e-12)
    while excess(rho) > 0:  # land on the feasible side of the root
        rho *= 1 - 1e-12
    return rho


def zcdp_multipliers(epsilon: float, delta: float, groups: list[ReleaseGroup]):
    """Return (noise multiplier per group, cost): rho split as rho share_g / n_g per release."""
    rho = zcdp_rho(epsilon, delta)
    multipliers = [math.sqrt(g.n_releases / (2.0 * rho * g.share)) for g in groups]
    return multipliers, PrivacyCost(
        epsilon, delta, rho, "zCDP, discrete Gaussian (CKS Thm 14), additive composition"
    )


def _calibrate(make_event, make_accountant, epsilon: float, delta: float) -> float:
    """Return the smallest noise scale c whose event is (epsilon, delta)-DP for the accountant."""
    # why lazy: dp_accounting loads only for the sampled Gaussian's accountant
    import dp_accounting

    return float(
        dp_accounting.calibrate_dp_mechanism(
            make_accountant,
            make_event,
            epsilon,
            delta,
            bracket_interval=dp_accounting.LowerEndpointAndGuess(1e-3, 1.0),
            tol=1e-3,
        )
    )


@functools.lru_cache(maxsize=256)
def sampled_gaussian_multipliers(
    epsilon: float, delta: float, groups: tuple[ReleaseGroup, ...], batch_size: int, n: int, d: int
):
    """Return (noise multiplier per group, cost) for releases on uniform m-of-n samples, by RDP.

    Multipliers are c sqrt(n_g / share_g) (the zCDP split's proportions); c is the smallest value
    whose composed sampled-Gaussian RDP gives (epsilon, delta - slack), the slack covering the
    discrete-vs-continuous Gaussian gap of every release.
    """
    # why lazy: dp_accounting loads only for the sampled Gaussian's accountant
    import dp_accounting
    from dp_accounting import rdp

    total = sum(g.n_releases for g in groups)
    target_delta = delta - gaussian_tv_slack(d, total, epsilon)

    def event(c):
        parts = []
        for g in groups:
            gauss = dp_accounting.GaussianDpEvent(c * math.sqrt(g.n_releases / g.share))
            one = (
                gauss
                if batch_size >= n
                else dp_accounting.SampledWithoutReplacementDpEvent(n, batch_size, gauss)
            )
            parts.append(dp_accounting.SelfComposedDpEvent(one, g.n_releases))
        return dp_accounting.ComposedDpEvent(parts)

    def accountant():
        return rdp.RdpAccountant(
            orders=_ORDERS, neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
        )

    c = _calibrate(event, accountant, epsilon, target_delta)
    multipliers = [c * math.sqrt(g.n_releases / g.share) for g in groups]
    how = (
        "RDP of the sampled Gaussian (without replacement, replace-one)"
        if batch_size < n
        else "RDP of the Gaussian"
    )
    return multipliers, PrivacyCost(epsilon, delta, None, how + ", dp_accounting")


@functools.lru_cache(maxsize=64)
def poisson_gaussian_multiplier(epsilon: float, delta: float, rate: float, n_releases: int, d: int):
    """Return (noise multiplier, cost) of DP-SGD's Poisson-sampled Gaussian for replace-one (epsilon, delta).

    dp_accounting's RDP for Poisson sampling is for add/remove-one neighbours; replacing a record
    is a removal then an addition, so (e, dl) add/remove implies (2 e, (1 + e^e) dl) replace-one
    (group privacy). We calibrate add/remove to (epsilon / 2, delta / (1 + e^(epsilon / 2))).
    """
    # why lazy: dp_accounting loads only for the sampled Gaussian's accountant
    import dp_accounting
    from dp_accounting import rdp

    half = epsilon / 2.0
    target_delta = delta / (1.0 + math.exp(half)) - gaussian_tv_slack(d, n_releases, half)

    def event(z):
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(z)), n_releases
        )

    def accountant():
        return rdp.RdpAccountant(
            orders=_ORDERS, neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
        )

    z = _calibrate(event, accountant, half, target_delta)
    return z, PrivacyCost(
        epsilon,
        delta,
        None,
        "RDP of the Poisson-sampled Gaussian (add/remove-one, doubled for replace-one), dp_accounting",
    )


def check_run_epsilon(epsilon, accountant) -> float:
    """Return epsilon (a finite number > 0, or math.inf for the non-private limit) for a run.

    epsilon = inf draws no noise and would charge nothing, so it is refused with an accountant:
    a shared budget that a run (or a grid search over epsilon) could skip would record exact
    coefficients as free. Decided from the arguments alone.
    """
    if isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool) and math.isinf(epsilon):
        if epsilon < 0:
            raise PrivacyParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
        if accountant is not None:
            raise PrivacyParameterError(
                "epsilon=inf is not a private fit and would charge the accountant nothing; drop "
                "the accountant for the non-private limit, or give a finite epsilon"
            )
        return math.inf
    return check_epsilon(epsilon)


def charge(budget, cost: PrivacyCost, label: str) -> None:
    """Spend `cost` from `budget` before any noise is drawn: zCDP natively when the budget has it."""
    if cost.rho is not None and hasattr(budget, "spend_zcdp"):
        budget.spend_zcdp(cost.rho, label=label)
    else:
        budget.spend(cost.epsilon, cost.delta, label)
