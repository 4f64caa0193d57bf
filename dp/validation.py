"""Checks of privacy parameters and data, done once at the boundary of the dp package."""

from __future__ import annotations

import math
import numbers
import warnings

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


class ImplicitDefault(float):
    """A default value the caller did not choose: it behaves as the number it holds, and the code
    that uses it can tell (`is_implicit`) that nobody set it, to warn (PrivacyLeakWarning).

    copy, deepcopy and pickling keep the marker, so scikit-learn's `clone` of an estimator whose
    parameter was left at its default still warns; any value given explicitly, even an equal
    one, is a plain float and does not.
    """

    def __new__(cls, value: float, name: str):
        obj = super().__new__(cls, value)
        obj.name = name
        return obj

    def __repr__(self) -> str:
        return repr(float(self))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (ImplicitDefault, (float(self), self.name))


def is_implicit(value) -> bool:
    """Return True when `value` is an ImplicitDefault, i.e. a default the caller never set."""
    return isinstance(value, ImplicitDefault)


# The defaults a practitioner gets without choosing (both warn when used, diffprivlib style).
DEFAULT_EPSILON = ImplicitDefault(1.0, "epsilon")
DEFAULT_CLIP = ImplicitDefault(1.0, "clip")


def warn_implicit_clip(clip, stacklevel: int = 3) -> None:
    """Warn (PrivacyLeakWarning) when the clip bound was left at its default: data-independent."""
    if is_implicit(clip):
        warnings.warn(
            f"clip not given: rows are clipped to L2 norm {float(clip):g}, the default. The guarantee "
            "holds for any bound, but a bound that does not fit the data biases the estimate; choose "
            "clip from public knowledge of the data's range (never from the data themselves) and pass "
            "it explicitly to silence this warning",
            PrivacyLeakWarning,
            stacklevel=stacklevel,
        )


def constant_columns(X: np.ndarray) -> np.ndarray:
    """Return the indices of the columns of X whose values are all equal."""
    return np.flatnonzero(np.all(X == X[0], axis=0))


def check_data(X, min_rows: int = 1, private: bool = False) -> np.ndarray:
    """Return X as a 2-D float64 array; non-finite entries raise.

    These are preconditions of the data, checked before anything is released. With
    private=False the error names the first bad row and column (a non-private run: the caller
    sees its own data). With private=True the messages say only what is wrong, never where, how
    many or which value, nor the number of rows (private under add-remove): a message is output
    too, and one that quotes the data is a release nobody paid for. The refusal itself still
    depends on the data, which is why finite data (and >= min_rows rows) are documented
    preconditions of every private release.
    """
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        if private:
            raise DataError("data must be numeric (an array of numbers, rows = records)") from None
        raise DataError(f"data must be numeric: {exc}") from None
    if arr.ndim != 2:
        raise DataError(f"data must be a 2-D array (rows = records), got {arr.ndim} dimension(s)")
    if arr.shape[0] < min_rows or arr.shape[1] < 1:
        shown = f"{arr.shape[1]} column(s)" if private else f"shape {arr.shape}"
        raise DataError(f"data needs at least {min_rows} row(s) and 1 column, got {shown}")
    bad = ~np.isfinite(arr)
    if bad.any():
        if private:
            raise DataError(
                "data contain non-finite values (NaN or inf): a private release needs finite data; "
                "remove or impute them first (where they are is not reported: that is data too)"
            )
        row, col = np.argwhere(bad)[0]
        raise DataError(
            f"data contains {int(bad.sum())} non-finite value(s); first at row {row}, "
            f"column {col}: {arr[row, col]!r}"
        )
    return arr
