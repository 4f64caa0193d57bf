"""Answer a batch of linear queries W x under differential privacy through an optimized strategy.

    strategy = dp.queries.optimize(W, method="coa")
    answers = dp.queries.answer(W, x, strategy, epsilon=0.1, delta=1e-4, random_state=None)
    dp.queries.expected_error(W, strategy, epsilon=0.1, delta=1e-4)

`optimize` dispatches through METHODS (name -> function(W, **options) -> Strategy); a new
mechanism is one import and one entry. `answer` and `expected_error` use only the strategy's
A, R and noise kind, so they work for every method.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dp.accounting import PrivacyAccountant, resolve_neighbouring
from dp.calibration import gaussian_sigma
from dp.mechanisms import Release, gaussian_mechanism, laplace_mechanism
from dp.queries.amm import amm_strategy
from dp.queries.baselines import identity_strategy, workload_strategy
from dp.queries.coa import coa_schur_strategy, coa_strategy
from dp.queries.dual_newton import coa_dual_strategy
from dp.queries.hierarchical import hierarchical_strategy
from dp.queries.lrm import lrm_strategy
from dp.queries.strategy import Strategy
from dp.queries.wavelet import wavelet_strategy
from dp.validation import DataError, check_delta, check_epsilon

METHODS = {
    "identity": identity_strategy,
    "workload": workload_strategy,
    "hierarchical": hierarchical_strategy,
    "wavelet": wavelet_strategy,
    "coa": coa_strategy,  # Yuan et al. Alg. 1-3: Newton with CG on the Hessian operator
    "coa-schur": coa_schur_strategy,  # the same program, exact Newton directions (faster)
    "coa-dual": coa_dual_strategy,  # the same program through its n-variable dual (fastest; any n > m)
    "lrm": lrm_strategy,  # Yuan et al. (VLDB 2012): W ~ B L, Laplace noise (eps-DP); Alg. 1 and/or the p-Identity search
    "amm": amm_strategy,  # the LRM paper's App. B: the L2-optimal strategy (COA's program) under Laplace noise
}


def check_workload(W) -> np.ndarray:
    """Return W as a 2-D finite float64 array with or raise DataError naming the bad entry."""
    try:
        W = np.asarray(W, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"workload must be numeric: {exc}") from None
    if W.ndim != 2 or min(W.shape) < 1:
        raise DataError(
            f"workload must be a non-empty 2-D matrix (queries x cells), got shape {W.shape}"
        )
    if not np.all(np.isfinite(W)):
        row, col = np.argwhere(~np.isfinite(W))[0]
        raise DataError(f"workload has a non-finite entry at query {row}, cell {col}")
    if not np.any(W):
        raise DataError("workload is all zeros")
    return W


def optimize(W, method: str = "coa", **options) -> Strategy:
    """Return the strategy of `method` for workload W (m x n); options go to that method."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(sorted(METHODS))}")
    return METHODS[method](check_workload(W), **options)


def _check_pair(W, strategy: Strategy) -> np.ndarray:
    W = check_workload(W)
    if not isinstance(strategy, Strategy):
        raise TypeError(f"strategy must be a dp.queries.Strategy, got {type(strategy).__name__}")
    if W.shape != strategy.shape:
        raise DataError(f"workload shape {W.shape} does not match the strategy's {strategy.shape}")
    return W


DEFAULT_NEIGHBOURING = (
    "add-remove"  # the histogram papers' relation (COA, LRM): one count changes by 1
)


def noise_variance(
    strategy: Strategy,
    epsilon: float,
    delta: float,
    calibration: str = "analytic",
    neighbouring: str = DEFAULT_NEIGHBOURING,
) -> float:
    """Return the variance of the noise on each strategy answer (continuous calibration).

    Gaussian: sigma^2 with sigma from dp.calibration (classical or analytic); Laplace: 2 b^2 with
    b = sensitivity / epsilon (delta unused); the sensitivity is the strategy's under
    `neighbouring` (Strategy.sensitivity_for).
    """
    epsilon = check_epsilon(epsilon)
    sensitivity = strategy.sensitivity_for(neighbouring)
    if strategy.noise == "laplace":
        return 2.0 * (sensitivity / epsilon) ** 2
    return (
        gaussian_sigma(epsilon, check_delta(delta, allow_zero=False), sensitivity, calibration) ** 2
    )


