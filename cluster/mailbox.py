"""Peer-to-peer messages between workers: a WorkerPlugin handler and a blocking mailbox.

One inner iteration of the distributed HAMSI loop is one all-to-all round among the workers (no
client, no scheduler). The chunk's start barrier goes through the `hamsi_mail` handler and
trades each worker's link address; on plain tcp:// clusters the rounds then go over direct links
between the task threads (cluster.links), else each task thread posts its message to every
peer's handler and waits for the peers' messages of the same step (`round` picks the way).

What it opens it closes: one comm per peer (distributed.comm.connect, the public comm API),
closed when the plugin is torn down or a send fails. Messages of a finished or aborted run are
dropped on arrival, so nothing of an old attempt stays in memory. A chunk starts with a barrier
(`start`), so a task whose peers are not scheduled in time fails with a clear message instead of
timing out later inside an exchange.

Every worker process also runs a StallClock: the seconds it was stopped (SIGSTOP, a frozen
cgroup, a suspended VM). They are no optimization time (cluster.exchange.MailboxExchange.clock).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
import time

from distributed import get_worker
from distributed.comm import connect
from distributed.comm.addressing import get_address_host, parse_address
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol.serialize import to_serialize

from cluster.errors import PeerLost, StartTimeout
from cluster.links import Links, addressed_frames, frame_nbytes

HANDLER = "hamsi_mail"
ABORT_POLL = 0.05  # seconds between a waiting post's checks for an abort of its run
STALL_TICK = 0.05  # seconds between the stall clock's ticks
# A gap of more than STALL_GAP s between two ticks, during which the process used less than
# STALL_CPU of it plus STALL_CPU_SLACK s in CPU time, was a stop: a thread holding the GIL uses
# CPU; the slack is what the other threads used in the tick before the stop and the moment after.
# A stopped process uses none, while one starved on an oversubscribed host (20 runnable processes
# on 2 cores: ~10 % each) still optimizes: it must not count as stopped, so STALL_CPU is 1 %.
STALL_GAP = 1.0
STALL_CPU = 0.01
STALL_CPU_SLACK = 0.1
# Runs remembered as finished (late messages for them are dropped); old ones fall out.
FINISHED_KEPT = 1024

# One mailbox per worker, found by the worker's address from the task thread.
_BOXES: dict[str, Mailbox] = {}


class StallClock:
    """Seconds this process was stopped: a thread ticks every STALL_TICK s and adds the gaps that were stops.

    A stopped process runs no thread, so the tick after the stop comes late by the stop's length;
    its CPU time (time.process_time) did not advance meanwhile, which tells a stop from a thread
    holding the GIL. (A process that got under 1 % of a CPU for over STALL_GAP s on an overloaded
    host counts as stopped too: it did not optimize either; one that got its share of a busy host did.)
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._total = 0.0
        self._last, self._cpu = time.monotonic(), time.process_time()
        threading.Thread(target=self._tick, name="hamsi-stall-clock", daemon=True).start()

    def _stop_since_tick(self, now: float, cpu: float) -> float:
        """Return the seconds since the last tick if they were a stop, else 0 (call with the lock)."""
        gap = now - self._last
        if gap > STALL_GAP and cpu - self._cpu < STALL_CPU * gap + STALL_CPU_SLACK:
            return gap - STALL_TICK
        return 0.0

    def _tick(self) -> None:
        while True:
            time.sleep(STALL_TICK)
            with self._lock:
                now, cpu = time.monotonic(), time.process_time()
                self._total += self._stop_since_tick(now, cpu)
                self._last, self._cpu = now, cpu

    def total(self) -> float:
        """Return the seconds this process was stopped since the clock started.

        A stop that just ended counts before the ticking thread has run again (the task thread
        may send its next message first).
        """
        with self._lock:
            return self._total + self._stop_since_tick(time.monotonic(), time.process_time())


_STALLS: list = []  # this process's StallClock, made at the first use
_STALLS_LOCK = threading.Lock()


def stall_clock() -> StallClock:
    """Return this process's StallClock (started at the first call)."""
    with _STALLS_LOCK:
        if not _STALLS:
            _STALLS.append(StallClock())
        return _STALLS[0]


