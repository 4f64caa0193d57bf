"""What every method needs to build its run: the problem, the privacy target and the randomness."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dp._random import RandomBits
from dp.learning.accounting import (
    PrivacyCost,
    ReleaseGroup,
    charge,
    check_run_epsilon,
    laplace_epsilons,
    sampled_gaussian_multipliers,
    zcdp_multipliers,
)
from dp.learning.noise import NoiseStream, gaussian_stream, laplace_stream, silent_stream
from dp.learning.problems import RegularizedProblem
from dp.learning.sampling import FullBatches, UniformBatches

NON_PRIVATE = PrivacyCost(math.inf, 0.0, None, "none (epsilon = inf: the non-private limit)")


@dataclass
class RunSettings:
    """The inputs of one private run; `noise` is 'laplace' (thesis) or 'gaussian' (our variants)."""

    problem: RegularizedProblem
    epsilon: float
    delta: float
    n_iter: int
    beta: float
    batch_size: int  # = n for the full-gradient methods
    noise: str
    bits: RandomBits
    rng: np.random.Generator
    budget: object  # the shared accountant every release is charged to
    method: str  # the ledger label

    @property
    def sampled(self) -> bool:
        return self.batch_size < self.problem.n

    def batches(self):
        """Return the batch plan: all records, or m uniform records per iteration."""
        if self.sampled:
            return UniformBatches(self.problem.n, self.batch_size, self.rng)
        return FullBatches(self.problem.n)

    def sensitivity(self, weight: float) -> float:
        """Return the sensitivity of one release of weight * (clipped mean batch gradient)."""
        norm = 1 if self.noise == "laplace" else 2
        return weight * self.problem.sensitivity(norm, self.batch_size)

    def sampling_variance(self) -> float:
        """Return the per-coordinate variance bound of the batch gradient (thesis (A.5)-(A.7)).

        S2^2 / (4 d) * (1 - (m - 1)/(n - 1)) / m for m-of-n samples (the mean-scale (4.55));
        (S2 / n)^2 / (4 d) for the full gradient, as the thesis keeps in (4.21).
        """
        n, d, m = self.problem.n, self.problem.d, self.batch_size
        per_record = self.problem.sensitivity(2, 1)
        if m < n:
            return per_record**2 / (4 * d) * (1 - (m - 1) / (n - 1)) / m
        return (per_record / n) ** 2 / (4 * d)


def calibrate(settings: RunSettings, groups: list[ReleaseGroup], disjoint: bool = False):
    """Return (noise level per group, cost): base epsilon (Laplace) or noise multiplier (Gaussian).

    `disjoint`: every record is read by one release only (DP-onlineGDwS), so by parallel
    composition each release may spend the whole budget.
    """
    s = settings
    if math.isinf(s.epsilon):
        return [math.inf if s.noise == "laplace" else 0.0] * len(groups), NON_PRIVATE
    account = [ReleaseGroup(1, 1.0)] if disjoint else groups
    if s.noise == "laplace":  # disjoint buckets are not a random sample: no amplification
        sample = s.problem.n if disjoint else s.batch_size
        levels, cost = laplace_epsilons(s.epsilon, account, sample, s.problem.n)
    elif not s.delta > 0:
        raise ValueError("the Gaussian variants need delta > 0 (e.g. delta=1e-5)")
    elif s.sampled and not disjoint:
        levels, cost = sampled_gaussian_multipliers(
            s.epsilon, s.delta, tuple(account), s.batch_size, s.problem.n, s.problem.d
        )
    else:
        levels, cost = zcdp_multipliers(s.epsilon, s.delta, account)
    return (levels * len(groups) if disjoint else levels), cost


def noise_variance(settings: RunSettings, level: float, weight: float) -> float:
    """Return the per-coordinate variance of the noise a release at this level gets (before gridding)."""
    sensitivity = settings.sensitivity(weight)
    if settings.noise == "laplace":
        return 2.0 * (sensitivity / level) ** 2
    return (level * sensitivity) ** 2


def make_streams(
    settings: RunSettings, groups: list[ReleaseGroup], weight: float, disjoint: bool = False
) -> tuple[list[NoiseStream], PrivacyCost]:
    """Calibrate, charge the budget for the whole run, then draw one noise stream per release group."""
    levels, cost = calibrate(settings, groups, disjoint)
    if math.isinf(settings.epsilon):
        check_run_epsilon(settings.epsilon, settings.budget)  # nothing to charge: no budget either
        return [silent_stream() for _ in groups], cost
    total = sum(g.n_releases for g in groups)
    charge(
        settings.budget,
        cost,
        f"{settings.method}: {total} noisy gradient releases ({cost.accounting})",
    )
    make = laplace_stream if settings.noise == "laplace" else gaussian_stream
    d = settings.problem.d
    streams = [
        make(settings.sensitivity(weight), level, d, g.n_releases, settings.bits)
        for level, g in zip(levels, groups)
    ]
    return streams, cost
