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
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".part")
    os.close(fd)
    try:
        yield temporary
        _usual_permissions(temporary)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def atomic_output(path, mode: str = "w", **kwargs):
    """Yield an open file handle whose contents replace `path` only if the block succeeds."""
    with atomic_path(path) as temporary:
        with open(temporary, mode, **kwargs) as handle:
            yield handle
