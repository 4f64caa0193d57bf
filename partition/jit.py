"""numba kernels cached on disk and compiled by one process of the host at a time.

numba's on-disk cache keeps, per function, an index file (signature -> data file name) and the data
files, each written to a temporary name and renamed; but a save writes the index first and the data
second, and nothing stops two processes from loading and saving the same function at once: one can
read an index whose data file is not written yet (or is a stale one of the same number), and two
saves of different signatures can each pick data file 1 and overwrite the other's index. The first
fit of a new install compiles in several processes at once (`hamsi.kernels.warm_up`'s helper, Dask
workers, a user's parallel jobs), so these windows are real.

`cached_njit` is `numba.njit(cache=True)` whose dispatcher compiles (load from the cache, or compile
and save) only while it holds numba's compiler lock (one thread of this process at a time) and then
an exclusive lock on a file beside the function's cache files (one process at a time). A process
that waited finds the complete index and data the other wrote and loads them. A kernel's callees
are locked while its own lock is held; the call graph has no cycles, so neither can the waits.

This module sits at the bottom of the import arrows (cluster -> hamsi -> partition) so that every
package's kernels use the one implementation.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings

from numba import njit
from numba.core import sigutils
from numba.core.compiler_lock import global_compiler_lock

try:
    import fcntl
except ImportError:  # not POSIX: numba's own behaviour (no inter-process lock)
    fcntl = None

# A compile takes seconds; a lock held this long belongs to a stopped process (a dead one's lock
# is released by the kernel): compile without it rather than wait forever, and say so.
LOCK_TIMEOUT_S = 600.0
_POLL_S = 0.02
# Lock files this process holds, with their nesting depth; changed only under the compiler lock.
_held: dict[tuple[int, str], int] = {}


def cached_njit(function=None, **options):
    """Return numba.njit(cache=True, **options)(function) compiling under the locks of this module.

    Usable as ``@cached_njit`` or ``@cached_njit(nogil=True, parallel=True)``.
    """

    def decorate(f):
        return serialize_compiles(njit(cache=True, **options)(f))

    return decorate if function is None else decorate(function)


def serialize_compiles(dispatcher):
    """Return `dispatcher` (cache=True) with its compile() run under the compiler and file locks.

    numba calls `self.compile(signature)` both for a call from Python and for a call from another
    kernel being compiled, so the instance attribute covers both.
    """
    unlocked = dispatcher.compile
    code = dispatcher.py_func.__code__
    name = f"{dispatcher.py_func.__qualname__}-{code.co_firstlineno}.lock"

    def compile(sig):
        args, _ = sigutils.normalize_signature(sig)
        existing = dispatcher.overloads.get(tuple(args))
        if existing is not None:  # typing asks again for every call site: no file lock needed
            return existing.entry_point
        with global_compiler_lock, _file_lock(dispatcher._cache.cache_path, name):
            return unlocked(sig)

    dispatcher.compile = compile
    return dispatcher


@contextlib.contextmanager
def _file_lock(directory: str, name: str):
    """Hold an exclusive flock on directory/name (created if missing) for the block.

    Re-entrant within the process (a function compiled again while its own compile runs). When the
    file cannot be opened (numba could not write this cache either) or the wait exceeds
    LOCK_TIMEOUT_S, the block runs without the lock.
    """
    path = os.path.join(directory, name)
    key = (os.getpid(), path)  # a forked child does not hold its parent's locks
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    fd = _open_lock_file(directory, path) if fcntl is not None else None
    if fd is None:
        yield
        return
    try:
        locked = _acquire(fd, path)
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]
            if locked:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _open_lock_file(directory: str, path: str):
    """Return a descriptor of the lock file, or None when it can be neither created nor opened."""
    try:
        os.makedirs(directory, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        try:  # another user's lock file in a shared cache: flock works on a read-only descriptor
            return os.open(path, os.O_RDONLY)
        except OSError:
            return None


def _acquire(fd: int, path: str) -> bool:
    """Return True once the exclusive lock is held; False (with a warning) after LOCK_TIMEOUT_S."""
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                warnings.warn(
                    f"{path}: another process has held this compile lock for over "
                    f"{LOCK_TIMEOUT_S:.0f} s; compiling without it",
                    RuntimeWarning,
                    stacklevel=4,
                )
                return False
            time.sleep(_POLL_S)
