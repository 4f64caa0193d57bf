"""Peer-to-peer messages between workers: a WorkerPlugin handler and a blocking mailbox.

One inner iteration of the distributed HAMSI loop is one all-to-all exchange among the workers
(no client, no scheduler): each task thread posts its message to every peer's `hamsi_mail`
handler and waits for the peers' messages of the same step. Measured on loopback: ~0.85 ms one
way, against ~14 ms for a client round trip through the scheduler.
"""

from __future__ import annotations

import asyncio
import threading
import time

from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol.serialize import to_serialize

from cluster.errors import PeerLost

HANDLER = "hamsi_mail"

# One mailbox per worker, found by the worker's address from the task thread.
_BOXES: dict[str, "Mailbox"] = {}


class Mailbox:
    """Messages delivered to one worker, keyed by (run, step, sender), waited on by task threads."""

    def __init__(self, worker):
        self.worker = worker
        self._messages: dict[tuple, object] = {}
        self._cond = threading.Condition()
        self._aborted: set[str] = set()
        self._comms: dict = {}  # peer address -> an open comm, used only from the worker's event loop

    async def deliver(self, run=None, step=None, sender=None, payload=None):
        """Store one message (runs on the worker's event loop; the sender expects no reply)."""
        with self._cond:
            self._messages[(run, step, sender)] = payload
            self._cond.notify_all()

    def abort(self, run: str):
        """Wake every waiter of `run` with PeerLost (the driver calls this when a peer died)."""
        with self._cond:
            self._aborted.add(run)
            self._cond.notify_all()

    def collect(self, run: str, step, senders: list[str], timeout: float) -> list:
        """Return the payloads of `senders` for (run, step), in the order of `senders`.

        Raises PeerLost naming the missing senders after `timeout` seconds.
        """
        deadline = time.monotonic() + timeout
        keys = [(run, step, s) for s in senders]
        with self._cond:
            while True:
                if run in self._aborted:
                    raise PeerLost(f"run {run} aborted by the driver")
                if all(k in self._messages for k in keys):
                    return [self._messages.pop(k) for k in keys]
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [s for s, k in zip(senders, keys) if k not in self._messages]
                    raise PeerLost(f"no message for step {step} from {missing} within {timeout:g} s")
                self._cond.wait(left)

    def forget(self, run: str):
        """Drop every stored message of `run` (a finished or abandoned attempt)."""
        with self._cond:
            for key in [k for k in self._messages if k[0] == run]:
                del self._messages[key]
            self._aborted.discard(run)

    async def _comm_to(self, addr: str):
        comm = self._comms.get(addr)
        if comm is None or comm.closed():
            comm = await self.worker.rpc.connect(addr)
            self._comms[addr] = comm
        return comm

    def post(self, run: str, step, peers: list[str], payload):
        """Start posting `payload` to every peer; return a concurrent Future (call from a task thread).

        Messages go over one long-lived comm per peer with reply=False: a send is one write, not
        a request/response round trip; the peer's handler reads them in order. The write runs on
        the worker's event loop while the task thread keeps computing (the kernels drop the GIL),
        so `payload` must not change until `wait_posted` returns.
        """
        message = {"op": HANDLER, "reply": False, "run": run, "step": step, "sender": self.worker.address,
                   "payload": to_serialize(payload)}

        async def post_all():
            async def post(addr):
                comm = await self._comm_to(addr)
                await comm.write(message)
            await asyncio.gather(*(post(a) for a in peers))

        return asyncio.run_coroutine_threadsafe(post_all(), self.worker.loop.asyncio_loop)

    def wait_posted(self, future, peers: list[str], timeout: float):
        """Return when a post finished; raise PeerLost when a write failed or stalled for `timeout` s.

        A peer that died is also noticed by the driver (the scheduler drops it), which aborts the
        run on the survivors.
        """
        try:
            future.result(timeout)
        except Exception as exc:  # OSError, CommClosedError, TimeoutError
            future.cancel()
            for addr in peers:
                self._comms.pop(addr, None)
            raise PeerLost(f"sending to {peers} failed: {type(exc).__name__}: {exc}") from exc

    def send(self, run: str, step, peers: list[str], payload, timeout: float):
        """Post `payload` to every peer and wait until it is written (see `post`)."""
        if peers:
            self.wait_posted(self.post(run, step, peers, payload), peers, timeout)


class MailboxPlugin(WorkerPlugin):
    """Installs the `hamsi_mail` handler and the worker's Mailbox (register once per client)."""

    name = "hamsi-mailbox"
    idempotent = True

    def setup(self, worker):
        box = Mailbox(worker)
        _BOXES[worker.address] = box
        worker.handlers[HANDLER] = box.deliver

    def teardown(self, worker):
        _BOXES.pop(worker.address, None)
        worker.handlers.pop(HANDLER, None)


def install(client):
    """Register the MailboxPlugin on every current and future worker of `client`."""
    client.register_plugin(MailboxPlugin(), name=MailboxPlugin.name)


def local_mailbox() -> Mailbox:
    """Return this worker's Mailbox (call from inside a task)."""
    from distributed import get_worker

    worker = get_worker()
    try:
        return _BOXES[worker.address]
    except KeyError:
        raise RuntimeError("the hamsi mailbox plugin is not installed on this worker; call mailbox.install(client)")


def abort_run(run: str):
    """Abort `run` on this worker (used through client.run on the survivors after a failure)."""
    for box in _BOXES.values():
        box.abort(run)
