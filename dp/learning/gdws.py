"""DP-GDwS: differentially private smoothed gradient descent (thesis Alg. 4, section 4.2.1)."""

from __future__ import annotations

import math

import numpy as np

from dp.learning.accounting import PrivacyCost, ReleaseGroup
from dp.learning.iterations import Stage
from dp.learning.settings import RunSettings, make_streams


def smoothed_step_size(settings: RunSettings, noise_var: float, n_iter: int) -> float:
    """Return the noise-aware step of thesis (4.21) (full gradient) / (4.55) (m-of-n samples).

    alpha = ([sampling variance + Var(eta) / beta^2] beta / (2 - beta))^(-1/2) * 0.25 / sqrt(T + 1),
    per coordinate, where Var(eta) = 2 sigma_t^2 for the Laplace noise of (4.17)/(4.52). Capped at
    1 / (beta L), the stability limit of the equivalent heavy ball (alpha beta <= 1/L), which only
    binds when there is almost no noise (large epsilon). L is the public bound curvature R^2 + 2 reg
    (RegularizedProblem.smoothness_bound), never a value computed from the private rows.
    """
    beta = settings.beta
    spread = (settings.sampling_variance() + noise_var / beta**2) * beta / (2 - beta)
    alpha = 0.25 / (math.sqrt(spread) * math.sqrt(n_iter + 1))
    return min(alpha, 1.0 / (beta * settings.problem.smoothness_bound()))


def smoothed_descent(
    settings: RunSettings, n_iter: int, disjoint: bool = False
) -> tuple[list[Stage], PrivacyCost]:
    """Return the one stage of DP-GDwS / DP-SGDwS / DP-onlineGDwS and its cost.

    Each release is beta * g(x_t) + eta_t with eta_t at epsilon / T per release (4.17), amplified by
    sampling for m-of-n batches (4.52); the update is the heavy ball form of (4.14)-(4.15).
    """
    beta = settings.beta
    streams, cost = make_streams(settings, [ReleaseGroup(n_iter, 1.0)], beta, disjoint=disjoint)
    alpha = smoothed_step_size(settings, streams[0].variance, n_iter)
    stage = Stage(
        np.full(n_iter, alpha),
        momentum=1.0 - beta,
        extrapolate=False,
        gradient_weight=beta,
        stream=streams[0],
    )
    return [stage], cost


def dp_gdws(settings: RunSettings):
    """Return (stages, batches, cost) of DP-GDwS (Alg. 4): full gradients, smoothing beta."""
    stages, cost = smoothed_descent(settings, settings.n_iter)
    return stages, settings.batches(), cost
