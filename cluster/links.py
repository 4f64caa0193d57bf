"""Direct TCP links between the chunk tasks of one run: the inner iterations' all-to-all rounds.

A round through distributed's comms (cluster.mailbox: the task thread hands the message to the
worker's event loop, which serializes and writes it; the peer's loop reads, deserializes and
wakes the peer's task thread) cost ~4 ms for 330 KiB on loopback, more than half of an inner
iteration. Here the task threads talk to each other directly: one plain TCP connection per pair
of workers, opened at a chunk's start and closed at its end, with TCP_NODELAY. One round sends
every peer our frame and reads theirs in a single `selectors` loop (no deadlock when both sides
write at once, and no polling: the thread blocks in select while it waits). Each worker listens
on the host of its Dask address only, so links also work between hosts; only plain tcp://
clusters use them (a tls:// cluster keeps its encrypted comms: the mailbox's).

Nothing a connection sends is trusted before it is authenticated, and nothing is ever unpickled:
- the hello has fixed sizes and is an HMAC-SHA256 challenge-response on the chunk's random secret
  (made by the driver, handed to the tasks through Dask, so as safe as the cluster's own comms):
  each side proves it holds the secret over the other's fresh nonce (hmac.compare_digest);
- a frame is numbers only: a header, a descriptor (dtype from a whitelist, shape) per array, and
  the arrays' raw bytes (cluster.messages.to_arrays / from_arrays give the typed Message); every
  size is checked against the run's FrameLimit before anything is allocated. An array is written
  from its own memory and read into a fresh one, with no copy in between.
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
import hashlib
import hmac
import math
import os
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass

import numpy as np

from cluster.errors import PeerLost
from cluster.messages import MalformedMessage, from_arrays, to_arrays

HELLO_DEADLINE = 3.0  # seconds a connection has for its whole hello (a peer needs milliseconds)
FINISHED_KEPT = 1024  # runs remembered as finished (their late connections are refused)
HELLOS_AT_ONCE = 64  # connections in their hello at one time (module docstring: who makes room)
ACCEPTS_AT_ONCE = (
    16  # connections accepted per turn of the loop, before the pending hellos are read
)
HELLO_POLL = 0.5  # seconds between checks for an abort while a peer's hello answer is awaited
ACCEPT_RETRY = 0.1  # seconds to wait after accept() failed for lack of resources (EMFILE, ENOBUFS)
CONNECT_ATTEMPT = 3.0  # seconds one attempt to connect may take (a full backlog drops the SYN)
CONNECT_BACKOFF = (0.05, 1.0)  # first and longest pause between attempts to open a link

# The hello (fixed sizes: nothing is read whose length the peer chose). The connecting side
# sends HELLO (magic, run id, its worker address, a fresh nonce); the accepting side answers a
# fresh nonce; the connector proves it knows the run's secret with an HMAC over both, and the
# acceptor answers with its own HMAC, so each side knows the other belongs to the run before
# any frame is read.
HELLO = struct.Struct("!4s64s128s32s")
HELLO_MAGIC = b"HMSL"
NONCE = 32
MAC = hashlib.sha256().digest_size
# A frame: FRAME (magic, number of arrays), then one DESCRIPTOR per array, then the raw bytes.
FRAME = struct.Struct("!4sI")
FRAME_MAGIC = b"HMSF"
DESCRIPTOR = struct.Struct("!BBQQ")  # dtype code, ndim (0-2), shape (unused dimensions 0)
DTYPES = {
    1: np.dtype(np.float64),
    2: np.dtype(np.int64),
    3: np.dtype(np.int32),
    4: np.dtype(np.uint8),
}
CODES = {dtype: code for code, dtype in DTYPES.items()}
MAX_ARRAYS = 1 << 16


@dataclass(frozen=True)
class FrameLimit:
    """What a frame of one run may declare: arrays per frame, bytes per array (set by the run's sizes)."""

    max_arrays: int = MAX_ARRAYS
    max_array_bytes: int = 1 << 20


class FrameRefused(ValueError):
    """A frame declared something the run cannot need (a size, a dtype, a shape): read no further."""


def encode(message) -> list:
    """Return the frame of a Message as buffers: frame header + descriptors, then each array's bytes."""
    arrays = [np.ascontiguousarray(a) for a in to_arrays(message)]
    parts = [FRAME.pack(FRAME_MAGIC, len(arrays))]
    for a in arrays:
        if a.dtype not in CODES or a.ndim > 2:
            raise TypeError(
                f"links carry 0-2 dimensional arrays of {sorted(map(str, CODES))}, not {a.dtype} x {a.ndim}"
            )
        shape = tuple(a.shape) + (0,) * (2 - a.ndim)
        parts.append(DESCRIPTOR.pack(CODES[a.dtype], a.ndim, *shape))
    return [b"".join(parts), *(a for a in arrays if a.nbytes)]


def addressed_frames(message, peers: list[str]) -> dict:
    """Return {peer: frame}: one Message encoded once for all, or {peer: Message} encoded per peer."""
    if isinstance(message, dict):
        return {p: encode(message[p]) for p in peers}
    frame = encode(message)
    return dict.fromkeys(peers, frame)


def frame_nbytes(frame: list) -> int:
    """Return the bytes a frame puts on the wire (header, descriptors, arrays)."""
    return sum(memoryview(b).nbytes for b in frame)


class _Inbound:
    """Reads one frame from a non-blocking socket, piece by piece, into freshly allocated arrays.

    Every declared size is checked against the run's FrameLimit before anything is allocated.
    """

    def __init__(self, limit: FrameLimit):
        self.limit = limit
        self.header = bytearray(FRAME.size)
        self.targets = [memoryview(self.header)]
        self.stage = "header"
        self.arrays: list[np.ndarray] = []
        self.done = False

    def feed(self, sock) -> None:
        """Read what is available; raise ConnectionResetError when the peer closed its end."""
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
            magic, count = FRAME.unpack(self.header)
            if magic != FRAME_MAGIC or count > self.limit.max_arrays:
                raise FrameRefused(
                    f"a frame of {count} arrays (magic {magic!r}); this run sends at most "
                    f"{self.limit.max_arrays}"
                )
            self.descriptors = bytearray(DESCRIPTOR.size * count)
            self.stage = "descriptors"
            self.targets = [memoryview(self.descriptors)] if count else []
            if not count:
                self._next_stage()
        elif self.stage == "descriptors":
            self.arrays = [
                self._allocate(*DESCRIPTOR.unpack_from(self.descriptors, DESCRIPTOR.size * i))
                for i in range(len(self.descriptors) // DESCRIPTOR.size)
            ]
            self.stage = "body"
            self.targets = [memoryview(a).cast("B") for a in self.arrays if a.nbytes]
            if not self.targets:
                self._next_stage()
        else:
            self.done = True

    def _allocate(self, code: int, ndim: int, rows: int, cols: int) -> np.ndarray:
        dtype, shape = DTYPES.get(code), (rows, cols)[:ndim]
        if dtype is None or ndim > 2 or any((rows, cols)[ndim:]):  # unused dimensions are 0
            raise FrameRefused(
                f"an array of dtype code {code}, {ndim} dimensions, shape ({rows}, {cols})"
            )
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > self.limit.max_array_bytes:
            raise FrameRefused(
                f"an array of {rows} x {cols} {dtype} ({nbytes} bytes); this run sends at most "
                f"{self.limit.max_array_bytes} bytes per array"
            )
        return np.empty(shape, dtype=dtype)

    def value(self):
        return from_arrays(self.arrays)


class _Outbound:
    """Writes one frame to a non-blocking socket, as far as the socket takes it."""

    def __init__(self, frame: list):
        self.views = [memoryview(b).cast("B") for b in frame if len(b)]
        self.nbytes = sum(v.nbytes for v in self.views)

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


def _read_exactly(sock, size: int, waiting=None) -> bytes:
    """Read exactly `size` bytes from a blocking socket (the hello's fixed-size pieces).

    waiting: called whenever the socket's timeout passes without data (it raises to give up).
    """
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        try:
            n = sock.recv_into(view[got:])
        except TimeoutError:
            if waiting is None:
                raise
            waiting()
            continue
        if n == 0:
            raise ConnectionResetError("the peer closed the connection during the hello")
        got += n
    return bytes(data)


def _fixed(text: str, size: int) -> bytes:
    raw = text.encode()
    if len(raw) > size:
        raise ValueError(f"{text!r} is longer than the hello's {size} bytes")
    return raw.ljust(size, b"\0")


def _mac(secret: bytes, role: bytes, hello: bytes, nonce: bytes) -> bytes:
    """Return the HMAC-SHA256 by which one side of a hello proves it holds the run's secret."""
    return hmac.new(secret, role + hello + nonce, hashlib.sha256).digest()


class _Hello:
    """One accepted connection in its hello: reads the fixed-size pieces without blocking.

    run is None until the connection sent a whole HELLO naming a run this worker expects; then
    the nonce is answered and its proof (MAC bytes) is read.
    """

    def __init__(self, sock, deadline: float):
        self.sock, self.deadline = sock, deadline
        self.data, self.want = bytearray(), HELLO.size
        self.run = self.peer = self.secret = self.sent = self.nonce = None

    def read(self) -> bool:
        """Read what is available, never past the piece awaited; True once that piece is complete."""
        while len(self.data) < self.want:
            try:
                chunk = self.sock.recv(self.want - len(self.data))
            except BlockingIOError:
                return False
            if not chunk:
                raise ConnectionResetError("the connection closed during its hello")
            self.data += chunk
        return True

    def send(self, data: bytes) -> None:
        """Send a piece of the hello whole (it fits a fresh socket's buffer), else refuse the connection."""
        if self.sock.send(data) != len(data):
            raise ConnectionRefusedError("the connection does not take the hello's answer")

    def answer(self, run: str, peer: str, secret: bytes) -> None:
        """Answer a fresh nonce to a HELLO naming `run`; its proof comes next."""
        self.run, self.peer, self.secret, self.sent = run, peer, secret, bytes(self.data)
        self.nonce = os.urandom(NONCE)
        self.send(self.nonce)
        self.data, self.want = bytearray(), MAC


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
        self._expected: dict[str, tuple[bytes, FrameLimit]] = {}  # run -> (secret, frame limit)
        self._finished: collections.deque = collections.deque(maxlen=FINISHED_KEPT)
        self._listener.setblocking(False)
        self._stop_r, self._stop_w = socket.socketpair()  # wakes the accept loop at shutdown
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._aborted: set[str] = set()
        self.closed = False
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="hamsi-links-accept", daemon=True
        )
        self._acceptor.start()

    # ------------------------------------------------------------------ connections
    def _accept_loop(self) -> None:
        """Accept connections and serve all their hellos at once (module docstring), until shutdown."""
        pending: dict[socket.socket, _Hello] = {}  # in order of arrival
        with selectors.DefaultSelector() as selector:
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
            hello = _Hello(sock, time.monotonic() + HELLO_DEADLINE)
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
                hello.data, _mac(hello.secret, b"connect", hello.sent, hello.nonce)
            ):
                raise ConnectionRefusedError("the proof does not match the run's secret")
            hello.send(_mac(hello.secret, b"accept", hello.sent, hello.nonce))
            pending.pop(hello.sock)
            selector.unregister(hello.sock)
            with self._cond:
                if self.closed or hello.run not in self._expected:
                    raise ConnectionRefusedError("the run ended")
                self._accepted[(hello.run, hello.peer)] = hello.sock
                self._cond.notify_all()
        except (OSError, UnicodeDecodeError):
            self._drop(hello, pending, selector)

    def _connect(self, run: str, address, secret: bytes, deadline: float):
        """Return a socket to the peer at `address` after the hello (each side proved it holds `secret`)."""

        def waiting():  # a stopped peer's kernel accepts the connection, but nobody answers
            self._check_aborted(run)
            if time.monotonic() > deadline:
                raise PeerLost(
                    f"the link listener at {address[0]}:{address[1]} did not answer the hello"
                )

        sock = socket.create_connection(
            tuple(address), timeout=min(max(deadline - time.monotonic(), 0.1), CONNECT_ATTEMPT)
        )
        try:
            sock.settimeout(HELLO_POLL)
            hello = HELLO.pack(
                HELLO_MAGIC, _fixed(run, 64), _fixed(self.worker_address, 128), os.urandom(NONCE)
            )
            sock.sendall(hello)
            nonce = _read_exactly(sock, NONCE, waiting)
            sock.sendall(_mac(secret, b"connect", hello, nonce))
            if not hmac.compare_digest(
                _read_exactly(sock, MAC, waiting), _mac(secret, b"accept", hello, nonce)
            ):
                raise PeerLost(
                    f"the link listener at {address[0]}:{address[1]} did not prove it belongs to run {run}"
                )
        except BaseException:
            sock.close()
            raise
        return sock

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
        with self._cond:
            self._runs[run] = links

    def _connect_retrying(self, run: str, peer: str, address, secret: bytes, deadline: float):
        """Return `_connect`'s socket, trying again with backoff until `deadline` (a refused or closed attempt).

        A listener busy with strangers' connections may close ours or leave it in its backlog;
        only a peer that cannot be linked until the chunk's deadline is declared lost.
        """
        pause = CONNECT_BACKOFF[0]
        while True:
            try:
                return self._connect(run, address, secret, deadline)
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

        message: one Message for every peer, or {peer: Message} (each peer its own). Raises
        PeerLost naming the peers whose message is missing after `timeout` seconds, or whose
        connection failed.
        """
        links, limit = self._runs[run], self._expected[run][1]
        frames = addressed_frames(message, peers)
        outbound = {p: _Outbound(frames[p]) for p in peers}
        sent = sum(o.nbytes for o in outbound.values())
        inbound = {p: _Inbound(limit) for p in peers}
        waited = 0.0
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self._wake_r, selectors.EVENT_READ, None)
            for p in peers:
                outbound[p].push(links[p])
                selector.register(
                    links[p],
                    selectors.EVENT_READ | (0 if outbound[p].done else selectors.EVENT_WRITE),
                    p,
                )
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
        try:
            return [inbound[p].value() for p in peers], waited, sent
        except MalformedMessage as exc:
            raise PeerLost(f"run {run}: a peer sent a malformed message ({exc})") from exc

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
        except (OSError, FrameRefused) as exc:
            raise PeerLost(f"the link to {peer} failed: {type(exc).__name__}: {exc}") from exc
        if inbound[peer].done:
            pending.discard(peer)
        events = (selectors.EVENT_READ if peer in pending else 0) | (
            0 if outbound[peer].done else selectors.EVENT_WRITE
        )
        if events:
            selector.modify(sock, events, peer)
        else:
            selector.unregister(sock)

    def _check_aborted(self, run: str) -> None:
        with self._cond:
            if run in self._aborted:
                raise PeerLost(f"run {run} aborted by the driver")
