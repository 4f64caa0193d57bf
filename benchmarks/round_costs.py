"""The CPU one worker spends in a round of the direct links, measured in this process (bench_scaling.py).

`round_sample` times cluster.link_round.record_round, the code the workers run in an inner
iteration, over real TCP loopback connections to P peers (P = 1 .. 31) whose frames are already
in (a worker whose peers were ahead: the round's CPU, not its wait), with the owned-V inner
iteration's frames: the partials record of a U and a V shard to every peer, and after it a
Message of the V shard for the one peer that steps it next (one peer's record is followed by
such a Message too). A least-squares line over P gives the
round's fixed CPU and its CPU per peer (a frame written, one read and decoded). `byte_sample`
times rounds of one large V shard each way with one peer (a thread on the far end): the slope
between two sizes is the CPU per byte sent and received (both copies through the kernel).
Every figure is this thread's CPU time (time.thread_time), so other processes' time slices on a
shared machine do not count; bench_scaling.py takes medians over interleaved repeats.
"""

from __future__ import annotations

import socket
import threading
import time

import numpy as np

from cluster.link_frames import FrameLimit, FrameReader, encode, encode_record
from cluster.link_round import exchange_round, record_round
from cluster.messages import (
    RECORD_ITEMS,
    ItemShard,
    Message,
    ShardPartials,
    partials_record,
    record_layout,
)

PEERS = (1, 2, 4, 8, 16, 31)
BYTE_SIZES = (512 * 1024, 4 * 1024 * 1024)
LIMIT = FrameLimit(max_array_bytes=8 << 20)
SENDER = "tcp://127.0.0.1:40000"


def _no_abort(run: str) -> None:
    return None


def loopback_links(count: int) -> tuple[list, list]:
    """Return `count` connected TCP loopback pairs (near ends, far ends), non-blocking, TCP_NODELAY."""
    near, far = [], []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        for _ in range(count):
            a = socket.create_connection(listener.getsockname()[:2])
            b, _ = listener.accept()
            for s in (a, b):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.setblocking(False)
            near.append(a)
            far.append(b)
    return near, far


def partials_message(memory: int = 5) -> Message:
    """Return an inner iteration's Message of partials: a U shard's and a V shard's W'g and norms."""
    rng = np.random.default_rng(0)
    shards = [
        ShardPartials(s, wtg=rng.standard_normal(2 * memory), norms=rng.standard_normal(2))
        for s in (0, 1)
    ]
    return Message(1, SENDER, shards=shards)


def _drain(sockets, buf) -> None:
    for s in sockets:
        try:
            while s.recv_into(buf):
                pass
        except BlockingIOError:
            pass


def partials_record_of(message: Message, items: bool = False) -> np.ndarray:
    """Return the partials record of `message`'s shards at step 1 (items: items_follow set)."""
    record = partials_record(record_layout(message.shards), 1, False, 0.0, message.shards)
    record[RECORD_ITEMS] = float(items)
    return record


def round_sample(peers: int, rounds: int = 40) -> float:
    """Return the mean CPU seconds of one round with `peers` peers whose frames are in (module docstring)."""
    near, far = loopback_links(peers)
    names = [f"peer-{i}" for i in range(peers)]
    mine = partials_record_of(partials_message())
    handed = {names[0]: Message(1, SENDER, items=[ItemShard(3, g=np.zeros(8))])}
    theirs = [encode_record(mine)]
    followed = [
        encode_record(partials_record_of(partials_message(), True)),
        *encode(handed[names[0]]),
    ]
    readers = {p: FrameReader(LIMIT) for p in names}
    links = dict(zip(names, near))
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    buf = bytearray(1 << 16)
    total = 0.0
    try:
        for step in range(rounds + 2):
            for i, s in enumerate(far):
                s.sendmsg(followed if i == 0 else theirs)
            start = time.thread_time()
            record_round(links, readers, wake_r, _no_abort, "r", names, mine, handed, 10.0)
            if step >= 2:  # the first rounds warm the code and the sockets
                total += time.thread_time() - start
            _drain(far, buf)
    finally:
        for s in (*near, *far, wake_r, wake_w):
            s.close()
    return total / rounds


def byte_sample(size: int, rounds: int = 8) -> float:
    """Return the mean CPU seconds of a round that sends and receives one V shard of `size` bytes."""
    (a,), (b,) = loopback_links(1)
    wake = [socket.socketpair() for _ in range(2)]
    for r, _ in wake:
        r.setblocking(False)
    item = np.ones(size // 8)
    message = Message(1, SENDER, items=[ItemShard(3, x=item)])
    far_error: list = []

    def far_end():
        try:
            readers = {"near": FrameReader(LIMIT)}
            for _ in range(rounds + 1):
                exchange_round(
                    {"near": b}, readers, wake[1][0], _no_abort, "r", ["near"], message, 30.0
                )
        except Exception as exc:  # reported by the near end
            far_error.append(exc)

    thread = threading.Thread(target=far_end, daemon=True)
    thread.start()
    readers, total = {"far": FrameReader(LIMIT)}, 0.0
    try:
        for step in range(rounds + 1):
            start = time.thread_time()
            exchange_round({"far": a}, readers, wake[0][0], _no_abort, "r", ["far"], message, 30.0)
            if step:
                total += time.thread_time() - start
        thread.join(30.0)
    finally:
        for s in (a, b, *(x for pair in wake for x in pair)):
            s.close()
    if far_error:
        raise far_error[0]
    return total / rounds


def fit_round(cpu_by_peers: dict) -> tuple[float, float, float]:
    """Return (fixed seconds per round, seconds per peer, largest |relative residual|) of a line over P."""
    p = np.array(sorted(cpu_by_peers), dtype=float)
    y = np.array([cpu_by_peers[int(k)] for k in p])
    slope, fixed = np.polyfit(p, y, 1)
    residual = float(np.max(np.abs((fixed + slope * p) / y - 1)))
    return float(max(fixed, 0.0)), float(slope), residual


def per_byte(cpu_by_size: dict) -> float:
    """Return the CPU seconds per byte sent and received: the slope between the two sizes."""
    (s0, t0), (s1, t1) = sorted(cpu_by_size.items())
    return (t1 - t0) / (s1 - s0)
