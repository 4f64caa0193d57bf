"""The hello of a direct link: an HMAC-SHA256 challenge-response on the run's secret.

The connecting side sends HELLO (magic, run id, its worker address, a fresh nonce); the
accepting side answers a fresh nonce; the connector proves it knows the run's secret with an
HMAC over both, and the acceptor answers with its own HMAC, so each side knows the other belongs
to the run before any frame is read. Every piece has a fixed size: nothing is read whose length
the peer chose.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time

from cluster.errors import PeerLost

HELLO_POLL = 0.5  # seconds between checks for an abort while a peer's hello answer is awaited
CONNECT_ATTEMPT = 3.0  # seconds one attempt to connect may take (a full backlog drops the SYN)
HELLO = struct.Struct("!4s64s128s32s")  # magic, run id, worker address, nonce
HELLO_MAGIC = b"HMSL"
NONCE = 32
MAC = hashlib.sha256().digest_size


def read_exactly(sock, size: int, waiting=None) -> bytes:
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


def fixed_bytes(text: str, size: int) -> bytes:
    raw = text.encode()
    if len(raw) > size:
        raise ValueError(f"{text!r} is longer than the hello's {size} bytes")
    return raw.ljust(size, b"\0")


def hello_mac(secret: bytes, role: bytes, hello: bytes, nonce: bytes) -> bytes:
    """Return the HMAC-SHA256 by which one side of a hello proves it holds the run's secret."""
    return hmac.new(secret, role + hello + nonce, hashlib.sha256).digest()


class AcceptedHello:
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


def connect_with_hello(
    run: str, worker_address: str, address, secret: bytes, deadline: float, check_aborted
):
    """Return a socket to the peer at `address` after the hello (each side proved it holds `secret`).

    check_aborted(run) raises when the run was aborted while the answer is awaited.
    """

    def waiting():  # a stopped peer's kernel accepts the connection, but nobody answers
        check_aborted(run)
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
            HELLO_MAGIC, fixed_bytes(run, 64), fixed_bytes(worker_address, 128), os.urandom(NONCE)
        )
        sock.sendall(hello)
        nonce = read_exactly(sock, NONCE, waiting)
        sock.sendall(hello_mac(secret, b"connect", hello, nonce))
        if not hmac.compare_digest(
            read_exactly(sock, MAC, waiting), hello_mac(secret, b"accept", hello, nonce)
        ):
            raise PeerLost(
                f"the link listener at {address[0]}:{address[1]} did not prove it belongs to run {run}"
            )
    except BaseException:
        sock.close()
        raise
    return sock
