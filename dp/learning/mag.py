"""DP-MAG: the multistage accelerated method M-ASG made private (thesis Alg. 5, section 4.2.2).

Stages k = 1..K of Nesterov steps with a restart between them. Stage lengths follow M-ASG
(4.38): n_1 = ceil(2 sqrt(kappa) log sqrt(kappa)) (as the thesis takes it, after Aybat et al.),
n_k = 2^k ceil(sqrt(kappa) log 2^(p+2)), cut so that they sum to T. Privacy: eps_k = eps / K per
stage and eps_k / n_k per release (4.40)-(4.41). Step (4.43), per coordinate:
alpha_k = ([sampling variance + Var(eta_k)] / (1 - b^2))^(-1/2) / (2^(2(k+1)) 2 L), with the
momentum b = (1 - sqrt(mu/L)) / (1 + sqrt(mu/L)) of Alg. 5 line 10. (4.43) is not scale-free (it
mixes 1/L with 1/gradient); we evaluate it on the mean objective and cap it at 1/L, the
stability limit of Nesterov's method, which it exceeds in the first stage at the thesis' settings.
"""

from __future__ import annotations

import math

import numpy as np

from dp.learning.accounting import ReleaseGroup
from dp.learning.iterations import Stage
from dp.learning.settings import RunSettings, make_streams


def condition_number(settings: RunSettings) -> float:
    """Return kappa = L / mu from the public bound L = curvature R^2 + 2 reg and mu = 2 reg."""
    return settings.problem.smoothness_bound() / settings.problem.strong_convexity()


def first_stage_length(kappa: float) -> int:
    """Return n_1 = ceil(2 sqrt(kappa) log sqrt(kappa)) of (4.38) (1 when kappa <= 1)."""
    root = math.sqrt(kappa)
    return max(1, math.ceil(2 * root * math.log(root))) if kappa > 1 else 1


def stage_lengths(kappa: float, n_iter: int, first: int | None = None, p: int = 1) -> list[int]:
    """Return the stage lengths n_1..n_K of (4.38), the last one cut so that they sum to n_iter."""
    root = math.sqrt(kappa)
    if first is None:
        first = first_stage_length(kappa)
    lengths = [min(max(first, 1), n_iter)]
    k = 2
    while sum(lengths) < n_iter:
        lengths.append(min(2**k * math.ceil(root * math.log(2 ** (p + 2))), n_iter - sum(lengths)))
        k += 1
    return lengths


def nesterov_momentum(kappa: float) -> float:
    """Return (1 - sqrt(1/kappa)) / (1 + sqrt(1/kappa)) (Alg. 5 line 10; DP-NAG's beta with (.)^1)."""
    r = math.sqrt(1.0 / kappa)
    return (1 - r) / (1 + r)


def mag_step(settings: RunSettings, k: int, noise_var: float, momentum: float) -> float:
    """Return the stage-k step of (4.43) (full gradients) / (4.59) (samples), capped at 1/L."""
    lipschitz = settings.problem.smoothness_bound()
    spread = (settings.sampling_variance() + noise_var) / (1 - momentum**2)
    alpha = 1.0 / (2 ** (2 * (k + 1)) * 2 * lipschitz * math.sqrt(spread))
    return min(alpha, 1.0 / lipschitz)


def private_multistage(settings: RunSettings) -> tuple[list[Stage], object]:
    """Return the stages of DP-MAG (full gradients) or DP-SMAG (samples) and the run's cost."""
    kappa = condition_number(settings)
    lengths = stage_lengths(kappa, settings.n_iter)
    K = len(lengths)
    groups = [ReleaseGroup(n_k, 1.0 / K) for n_k in lengths]
    streams, cost = make_streams(settings, groups, 1.0)
    momentum = nesterov_momentum(kappa)
    stages = [
        Stage(
            np.full(n_k, mag_step(settings, k, stream.variance, momentum)),
            momentum,
            extrapolate=True,
            gradient_weight=1.0,
            stream=stream,
        )
        for k, (n_k, stream) in enumerate(zip(lengths, streams), start=1)
    ]
    return stages, cost


def dp_mag(settings: RunSettings):
    """Return (stages, batches, cost) of DP-MAG (Alg. 5)."""
    stages, cost = private_multistage(settings)
    return stages, settings.batches(), cost
