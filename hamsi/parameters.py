"""Declared hyper-parameter constraints (scikit-learn's `_parameter_constraints` style), checked in one place.

An estimator declares, per parameter, what it accepts; `check_parameters` raises InputError on the
first parameter that breaks its constraint, naming it the way the caller speaks (a keyword in
Python, a flag on the command line).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass

import numpy as np

from hamsi.errors import InputError

AUTO = "auto"
# the default of a deprecated parameter: "not given" (scikit-learn's convention for a rename)
DEPRECATED = "deprecated"


@dataclass(frozen=True)
class Integer:
    """An integer >= minimum (bools refused); optionally None or "auto"."""

    minimum: int = 1
    none: bool = False
    auto: bool = False

    def problem(self, value) -> str | None:
        if (value is None and self.none) or (self.auto and value == AUTO):
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or value < self.minimum
        ):
            return f"must be an integer >= {self.minimum}"
        return None


@dataclass(frozen=True)
class Real:
    """A finite number >= 0 (> 0 when positive, < below when given); optionally None or "auto"."""

    none: bool = False
    auto: bool = False
    positive: bool = False
    below: float | None = None

    def problem(self, value) -> str | None:
        if (value is None and self.none) or (self.auto and value == AUTO):
            return None
        if self._accepts(value):
            return None
        bound = f"in [0, {self.below:g})" if self.below else ("> 0" if self.positive else ">= 0")
        return f"must be a finite number {bound}" + (" or 'auto'" if self.auto else "")

    def _accepts(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if not math.isfinite(value) or value < 0 or (self.positive and value == 0):
            return False
        return self.below is None or value < self.below


@dataclass(frozen=True)
class Boolean:
    """True or False (numpy's bool too); 0 and 1 are not."""

    def problem(self, value) -> str | None:
        if isinstance(value, (bool, np.bool_)):
            return None
        return "must be True or False"


@dataclass(frozen=True)
class Choice:
    """One of `options` (compared lower-cased when `lower`)."""

    options: tuple
    lower: bool = False

    def problem(self, value) -> str | None:
        seen = str(value).lower() if self.lower else value
        if seen in self.options:
            return None
        return f"choose one of {', '.join(map(str, self.options))}"


def check_parameters(estimator, constraints: dict, name=lambda parameter: parameter) -> None:
    """Raise InputError naming the first parameter of `estimator` that breaks its constraint.

    A deprecated name (Renamed) that was given, and is valid, warns FutureWarning naming its
    successor.
    """
    for parameter, constraint in constraints.items():
        value = getattr(estimator, parameter)
        problem = constraint.problem(value)
        if problem is None:
            continue
        if isinstance(constraint, Choice):
            raise InputError(f"unknown {name(parameter)} {value!r}; {problem}")
        raise InputError(f"{name(parameter)} {problem}; got {value!r}")
    warn_renamed(estimator, constraints, name)


@dataclass(frozen=True)
class Renamed:
    """A deprecated parameter name for `new`: DEPRECATED (not given), else a value `new` accepts."""

    new: str
    constraint: object

    def problem(self, value) -> str | None:
        if is_deprecated_default(value):
            return None
        return self.constraint.problem(value)


def is_deprecated_default(value) -> bool:
    """True when a deprecated parameter holds its default, DEPRECATED (it was not given)."""
    return isinstance(value, str) and value == DEPRECATED


def renamed_value(estimator, new: str):
    """Return the estimator's parameter `new`: a deprecated name's value when one was given, else its own."""
    for old, constraint in estimator._parameter_constraints.items():
        if isinstance(constraint, Renamed) and constraint.new == new:
            value = getattr(estimator, old)
            if not is_deprecated_default(value):
                return value
    return getattr(estimator, new)


def warn_renamed(estimator, constraints: dict, name=lambda parameter: parameter) -> None:
    """Warn FutureWarning for each deprecated parameter name that was given (scikit-learn's rename path)."""
    for old, constraint in constraints.items():
        if isinstance(constraint, Renamed) and not is_deprecated_default(getattr(estimator, old)):
            warnings.warn(
                f"{name(old)} is deprecated and will be removed in a future release; use "
                f"{name(constraint.new)} (same meaning)",
                FutureWarning,
                stacklevel=5,
            )


def with_new_names(params: dict, constraints: dict) -> dict:
    """Return `params` (a saved model's, a trial's) with values given under deprecated names moved to the new."""
    params = dict(params)
    for old, constraint in constraints.items():
        if isinstance(constraint, Renamed) and old in params:
            value = params.pop(old)
            if not is_deprecated_default(value):
                params[constraint.new] = value
    return params


def renamed_keyword(function: str, old: str, old_value, new: str, new_value):
    """Return the value of keyword `new`: `old`'s, with a FutureWarning, when that was given.

    A deprecated keyword defaults to DEPRECATED (or None where None means "not given").
    """
    if old_value is None or is_deprecated_default(old_value):
        return new_value
    warnings.warn(
        f"{function}({old}=...) is deprecated and will be removed in a future release; use "
        f"{new}= (same meaning)",
        FutureWarning,
        stacklevel=3,
    )
    return old_value
