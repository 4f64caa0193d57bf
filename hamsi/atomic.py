"""Atomic output files: write to a temporary file beside the target, rename it into place on success.

A reader (or a crashed run) never sees half a file: either the old file or the complete new one.
Files that hold what was learned from the ratings (models, checkpoints: the factors) are written
PRIVATE, readable by their owner only; other outputs get the permissions open() would give them.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

# Owner read/write only: the mode of model files and checkpoints, whatever the umask.
PRIVATE = 0o600


def _usual_permissions(path: str) -> None:
    """Give a mkstemp file (owner-only, 0600) the permissions open() would have given it."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


@contextlib.contextmanager
def atomic_path(path, permissions: int | None = None):
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    with atomic_paths([path], private=[path] if permissions == PRIVATE else ()) as (temporary,):
        yield temporary


@contextlib.contextmanager
def atomic_output(path, mode: str = "w", permissions: int | None = None, **kwargs):
    """Yield an open file handle whose contents replace `path` only if the block succeeds.

    permissions: PRIVATE for a file only its owner may read; None for the umask's usual ones.
    """
    if permissions not in (None, PRIVATE):
        raise ValueError(f"permissions must be None or PRIVATE (0o600); got {permissions!r}")
    with atomic_path(path, permissions) as temporary:
        with open(temporary, mode, **kwargs) as handle:
            yield handle


@contextlib.contextmanager
def atomic_paths(paths, private=()):
    """Yield temporary paths beside `paths`; rename all of them into place only if the block succeeds.

    Outputs that belong together (a run's trace, model and plot) are replaced as a set: a failure
    while writing any of them leaves every old file as it was. Nothing is written until the
    last temporary file is complete, so only the renames themselves (metadata operations on one
    file system) come after the point of no return. Paths in `private` are renamed in with mode
    PRIVATE (the mode is set on the temporary file, so the target is never readable by others).
    """
    paths = [os.fspath(path) for path in paths]
    private = {os.fspath(path) for path in private}
    temporaries = []
    try:
        for path in paths:
            directory = os.path.dirname(os.path.abspath(path))
            fd, temporary = tempfile.mkstemp(
                dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".part"
            )
            os.close(fd)
            temporaries.append(temporary)
        yield list(temporaries)
        for temporary, path in zip(temporaries, paths):
            if path in private:
                os.chmod(temporary, PRIVATE)  # a writer may have replaced mkstemp's 0600 file
            else:
                _usual_permissions(temporary)
            os.replace(temporary, path)
    except BaseException:
        for temporary in temporaries:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        raise
