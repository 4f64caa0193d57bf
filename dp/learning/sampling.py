"""Which records each iteration reads: all, a uniform sample, a disjoint bucket, or a Poisson sample."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class FullBatches:
    """Every iteration reads all n records (thesis Alg. 4 and 5)."""

    n: int
    divisor = None

    @property
    def size(self) -> int:
        return self.n

    def rows(self, t: int):
        return slice(None)


@dataclass
class UniformBatches:
    """Each iteration reads m records drawn uniformly without replacement (thesis Alg. 6 line 4, Alg. 7 line 8)."""

    n: int
    size: int
    rng: np.random.Generator
    divisor = None

    def rows(self, t: int):
        return self.rng.choice(self.n, self.size, replace=False)


@dataclass
class DisjointBuckets:
    """Iteration t reads records [t b, (t + 1) b): every record is used once (DP-onlineGDwS, Fig. 4.13)."""

    n: int
    size: int
    divisor = None

    def rows(self, t: int):
        return slice(t * self.size, (t + 1) * self.size)


@dataclass
class PoissonBatches:
    """Each record joins an iteration's batch independently with probability q (Abadi et al.; Opacus).

    The batch sum is divided by the expected size q n, so the divisor is public.
    """

    n: int
    rate: float
    rng: np.random.Generator

    @property
    def size(self) -> float:
        return self.rate * self.n

    @property
    def divisor(self) -> float:
        return self.rate * self.n

    def rows(self, t: int):
        return np.flatnonzero(self.rng.random(self.n) < self.rate)
