"""Errors raised on bad user input; the CLI prints them without a traceback."""


class InputError(ValueError):
    """Bad user input: a message naming the file, line and value where known."""


class DivergenceError(FloatingPointError):
    """The optimizer produced NaN or inf; the run stops and says when."""
