"""Noise for T gradient releases, drawn up front with the project's exact discrete samplers.

Each release follows dp.mechanisms' recipe (see its docstring): the value is rounded to a
power-of-two grid chosen from public quantities, integer noise drawn exactly (CKS 2020) is added,
and the sum is scaled back. Drawing all T noise vectors at once is the same law as drawing them
one by one (the noise never depends on the data), and far faster for thousands of iterations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dp._random import RandomBits
from dp.discrete import discrete_gaussian, discrete_laplace
from dp.mechanisms import GAUSSIAN_GRID_BITS, LAPLACE_GRID_BITS, _from_grid, _grid_step, _to_grid


@dataclass
class NoiseStream:
    """Pre-drawn noise for `n_releases` releases of d values; `release(t, v)` returns v + noise_t."""

    mechanism: str  # "laplace", "gaussian" or "none"
    sensitivity: float  # L1 (Laplace) or L2 (Gaussian) sensitivity of one release
    noise_scale: float  # Laplace b or Gaussian sigma per coordinate, in the units of the values
    granularity: float  # grid step; 0 when there is no noise
    draws: np.ndarray | None  # (n_releases, d) integers

    def release(self, t: int, values: np.ndarray) -> np.ndarray:
        """Return the t-th noisy release of `values` (exact grid arithmetic, as dp.mechanisms)."""
        if self.draws is None:
            return values
        return _from_grid(_to_grid(values, self.granularity), self.draws[t], self.granularity)

    def fits_exactly(self, value_bound: float) -> bool:
        """Return whether every release of values bounded by `value_bound` stays on the exact grid,
        asking dp.mechanisms' own range checks with the public bound and the largest noise draw."""
        if self.draws is None:
            return True
        try:
            _from_grid(
                _to_grid(np.array([value_bound]), self.granularity),
                np.array([np.abs(self.draws).max()]),
                self.granularity,
            )
        except ValueError:
            return False
        return True

    @property
    def variance(self) -> float:
        """Return the per-coordinate noise variance (2 b^2 for Laplace, sigma^2 for Gaussian)."""
        if self.mechanism == "laplace":
            return 2.0 * self.noise_scale**2
        return self.noise_scale**2


def silent_stream() -> NoiseStream:
    """Return the stream of the non-private limit (epsilon = inf): no noise at all."""
    return NoiseStream("none", 0.0, 0.0, 0.0, None)


def laplace_stream(
    l1_sensitivity: float, epsilon: float, d: int, n_releases: int, bits: RandomBits
) -> NoiseStream:
    """Return noise making each release epsilon-DP for L1 sensitivity `l1_sensitivity` (Laplace)."""
    if math.isinf(epsilon):
        return silent_stream()
    gamma = _grid_step(l1_sensitivity / epsilon, LAPLACE_GRID_BITS)
    scale_int = math.ceil((l1_sensitivity + d * gamma) / (epsilon * gamma))
    draws = discrete_laplace(scale_int, n_releases * d, bits).reshape(n_releases, d)
    return NoiseStream("laplace", l1_sensitivity, scale_int * gamma, gamma, draws)


def gaussian_stream(
    l2_sensitivity: float, noise_multiplier: float, d: int, n_releases: int, bits: RandomBits
) -> NoiseStream:
    """Return discrete Gaussian noise with sigma >= noise_multiplier * (inflated L2 sensitivity).

    Each release is then exactly 1 / (2 noise_multiplier^2)-zCDP (CKS 2020 Thm 14), the grid
    rounding included; within total variation d / (8 * 2^48) of the continuous Gaussian.
    """
    if noise_multiplier == 0.0:
        return silent_stream()
    gamma = _grid_step(noise_multiplier * l2_sensitivity, GAUSSIAN_GRID_BITS)
    sigma_int = math.ceil(noise_multiplier * (l2_sensitivity + math.sqrt(d) * gamma) / gamma)
    draws = discrete_gaussian(sigma_int, n_releases * d, bits).reshape(n_releases, d)
    return NoiseStream("gaussian", l2_sensitivity, sigma_int * gamma, gamma, draws)


def gaussian_tv_slack(d: int, n_releases: int, epsilon: float) -> float:
    """Return the delta lost to the discrete-vs-continuous Gaussian gap over n_releases (see dp.mechanisms)."""
    eta = d / (8.0 * float(2**GAUSSIAN_GRID_BITS) ** 2)
    return n_releases * (1.0 + math.exp(epsilon)) * eta
