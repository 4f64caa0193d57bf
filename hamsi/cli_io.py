"""What every `hamsi` sub-command shares for its input and output, in hamsi's and dp's commands alike.

Argument types (seeds, numbers or 'auto'), output checks and atomic output sets whose errors name
the flag, a numeric CSV reader whose messages quote no data in a private run, and the one-line
report of caught warnings. Commands import this module, never each other.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import warnings

import numpy as np

from hamsi.atomic import atomic_paths
from hamsi.data.readers import decompression_errors, refuse_special_file
from hamsi.errors import DivergenceError, InputError, for_cli


def seed_value(text: str) -> int:
    """Parse a random seed: an integer >= 0, as numpy's generators require (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value}")
    return value


def auto_or(number, what: str):
    """Return an argparse type that parses `number` (int or float) or the word 'auto'."""

    def parse(text: str):
        if text == "auto":
            return text
        try:
            return number(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} or 'auto', got {text!r}") from None

    return parse


auto_or_float = auto_or(float, "a number")
auto_or_int = auto_or(int, "an integer")


def add_renamed_flag(parser, old: str, new: str, **options) -> None:
    """Add `old` as a hidden, deprecated spelling of the flag `new` (added before): same value, a warning on stderr."""

    class Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(
                f"{parser.prog}: warning: {option_string} is deprecated and will be removed in a "
                f"future release; use {new} (same meaning)",
                file=sys.stderr,
            )
            setattr(namespace, self.dest, values)

    dest = new.lstrip("-").replace("-", "_")
    parser.add_argument(
        old, dest=dest, action=Renamed, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **options
    )


def check_writable(flag: str, path) -> None:
    """Raise InputError naming `flag` and `path` unless a file can be created where `path` goes."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise InputError(f"{flag} {path}: is a directory")
    directory = os.path.dirname(os.path.abspath(path))
    try:  # what atomic_output will do: create a file beside the target (root ignores permission bits)
        handle, probe = tempfile.mkstemp(dir=directory, prefix=".hamsi-write-check-")
    except OSError as exc:
        raise InputError(
            f"{flag} {path}: cannot write there ({exc.strerror or exc}: {directory})"
        ) from None
    os.close(handle)
    os.unlink(probe)


def write_as_set(outputs: dict, private=()) -> None:
    """Write {flag: (path, writer(temporary path))} to temporary files renamed together (atomic_paths).

    The outputs of the flags in `private` (a model file) become owner-only (atomic.PRIVATE).

    A failure in any writer leaves every existing output unchanged; the error names the flag and
    the user's path (not the temporary one), e.g. "--plot run.png: cannot write (No space left on device)".
    """
    flags = list(outputs)
    paths = [outputs[flag][0] for flag in flags]
    with atomic_paths(paths, private=[outputs[f][0] for f in flags if f in private]) as temporaries:
        for flag, temporary in zip(flags, temporaries):
            path, writer = outputs[flag]
            with naming_output(flag, path):
                try:
                    writer(temporary)
                except DivergenceError as exc:  # a writer's refusal names the file it was given
                    raise DivergenceError(str(exc).replace(temporary, f"{flag} {path}")) from None


@contextlib.contextmanager
def naming_output(flag: str, path):
    """Re-raise an OSError inside the block as one naming the flag and the user's path.

    A bare "[Errno 28] No space left on device" names neither; temporary names are not the user's.
    """
    try:
        yield
    except OSError as exc:
        raise OSError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None


def write_binary(path: str, write) -> None:
    """Call write(handle) on `path` opened for binary writing (np.save on a name would append .npy)."""
    with open(path, "wb") as handle:
        write(handle)


def report_warnings(command: str, caught, category: type[Warning], describe=None) -> list:
    """Print each caught warning of `category` as `hamsi COMMAND: warning: ...`; return the others.

    describe(message) -> str words a warning for the command line (default for_cli).
    """
    describe = describe or for_cli
    others = []
    for warning in caught:
        if issubclass(warning.category, category):
            print(f"hamsi {command}: warning: {describe(warning.message)}", file=sys.stderr)
        else:
            others.append(warning)
    return others


def reissue(caught) -> None:
    """Emit recorded warnings again, where they were first raised (warnings.warn_explicit)."""
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def read_numeric_csv(path: str, private: bool = False):
    """Return (float64 array, header or None).

    Errors name the file line and column, and quote the value, for a non-private run (the caller
    sees their own data). With private=True (under --epsilon) a message is an output too: it says
    only what is wrong, never which value, where, how many, nor the row count (private under
    add-remove). The refusal itself still depends on the data, which is why finite numbers and
    at least 2 rows are documented preconditions of a private run (docs/privacy.md).
    """
    import pandas as pd  # why lazy: pandas loads only when a CSV is read, not at every CLI start

    refuse_special_file(path)
    try:
        with decompression_errors(path):
            raw = pd.read_csv(
                path, header=None, dtype=str, skip_blank_lines=True, keep_default_na=False
            )
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as exc:
        # the parser's message names a line and a field count: data, under --epsilon
        detail = "rows must have equal numbers of fields" if private else str(exc)
        raise InputError(f"{path}: cannot parse as CSV: {detail}") from None
    numeric = raw.apply(lambda col: pd.to_numeric(col.str.strip(), errors="coerce"))
    header = None
    first_line = 1
    if numeric.iloc[0].isna().all():
        header = list(raw.iloc[0])
        numeric = numeric.iloc[1:]
        raw = raw.iloc[1:]
        first_line = 2
    if numeric.shape[0] < 2:
        got = "" if private else f", got {numeric.shape[0]}"
        raise InputError(f"{path}: need at least 2 data rows{got}")
    values = numeric.to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        if private:
            raise InputError(
                f"{path}: the data hold a non-numeric or non-finite value; a private run needs "
                "finite numbers in every cell (which value, where and how many are not reported "
                "under --epsilon: that is data too)"
            )
        row, col = np.argwhere(bad)[0]
        name = f" ({header[col]!r})" if header else ""
        raise InputError(
            f"{path}: line {first_line + row}, column {col + 1}{name}: "
            f"non-numeric or non-finite value {raw.iat[row, col]!r} "
            f"({int(bad.sum())} bad value(s) in total)"
        )
    return values, header


def rating_columns(text):
    """Return --columns as a (user, item, rating) tuple of names, or None."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",")]
    if len(names) != 3 or not all(names):
        raise InputError(f"--columns must name 3 columns, user,item,rating; got {text!r}")
    return tuple(names)


def describe_ratings(ratings, duplicates: str) -> str:
    """Return one line of what a rating file held: sizes, rating range, the duplicates policy."""
    facts = ratings.summary()
    merged = facts["duplicates_merged"]
    return (
        f"{facts['source']}: {facts['ratings']:,} ratings, {facts['users']:,} users, "
        f"{facts['items']:,} items, ratings {facts.get('rating_min', math.nan):g} to "
        f"{facts.get('rating_max', math.nan):g} (mean {facts.get('rating_mean', math.nan):.3g}, "
        f"sd {facts.get('rating_std', math.nan):.3g}); duplicates: {duplicates}"
        + (f" ({merged:,} merged)" if merged else "")
    )
