"""Sources of uniform random bits: a secure default and a seedable one for tests.

Every sampler in `dp` consumes only uniform 64-bit words and exact integer arithmetic (never a
floating-point uniform), so the distribution of a release depends only on these words.
"""

from __future__ import annotations

import os

import numpy as np


class RandomBits:
    """Uniform random 64-bit words from os.urandom (default) or a seeded NumPy generator.

    The seeded mode exists so that tests and benchmarks are reproducible; it is NOT a
    cryptographically secure source and must not be used for a real release.
    """

    def __init__(self, random_state=None):
        if random_state is None:
            self._rng = None
        elif isinstance(random_state, np.random.Generator):
            self._rng = random_state
        elif isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
            self._rng = np.random.default_rng(int(random_state))
        else:
            raise TypeError(
                "random_state must be None (secure source), an int seed or a numpy Generator, "
                f"got {type(random_state).__name__}"
            )

    @property
    def secure(self) -> bool:
        """True when words come from the operating system's CSPRNG."""
        return self._rng is None

    def bytes(self, n: int) -> bytes:
        """Return n uniform random bytes."""
        if self._rng is None:
            return os.urandom(n)
        return self._rng.bytes(n)

    def words(self, n: int) -> np.ndarray:
        """Return n independent uniform uint64 words."""
        return np.frombuffer(self.bytes(8 * int(n)), dtype=np.uint64).copy()

    def below(self, bound) -> np.ndarray:
        """Return exact uniform integers in [0, bound) (int64), one per entry of `bound`.

        Rejection sampling on the low bits of a word: no modulo bias, no floating point.
        Bounds must lie in [1, 2**62].
        """
        bound = np.asarray(bound, dtype=np.int64)
        out = np.empty(bound.shape, dtype=np.int64)
        flat_bound = bound.ravel()
        flat_out = out.ravel()
        # bit length of (bound - 1): frexp is exact below 2**53 and can only over-estimate above,
        # which keeps the mask wide enough (rejection stays exact, just a little slower).
        _, exponent = np.frexp(np.maximum(flat_bound - 1, 0).astype(np.float64))
        mask = ((np.uint64(1) << exponent.astype(np.uint64)) - np.uint64(1)).astype(np.uint64)
        todo = np.arange(flat_bound.size)
        while todo.size:
            draw = (self.words(todo.size) & mask[todo]).astype(np.int64)
            ok = draw < flat_bound[todo]
            flat_out[todo[ok]] = draw[ok]
            todo = todo[~ok]
        return flat_out.reshape(bound.shape)

    def below_big(self, bound: int) -> int:
        """Return one exact uniform Python int in [0, bound) for an arbitrarily large bound."""
        nbits = max(int(bound - 1).bit_length(), 1)
        nbytes = (nbits + 7) // 8
        while True:
            value = int.from_bytes(self.bytes(nbytes), "little") >> (8 * nbytes - nbits)
            if value < bound:
                return value


def as_random_bits(random_state) -> RandomBits:
    """Return a RandomBits for None (secure), an int seed, a Generator or a RandomBits."""
    if isinstance(random_state, RandomBits):
        return random_state
    return RandomBits(random_state)
