"""Errors of the Dask runner: a cluster that cannot be reached or used, a lost peer."""

from hamsi.errors import InputError


class ClusterError(InputError):
    """The cluster cannot run the job: unreachable scheduler, too few workers, memory limits.

    A subclass of InputError so the CLI prints it as one clear line.
    """


class PeerLost(RuntimeError):
    """A worker stopped answering during an exchange (raised inside a task; the driver recovers)."""


class StartTimeout(ClusterError):
    """The tasks of a chunk did not all start within the timeout (a busy or shrinking cluster)."""