class Mailbox:
    """Messages delivered to one worker, keyed by (run, step, sender), waited on by task threads."""

    def __init__(self, address: str, loop, links=None, connection_args=None):
        self.address, self.loop, self.links = address, loop, links
        self.connection_args = connection_args or {}  # the worker's TLS context on a tls:// cluster
        self.stalls = stall_clock()
        self._linked: set[str] = set()  # runs whose rounds go over direct links
        self._messages: dict[tuple, object] = {}
        self._cond = threading.Condition()
        self._aborted: set[str] = set()
        self._finished: collections.deque = collections.deque(maxlen=FINISHED_KEPT)
        self._comms: dict = {}  # peer address -> an open comm, used only from the event loop
        self.closed = False

    async def deliver(self, run=None, step=None, sender=None, payload=None):
        """Store one message (runs on the worker's event loop; the sender expects no reply)."""
        with self._cond:
            if self.closed or run in self._finished:
                return
            self._messages[(run, step, sender)] = payload
            self._cond.notify_all()

    def abort(self, run: str):
        """Wake every waiter of `run` with PeerLost (the driver calls this when a peer died)."""
        with self._cond:
            self._aborted.add(run)
            self._cond.notify_all()
        if self.links is not None:
            self.links.abort(run)

    def aborted(self, run: str) -> bool:
        """True when the driver aborted `run` (until `forget`)."""
        with self._cond:
            return run in self._aborted

    def _wait(self, run: str, keys: list, timeout: float, on_timeout) -> list:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if run in self._aborted:
                    raise PeerLost(f"run {run} aborted by the driver")
                if all(k in self._messages for k in keys):
                    return [self._messages.pop(k) for k in keys]
                left = deadline - time.monotonic()
                if left <= 0:
                    on_timeout([k[2] for k in keys if k not in self._messages])
                self._cond.wait(left)

    def collect(self, run: str, step, senders: list[str], timeout: float) -> list:
        """Return the payloads of `senders` for (run, step), in the order of `senders`.

        Raises PeerLost naming the missing senders after `timeout` seconds.
        """

        def fail(missing):
            raise PeerLost(f"no message for step {step} from {missing} within {timeout:g} s")

        return self._wait(run, [(run, step, s) for s in senders], timeout, fail)

    def start(
        self, run: str, peers: list[str], timeout: float, secret: bytes | None = None, limit=None
    ):
        """Barrier at a chunk's start: return once every peer's task runs; raise StartTimeout after `timeout`.

        The start messages carry each worker's link address; when every worker has one (plain
        tcp:// clusters) and the run has a link secret, the run's rounds go over direct links
        (cluster.links, frames checked against `limit`), else over comms. The secret is announced
        to the links before our start message leaves, so no peer can connect before it is known.
        """
        linked = self.links is not None and secret is not None
        if linked:
            self.links.expect(run, secret, limit)
        self.send(run, "start", peers, self.links.address if linked else None, timeout)

        def fail(missing):
            raise StartTimeout(
                f"the chunk tasks of {', '.join(missing)} did not start within {timeout:g} s "
                f"(their workers are busy with other work or gone); run with fewer workers or "
                f"on a less busy cluster, or raise peer_timeout"
            )

        addresses = self._wait(run, [(run, "start", p) for p in peers], timeout, fail)
        if peers and linked and all(a is not None for a in addresses):
            self.links.open(run, dict(zip(peers, addresses)), timeout)
            self._linked.add(run)

    def round(
        self, run: str, step, peers: list[str], message, timeout: float
    ) -> tuple[list, float, float, int]:
        """Send `message` to every peer; return (the peers' messages in order, seconds sending, seconds waiting, bytes).

        message: one Message for every peer, or {peer: Message}. Bytes sent: the links' frames
        as written; through the comms the same frames' size (the comms' own framing not counted).
        """
        start = time.perf_counter()
        if run in self._linked:
            received, waited, nbytes = self.links.round(run, peers, message, timeout)
            return received, time.perf_counter() - start - waited, waited, nbytes
        nbytes = sum(frame_nbytes(f) for f in addressed_frames(message, peers).values())
        posted = self.post(run, step, peers, message)
        sent = time.perf_counter()
        received = self.collect(run, step, peers, timeout)
        self.wait_posted(posted, peers, timeout, run)
        return received, sent - start, time.perf_counter() - sent, nbytes

    def linked(self, run: str) -> bool:
        """Whether `run`'s rounds go over the direct links (not through Dask's comms)."""
        return run in self._linked

    def record_round(
        self, run: str, peers: list[str], record, items: dict, timeout: float
    ) -> tuple[object, dict, float, float, int]:
        """Send a partials record over the direct links; return (the peers' records, {peer: Message
        of items}, seconds sending, seconds waiting, bytes). Only for a linked run (`linked`)."""
        start = time.perf_counter()
        records, received, waited, nbytes = self.links.record_round(
            run, peers, record, items, timeout
        )
        return records, received, time.perf_counter() - start - waited, waited, nbytes

    def forget(self, run: str):
        """Drop every stored message of `run` and drop its late ones on arrival (a finished or aborted attempt)."""
        with self._cond:
            self._finished.append(run)
            for key in [k for k in self._messages if k[0] == run]:
                del self._messages[key]
            self._aborted.discard(run)
            self._linked.discard(run)
        if self.links is not None:
            self.links.close(run)

    async def _comm_to(self, addr: str):

        comm = self._comms.get(addr)
        if comm is None or comm.closed():
            comm = await connect(addr, **self.connection_args)
            self._comms[addr] = comm
        return comm

    def post(self, run: str, step, peers: list[str], payload):
        """Start posting `payload` (payload[peer] when a dict) to every peer; return a concurrent Future.

        Call from a task thread. Messages go over one long-lived comm per peer with reply=False: a
        send is one write, not a request/response round trip; the peer's handler reads them in
        order. The write runs on the worker's event loop while the task thread keeps computing (the
        kernels drop the GIL), so `payload` must not change until `wait_posted` returns.
        """

        def message(addr):
            mine = payload[addr] if isinstance(payload, dict) else payload
            return {
                "op": HANDLER,
                "reply": False,
                "run": run,
                "step": step,
                "sender": self.address,
                "payload": to_serialize(mine),
            }

        async def post_all():
            async def post(addr):
                comm = await self._comm_to(addr)
                await comm.write(message(addr))

            await asyncio.gather(*(post(a) for a in peers))

        return asyncio.run_coroutine_threadsafe(post_all(), self.loop)

    def wait_posted(self, future, peers: list[str], timeout: float, run: str | None = None):
        """Return when a post finished; raise PeerLost when a write failed, stalled for `timeout` s,
        or the driver aborted `run`.

        A peer that died is noticed by the driver (the scheduler drops it), which aborts the run
        on the survivors; the abort must end this wait too, since a comm to a dead peer keeps
        retrying its connect for Dask's connect timeout (30 s by default) while the task holds
        the worker's thread. The comms of a failed post are closed.
        """
        deadline = time.monotonic() + timeout
        try:
            while not future.done():
                if run is not None and run in self._aborted:
                    raise PeerLost(f"run {run} aborted by the driver")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"not written within {timeout:g} s")
                concurrent.futures.wait([future], timeout=min(left, ABORT_POLL))
            future.result()
        except Exception as exc:  # OSError, CommClosedError, TimeoutError, PeerLost (aborted)
            future.cancel()
            for addr in peers:
                comm = self._comms.pop(addr, None)
                if comm is not None:
                    self.loop.call_soon_threadsafe(comm.abort)
            raise PeerLost(f"sending to {peers} failed: {type(exc).__name__}: {exc}") from exc

    def send(self, run: str, step, peers: list[str], payload, timeout: float):
        """Post `payload` to every peer and wait until it is written (see `post`)."""
        if peers:
            self.wait_posted(self.post(run, step, peers, payload), peers, timeout, run)

    async def close(self):
        """Close every comm this mailbox opened and drop what it holds (plugin teardown)."""
        with self._cond:
            self.closed = True
            self._messages.clear()
            self._cond.notify_all()
        if self.links is not None:
            self.links.shutdown()
        comms, self._comms = list(self._comms.values()), {}
        for comm in comms:
            await comm.close()


