"""Start or connect to a Dask cluster; close only what was opened here."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
from urllib.parse import urlsplit

import dask

from cluster.errors import ClusterError

# Connecting to a scheduler that is not there should fail fast with a message naming it,
# not hang for distributed's default 30 s.
CONNECT_TIMEOUT = 5.0
# The LocalCluster hamsi starts (never a cluster it connects to): Dask's statistical profiler
# samples every thread's stack every 10 ms, taking the GIL from the HAMSI task 100 times a second.
LOCAL_WORKER_CONFIG = {"distributed.worker.profile.enabled": False}
MAIN_GUARD_HINT = (
    "If this is a script that starts a local cluster, put its code under "
    '`if __name__ == "__main__":` (Dask\'s worker processes re-import the main module).'
)


def default_workers() -> int:
    """Return the default number of worker processes: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def connect(
    client=None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    memory_limit="auto",
    timeout: float = CONNECT_TIMEOUT,
    quiet: bool = False,
    security=None,
):
    """Yield a distributed.Client: the given one, one connected to `scheduler`, or a new LocalCluster.

    The LocalCluster (worker processes on loopback, n_workers = cores by default) and any client
    created here are closed on exit; a client passed in is left open. The dashboard link of a new
    cluster is printed to stderr unless `quiet`. security: a distributed.security.Security (TLS
    certificates) for a tls:// scheduler or a new TLS LocalCluster; None takes Dask's configuration
    (distributed.comm.tls.*), as distributed itself does.
    """
    # why lazy: distributed is heavy; `import cluster` and constructing the estimator need none of it
    from distributed.security import Security

    quiet_interrupted_sync()
    try:
        if client is not None:
            yield client
            return
        security = Security() if security is None else security
        if scheduler is not None:
            yield from _scheduler_client(scheduler, timeout, security)
            return
        n_workers = default_workers() if n_workers is None else int(n_workers)
        yield from _local_client(n_workers, threads_per_worker, memory_limit, quiet, security)
    except KeyboardInterrupt:
        quiet_half_built_futures()
        raise


def _scheduler_client(scheduler: str, timeout: float, security):
    """Yield a Client of the scheduler at `scheduler` once it answers as one (check_scheduler); close it after."""
    # why lazy: distributed is heavy; `import cluster` and constructing the estimator need none of it
    from distributed import Client

    scheduler = check_scheduler(scheduler, timeout, security)
    try:
        opened = Client(scheduler, timeout=timeout, set_as_default=False, security=security)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"cannot reach the Dask scheduler at {scheduler} within {timeout:g} s "
            f"({type(exc).__name__}: {exc}); is `dask scheduler` running there?"
        ) from exc
    quiet_interrupted_gathers(opened.loop)
    try:
        yield opened
    finally:
        opened.close()


def _local_client(n_workers: int, threads_per_worker: int, memory_limit, quiet: bool, security):
    """Yield a Client of a new LocalCluster (_local_cluster); close both after, the workers' logs silenced."""
    # why lazy: distributed is heavy; `import cluster` and constructing the estimator need none of it
    from distributed import Client

    local = _local_cluster(n_workers, threads_per_worker, memory_limit, security)
    try:
        opened = Client(local, set_as_default=False, security=security)
        for loop in {id(opened.loop): opened.loop, id(local.loop): local.loop}.values():
            quiet_interrupted_gathers(loop)
        try:
            if not quiet:
                _announce_local_cluster(opened, n_workers, threads_per_worker)
            yield opened
        finally:
            quiet_worker_logs(opened)
            opened.close()
    finally:
        local.close()


def _local_cluster(n_workers: int, threads_per_worker: int, memory_limit, security):
    """Return a new LocalCluster: n_workers worker processes on loopback; ClusterError when it cannot start."""
    # why lazy: distributed is heavy; `import cluster` and constructing the estimator need none of it
    from distributed import LocalCluster

    if n_workers < 1:
        raise ClusterError(f"n_workers must be >= 1, got {n_workers}")
    # Worker processes (not threads): the numba kernels release the GIL, but the exchange
    # handlers and the task thread of one worker must not compete with another worker's.
    if multiprocessing.parent_process() is not None:
        # Worker processes are spawned and re-import the user's __main__ module; a script that
        # starts a cluster at import time would otherwise fail with a long nanny traceback.
        raise ClusterError(MAIN_GUARD_HINT)
    try:
        with workers_ignore_sigint(), dask.config.set(LOCAL_WORKER_CONFIG):
            return LocalCluster(
                n_workers=n_workers,
                threads_per_worker=int(threads_per_worker),
                processes=True,
                host="127.0.0.1",
                dashboard_address=":0",
                memory_limit=memory_limit,
                silence_logs=logging.ERROR,
                security=security,
                protocol="tls://" if security.tls_ca_file else None,
            )
    except RuntimeError as exc:
        raise ClusterError(
            f"the local Dask cluster did not start ({exc}). {MAIN_GUARD_HINT}"
        ) from exc


