"""The V replica in shared memory, for a chunk whose workers all run on one host.

With V replicated in each worker's memory, every worker steps all of V each inner iteration
(V's L-BFGS rows are most of the vector work on ml-100k-like: 1682 items against 943 users) and
sends its block's gV rows to every peer. On one host the workers instead map one file in
/dev/shm holding V, gV, V's memory rows, starts and pair rows. In a STRATA/-B subset each item
shard V_j is touched by one row shard only (its "home", cluster.placement.assign_v_homes), so:
- the home writes V_j's gradient straight into the shared gV and forms V_j's partials;
- after the round (which only carries partials), V_j is stored, remembered and stepped by ONE
  worker: the home of V_j in the next subset of the cycle (it reads V_j next), or the current
  home at the cycle's end, where the evaluation's barrier follows.
So a shard of V is written by one worker between two rounds and read by others only after a
round: no locks, and the same kernels on the same shard slices give the in-process bits.

The lead worker creates the file from its state, the others map it after a barrier, and the lead
unlinks it once all have mapped it (nothing is left in /dev/shm even if a worker dies later). The
file's name carries the lead's pid: a lead that dies between creating and unlinking leaves a file
that the next lead on the host removes (remove_stale: only files whose creator is provably gone).
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from hamsi.kernels import memory_rows

DIRECTORY = "/dev/shm"
VECTORS = ("x", "g", "x_start", "g_start")
ROWS = ("S", "Y")
PAIR = ("s_new", "y_new")


# Use at most this share of /dev/shm's free space (containers often give it 64 MiB only).
SPACE_SHARE = 0.5


def nbytes(n: int, memory: int) -> int:
    """Return the size of the file for a V of n entries and memory M."""
    return 8 * n * (len(VECTORS) + 2 * memory + len(PAIR))


def available(size: int) -> bool:
    """True when this host's /dev/shm is writable and has room for `size` bytes (with a margin)."""
    if not (os.path.isdir(DIRECTORY) and os.access(DIRECTORY, os.W_OK)):
        return False
    info = os.statvfs(DIRECTORY)
    return size <= SPACE_SHARE * info.f_bavail * info.f_frsize


def host_check(size: int):
    """Return this worker's user id when /dev/shm can take `size` bytes, else None (run on each worker).

    Workers of different users could not open each other's file (it is created 0600).
    """
    return os.getuid() if available(size) else None


PREFIX = "hamsi-"


def path_of(run_id: str, pid: int) -> str:
    """Return the file of chunk `run_id` created by the process `pid` (the lead worker)."""
    return os.path.join(DIRECTORY, f"{PREFIX}{pid}-{run_id}")


def find(run_id: str) -> str:
    """Return the file of chunk `run_id` (made by the lead, whose pid the others do not know)."""
    suffix = f"-{run_id}"
    for name in os.listdir(DIRECTORY):
        if name.startswith(PREFIX) and name.endswith(suffix):
            return os.path.join(DIRECTORY, name)
    raise FileNotFoundError(f"no shared replica of chunk {run_id} in {DIRECTORY}")


def _creator_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def remove_stale(directory: str = DIRECTORY) -> list[str]:
    """Remove the replica files whose creating process no longer exists; return their paths.

    A live pid (even a reused one) keeps its file: only files of provably dead runs go.
    """
    removed = []
    for name in os.listdir(directory):
        pid, _, run = name[len(PREFIX) :].partition("-")
        if not (name.startswith(PREFIX) and pid.isdigit() and run) or not _creator_gone(int(pid)):
            continue
        try:
            os.unlink(os.path.join(directory, name))
            removed.append(os.path.join(directory, name))
        except OSError:  # another lead removed it first, or it is not ours to remove
            pass
    return removed


class SharedReplica:
    """Views into one mapped file: x, g, x_start, g_start (n), S, Y (M x n, kernels.memory_rows' layout), s_new, y_new."""

    def __init__(self, path: str, n: int, memory: int, create: bool):
        size = nbytes(n, memory)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:  # reserve the pages now: a full tmpfs fails here, not with SIGBUS on a write
                os.posix_fallocate(fd, 0, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        flat = np.frombuffer(self._map, dtype=np.float64)
        offset = 0
        for name in VECTORS:
            setattr(self, name, flat[offset : offset + n])
            offset += n
        self.S, self.Y = memory_rows(memory, n, flat[offset : offset + 2 * memory * n])
        offset += 2 * memory * n
        for name in PAIR:
            setattr(self, name, flat[offset : offset + n].reshape(1, n))
            offset += n

    @classmethod
    def create(cls, path: str, common) -> SharedReplica:
        """Create the file and fill it from `common` (a cluster.shard.CommonState)."""
        x = common.x_rep.reshape(-1)
        replica = cls(path, x.size, common.S.shape[0], create=True)
        replica.x[:], replica.S[:], replica.Y[:] = x, common.S, common.Y
        replica.x_start[:], replica.g_start[:] = common.x_start, common.g_start
        return replica

    @classmethod
    def attach(cls, path: str, common) -> SharedReplica:
        """Map the file the lead created (sizes from this worker's identical `common`)."""
        return cls(path, common.x_rep.size, common.S.shape[0], create=False)

    def copy_out(self, common) -> None:
        """Write the shared vectors back into `common` (the chunk's result state)."""
        common.x_rep.reshape(-1)[:] = self.x
        common.S[:], common.Y[:] = self.S, self.Y
        common.x_start[:], common.g_start[:] = self.x_start, self.g_start

    def close(self) -> None:
        """Drop the views and unmap (the views must not be used afterwards)."""
        for name in VECTORS + ROWS + PAIR:
            setattr(self, name, None)
        try:
            self._map.close()
        except BufferError:  # a view is still referenced somewhere: the mapping goes with it
            pass