class MailboxPlugin(WorkerPlugin):
    """Installs the `hamsi_mail` handler and the worker's Mailbox (register once per client)."""

    name = "hamsi-mailbox"
    idempotent = True

    async def setup(self, worker):
        box = Mailbox(
            worker.address,
            asyncio.get_running_loop(),
            worker_links(worker.address),
            connection_args=worker.connection_args,
        )
        _BOXES[worker.address] = box
        worker.handlers[HANDLER] = box.deliver

    async def teardown(self, worker):
        box = _BOXES.pop(worker.address, None)
        if box is not None:  # the handler stays (a late message finds a closed box, not a KeyError)
            await box.close()


def worker_links(address: str):
    """Return a Links listening on the worker's host for a plain tcp:// worker, else None (keep the comms)."""
    if parse_address(address)[0] != "tcp":
        return None
    return Links(address, get_address_host(address))


def install(client):
    """Register the MailboxPlugin on every current and future worker of `client`."""
    client.register_plugin(MailboxPlugin(), name=MailboxPlugin.name)


def local_mailbox() -> Mailbox:
    """Return this worker's Mailbox (call from inside a task)."""
    worker = get_worker()
    try:
        return _BOXES[worker.address]
    except KeyError:
        raise RuntimeError(
            "the hamsi mailbox plugin is not installed on this worker; call mailbox.install(client)"
        ) from None


def abort_run(run: str):
    """Abort `run` on this worker (used through client.run on the survivors after a failure)."""
    for box in _BOXES.values():
        box.abort(run)
