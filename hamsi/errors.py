"""Errors raised on bad user input; the CLI prints them without a traceback.

What the user should do differs by interface: the Python API passes keywords (`columns=`), the
command line gives flags (`--columns`). A message is written once, at the place that detects the
problem; its advice is an `Advice` holding both wordings, and each interface shows its own
(`str(error)` the API's, `for_cli(error)` the command line's).
"""

from __future__ import annotations

from typing import NamedTuple

# Estimator parameters whose flag is not --<name with dashes>.
FLAG_NAMES = {"random_state": "--seed"}


def flag_name(parameter: str) -> str:
    """Return the command-line flag of an estimator parameter (for error messages)."""
    return FLAG_NAMES.get(parameter, "--" + parameter.replace("_", "-"))


class Advice(NamedTuple):
    """What to do about a problem, in the words of the Python API and of the command line."""

    api: str
    cli: str


class InputError(ValueError):
    """Bad user input: a message naming the file, line and value where known (and advice)."""

    def __init__(self, message: str, advice: Advice | None = None):
        super().__init__(message)
        self.advice = advice

    def __str__(self) -> str:
        message = super().__str__()
        return message if self.advice is None else f"{message}; {self.advice.api}"

    def __reduce__(self):  # pickled to and from Dask workers with its advice
        return type(self), (self.args[0], self.advice)

    def for_cli(self) -> str:
        """Return the message with the command line's advice."""
        message = super().__str__()
        return message if self.advice is None else f"{message}; {self.advice.cli}"


class AdvisedWarning(UserWarning):
    """A UserWarning whose advice, like InputError's, has a Python and a command-line wording."""

    def __init__(self, message: str, advice: Advice):
        super().__init__(message)
        self.advice = advice

    def __str__(self) -> str:
        return f"{super().__str__()}; {self.advice.api}"

    def __reduce__(self):
        return type(self), (self.args[0], self.advice)

    def for_cli(self) -> str:
        return f"{super().__str__()}; {self.advice.cli}"


def for_cli(error) -> str:
    """Return what the command line prints for an error or warning: its CLI advice where it has one."""
    return error.for_cli() if isinstance(error, (InputError, AdvisedWarning)) else str(error)


class DivergenceError(FloatingPointError):
    """The optimizer produced NaN or inf; the run stops and says when."""
