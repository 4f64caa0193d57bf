"""Declared hyper-parameter constraints (scikit-learn's `_parameter_constraints` style), checked in one place.

An estimator declares, per parameter, what it accepts; `check_parameters` raises InputError on the
first parameter that breaks its constraint, naming it the way the caller speaks (a keyword in
Python, a flag on the command line).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from hamsi.errors import InputError

AUTO = "auto"


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
    """Raise InputError naming the first parameter of `estimator` that breaks its constraint."""
    for parameter, constraint in constraints.items():
        value = getattr(estimator, parameter)
        problem = constraint.problem(value)
        if problem is None:
            continue
        if isinstance(constraint, Choice):
            raise InputError(f"unknown {name(parameter)} {value!r}; {problem}")
        raise InputError(f"{name(parameter)} {problem}; got {value!r}")