def _announce_local_cluster(opened, n_workers: int, threads_per_worker: int) -> None:
    """Print the new cluster's size and dashboard to stderr, and a warning when it has more threads than cores."""
    print(
        f"hamsi: local Dask cluster, {n_workers} workers x {threads_per_worker} threads; "
        f"dashboard {opened.dashboard_link}",
        file=sys.stderr,
    )
    cores = default_workers()
    if n_workers * int(threads_per_worker) > cores:
        # every inner iteration waits for all workers: one that waits for a core stalls them all
        print(
            f"hamsi: warning: {n_workers} workers x {threads_per_worker} threads on {cores} cores; "
            f"each inner iteration waits for the slowest worker, so expect it to be slow",
            file=sys.stderr,
        )


def quiet_interrupted_gathers(loop) -> None:
    """Drop the AllExit errors of a gather that Ctrl-C interrupted, on the event loop of a client opened here.

    Interrupting `client.gather` cancels its coroutine but not the waiters it started
    (distributed.utils.All); they end with AllExit, which Dask means to be quiet, and asyncio
    would print each as a 'Task exception was never retrieved' traceback before the command's
    one line. Every other error goes to the loop's previous handler.
    """
    # why lazy: distributed is heavy; `import cluster` and constructing the estimator need none of it
    from distributed.client import AllExit

    asyncio_loop = getattr(loop, "asyncio_loop", loop)
    previous = asyncio_loop.get_exception_handler()

    def handler(event_loop, context):
        if isinstance(context.get("exception"), AllExit):
            return
        if previous is None:
            event_loop.default_exception_handler(context)
        else:
            previous(event_loop, context)

    asyncio_loop.set_exception_handler(handler)


def quiet_half_built_futures() -> None:
    """After Ctrl-C, drop the AttributeError a half-built distributed Future raises when collected.

    An interrupt that lands inside `Future.__init__` leaves the object without the attributes its
    finalizer reads (`_cleared`); when the interrupted frames are collected, Python would print the
    finalizer's error as an 'Exception ignored in' traceback after the command's one line. Only
    AttributeErrors of finalizers defined in `distributed` are dropped; anything else goes to the
    previous sys.unraisablehook. Installed once per process.
    """
    previous = sys.unraisablehook
    if getattr(previous, "drops_half_built_futures", False):
        return

    def hook(unraisable):
        module = getattr(unraisable.object, "__module__", None) or ""
        if isinstance(unraisable.exc_value, AttributeError) and module.startswith("distributed."):
            return
        previous(unraisable)

    hook.drops_half_built_futures = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


class _InterruptedSyncFilter(logging.Filter):
    """Drops the one record `quiet_interrupted_sync` is about; lets every other record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or not isinstance(record.exc_info[1], NameError):
            return True
        tb, last = record.exc_info[2], None
        while tb is not None:
            last, tb = tb, tb.tb_next
        code = last.tb_frame.f_code if last is not None else None
        return not (
            code is not None
            and code.co_name == "cancel"
            and code.co_filename.endswith(os.path.join("distributed", "utils.py"))
        )


def quiet_interrupted_sync() -> None:
    """Drop tornado's log of distributed's `sync` failing to cancel after a Ctrl-C that came early.

    `distributed.utils.sync` answers Ctrl-C by scheduling `cancel` on the event loop; an interrupt
    that lands before its coroutine has made the future leaves `cancel` reading an unbound name,
    and tornado logs that NameError with its traceback on the `tornado.application` logger (from
    the loop's thread, so a filter added after the interrupt could come too late). Only records
    of a NameError raised in that `cancel` are dropped. Installed once per process.
    """
    logger = logging.getLogger("tornado.application")
    if not any(isinstance(f, _InterruptedSyncFilter) for f in logger.filters):
        logger.addFilter(_InterruptedSyncFilter())


def quiet_worker_logs(client) -> None:
    """Silence the workers' `distributed` logs before hamsi closes the LocalCluster it started.

    Closing races the workers' heartbeats against the scheduler's shutdown: a worker could log a
    'Failed to communicate with scheduler during heartbeat' traceback at ERROR after the run had
    ended (seen after Ctrl-C, under load). Best effort: a worker already gone is no error here.
    """
    try:
        client.run(_set_distributed_log_level, logging.CRITICAL, on_error="ignore")
    except Exception:  # noqa: BLE001 - the cluster is being closed whatever happens here
        pass


def _set_distributed_log_level(level: int) -> None:
    logging.getLogger("distributed").setLevel(level)


@contextlib.contextmanager
def workers_ignore_sigint():
    """Start worker processes with SIGINT ignored (inherited), then restore this process's handler.

    Ctrl-C in a terminal signals the whole process group: the workers would each print a
    KeyboardInterrupt traceback. This process alone handles it (one line, exit 130) and closes
    the cluster, which stops the workers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def scheduler_address(address: str) -> str:
    """Return `address` as tcp://host:port (or tls://); raise ClusterError when it has no port (or no host)."""
    text = address if "://" in address else f"tcp://{address}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ClusterError(f"scheduler address {address!r} is not host:port ({exc})") from exc
    if not parts.hostname or port is None:
        raise ClusterError(
            f"scheduler address {address!r} has no port; give it as tcp://HOST:PORT "
            f"(a Dask scheduler listens on 8786 by default)"
        )
    return text


def reach_tcp(address: str, timeout: float) -> None:
    """Raise ClusterError naming `address` when nothing accepts a TCP connection there (tcp:// and tls://)."""
    parts = urlsplit(address)
    if parts.scheme not in ("tcp", "tls"):
        return
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=timeout).close()
    except OSError as exc:
        raise ClusterError(
            f"cannot reach the Dask scheduler at {address} within {timeout:g} s "
            f"({type(exc).__name__}: {exc}); is `dask scheduler` running there?"
        ) from exc


