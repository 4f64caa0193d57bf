"""One exchange round between two Dask workers on one host: TCP mailbox vs shared memory vs actors.

Each round sends one message of --kib KiB from each worker to the other and waits for the
peer's (what one HAMSI inner iteration does; ml-100k-like rank 50 sends ~330 KiB of gV rows,
ml-1m-like ~1.5 MiB). Four transports, same two worker processes:
- direct links: cluster.links (the engine's on tcp:// clusters: authenticated sockets, binary frames);
- mailbox: cluster.mailbox (the engine's on tls://: one comm per peer, reply=False writes, a condition wait);
- shared memory: each worker writes into its own multiprocessing.shared_memory segment and bumps a
  counter; the peer polls the counter and copies the payload (works only on one host);
- actors: distributed's Actor, a worker-to-worker method call `peer.deliver(step, payload)` per
  round (request/response), then polls of the local actor until the peer's call arrived (an actor
  runs one method at a time, so it cannot block waiting).
Prints the best and median microseconds per round of --repeats runs of --rounds rounds, and the
load average.

    python benchmarks/bench_exchange.py [--rounds 300] [--repeats 3] [--kib 330 1500]
"""

from __future__ import annotations

import argparse
import os
import secrets
import threading
import time

import numpy as np

from cluster.connect import connect
from cluster.mailbox import install, local_mailbox


def message_of(size: int):
    """Return a Message carrying `size` bytes of gradient rows (what an inner iteration sends)."""
    from cluster.messages import GradientPart, Message

    return Message(0, "bench", gradient=[GradientPart(0, (0, size // 8), np.ones(size // 8))])


def mailbox_rounds(peer: str, rounds: int, size: int, run: str) -> float:
    box = local_mailbox()
    payload = message_of(size)
    box.start(run, [peer], 30.0)  # no link secret: the rounds go through the comms
    start = time.perf_counter()
    for step in range(rounds):
        posted = box.post(run, step, [peer], payload)
        box.collect(run, step, [peer], 30.0)
        box.wait_posted(posted, [peer], 30.0)
    seconds = time.perf_counter() - start
    box.forget(run)
    return seconds


def links_rounds(peer: str, rounds: int, size: int, run: str, secret: bytes) -> float:
    from cluster.links import FrameLimit

    box = local_mailbox()
    if box.links is None:
        raise RuntimeError("this worker has no direct links (not a tcp:// worker)")
    payload = message_of(size)
    box.start(run, [peer], 30.0, secret, FrameLimit(max_array_bytes=size + 8))
    start = time.perf_counter()
    for step in range(rounds):
        box.round(run, step, [peer], payload, 30.0)
    seconds = time.perf_counter() - start
    box.forget(run)
    return seconds


def shared_rounds(mine: str, theirs: str, rounds: int, size: int) -> float:
    from multiprocessing import shared_memory

    own = shared_memory.SharedMemory(name=mine, create=True, size=size + 8)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                peer = shared_memory.SharedMemory(name=theirs)
                break
            except (FileNotFoundError, ValueError):  # not there yet, or not sized yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.001)
        own_count = np.ndarray(1, dtype=np.int64, buffer=own.buf)
        own_data = np.ndarray(size // 8, dtype=np.float64, buffer=own.buf, offset=8)
        peer_count = np.ndarray(1, dtype=np.int64, buffer=peer.buf)
        peer_data = np.ndarray(size // 8, dtype=np.float64, buffer=peer.buf, offset=8)
        payload, received = np.ones(size // 8), np.empty(size // 8)
        own_count[0] = 0
        start = time.perf_counter()
        for step in range(1, rounds + 1):
            own_data[:] = payload
            own_count[0] = step
            while peer_count[0] < step:  # poll; the peer writes its counter after its payload
                pass
            received[:] = peer_data
        seconds = time.perf_counter() - start
        del own_count, own_data, peer_count, peer_data
        peer.close()
        return seconds
    finally:
        time.sleep(0.2)  # the peer may still be copying our last payload
        own.close()
        own.unlink()


class Box:
    """An actor holding the messages other workers delivered to this one."""

    def __init__(self):
        self.messages = {}
        self.cond = threading.Condition()

    def deliver(self, step, payload):
        with self.cond:
            self.messages[step] = payload
            self.cond.notify_all()

    def take(self, step):
        """Return the message of `step` or None (an actor runs one method at a time: never block)."""
        with self.cond:
            return self.messages.pop(step, None)


def actor_rounds(own, peer, rounds: int, size: int) -> float:
    payload = np.ones(size // 8)
    start = time.perf_counter()
    for step in range(rounds):
        peer.deliver(step, payload).result()
        while own.take(step).result() is None:  # each poll is a call to the local actor
            time.sleep(0.0001)
    return time.perf_counter() - start


def run_pair(client, workers, function, *args_per_worker) -> float:
    futures = [
        client.submit(function, *args, workers=[w], pure=False, allow_other_workers=False)
        for w, args in zip(workers, args_per_worker)
    ]
    return max(client.gather(futures))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kib", type=int, nargs="+", default=[330, 1500])
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()}")
    with connect(n_workers=2, threads_per_worker=2, quiet=True) as client:
        install(client)
        a, b = sorted(client.scheduler_info()["workers"])
        box_futures = [
            client.submit(Box, workers=[w], actor=True) for w in (a, b)
        ]  # kept: they hold the actors
        boxes = [f.result() for f in box_futures]
        for kib in args.kib:
            size = kib * 1024
            times = {"direct links": [], "mailbox comms": [], "shared memory": [], "actors": []}
            for repeat in range(args.repeats):
                run, secret = f"bench-{kib}-{repeat}", secrets.token_bytes(32)
                times["direct links"].append(
                    run_pair(
                        client,
                        [a, b],
                        links_rounds,
                        (b, args.rounds, size, run, secret),
                        (a, args.rounds, size, run, secret),
                    )
                )
                times["mailbox comms"].append(
                    run_pair(
                        client,
                        [a, b],
                        mailbox_rounds,
                        (b, args.rounds, size, run + "-c"),
                        (a, args.rounds, size, run + "-c"),
                    )
                )
                names = (
                    f"hamsi-bench-{os.getpid()}-{repeat}-a",
                    f"hamsi-bench-{os.getpid()}-{repeat}-b",
                )
                times["shared memory"].append(
                    run_pair(
                        client,
                        [a, b],
                        shared_rounds,
                        (names[0], names[1], args.rounds, size),
                        (names[1], names[0], args.rounds, size),
                    )
                )
                rounds = max(10, args.rounds // 10)
                seconds = run_pair(
                    client,
                    [a, b],
                    actor_rounds,
                    (boxes[0], boxes[1], rounds, size),
                    (boxes[1], boxes[0], rounds, size),
                )
                times["actors"].append(seconds * args.rounds / rounds)
            print(
                f"{kib} KiB per message, microseconds per exchange round, best (median) of {args.repeats}:"
            )
            for name, values in times.items():
                us = 1e6 * np.array(values) / args.rounds
                print(f"  {name:14s} {us.min():10.0f} ({np.median(us):10.0f})")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
