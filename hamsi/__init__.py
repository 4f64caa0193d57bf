"""hamsi: second-order incremental optimization (HAMSI) and private estimation on Dask."""

from hamsi.data import Ratings
from hamsi.errors import DivergenceError, InputError

__version__ = "0.1.0"

__all__ = ["Ratings", "InputError", "DivergenceError", "__version__"]
