"""DP-SGD as practitioners run it (Abadi et al. 2016; the Opacus recipe), the Gaussian baseline.

Poisson sampling at rate q = batch_size / n, per-example gradients clipped to L2 norm C, Gaussian
noise z C on the sum, division by the expected batch size q n, a constant step 1/L; z calibrated
by the RDP accountant of the Poisson-sampled Gaussian (dp.learning.accounting).
"""

from __future__ import annotations

import math

import numpy as np

from dp.learning.accounting import charge, poisson_gaussian_multiplier
from dp.learning.iterations import Stage
from dp.learning.noise import gaussian_stream, silent_stream
from dp.learning.sampling import PoissonBatches
from dp.learning.settings import NON_PRIVATE, RunSettings


def dp_sgd(settings: RunSettings):
    """Return (stages, batches, cost) of DP-SGD with Poisson batches of expected size batch_size."""
    problem, T = settings.problem, settings.n_iter
    if settings.noise != "gaussian":
        raise ValueError("dp-sgd uses Gaussian noise")
    batches = PoissonBatches(problem.n, settings.batch_size / problem.n, settings.rng)
    if math.isinf(settings.epsilon):
        stream, cost = silent_stream(), NON_PRIVATE
    else:
        if not settings.delta > 0:
            raise ValueError("dp-sgd needs delta > 0 (e.g. delta=1e-5)")
        z, cost = poisson_gaussian_multiplier(
            settings.epsilon, settings.delta, batches.rate, T, problem.d
        )
        charge(
            settings.budget,
            cost,
            f"{settings.method}: {T} noisy gradient releases ({cost.accounting})",
        )
        # add/remove-one sensitivity of the sum of clipped gradients is C; the release is sum / (q n)
        stream = gaussian_stream(problem.clip / batches.divisor, z, problem.d, T, settings.bits)
    stage = Stage(np.full(T, 1.0 / problem.smoothness_bound()), 0.0, False, 1.0, stream)
    return [stage], batches, cost
