"""minimize_private: run one of the private gradient methods of thesis ch. 4 (or a baseline)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from dp._random import as_random_bits
from dp.accounting import PrivacyAccountant
from dp.learning.accounting import PrivacyCost, check_run_epsilon
from dp.learning.baselines import dp_gd, dp_hb, dp_nag, m_asg, m_asg_star
from dp.learning.defaults import (
    default_batch_size,
    default_clip,
    default_plan,
    default_reg,
    public_bounds,
)
from dp.learning.dpsgd import dp_sgd
from dp.learning.gdws import dp_gdws
from dp.learning.iterations import run_stages
from dp.learning.mag import dp_mag
from dp.learning.online import dp_online_gdws
from dp.learning.problems import loss_problem, make_problem
from dp.learning.settings import RunSettings
from dp.learning.sgdws import dp_sgdws
from dp.learning.smag import dp_smag
from dp.validation import check_delta

# name -> (builder, noise, needs a batch size: "yes" / "no" / "optional")
METHODS = {
    "dp-gdws": (dp_gdws, "laplace", "no"),
    "dp-mag": (dp_mag, "laplace", "no"),
    "dp-sgdws": (dp_sgdws, "laplace", "yes"),
    "dp-onlinegdws": (dp_online_gdws, "laplace", "yes"),
    "dp-smag": (dp_smag, "laplace", "yes"),
    "dp-gd": (dp_gd, "laplace", "optional"),
    "dp-hb": (dp_hb, "laplace", "optional"),
    "dp-nag": (dp_nag, "laplace", "optional"),
    "m-asg": (m_asg, "laplace", "optional"),
    "m-asg*": (m_asg_star, "laplace", "optional"),
    "dp-sgd": (dp_sgd, "gaussian", "yes"),
}
# Beyond the thesis: the same methods with discrete Gaussian noise, zCDP (full gradients, disjoint
# buckets) or RDP of the sampled Gaussian (uniform samples).
GAUSSIAN_VARIANTS = {
    f"{name}-gauss": (builder, "gaussian", batch)
    for name, (builder, _, batch) in METHODS.items()
    if name in ("dp-gdws", "dp-mag", "dp-sgdws", "dp-onlinegdws", "dp-smag")
}
ALL_METHODS = {**METHODS, **GAUSSIAN_VARIANTS}


@dataclass
class PrivateMinimizeResult:
    """The outcome of a private run (scipy.optimize.OptimizeResult habits)."""

    x: np.ndarray  # the last iterate: the private output
    method: str
    n_iter: int
    privacy_spent: PrivacyCost
    noise_scales: list[float]  # Laplace b / Gaussian sigma per stage, on the mean gradient (public)
    step_sizes: list[
        float
    ]  # the first step of each stage (public: from n, d, epsilon, T, clip, R, reg)
    reg: float  # the L2 penalty lambda used (given, or default_reg of public numbers)
    status: str  # "completed" or "diverged" (a non-finite iterate: public, from the releases)
    message: str  # data-independent
    # f(x_t) on the private data without noise, only when history_every is given: NOT private
    nonprivate_history: np.ndarray | None = None

    @property
    def success(self) -> bool:
        return self.status == "completed"


def _check_int(value, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _batch_size(method: str, needs: str, batch_size, n: int) -> int:
    if batch_size is None:
        return default_batch_size(n) if needs == "yes" else n
    if needs == "no":
        raise ValueError(
            f"method {method!r} uses full gradients; drop batch_size "
            "(its stochastic version is the one with an 's')"
        )
    size = _check_int(batch_size, "batch_size")
    if size > n:
        raise ValueError(f"batch_size must be at most n = {n}, got {size}")
    return size


def run_budget(accountant, epsilon: float, delta: float):
    """Return the accountant a run charges: the given one (replace-one only), else a fresh
    (epsilon, delta) one, or None for the non-private limit epsilon = inf."""
    if accountant is not None:
        relation = getattr(accountant, "neighbouring", "replace-one")
        if relation != "replace-one":
            raise ValueError(
                f"the private gradient methods are calibrated for replace-one neighbours; "
                f"the accountant is for {relation!r}"
            )
        return accountant
    return None if math.isinf(epsilon) else PrivacyAccountant(epsilon, delta)


def minimize_private(
    X,
    y,
    method: str | None = None,
    epsilon: float = 1.0,
    delta: float = 0.0,
    n_iter: int | None = None,
    beta: float = 0.1,
    batch_size: int | None = None,
    clip: float | None = None,
    data_norm: float | None = None,
    reg: float | None = None,
    loss: str = "logistic",
    accountant=None,
    random_state=None,
    history_every: int | None = None,
    gram_bound: float | None = None,
) -> PrivateMinimizeResult:
    """Return the result of `method` on min_x mean_i loss_i(x) + reg |x|^2, (epsilon, delta)-DP.

    Neighbouring data sets differ in one record (replace-one); n, d and every argument are public.
    Rows are scaled to L2 norm <= data_norm (R) and per-record loss gradients clipped to `clip`
    (default: dp.learning.defaults.default_clip: R for the Gaussian methods' L2 clipping,
    max(R, 0.3 sqrt(d) R) for the Laplace methods' L1 clipping); both bounds, not the data, set
    every step size, momentum, stage plan and noise scale (dp.learning.problems). data_norm=None warns (dp.PrivacyLeakWarning) and takes R = 1.
    gram_bound: a bound G <= R^2 on lambda_max(X'X/n) that the caller knows without looking at the
    data, or has released privately and charged (dp.learning.defaults.private_gram_bound): the
    steps then use L = curvature G + 2 reg instead of curvature R^2 + 2 reg; no sensitivity or
    noise scale depends on it.
    method=None / n_iter=None / reg=None: chosen from (n, d, epsilon, delta, clip, R) by
    dp.learning.defaults (default_plan, default_reg; the plan's T is for full gradients); the
    stochastic methods default to batch_size = ceil(sqrt(n)) and n_iter = one pass, ceil(n / m).
    The whole run is charged to `accountant` (a dp.PrivacyAccountant, shared; a fresh one of
    (epsilon, delta) if None) before any noise is drawn. epsilon = math.inf runs the method
    without noise (the non-private limit) and charges nothing: it refuses an accountant. history_every = k records f(x_t)
    on the private data at t = 0, k, 2k, ... and T in `nonprivate_history`: a diagnostic for
    study, NOT private; off by default.
    """
    epsilon = check_run_epsilon(epsilon, accountant)
    delta = check_delta(delta)
    clip, data_norm = public_bounds(clip, data_norm, stacklevel=3)
    n_rows, n_features = np.shape(X) if np.ndim(X) == 2 else (0, 0)
    reg = default_reg(n_rows, n_features, epsilon) if reg is None else reg
    plan = default_plan(
        n_rows,
        n_features,
        epsilon,
        delta,
        data_norm if clip is None else clip,  # the plan's T does not depend on C (default_plan)
        data_norm,
        reg,
        loss_problem(loss).curvature,
        gram_bound,
    )
    method = plan.method if method is None else method
    if method not in ALL_METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(ALL_METHODS)}")
    _, noise, _ = ALL_METHODS[method]
    clip = default_clip(noise, n_features, data_norm) if clip is None else clip
    if not (isinstance(beta, numbers.Real) and 0 < beta <= 1):
        raise ValueError(f"beta must lie in (0, 1], got {beta!r}")
    problem = make_problem(
        loss,
        X,
        y,
        reg,
        clip,
        clip_norm=1 if noise == "laplace" else 2,
        data_norm=data_norm,
        gram_bound=gram_bound,
    )
    settings = _run_settings(
        problem, method, plan, epsilon, delta, n_iter, beta, batch_size, accountant, random_state
    )
    every = None if history_every is None else _check_int(history_every, "history_every")
    return _run(settings, every)


def _run_settings(
    problem, method, plan, epsilon, delta, n_iter, beta, batch_size, accountant, random_state
) -> RunSettings:
    """Return the settings of one run: the batch size and T (given, or the defaults), the noise
    source and the budget it charges."""
    _, noise, needs = ALL_METHODS[method]
    batch_size = _batch_size(method, needs, batch_size, problem.n)
    if n_iter is None:  # full gradients: the plan's T; samples: one pass over the data, ceil(n / m)
        n_iter = plan.n_iter if batch_size == problem.n else math.ceil(problem.n / batch_size)
    n_iter = _check_int(n_iter, "n_iter")
    bits = as_random_bits(random_state)
    return RunSettings(
        problem=problem,
        epsilon=epsilon,
        delta=delta,
        n_iter=n_iter,
        beta=float(beta),
        batch_size=batch_size,
        noise=noise,
        bits=bits,
        rng=np.random.default_rng(int(bits.words(1)[0])),
        budget=run_budget(accountant, epsilon, delta),
        method=method,
    )


def _run(settings: RunSettings, history_every: int | None) -> PrivateMinimizeResult:
    """Return the result of the method in `settings`: its stages charged, then run from x = 0."""
    builder = ALL_METHODS[settings.method][0]
    stages, batches, cost = builder(settings)
    problem = settings.problem
    trajectory = run_stages(problem, stages, batches, np.zeros(problem.d), history_every)
    return PrivateMinimizeResult(
        x=trajectory.x,
        method=settings.method,
        n_iter=trajectory.n_iter,
        privacy_spent=cost,
        noise_scales=[s.stream.noise_scale for s in stages],
        step_sizes=[float(s.steps[0]) for s in stages],
        reg=problem.reg,
        status=trajectory.status,
        message=trajectory.message,
        nonprivate_history=trajectory.nonprivate_history,
    )
