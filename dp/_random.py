"""Sources of uniform random bits: a secure default and a seedable one for tests.

Every sampler in `dp` consumes only uniform 64-bit words and exact integer arithmetic (never a
floating-point uniform), so the distribution of a release depends only on these words.

A private release never reuses randomness across fits. Two fits that draw the same noise on
neighbouring data sets release the exact, noise-free difference of their statistics, so:
- random_state=None (the default): fresh words from os.urandom for every fit;
- a numpy Generator is used by reference: every fit advances the one object. The estimators keep
  it by reference through sklearn's `clone` (which would otherwise deep-copy its state into every
  fold, and every fold would draw the same noise: `SharedRandomState`), and refuse to be pickled
  or deep-copied while holding one (a copy of the state is a copy of the noise);
- an integer seed is for tests and benchmarks: it warns (PrivacyLeakWarning), from the argument
  alone, because the same seed gives the same noise.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from dp.validation import PrivacyLeakWarning

# What an integer seed risks, and the advice in the Python API's words; an interface with other
# words for random_state (the command line's --seed) names its own parameter and gives its own
# advice around SEED_RISK.
SEED_RISK = (
    "the same seed gives the same noise, so two fits or releases with one seed (a refit, the folds "
    "of a cross-validation, a rerun) release the exact difference of their statistics; seeds are "
    "for tests only"
)
SEED_ADVICE = "pass random_state=None (fresh OS entropy for every release) for a real release"
SEED_WARNING = f"random_state is an integer seed: {SEED_RISK}; {SEED_ADVICE}"


def warn_seed(stacklevel: int = 3) -> None:
    """Warn (PrivacyLeakWarning) that an integer seed makes the noise repeatable: data-independent."""
    warnings.warn(SEED_WARNING, PrivacyLeakWarning, stacklevel=stacklevel + 1)


class RandomBits:
    """Uniform random 64-bit words from os.urandom (default) or a seeded NumPy generator.

    The seeded mode exists so that tests and benchmarks are reproducible; it is NOT a
    cryptographically secure source and must not be used for a real release.
    """

    def __init__(self, random_state=None, stacklevel: int = 2):
        if random_state is None:
            self._rng = None
        elif isinstance(random_state, np.random.Generator):
            self._rng = random_state  # by reference: every draw advances the caller's generator
        elif isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
            warn_seed(stacklevel)
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


def as_random_bits(random_state, stacklevel: int = 3) -> RandomBits:
    """Return a RandomBits for None (secure), an int seed (warns), a Generator or a RandomBits."""
    if isinstance(random_state, RandomBits):
        return random_state
    return RandomBits(random_state, stacklevel=stacklevel + 1)


class SharedRandomState:
    """Mixin for private estimators: a Generator given as random_state is never copied.

    sklearn's `clone` deep-copies every parameter, so each clone (each fold of a cross-validation,
    each candidate of a grid search) would start from the same Generator state and draw the same
    noise. Here `clone` hands the clone the same Generator object (as it does the shared
    accountant), and pickling or deep-copying an estimator that holds one is refused (joblib's
    worker processes would each get a copy of the state). None and integer seeds clone as usual.
    """

    def __sklearn_clone__(self):
        # why lazy: scikit-learn loads only when a RandomState is given
        from sklearn.base import clone

        params = {
            name: value if isinstance(value, np.random.Generator) else clone(value, safe=False)
            for name, value in self.get_params(deep=False).items()
        }
        new = type(self)(**params)
        if hasattr(self, "_metadata_request"):
            new._metadata_request = clone(self._metadata_request)
        return new

    def __getstate__(self):
        if isinstance(getattr(self, "random_state", None), np.random.Generator):
            raise TypeError(
                f"a {type(self).__name__} holding a numpy Generator as random_state cannot be "
                "pickled or deep-copied: the copy would draw the same noise as the original; use "
                "sklearn.clone (it shares the Generator) or random_state=None"
            )
        return super().__getstate__()
