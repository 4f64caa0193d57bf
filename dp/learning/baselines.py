"""The baselines of the thesis' figures with DP noise at epsilon / T per release (section 4.4).

DP-GD: step 1/sqrt(t) (as Song et al. [76]); DP-HB: alpha = 1/L, momentum ((sqrt k - 1)/(sqrt k + 1))^2;
DP-NAG: alpha = 1/L, momentum (sqrt k - 1)/(sqrt k + 1); M-ASG (Aybat et al. [3], thesis (4.38)):
alpha_1 = 1/L, alpha_k = 1 / (2^(2k) L), momentum (1 - sqrt(mu alpha_k)) / (1 + sqrt(mu alpha_k));
M-ASG*: M-ASG whose first stage length uses the noise variance and the initial gap, as Aybat et
al.'s variant does: n_1 = ceil(sqrt(kappa) log(Delta L / (sigma^2 sqrt(kappa)))), which balances the
two terms of (4.39); Delta = f(0) - f* is bounded publicly (log 2 for logistic regression).
With a batch size they are the stochastic versions (SGD, SHB, SNAG, stocMASG, stocMASG*), the
noise amplified by sampling as for DP-SGDwS. L is everywhere the public bound curvature R^2 + 2 reg.
"""

from __future__ import annotations

import math

import numpy as np

from dp.learning.accounting import ReleaseGroup
from dp.learning.iterations import Stage
from dp.learning.mag import condition_number, nesterov_momentum, stage_lengths
from dp.learning.settings import RunSettings, calibrate, make_streams, noise_variance


def _uniform_noise_stages(settings: RunSettings, lengths, steps, momenta, extrapolate: bool):
    """Return stages whose releases all get epsilon / T, with the given steps and momenta."""
    T = sum(lengths)
    groups = [ReleaseGroup(n_k, n_k / T) for n_k in lengths]
    streams, cost = make_streams(settings, groups, 1.0)
    stages = [
        Stage(np.asarray(step, dtype=np.float64) * np.ones(n_k), m, extrapolate, 1.0, stream)
        for n_k, step, m, stream in zip(lengths, steps, momenta, streams)
    ]
    return stages, settings.batches(), cost


def dp_gd(settings: RunSettings):
    """Return the run of DP-GD (SGD with a batch size): x_{t+1} = x_t - (g + eta) / sqrt(t)."""
    T = settings.n_iter
    return _uniform_noise_stages(settings, [T], [1.0 / np.sqrt(np.arange(1, T + 1))], [0.0], False)


def dp_hb(settings: RunSettings):
    """Return the run of DP-HB (4.5) with the thesis' classical parameters."""
    kappa = condition_number(settings)
    momentum = nesterov_momentum(kappa) ** 2
    return _uniform_noise_stages(
        settings, [settings.n_iter], [1.0 / settings.problem.smoothness_bound()], [momentum], False
    )


def dp_nag(settings: RunSettings):
    """Return the run of DP-NAG (4.6) with the thesis' classical parameters."""
    kappa = condition_number(settings)
    return _uniform_noise_stages(
        settings,
        [settings.n_iter],
        [1.0 / settings.problem.smoothness_bound()],
        [nesterov_momentum(kappa)],
        True,
    )


def _masg(settings: RunSettings, first: int | None):
    lipschitz, mu = settings.problem.smoothness_bound(), settings.problem.strong_convexity()
    lengths = stage_lengths(lipschitz / mu, settings.n_iter, first=first)
    steps = [1.0 / lipschitz] + [
        1.0 / (2 ** (2 * k) * lipschitz) for k in range(2, len(lengths) + 1)
    ]
    momenta = [(1 - math.sqrt(mu * a)) / (1 + math.sqrt(mu * a)) for a in steps]
    return _uniform_noise_stages(settings, lengths, steps, momenta, True)


def m_asg(settings: RunSettings):
    """Return the run of M-ASG with DP noise (thesis (4.38))."""
    return _masg(settings, first=None)


def m_asg_star(settings: RunSettings):
    """Return the run of M-ASG* with DP noise: the first stage length from sigma^2 and Delta."""
    kappa = condition_number(settings)
    levels, _ = calibrate(settings, [ReleaseGroup(settings.n_iter, 1.0)])
    d = settings.problem.d
    sigma2 = d * (noise_variance(settings, levels[0], 1.0) + settings.sampling_variance())
    ratio = (
        settings.problem.initial_gap_bound()
        * settings.problem.smoothness_bound()
        / (sigma2 * math.sqrt(kappa))
    )
    first = (
        math.ceil(math.sqrt(kappa) * math.log(max(ratio, math.e)))
        if sigma2 > 0
        else settings.n_iter
    )
    return _masg(settings, first=first)
