"""Small builders shared by several test modules (imported as `helpers`: tests/ is on sys.path)."""

import numpy as np
import scipy.sparse as sp

from partition.base import Partition


def finite_difference_gradient(problem, x, eps=1e-6):
    """Return the central-difference gradient of problem.evaluate(x)[1] (the objective)."""
    grad = np.empty_like(x)
    for i in range(x.size):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (problem.evaluate(up)[1] - problem.evaluate(down)[1]) / (2 * eps)
    return grad


def block_least_squares(seed=0, groups=4, width=3, rows_per_group=12):
    """Return (A, b): a block-diagonal sparse A whose group-j functions touch only group j's parameters."""
    rng = np.random.default_rng(seed)
    A = sp.block_diag(
        [rng.standard_normal((rows_per_group, width)) for _ in range(groups)], format="csr"
    )
    b = A @ rng.standard_normal(A.shape[1]) + 0.1 * rng.standard_normal(A.shape[0])
    return A, b


def least_squares_cover(A, groups=4, rows_per_group=12):
    """Return two subsets of `groups` blocks; subset k's block j holds the k-th half of group j's rows."""
    half = rows_per_group // 2
    subsets = [
        [
            np.arange(
                j * rows_per_group + k * half, j * rows_per_group + (k + 1) * half, dtype=np.int64
            )
            for j in range(groups)
        ]
        for k in range(2)
    ]
    return Partition(scheme="custom", shape=A.shape, subsets=subsets)


class ConnectionFlood:
    """Hold `idle` silent and `drip` slow-drip connections to every 127.0.0.1 port, reconnecting closed ones.

    A slow-drip connection sends one byte every `every` seconds (a hello that never completes).
    Runs in one thread until stop(); `opened` counts the connections made.
    """

    def __init__(self, ports, idle=200, drip=64, every=0.5):
        import threading

        self.ports, self.idle, self.drip, self.every = list(ports), idle, drip, every
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self._stop.set()
        self._thread.join(30)

    def _run(self):
        import selectors
        import socket
        import time

        next_turn = 0.0
        held = {(port, kind): [] for port in self.ports for kind in ("idle", "drip")}
        with selectors.DefaultSelector() as selector:
            try:
                while not self._stop.is_set():
                    if time.monotonic() >= next_turn:  # once per period: refill, drip a byte
                        next_turn = time.monotonic() + self.every
                        for (port, kind), socks in held.items():
                            want = self.idle if kind == "idle" else self.drip
                            for _ in range(min(want - len(socks), 64)):
                                try:
                                    sock = socket.create_connection(("127.0.0.1", port), 0.5)
                                except OSError:
                                    break
                                sock.setblocking(False)
                                socks.append(sock)
                                selector.register(sock, selectors.EVENT_READ, (port, kind))
                                self.opened += 1
                            for sock in socks if kind == "drip" else []:
                                try:
                                    sock.send(b"H")
                                except OSError:
                                    pass
                    for key, _ in selector.select(self.every):  # readable: closed by the listener
                        selector.unregister(key.fileobj)
                        held[key.data].remove(key.fileobj)
                        key.fileobj.close()
            finally:
                for socks in held.values():
                    for sock in socks:
                        sock.close()
