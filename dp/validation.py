"""Checks of privacy parameters and data, done once at the boundary of the dp package."""

from __future__ import annotations

import math
import numbers

import numpy as np


class PrivacyParameterError(ValueError):
    """An epsilon, delta, sensitivity or clipping bound outside its valid range."""


class DataError(ValueError):
    """Input data that cannot be used: wrong shape, too few rows, non-finite values."""


def _as_real(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PrivacyParameterError(f"{name} must be a real number, got {value!r}")
    return float(value)


def check_epsilon(epsilon) -> float:
    """Return epsilon as float after checking 0 < epsilon < inf."""
    eps = _as_real(epsilon, "epsilon")
    if not (eps > 0 and math.isfinite(eps)):
        raise PrivacyParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    return eps


def check_delta(delta, allow_zero: bool = True) -> float:
    """Return delta as float after checking 0 <= delta < 1 (0 < delta when allow_zero is False)."""
    d = _as_real(delta, "delta")
    if not (0.0 <= d < 1.0) or (d == 0.0 and not allow_zero):
        bound = "[0, 1)" if allow_zero else "(0, 1)"
        raise PrivacyParameterError(f"delta must lie in {bound}, got {delta!r}")
    return d


def check_mechanism_delta(mechanism, delta) -> float:
    """Return delta checked for `mechanism`: 0 for 'laplace' (pure DP), in (0, 1) for 'gaussian'.

    A delta given to the Laplace mechanism would be silently unused, so it is refused.
    """
    if mechanism not in ("laplace", "gaussian"):
        raise ValueError(f"mechanism must be 'laplace' or 'gaussian', got {mechanism!r}")
    value = check_delta(delta, allow_zero=mechanism == "laplace")
    if mechanism == "laplace" and value != 0.0:
        raise PrivacyParameterError(
            f"delta={delta!r} is not used by the laplace mechanism (pure epsilon-DP); "
            "set delta to 0 or use mechanism 'gaussian'"
        )
    return value


def check_positive(value, name: str) -> float:
    """Return value as float after checking 0 < value < inf."""
    v = _as_real(value, name)
    if not (v > 0 and math.isfinite(v)):
        raise PrivacyParameterError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def check_alpha(alpha) -> float:
    """Return the penalty alpha as float after checking 0 <= alpha < inf."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise ValueError(f"alpha must be a number >= 0 (or 'cv'), got {alpha!r}")
    a = float(alpha)
    if not (a >= 0 and math.isfinite(a)):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
    return a


class DataWarning(UserWarning):
    """Data that can be used but probably not as intended (e.g. a constant column)."""


class PrivacyLeakWarning(UserWarning):
    """A privacy parameter left implicit (a clip bound not given, a budget not shared): said from the
    arguments alone, never from the data, so the warning itself releases nothing."""


def constant_columns(X: np.ndarray) -> np.ndarray:
    """Return the indices of the columns of X whose values are all equal."""
    return np.flatnonzero(np.all(X == X[0], axis=0))


def check_data(X, min_rows: int = 1) -> np.ndarray:
    """Return X as a 2-D float64 array; non-finite entries raise naming the first bad row/column."""
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"data must be numeric: {exc}") from None
    if arr.ndim != 2:
        raise DataError(f"data must be a 2-D array (rows = records), got shape {arr.shape}")
    if arr.shape[0] < min_rows or arr.shape[1] < 1:
        raise DataError(f"data needs at least {min_rows} row(s) and 1 column, got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DataError(
            f"data contains {int(bad.sum())} non-finite value(s); first at row {row}, "
            f"column {col}: {arr[row, col]!r}"
        )
    return arr