def expected_error(
    W,
    strategy: Strategy,
    epsilon: float,
    delta: float = 0.0,
    calibration: str = "analytic",
    x=None,
    neighbouring: str = DEFAULT_NEIGHBOURING,
) -> float:
    """Return E ||W x - answer||_2^2 = noise variance * ||R||_F^2 (+ ||(W - R A) x||^2 if x is given).

    Closed form of the matrix mechanism's error (COA eq. (3) before normalization); the bias
    term only exists for strategies with R A != W (LRM's relaxation) and needs the data x.
    `neighbouring` must be the relation `answer` calibrates to (the budget's, when one is given).
    """
    W = _check_pair(W, strategy)
    total = noise_variance(strategy, epsilon, delta, calibration, neighbouring) * float(
        np.sum(strategy.reconstruction**2)
    )
    if x is not None:
        bias = (W - strategy.reconstruction @ strategy.matrix) @ _check_histogram(x, W.shape[1])
        total += float(bias @ bias)
    return total


def _check_histogram(x, n: int) -> np.ndarray:
    try:
        x = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"histogram must be numeric: {exc}") from None
    if x.shape != (n,):
        raise DataError(f"histogram must have shape ({n},) to match the workload, got {x.shape}")
    if not np.all(np.isfinite(x)):  # which cell is data: not said (the message is a release too)
        raise DataError("histogram has non-finite counts: a private release needs finite counts")
    return x


@dataclass(frozen=True)
class Answers:
    """Private answers to the workload and the release of the strategy queries they came from."""

    values: np.ndarray  # R (A x + noise), shape (m,)
    release: (
        Release  # the noisy A x, with its mechanism, epsilon, delta, sensitivity and noise scale
    )
    neighbouring: str = DEFAULT_NEIGHBOURING  # the relation the release's guarantee holds for


def answer(
    W,
    x,
    strategy: Strategy,
    epsilon: float,
    delta: float = 0.0,
    random_state=None,
    calibration: str = "analytic",
    budget: PrivacyAccountant | None = None,
    neighbouring: str | None = None,
) -> Answers:
    """Return R (A x + noise): (epsilon, delta)-DP answers to W x under `neighbouring`.

    The relation is the explicit `neighbouring`, else the budget's (a PrivacyAccountant's default is
    replace-one), else add-remove (one count changes by 1: the COA and LRM papers'). The noise
    comes from dp.mechanisms' exact discrete samplers, calibrated to the strategy's sensitivity
    under that relation (Strategy.sensitivity_for; Gaussian: L2, Laplace: L1, epsilon-DP):
    add-remove, the largest column norm of A; replace-one (a record moves from cell i to cell j),
    max over i != j of |A (e_i - e_j)|, up to twice that. Charging a replace-one budget
    for a release calibrated to add-remove fails an audit (epsilon >= 1.86 measured for a
    claimed 1). The budget, if given, is charged before any noise is drawn. Reconstruction is
    post-processing and costs nothing.
    """
    W = _check_pair(W, strategy)
    relation = resolve_neighbouring(neighbouring, budget, default=DEFAULT_NEIGHBOURING)
    sensitivity = strategy.sensitivity_for(relation)
    x = _check_histogram(x, W.shape[1])
    strategy_answers = strategy.matrix @ x
    label = f"queries:{strategy.method}"
    if strategy.noise == "laplace":
        release = laplace_mechanism(
            strategy_answers,
            sensitivity,
            epsilon,
            random_state=random_state,
            budget=budget,
            label=label,
        )
    else:
        release = gaussian_mechanism(
            strategy_answers,
            sensitivity,
            epsilon,
            delta,
            calibration,
            random_state=random_state,
            budget=budget,
            label=label,
        )
    return Answers(
        values=strategy.reconstruction @ release.values, release=release, neighbouring=relation
    )
