"""Small builders shared by several test modules (imported as `helpers`: tests/ is on sys.path)."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

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


# --- real Dask processes on loopback (`dask scheduler` + `dask worker`), always stopped ---------

DASK = str(Path(sys.executable).with_name("dask"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def stop(processes):
    """Terminate each process group (dask worker forks a nanny child), then kill what is left."""
    for proc in processes:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for proc in processes:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def real_cluster(tmp_path, n_workers: int):
    """Start `dask scheduler` and n_workers `dask worker` processes on 127.0.0.1; yield the address, then stop them."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path / "cluster.log", "w")
    processes = []
    try:
        processes.append(
            subprocess.Popen(
                [
                    DASK,
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--dashboard-address",
                    ":0",
                    "--no-show",
                ],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        )
        wait_for_port(port)
        for _ in range(n_workers):
            processes.append(
                subprocess.Popen(
                    [
                        DASK,
                        "worker",
                        address,
                        "--host",
                        "127.0.0.1",
                        "--nthreads",
                        "1",
                        "--nworkers",
                        "1",
                        "--no-dashboard",
                    ],
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            )
        yield address
    finally:
        stop(processes)
        log.close()


def checkpoint_state(n=11, memory=2, n_subsets=3, seed=0) -> dict:
    """Return save()'s keywords for a run state as cluster.driver checkpoints it (n parameters, memory M)."""
    from hamsi.stepper import Stepper
    from hamsi.stop_rules import StopRules

    rng = np.random.default_rng(seed)
    stepper = Stepper(
        method="hamsi",
        n_subsets=n_subsets,
        n_params=n,
        memory=memory,
        eta=1.0,
        gamma=0.51,
        eta_gd=0.001,
        safeguard=True,
        random_state=seed,
    )
    stepper.cycle(1)  # the schedule rng moved on
    stepper.lbfgs.consider_pair(np.array([1.0, 2.0] + [0.0] * (2 * memory)))
    arrays = {
        "x": rng.standard_normal(n),
        "S": rng.standard_normal((memory, n)),
        "Y": rng.standard_normal((memory, n)),
        "x_start": rng.standard_normal(n),
        "g_start": rng.standard_normal(n),
        "saved_best": rng.standard_normal(n),
    }
    meta = {
        "trace": [(0, 0, 0.0, 1.5, float("nan"), 2.0), (1, 3, 0.1, 1.2, float("nan"), 1.4)],
        "stepper": stepper,
        "stop": StopRules(max_epochs=5),
        "time_used": 0.1,
        "cycles_done": 1,
    }
    fingerprint = {
        "problem": "MatrixFactorization",
        "n_params": n,
        "n_functions": 40,
        "scheme": "strata",
        "n_shards": 2,
        "n_subsets": n_subsets,
        "memory": memory,
        "method": "hamsi",
        "schedule": "det",
        "random_state": seed,
    }
    return {"arrays": arrays, "meta": meta, "fingerprint": fingerprint}


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

    def wait_opened(self, count: int, timeout: float) -> None:
        """Return once `count` connections were made (the flood is in force); fail after `timeout` s."""
        import time

        deadline = time.monotonic() + timeout
        while self.opened < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the flood made {self.opened} of {count} connections in {timeout} s"
                )
            time.sleep(0.05)

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


# the ratings of the worker-data tests (test_cluster_data, test_cluster_coloring)
N_USERS, N_ITEMS = 80, 60


def sparse_id_frame():
    """Return 3000 ratings of sparse raw ids (user 3a + 1, item 2b + 5), in a shuffled order."""
    import pandas as pd

    from hamsi.data.synth import make_ratings

    r = make_ratings(users=N_USERS, items=N_ITEMS, ratings=3000, rank=3, seed=2, half_stars=True)
    order = np.random.default_rng(0).permutation(r.nnz)
    return pd.DataFrame(
        {
            "user": r.user_ids[r.rows][order] * 3 + 1,
            "item": r.item_ids[r.cols][order] * 2 + 5,
            "rating": r.values[order],
        }
    )


# the worker-data tests' fit: strata-b on 2 blocks with a validation split and patience
WORKER_DATA_OPTIONS = dict(
    rank=3,
    blocks=2,
    max_cycles=4,
    random_state=3,
    patience=50,
    validation_fraction=0.1,
    chunk_cycles=2,
    search=False,
)


def dask_frame(frame, n_partitions=7):
    """Return `frame` as a Dask DataFrame of n_partitions partitions, in its order."""
    import dask.dataframe as dd

    return dd.from_pandas(frame, npartitions=n_partitions, sort=False)


def largest_rows(value, depth=0) -> float:
    """Return the most rows of any array inside `value` (inf for a pandas object: a table of ratings)."""
    import pandas as pd

    if isinstance(value, (pd.DataFrame, pd.Series)):
        return float("inf")
    if isinstance(value, np.ndarray):
        return value.shape[0] if value.ndim else 1
    if depth > 4:
        return 0
    if isinstance(value, dict):
        return max((largest_rows(v, depth + 1) for v in value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return max((largest_rows(v, depth + 1) for v in value), default=0)
    if hasattr(value, "__dict__"):
        return largest_rows(vars(value), depth + 1)
    return 0
