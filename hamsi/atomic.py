"""Atomic output files: write to a temporary file beside the target, rename it into place on success.

A reader (or a crashed run) never sees half a file: either the old file or the complete new one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile


def _usual_permissions(path: str) -> None:
    """Give a mkstemp file (owner-only, 0600) the permissions open() would have given it."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    with atomic_paths([path]) as (temporary,):
        yield temporary


@contextlib.contextmanager
def atomic_output(path, mode: str = "w", **kwargs):
    """Yield an open file handle whose contents replace `path` only if the block succeeds."""
    with atomic_path(path) as temporary:
        with open(temporary, mode, **kwargs) as handle:
            yield handle


@contextlib.contextmanager
def atomic_paths(paths):
    """Yield temporary paths beside `paths`; rename all of them into place only if the block succeeds.

    Outputs that belong together (a run's trace, model and plot) are replaced as a set: a failure
    while writing any of them leaves every old file as it was. Nothing is written until the
    last temporary file is complete, so only the renames themselves (metadata operations on one
    file system) come after the point of no return.
    """
    paths = [os.fspath(path) for path in paths]
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
            _usual_permissions(temporary)
            os.replace(temporary, path)
    except BaseException:
        for temporary in temporaries:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        raise