def check_scheduler(address: str, timeout: float = CONNECT_TIMEOUT, security=None) -> str:
    """Return the normalized address after asking it who it is; raise ClusterError within ~timeout s.

    distributed's Client waits without limit for the handshake of a port that accepts connections
    but does not speak its protocol; this probe (a comm, one `identity` request, all under one
    deadline, the comm closed after) turns that into a clear error naming the address.
    """
    # why lazy: distributed is heavy; `import cluster` and constructing the estimator need none of it
    from distributed.comm import connect as open_comm
    from distributed.security import Security

    address = scheduler_address(address)
    reach_tcp(address, timeout)
    security = Security() if security is None else security
    if address.startswith("tls://") and not security.tls_ca_file:
        raise ClusterError(
            f"the scheduler {address} speaks TLS: give its CA and a client certificate "
            f"(--tls-ca-file, --tls-cert, --tls-key; or security=Security(...), or Dask's "
            f"distributed.comm.tls configuration)"
        )
    connection_args = security.get_connection_args("client")

    async def identity():
        comm = await open_comm(address, timeout=timeout, **connection_args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def ask():
        return asyncio.run(asyncio.wait_for(identity(), timeout))

    with concurrent.futures.ThreadPoolExecutor(
        1
    ) as pool:  # own event loop, whatever the caller runs
        try:
            reply = pool.submit(ask).result(timeout + 1.0)
        except (TimeoutError, concurrent.futures.TimeoutError) as exc:
            raise ClusterError(
                f"{address} accepted a connection but did not answer as a Dask scheduler within "
                f"{timeout:g} s; is `dask scheduler` running there (and not another service)?"
            ) from exc
        except (OSError, ValueError, TypeError) as exc:
            raise ClusterError(
                f"cannot reach the Dask scheduler at {address} within {timeout:g} s "
                f"({type(exc).__name__}: {exc}); is `dask scheduler` running there?"
            ) from exc
    if not (isinstance(reply, dict) and reply.get("type") == "Scheduler"):
        raise ClusterError(
            f"{address} answered, but not as a Dask scheduler (got {str(reply)[:80]!r})"
        )
    return address


def worker_info(client) -> dict:
    """Return {address: info} of the workers the scheduler knows now, fetched fresh.

    Not client.scheduler_info(): it returns a cached identity that the client's periodic refresh
    (which asks for no per-worker details) can overwrite between the fetch and the return, so
    under load it sometimes lists no workers at all, and every worker would look lost.
    """
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def worker_addresses(client, minimum: int = 1, wait: float = 5.0) -> list[str]:
    """Return the sorted addresses of the workers, waiting up to `wait` s for `minimum` of them."""
    try:
        client.wait_for_workers(minimum, timeout=wait)
    except TimeoutError as exc:
        have = len(worker_info(client))
        raise ClusterError(
            f"the scheduler at {client.scheduler.address} has {have} workers; "
            f"this run needs at least {minimum}"
        ) from exc
    return sorted(worker_info(client))


def worker_memory_limits(client) -> dict[str, tuple[int, int]]:
    """Return {address: (memory limit, memory in use)} in bytes as the scheduler reports them (limit 0: none).

    In use: the worker process's resident memory at its last heartbeat (its own baseline: Python,
    numpy, numba, Dask, and whatever it already holds).
    """
    info = worker_info(client)
    return {
        addr: (int(w.get("memory_limit") or 0), int((w.get("metrics") or {}).get("memory") or 0))
        for addr, w in info.items()
    }
