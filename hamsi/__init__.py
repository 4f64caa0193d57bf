"""hamsi: second-order incremental optimization (HAMSI) and private estimation on Dask."""

# First: OpenMP reads its wait policy once, when numba loads its threading layer.
from hamsi import threading_setup  # noqa: F401  (isort: skip)
import importlib

from hamsi.data import Ratings
from hamsi.errors import DivergenceError, InputError

__version__ = "0.1.0"

# Heavier parts load on first use so that `import hamsi` stays fast.
_LAZY = {
    "load_ratings": "hamsi.data.readers",
    "MatrixFactorizer": "hamsi.estimator",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hamsi' has no attribute {name!r}")


__all__ = [
    "Ratings",
    "InputError",
    "DivergenceError",
    "load_ratings",
    "MatrixFactorizer",
    "__version__",
]
