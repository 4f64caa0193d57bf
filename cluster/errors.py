"""Errors of the Dask runner: a cluster that cannot be reached or used, a lost peer, a failed chunk."""

import time

from hamsi.errors import InputError


class ClusterError(InputError):
    """The cluster cannot run the job: unreachable scheduler, too few workers, memory limits.

    A subclass of InputError so the CLI prints it as one clear line.
    """


class PeerLost(RuntimeError):
    """A worker stopped answering during an exchange (raised inside a task; the driver recovers)."""


class StartTimeout(ClusterError):
    """The tasks of a chunk did not all start within the timeout (a busy or shrinking cluster)."""


class ChunkFailed(PeerLost):
    """A chunk failed on the cluster; lost: the workers that died or hung with it (empty: all answer)."""

    def __init__(self, message: str, lost=(), cause: str = ""):
        super().__init__(message)
        self.lost, self.cause = tuple(lost), cause


# A chunk that fails this many times in a row with every worker answering is not rerun again.
RERUNS_WITHOUT_LOSS = 3
RERUN_PAUSE = (1.0, 4.0)  # first and longest pause before such a rerun (a passing fault passes)


class ChunkFailures:
    """When a failed chunk is rerun: after at most `losses` losses of workers in a run, and after at
    most RERUNS_WITHOUT_LOSS failures in a row of one chunk with every worker answering (then the
    fault does not pass: the run ends naming it, never as a lost worker)."""

    def __init__(self, losses: int):
        self.losses, self.lost, self.chunk, self.in_a_row = losses, 0, None, 0

    def before_rerun(self, error: PeerLost, chunk, hint: str) -> None:
        """Return when the chunk that failed with `error` may run again; raise ClusterError when not.

        chunk: what names the chunk (its first cycle); hint: how to continue the run later.
        """
        lost = getattr(error, "lost", ())
        self.in_a_row = 0 if lost or chunk != self.chunk else self.in_a_row
        self.chunk = chunk
        if lost:
            self.lost += 1
            if self.lost > self.losses:
                raise ClusterError(
                    f"giving up after {self.losses} recoveries from lost workers: {error}; {hint}"
                ) from error
            return
        self.in_a_row += 1
        if self.in_a_row >= RERUNS_WITHOUT_LOSS:
            cause = getattr(error, "cause", "") or str(error)
            raise ClusterError(
                f"the chunk from cycle {chunk} failed {self.in_a_row} times in a row with every "
                f"worker answering, so no worker is lost and a rerun does not help: {cause}; {hint}"
            ) from error
        time.sleep(min(RERUN_PAUSE[0] * 2 ** (self.in_a_row - 1), RERUN_PAUSE[1]))
