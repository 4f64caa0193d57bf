"""Direct TCP links between the chunk tasks of one run: the inner iterations' all-to-all rounds.

A round through distributed's comms (cluster.mailbox: the task thread hands the message to the
worker's event loop, which serializes and writes it; the peer's loop reads, deserializes and
wakes the peer's task thread) cost ~4 ms for 330 KiB on loopback, more than half of an inner
iteration. Here the task threads talk to each other directly: one plain TCP connection per pair
of workers, opened at a chunk's start and closed at its end, with TCP_NODELAY. A frame is a
pickle (protocol 5) whose numpy buffers travel out of band, so an array is written from its own
memory and read into a fresh one, with no copy in between. One round sends every peer our frame
and reads theirs in a single `selectors` loop (no deadlock when both sides write at once, and no
polling: the thread blocks in select while it waits). Each worker listens on its own host, so
links also work between hosts; only plain tcp:// clusters use them (a tls:// cluster keeps its
encrypted comms: the mailbox's).

Lifecycle: the worker's Links object (made by the mailbox plugin) owns a listening socket and a
thread accepting connections; a chunk's `open` connects to the peers above it in address order
and takes the connections of those below it from the accept thread; `close` shuts the run's
connections. A peer that dies closes its end: the survivors' rounds fail at once with PeerLost.
"""

from __future__ import annotations

import collections
import pickle
import selectors
import socket
import struct
import threading
import time

from cluster.errors import PeerLost

HEADER = struct.Struct("!QQ")  # pickle length, number of out-of-band buffers
LENGTH = struct.Struct("!Q")
ACCEPT_TIMEOUT = 10.0  # seconds a connecting peer has to send its hello
FINISHED_KEPT = 1024
OUT_OF_BAND = 64 * 1024  # bytes from which an array is sent out of band  # runs remembered as finished (their late connections are refused)


