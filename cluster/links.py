"""Direct TCP links between the chunk tasks of one run: the inner iterations' all-to-all rounds.

A round through distributed's comms (cluster.mailbox: the task thread hands the message to the
worker's event loop, which serializes and writes it; the peer's loop reads, deserializes and
wakes the peer's task thread) cost ~4 ms for 330 KiB on loopback, more than half of an inner
iteration. Here the task threads talk to each other directly: one plain TCP connection per pair
of workers, opened at a chunk's start and closed at its end, with TCP_NODELAY. One round sends
every peer our frame and reads theirs in a single `select.poll` loop (no deadlock when both sides
write at once, and no busy waiting: the thread blocks in poll while it waits). Each worker listens
on the host of its Dask address only, so links also work between hosts; only plain tcp://
clusters use them (a tls:// cluster keeps its encrypted comms: the mailbox's).

Nothing a connection sends is trusted before it is authenticated, and nothing is ever unpickled:
- the hello has fixed sizes and is an HMAC-SHA256 challenge-response on the chunk's random secret
  (made by the driver, handed to the tasks through Dask, so as safe as the cluster's own comms):
  each side proves it holds the secret over the other's fresh nonce (hmac.compare_digest);
- a frame is numbers only: a header, a descriptor (dtype from a whitelist, shape) per array, and
  the arrays' raw bytes (cluster.messages.to_arrays / from_arrays give the typed Message); every
  size is checked against the run's FrameLimit before anything is allocated. An array is written
  from its own memory and read into a fresh one (cluster.link_frames: a large one with no copy
  in between, small parts through one buffer).
Anyone who can reach a worker can connect to its links port, so connections that never finish
their hello must not keep the run's peers out. One accept thread serves every hello at once in a
`selectors` loop (no thread per connection): a connection has HELLO_DEADLINE seconds for its whole
hello (not per read), at most HELLOS_AT_ONCE are in their hello at one time, and when they are, a
new connection closes the oldest one that has not yet named a run this worker expects (a peer
names it in its first packet; a stranger cannot know the run id), so idle or slow-drip
connections take no slot from a peer. A peer whose connection was closed all the same connects
again (`open` retries with backoff until the chunk's deadline). accept() errors (EMFILE and the
like) close the oldest stranger, or wait, and accept again.

Lifecycle: the worker's Links object (made by the mailbox plugin) owns a listening socket and a
thread accepting connections; a chunk's `expect` announces its secret, its `open` connects to the
peers above it in address order and takes the (authenticated) connections of those below it from
the accept thread; `close` shuts the run's connections and forgets its secret. A peer that dies
closes its end: the survivors' rounds fail at once with PeerLost.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hmac
import selectors
import socket
import threading
import time

from cluster.errors import PeerLost
from cluster.link_frames import (
    CODES,
    DESCRIPTOR,
    DTYPES,
    FRAME,
    FRAME_MAGIC,
    MAX_ARRAYS,
    FrameLimit,
    FrameReader,
    FrameRefused,
    FrameWriter,
    addressed_frames,
    encode,
    frame_nbytes,
)
from cluster.link_hello import (
    HELLO,
    HELLO_MAGIC,
    MAC,
    NONCE,
    AcceptedHello,
    connect_with_hello,
    hello_mac,
)
from cluster.link_round import exchange_round, record_round

# The names callers import from here (frames, hello and round have modules of their own).
__all__ = [
    "CODES",
    "DESCRIPTOR",
    "DTYPES",
    "FRAME",
    "FRAME_MAGIC",
    "HELLO",
    "MAC",
    "MAX_ARRAYS",
    "NONCE",
    "FrameLimit",
    "FrameRefused",
    "Links",
    "addressed_frames",
    "encode",
    "frame_nbytes",
]
_Inbound, _Outbound = FrameReader, FrameWriter

HELLO_DEADLINE = 3.0  # seconds a connection has for its whole hello (a peer needs milliseconds)
FINISHED_KEPT = 1024  # runs remembered as finished (their late connections are refused)
HELLOS_AT_ONCE = 64  # connections in their hello at one time (module docstring: who makes room)
ACCEPTS_AT_ONCE = (
    16  # connections accepted per turn of the loop, before the pending hellos are read
)
ACCEPT_RETRY = 0.1  # seconds to wait after accept() failed for lack of resources (EMFILE, ENOBUFS)
CONNECT_BACKOFF = (0.05, 1.0)  # first and longest pause between attempts to open a link


class Links:
    """One worker's end of the direct links: a listening socket, accepted connections, open runs.

    A run is announced with `expect(run, secret, limit)` before its peers can connect; only a
    connection that proves it holds that run's secret is kept (cluster.links module docstring).
    """

    def __init__(self, worker_address: str, host: str):
        self.worker_address = worker_address
        self._listener = socket.create_server((host, 0))
        self.address = self._listener.getsockname()[:2]
        self._cond = threading.Condition()
        self._accepted: dict[tuple, socket.socket] = {}  # (run, peer) -> socket
        self._runs: dict[str, dict[str, socket.socket]] = {}
        self._readers: dict[str, dict[str, FrameReader]] = {}  # run -> peer -> its link's reader
        self._expected: dict[str, tuple[bytes, FrameLimit]] = {}  # run -> (secret, frame limit)
        self._finished: collections.deque = collections.deque(maxlen=FINISHED_KEPT)
        self._listener.setblocking(False)
        self._stop_r, self._stop_w = socket.socketpair()  # wakes the accept loop at shutdown
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._aborted: set[str] = set()
        self.closed = False
        # made here, not in the thread: its file descriptor exists before anything can run out
        self._selector = selectors.DefaultSelector()
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="hamsi-links-accept", daemon=True
        )
        self._acceptor.start()

    # ------------------------------------------------------------------ connections
    def _accept_loop(self) -> None:
        """Accept connections and serve all their hellos at once (module docstring), until shutdown."""
        pending: dict[socket.socket, AcceptedHello] = {}  # in order of arrival
        with self._selector as selector:
            selector.register(self._stop_r, selectors.EVENT_READ, "stop")
            selector.register(self._listener, selectors.EVENT_READ, "listener")
            try:
                while not self.closed:
                    now = time.monotonic()
                    for hello in [h for h in pending.values() if h.deadline <= now]:
                        self._drop(hello, pending, selector)
                    wait = min((h.deadline for h in pending.values()), default=now + 1.0) - now
                    events = selector.select(max(wait, 0.0))
                    # the pending hellos first: a peer's first packet is read before new
                    # connections can push it out
                    for key, _ in sorted(events, key=lambda e: isinstance(e[0].data, str)):
                        if key.data == "stop":
                            return
                        if key.data == "listener":
                            self._accept_some(pending, selector)
                        elif key.fileobj in pending:
                            self._serve_hello(key.data, pending, selector)
            finally:
                for hello in list(pending.values()):
                    hello.sock.close()

    def _accept_some(self, pending: dict, selector) -> None:
        for _ in range(ACCEPTS_AT_ONCE):
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if self.closed or exc.errno in (errno.EBADF, errno.EINVAL, errno.ENOTSOCK):
                    return  # the listener was closed: the worker is going away
                # EMFILE, ENFILE, ENOBUFS, ECONNABORTED: free a stranger's descriptor, or wait
                stranger = next((h for h in pending.values() if h.run is None), None)
                if stranger is None:
                    time.sleep(ACCEPT_RETRY)
                else:
                    self._drop(stranger, pending, selector)
                return
            if len(pending) >= HELLOS_AT_ONCE:
                stranger = next((h for h in pending.values() if h.run is None), None)
                if stranger is None:  # every slot holds a connection that named an expected run
                    sock.close()
                    continue
                self._drop(stranger, pending, selector)
            sock.setblocking(False)
            hello = AcceptedHello(sock, time.monotonic() + HELLO_DEADLINE)
            pending[sock] = hello
            selector.register(sock, selectors.EVENT_READ, hello)
            self._serve_hello(hello, pending, selector)  # its first packet may be there already

    @staticmethod
    def _drop(hello, pending: dict, selector) -> None:
        pending.pop(hello.sock, None)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(hello.sock)
        hello.sock.close()

    def _serve_hello(self, hello, pending: dict, selector) -> None:
        """Read what `hello` sent; answer it, keep its socket as a run's link, or close it (refused)."""
        try:
            finished = hello.read()
            if not finished:
                return
            if hello.run is None:  # its HELLO is complete: answer a nonce when it names our run
                magic, run_raw, peer_raw, _ = HELLO.unpack(hello.data)
                run, peer = run_raw.rstrip(b"\0").decode(), peer_raw.rstrip(b"\0").decode()
                with self._cond:
                    expected = self._expected.get(run)
                if magic != HELLO_MAGIC or expected is None:
                    raise ConnectionRefusedError("not a hello of a run this worker expects")
                hello.answer(run, peer, expected[0])
                return
            if not hmac.compare_digest(
                hello.data, hello_mac(hello.secret, b"connect", hello.sent, hello.nonce)
            ):
                raise ConnectionRefusedError("the proof does not match the run's secret")
            hello.send(hello_mac(hello.secret, b"accept", hello.sent, hello.nonce))
            pending.pop(hello.sock)
            selector.unregister(hello.sock)
            with self._cond:
                if self.closed or hello.run not in self._expected:
                    raise ConnectionRefusedError("the run ended")
                self._accepted[(hello.run, hello.peer)] = hello.sock
                self._cond.notify_all()
        except (OSError, UnicodeDecodeError):
            self._drop(hello, pending, selector)

    def expect(self, run: str, secret: bytes, limit: FrameLimit) -> None:
        """Accept run's links from peers that hold `secret`; their frames are checked against `limit`."""
        if len(secret) < 16:
            raise ValueError("a run's link secret must have at least 16 bytes")
        with self._cond:
            self._expected[run] = (bytes(secret), limit)

    def open(self, run: str, peers: dict[str, tuple], timeout: float) -> None:
        """Connect run's links: to the peers above us in address order, from those below; peers: addr -> link address.

        `expect(run, ...)` must have been called (the mailbox does it before the start barrier).
        """
        deadline = time.monotonic() + timeout
        secret = self._expected[run][0]
        links = {}
        try:
            for peer, address in sorted(peers.items()):
                if peer > self.worker_address:
                    links[peer] = self._connect_retrying(run, peer, address, secret, deadline)
            for peer in sorted(peers):
                if peer < self.worker_address:
                    links[peer] = self._take_accepted(run, peer, deadline)
        except BaseException:
            for sock in links.values():
                sock.close()
            raise
        for sock in links.values():
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        limit = self._expected[run][1]
        with self._cond:
            self._runs[run] = links
            self._readers[run] = {peer: FrameReader(limit) for peer in links}

    def _connect_retrying(self, run: str, peer: str, address, secret: bytes, deadline: float):
        """Return the socket of `connect_with_hello`, trying again with backoff until `deadline` (a refused or closed attempt).

        A listener busy with strangers' connections may close ours or leave it in its backlog;
        only a peer that cannot be linked until the chunk's deadline is declared lost.
        """
        pause = CONNECT_BACKOFF[0]
        while True:
            try:
                return connect_with_hello(
                    run, self.worker_address, address, secret, deadline, self._check_aborted
                )
            except (OSError, PeerLost) as exc:
                self._check_aborted(run)
                if time.monotonic() + pause >= deadline:
                    raise PeerLost(
                        f"cannot open the link to {peer}: {type(exc).__name__}: {exc}"
                    ) from exc
            time.sleep(pause)
            pause = min(2 * pause, CONNECT_BACKOFF[1])

    def _take_accepted(self, run: str, peer: str, deadline: float):
        with self._cond:
            while (run, peer) not in self._accepted:
                if run in self._aborted:
                    raise PeerLost(f"run {run} aborted by the driver")
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise PeerLost(f"{peer} did not open its link for run {run}")
                self._cond.wait(left)
            return self._accepted.pop((run, peer))

    def close(self, run: str) -> None:
        """Close run's links and refuse its late connections (a finished or aborted chunk)."""
        with self._cond:
            self._finished.append(run)
            self._expected.pop(run, None)
            sockets = list(self._runs.pop(run, {}).values())
            self._readers.pop(run, None)
            sockets += [self._accepted.pop(k) for k in [k for k in self._accepted if k[0] == run]]
            self._aborted.discard(run)
        for sock in sockets:
            sock.close()

    def abort(self, run: str) -> None:
        """Wake run's task thread with PeerLost (the driver calls this when a peer died)."""
        with self._cond:
            self._aborted.add(run)
            self._cond.notify_all()  # a task waiting for a peer's link in open()
        self._wake_w.send(b"x")

    def shutdown(self) -> None:
        """Close the listener and every link (plugin teardown)."""
        with self._cond:
            self.closed = True
            runs = list(self._runs)
        for run in runs:
            self.close(run)
        with contextlib.suppress(OSError):  # shut down already
            self._stop_w.send(b"x")
        self._acceptor.join(ACCEPT_RETRY + 1.0)
        for sock in (self._listener, self._stop_w, self._stop_r, self._wake_w, self._wake_r):
            sock.close()

    # ------------------------------------------------------------------ one round
    def round(self, run: str, peers: list[str], message, timeout: float) -> tuple[list, float, int]:
        """Send `message` to every peer; return (their messages in `peers` order, seconds blocked waiting, bytes sent).

        cluster.link_round.exchange_round on this run's links and their readers.
        """
        return exchange_round(*self._round_of(run), run, peers, message, timeout)

    def record_round(
        self, run: str, peers: list[str], record, items: dict, timeout: float
    ) -> tuple:
        """Send a partials record (and items[peer] after it); cluster.link_round.record_round on this run's links."""
        return record_round(*self._round_of(run), run, peers, record, items, timeout)

    def _round_of(self, run: str) -> tuple:
        """Return what a round of `run` works on: its links, their readers, the wake-up socket, the abort check."""
        return self._runs[run], self._readers[run], self._wake_r, self._check_aborted

    def _check_aborted(self, run: str) -> None:
        with self._cond:
            if run in self._aborted:
                raise PeerLost(f"run {run} aborted by the driver")
