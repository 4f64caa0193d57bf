"""Exact samplers for the discrete Laplace and discrete Gaussian distributions on the integers.

Canonne, Kamath and Steinke (2020), "The Discrete Gaussian for Differential Privacy", Alg. 1-3,
vectorized over many draws with NumPy. Only uniform integers and exact integer/rational
comparisons are used, so the sampled distribution is exactly the target one (no floating-point
log or exp of a uniform, which is what Mironov 2012 attacks).
"""

from __future__ import annotations

import numpy as np

from dp._random import RandomBits

_TWO64 = 1 << 64


def _bernoulli_exp_fraction(num: np.ndarray, den: np.ndarray, bits: RandomBits) -> np.ndarray:
    """Return booleans B with P[B] = exp(-num/den) for 0 <= num <= den (CKS Alg. 1).

    num/den are int64 arrays with den * K < 2**62 for the few K the loop reaches.
    """
    num = np.asarray(num, dtype=np.int64)
    den = np.broadcast_to(np.asarray(den, dtype=np.int64), num.shape)
    k = np.ones(num.shape, dtype=np.int64)
    active = np.arange(num.size)
    while active.size:
        # A ~ Bernoulli(gamma / K); the loop runs K steps with probability gamma^(K-1)/(K-1)!
        success = bits.below(den[active] * k[active]) < num[active]
        k[active[success]] += 1
        active = active[success]
    return (k % 2) == 1


def _bernoulli_exp_minus_one(size: int, bits: RandomBits) -> np.ndarray:
    """Return `size` booleans, each True with probability exp(-1)."""
    ones = np.ones(size, dtype=np.int64)
    return _bernoulli_exp_fraction(ones, ones, bits)


def _bernoulli_rational_big(r: np.ndarray, den: np.ndarray, bits: RandomBits) -> np.ndarray:
    """Return booleans B with P[B] = r/den exactly, for Python-int arrays 0 <= r <= den.

    A 64-bit uniform word W places U = (W + u)/2**64, u uniform in [0, 1), in the interval
    [W, W + 1)/2**64, and B = [U < r/den]. Exact integer comparisons decide B unless that interval
    straddles r/den, i.e. W den < r 2**64 < (W + 1) den (one W in 2**64). Then B holds exactly
    when u < (r 2**64 - W den)/den =: k/den, with 0 < k < den an integer, and a uniform integer V in
    [0, den) gives P[V < k] = k/den: the outcome has probability exactly r/den in every case.
    (Comparing V with r instead of k in the straddling case would be off by up to 2**-64.)
    """
    w = bits.words(r.size).astype(object)
    lower = w * den
    target = r * _TWO64
    out = (lower + den) <= target
    undecided = ~out & (lower < target)
    for i in np.flatnonzero(undecided.astype(bool)):
        k = int(target[i]) - int(lower[i])  # 0 < k < den in the straddling case
        out[i] = bits.below_big(int(den[i])) < k
    return out.astype(bool)


def _bernoulli_exp_big(num: np.ndarray, den: int, bits: RandomBits) -> np.ndarray:
    """Return booleans B with P[B] = exp(-num/den) for Python-int num >= 0 (CKS Alg. 1, gamma > 1).

    exp(-gamma) = exp(-1)^floor(gamma) * exp(-(gamma - floor(gamma))): floor(gamma) independent
    Bernoulli(exp(-1)) successes, then CKS Alg. 1 on the fractional part with exact rationals.
    """
    whole = (num // den).astype(np.int64)
    frac = num % den
    alive = np.ones(num.size, dtype=bool)
    remaining = whole.copy()
    while True:
        idx = np.flatnonzero(alive & (remaining > 0))
        if not idx.size:
            break
        alive[idx[~_bernoulli_exp_minus_one(idx.size, bits)]] = False
        remaining[idx] -= 1
    k = np.ones(num.size, dtype=np.int64)
    active = np.flatnonzero(alive)
    while active.size:
        den_k = den * k[active].astype(object)
        success = _bernoulli_rational_big(frac[active], den_k, bits)
        k[active[success]] += 1
        active = active[success]
    return alive & ((k % 2) == 1)


def discrete_laplace(scale: int, size: int, bits: RandomBits) -> np.ndarray:
    """Return `size` draws with P[Z = z] proportional to exp(-|z| / scale) (CKS Alg. 2, t = scale).

    `scale` is a positive integer below 2**50; draws are int64.
    """
    scale = int(scale)
    if not 1 <= scale < 1 << 50:
        raise ValueError(f"discrete Laplace scale must be an integer in [1, 2**50), got {scale}")
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        # acceptance of one candidate is about (1 - 1/e) * (1 - small), so over-draw a little
        batch = int(1.7 * (size - filled)) + 16
        u = bits.below(np.full(batch, scale, dtype=np.int64))
        keep = _bernoulli_exp_fraction(u, np.full(batch, scale, dtype=np.int64), bits)
        u = u[keep]
        # V ~ Geometric(1 - exp(-1)): count Bernoulli(exp(-1)) successes before the first failure
        v = np.zeros(u.size, dtype=np.int64)
        active = np.arange(u.size)
        while active.size:
            hit = _bernoulli_exp_minus_one(active.size, bits)
            v[active[hit]] += 1
            active = active[hit]
        magnitude = u + scale * v
        negative = bits.below(np.full(u.size, 2, dtype=np.int64)) == 1
        # the sign flip would count zero twice; reject (negative, 0) to keep the law symmetric
        valid = ~(negative & (magnitude == 0))
        draws = np.where(negative, -magnitude, magnitude)[valid]
        take = min(draws.size, size - filled)
        out[filled : filled + take] = draws[:take]
        filled += take
    return out


def discrete_gaussian(sigma: int, size: int, bits: RandomBits) -> np.ndarray:
    """Return `size` draws with P[Z = z] proportional to exp(-z^2 / (2 sigma^2)) (CKS Alg. 3).

    `sigma` is a positive integer (so sigma^2 is an exact integer); draws are int64.
    """
    sigma = int(sigma)
    if not 1 <= sigma < 1 << 40:
        raise ValueError(f"discrete Gaussian sigma must be an integer in [1, 2**40), got {sigma}")
    sigma2 = sigma * sigma
    t = sigma + 1  # floor(sigma) + 1
    den = 2 * sigma2 * t * t
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        batch = int(1.6 * (size - filled)) + 16
        y = discrete_laplace(t, batch, bits)
        # accept with probability exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)), written over integers
        num = (np.abs(y).astype(object) * t - sigma2) ** 2
        accept = _bernoulli_exp_big(num, den, bits)
        draws = y[accept]
        take = min(draws.size, size - filled)
        out[filled : filled + take] = draws[:take]
        filled += take
    return out