def encode(obj) -> list:
    """Return the frame of `obj` as a list of buffers: header, buffer lengths, pickle, out-of-band buffers.

    Arrays of at least OUT_OF_BAND bytes travel out of band (written from their own memory);
    smaller ones (the partials) are cheaper inside the pickle.
    """
    raws: list[memoryview] = []

    def out_of_band(buffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < OUT_OF_BAND:
            return True  # pickle it in band
        raws.append(raw)
        return False

    data = pickle.dumps(obj, protocol=5, buffer_callback=out_of_band)
    lengths = b"".join(LENGTH.pack(r.nbytes) for r in raws)
    return [HEADER.pack(len(data), len(raws)) + lengths, data, *raws]


class _Inbound:
    """Reads one frame from a non-blocking socket, piece by piece, into freshly allocated buffers."""

    def __init__(self):
        self.header = bytearray(HEADER.size)
        self.targets = [memoryview(self.header)]
        self.stage = "header"
        self.data = None
        self.buffers: list[bytearray] = []
        self.done = False

    def feed(self, sock) -> None:
        """Read what is available; raise PeerLost when the peer closed its end."""
        while self.targets:
            target = self.targets[0]
            try:
                n = sock.recv_into(target)
            except BlockingIOError:
                return
            if n == 0:
                raise ConnectionResetError("the peer closed the connection")
            if n < target.nbytes:
                self.targets[0] = target[n:]
                continue
            self.targets.pop(0)
            if not self.targets:
                self._next_stage()

    def _next_stage(self) -> None:
        if self.stage == "header":
            size, count = HEADER.unpack(self.header)
            self.data = bytearray(size)
            self.lengths = bytearray(LENGTH.size * count)
            self.count = count
            self.stage = "lengths"
            self.targets = [memoryview(self.lengths)] if count else []
            if not count:
                self._next_stage()
        elif self.stage == "lengths":
            sizes = [LENGTH.unpack_from(self.lengths, LENGTH.size * i)[0] for i in range(self.count)]
            self.buffers = [bytearray(s) for s in sizes]
            self.stage = "body"
            self.targets = [memoryview(self.data)] + [memoryview(b) for b in self.buffers if len(b)]
            if not self.targets:
                self._next_stage()
        else:
            self.done = True

    def value(self):
        return pickle.loads(self.data, buffers=self.buffers)


class _Outbound:
    """Writes one frame to a non-blocking socket, as far as the socket takes it."""

    def __init__(self, frame: list):
        self.views = [memoryview(b).cast("B") for b in frame if len(b)]

    @property
    def done(self) -> bool:
        return not self.views

    def push(self, sock) -> None:
        while self.views:
            try:
                sent = sock.sendmsg(self.views[:64])
            except BlockingIOError:
                return
            while sent:
                head = self.views[0]
                if sent >= head.nbytes:
                    sent -= head.nbytes
                    self.views.pop(0)
                else:
                    self.views[0] = head[sent:]
                    sent = 0


def _send_blocking(sock, obj) -> None:
    """Write one frame on a blocking socket (the hello)."""
    for buffer in encode(obj):
        sock.sendall(buffer)


def _read_blocking(sock):
    """Read one frame from a blocking socket (the hello): the round's reader, which then never waits on EAGAIN."""
    inbound = _Inbound()
    while not inbound.done:
        inbound.feed(sock)
    return inbound.value()


class Links:
    """One worker's end of the direct links: a listening socket, accepted connections, open runs."""

    def __init__(self, worker_address: str, host: str):
        self.worker_address = worker_address
        self._listener = socket.create_server((host, 0))
        self.address = self._listener.getsockname()[:2]
        self._cond = threading.Condition()
        self._accepted: dict[tuple, socket.socket] = {}  # (run, peer) -> socket
        self._runs: dict[str, dict[str, socket.socket]] = {}
        self._finished: collections.deque = collections.deque(maxlen=FINISHED_KEPT)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._aborted: set[str] = set()
        self.closed = False
        threading.Thread(target=self._accept_loop, name="hamsi-links-accept", daemon=True).start()

    # ------------------------------------------------------------------ connections
    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:  # the listener was closed: the worker is going away
                return
            threading.Thread(target=self._hello, args=(sock,), daemon=True).start()

    def _hello(self, sock) -> None:
        try:
            sock.settimeout(ACCEPT_TIMEOUT)
            run, peer = _read_blocking(sock)
        except (OSError, pickle.UnpicklingError, ValueError, struct.error, MemoryError, OverflowError):
            sock.close()
            return
        with self._cond:
            if self.closed or run in self._finished:
                sock.close()
                return
            self._accepted[(run, peer)] = sock
            self._cond.notify_all()

    def open(self, run: str, peers: dict[str, tuple], timeout: float) -> None:
        """Connect run's links: to the peers above us in address order, from those below; peers: addr -> link address."""
        deadline = time.monotonic() + timeout
        links = {}
        try:
            for peer, address in sorted(peers.items()):
                if peer > self.worker_address:
                    sock = socket.create_connection(tuple(address), timeout=max(deadline - time.monotonic(), 0.1))
                    _send_blocking(sock, (run, self.worker_address))
                    links[peer] = sock
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
        with self._cond:
            self._runs[run] = links

    def _take_accepted(self, run: str, peer: str, deadline: float):
        with self._cond:
            while (run, peer) not in self._accepted:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise PeerLost(f"{peer} did not open its link for run {run}")
                self._cond.wait(left)
            return self._accepted.pop((run, peer))

    def close(self, run: str) -> None:
        """Close run's links and refuse its late connections (a finished or aborted chunk)."""
        with self._cond:
            self._finished.append(run)
            sockets = list(self._runs.pop(run, {}).values())
            sockets += [self._accepted.pop(k) for k in [k for k in self._accepted if k[0] == run]]
            self._aborted.discard(run)
        for sock in sockets:
            sock.close()

    def abort(self, run: str) -> None:
        """Wake run's task thread with PeerLost (the driver calls this when a peer died)."""
        with self._cond:
            self._aborted.add(run)
        self._wake_w.send(b"x")

    def shutdown(self) -> None:
        """Close the listener and every link (plugin teardown)."""
        with self._cond:
            self.closed = True
            runs = list(self._runs)
        for run in runs:
            self.close(run)
        self._listener.close()
        self._wake_w.close()
        self._wake_r.close()

    # ------------------------------------------------------------------ one round
    def round(self, run: str, peers: list[str], message, timeout: float) -> tuple[list, float]:
        """Send `message` to every peer and return (their messages in `peers` order, seconds blocked waiting).

        Raises PeerLost naming the peers whose message is missing after `timeout` seconds, or whose
        connection failed.
        """
        links = self._runs[run]
        frame = encode(message)
        outbound = {p: _Outbound(frame) for p in peers}
        inbound = {p: _Inbound() for p in peers}
        waited = 0.0
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self._wake_r, selectors.EVENT_READ, None)
            for p in peers:
                outbound[p].push(links[p])
                selector.register(links[p], selectors.EVENT_READ | (0 if outbound[p].done else selectors.EVENT_WRITE), p)
            pending = set(peers)
            while pending or any(not o.done for o in outbound.values()):
                self._check_aborted(run)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PeerLost(f"no message from {sorted(pending)} within {timeout:g} s")
                start = time.perf_counter()
                events = selector.select(left)
                if all(o.done for o in outbound.values()):
                    waited += time.perf_counter() - start
                for key, mask in events:
                    self._serve(key.data, mask, links, inbound, outbound, pending, selector)
        return [inbound[p].value() for p in peers], waited

    def _serve(self, peer, mask, links, inbound, outbound, pending, selector) -> None:
        if peer is None:  # the wake-up socket
            try:
                self._wake_r.recv(4096)
            except BlockingIOError:
                pass
            return
        sock = links[peer]
        try:
            if mask & selectors.EVENT_WRITE:
                outbound[peer].push(sock)
            if mask & selectors.EVENT_READ and peer in pending:
                inbound[peer].feed(sock)
        except OSError as exc:
            raise PeerLost(f"the link to {peer} failed: {type(exc).__name__}: {exc}") from exc
        if inbound[peer].done:
            pending.discard(peer)
        events = (selectors.EVENT_READ if peer in pending else 0) | (0 if outbound[peer].done else selectors.EVENT_WRITE)
        if events:
            selector.modify(sock, events, peer)
        else:
            selector.unregister(sock)

    def _check_aborted(self, run: str) -> None:
        with self._cond:
            if run in self._aborted:
                raise PeerLost(f"run {run} aborted by the driver")
