"""The `hamsi` sub-commands (one module each) and what they share: the seed type and output handling."""

from __future__ import annotations

import argparse
import contextlib


def seed_value(text: str) -> int:
    """Parse a random seed: an integer >= 0, as numpy's generators require (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value}")
    return value


def warning_for_cli(message) -> str:
    """Return what the command line prints for a warning: its advice in flags, not keywords.

    dp's integer-seed warning advises random_state=None; on the command line that is omitting
    --seed (hamsi.errors.Advice holds both wordings; other warnings print as for_cli says).
    """
    from dp._random import SEED_ADVICE, SEED_RISK, SEED_WARNING
    from hamsi.errors import Advice, AdvisedWarning, flag_name, for_cli

    if str(message) == SEED_WARNING:
        flag = flag_name("random_state")
        cli = f"omit {flag} (fresh OS entropy for every release) for a real release"
        message = AdvisedWarning(f"{flag} given: {SEED_RISK}", Advice(SEED_ADVICE, cli))
    return for_cli(message)


def check_writable(flag: str, path) -> None:
    """Raise InputError naming `flag` and `path` unless a file can be created where `path` goes."""
    import os
    import tempfile

    from hamsi.errors import InputError

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
    from hamsi.atomic import atomic_paths
    from hamsi.errors import DivergenceError

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
