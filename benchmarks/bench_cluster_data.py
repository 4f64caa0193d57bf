"""Ratings read on the workers vs ratings through the client: memory and time to the first cycle.

Claims checked: fitting a Parquet directory from `dd.read_parquet` on a 2-worker LocalCluster keeps
the client at <= 64 MB + 16 bytes per user and item above its idle RSS, and each worker at <= 40
bytes per rating of its shard; the in-memory path (pandas read in the client, `load_ratings`,
shards scattered from the client) is measured beside it in the same run.

The preset (hamsi.data.synth) is written as a directory of --files Parquet files; each path runs in
a fresh process (its own LocalCluster of 2 workers on 127.0.0.1) so the RSS figures are its own.
RSS is sampled every 50 ms (client: this process; workers: their pids). "idle" is the RSS once the
cluster is up and warm (kernels compiled, the readers' libraries imported: their size is printed),
before any data is read. For the worker path the peak until the shards are built (the routing) is
printed too; the rest of the peak is the fit's state (U rows, L-BFGS pairs, the chunk's buffers, a
piece of the buddy's backup in flight: cluster/snapshot.py), which both paths hold. Times: seconds from the call to the end of the
first cycle (chunk_cycles=1: the first callback), and ms per inner iteration after cycle 1.

    python benchmarks/bench_cluster_data.py [--preset ml-20m-like] [--files 50] [--rank 10] [--epochs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_dask_overhead import ms_per_inner  # noqa: E402

CLIENT_BASE = 64 << 20
CLIENT_PER_ID = 16
WORKER_PER_RATING = 40


def write_parquet_directory(preset: str, files: int, directory: str, seed: int = 0) -> dict:
    """Write the preset's ratings as `files` Parquet files (raw ids, shuffled); return its sizes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hamsi.data.synth import make_ratings

    ratings = make_ratings(preset, seed=seed)
    order = np.random.default_rng(seed).permutation(ratings.nnz)
    cuts = np.linspace(0, ratings.nnz, files + 1).astype(np.int64)
    for f in range(files):
        take = order[cuts[f] : cuts[f + 1]]
        table = pa.table(
            {
                "user": ratings.user_ids[ratings.rows[take]],
                "item": ratings.item_ids[ratings.cols[take]],
                "rating": ratings.values[take],
            }
        )
        pq.write_table(table, os.path.join(directory, f"part-{f:03d}.parquet"))
    return {"ratings": ratings.nnz, "users": ratings.shape[0], "items": ratings.shape[1]}


class RssSampler:
    """Peak RSS of this process and of given pids, sampled every `interval` seconds in a thread."""

    def __init__(self, pids: dict, interval: float = 0.05):
        import psutil

        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.peak = {name: 0 for name in pids}
        self.interval, self._stop = interval, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            for name, proc in self.processes.items():
                try:
                    self.peak[name] = max(self.peak[name], proc.memory_info().rss)
                except Exception:  # a worker that is gone keeps its last peak
                    pass
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def import_readers() -> None:
    """Import what reading Parquet loads in a worker (pyarrow, pandas, dask.dataframe): part of warming up."""
    import dask.dataframe  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401


def measure(path: str, directory: str, options: dict, out: str) -> None:
    """Fit the directory one way ("workers" or "client") in this process; write the figures to `out` (JSON + .npy)."""
    import dask.dataframe as dd
    import psutil

    from cluster.connect import connect
    from cluster.dataset import load_worker_ratings
    from cluster.driver import fit_distributed, minimize_hamsi
    from cluster.warm import warm_up

    with connect(n_workers=2, quiet=True) as client:
        client.run(warm_up, options["rank"] + 1, 5)
        pids = client.run(os.getpid)
        pids["client"] = os.getpid()
        warm = {name: psutil.Process(pid).memory_info().rss for name, pid in pids.items()}
        client.run(import_readers)
        import_readers()
        idle = {name: psutil.Process(pid).memory_info().rss for name, pid in pids.items()}
        imports = {name: idle[name] - warm[name] for name in idle}
        first = []
        fit = dict(
            rank=options["rank"],
            biases=True,
            reg=1.0,
            random_state=0,
            max_cycles=options["epochs"],
            chunk_cycles=1,
            quiet=True,
            callback=lambda row: first or first.append(time.perf_counter()),
        )
        with RssSampler(pids) as sampler:
            start = time.perf_counter()
            if path == "workers":
                workers = list(pids)[:2]
                data = load_worker_ratings(
                    client,
                    dd.read_parquet(directory),
                    partitioner="strata-b",
                    n_blocks=2,
                    workers=workers,
                )
                routing = dict(sampler.peak)
                result = minimize_hamsi(
                    data.problem(fit.pop("rank"), reg=fit.pop("reg"), biases=fit.pop("biases")),
                    data.cover,
                    client=client,
                    **fit,
                )
                shard_ratings = {
                    a: sum(s for p, s in enumerate(data.sizes) if result.shard_owner[p] == a)
                    for a in workers
                }
            else:
                routing = None
                import pandas as pd

                from hamsi import load_ratings

                ratings = load_ratings(pd.read_parquet(directory))
                result = fit_distributed(ratings, client=client, **fit)
                sizes = np.bincount(
                    np.searchsorted(
                        result.shard_bounds[:3] // (options["rank"] + 1), ratings.rows, side="right"
                    )
                    - 1,
                    minlength=2,
                )
                shard_ratings = {a: int(sizes[p]) for p, a in result.shard_owner.items()}
    np.save(out + ".npy", result.x)
    with open(out, "w") as handle:
        json.dump(
            {
                "path": path,
                "idle": idle,
                "imports": imports,
                "peak": dict(sampler.peak),
                "routing": routing,
                "shard_ratings": shard_ratings,
                "first_cycle": first[0] - start,
                "ms_inner": float(ms_per_inner(result.trace)),
                "shared_memory": bool(result.shared_memory),
            },
            handle,
        )


def run(path: str, directory: str, options: dict) -> dict:
    """Return the figures of `measure` run in a fresh process (its RSS is its own)."""
    out = os.path.join(os.path.dirname(directory), f"figures-{path}.json")
    subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            "--measure",
            path,
            "--data",
            directory,
            "--rank",
            str(options["rank"]),
            "--epochs",
            str(options["epochs"]),
            "--figures",
            out,
        ],
        check=True,
    )
    with open(out) as handle:
        figures = json.load(handle)
    figures["x"] = np.load(out + ".npy")
    return figures


def report(figures: dict, sizes: dict) -> list:
    """Return the printed lines of one path's figures."""
    client = figures["peak"]["client"] - figures["idle"]["client"]
    goal = CLIENT_BASE + CLIENT_PER_ID * (sizes["users"] + sizes["items"])
    lines = [
        f"  client peak above idle: {client / 2**20:8.1f} MiB (goal {goal / 2**20:.1f} MiB: "
        f"{'met' if client <= goal else 'NOT met'})"
    ]
    for worker, count in figures["shard_ratings"].items():
        peak, idle = figures["peak"][worker], figures["idle"][worker]
        lines.append(
            f"  worker {worker}: {count} ratings, peak {peak / 2**20:.0f} MiB = {peak / count:.1f} B/rating; "
            f"above idle {(peak - idle) / count:.1f} B/rating (goal {WORKER_PER_RATING})"
            + (
                f", until the shards are built {(figures['routing'][worker] - idle) / count:.1f} B/rating"
                if figures["routing"]
                else ""
            )
            + f"; readers' imports {figures['imports'][worker] / 2**20:.0f} MiB (in idle)"
        )
    lines.append(
        f"  fit -> end of first cycle {figures['first_cycle']:.2f} s, {figures['ms_inner']:.2f} ms per "
        f"inner iteration (V in shared memory: {figures['shared_memory']})"
    )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="ml-20m-like")
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--measure", choices=("workers", "client"), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--figures", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    options = {"rank": args.rank, "epochs": args.epochs}
    if args.measure:  # the child process of `run`
        measure(args.measure, args.data, options, args.figures)
        return 0
    work = tempfile.mkdtemp(prefix="hamsi-bench-data-")
    directory = os.path.join(work, "ratings")
    os.mkdir(directory)
    try:
        sizes = write_parquet_directory(args.preset, args.files, directory)
        print(
            f"{args.preset}: {sizes['ratings']} ratings, {sizes['users']} users, {sizes['items']} items, "
            f"{args.files} Parquet files; rank {args.rank}, STRATA-B on 2 workers; load {os.getloadavg()}",
            flush=True,
        )
        figures = {path: run(path, directory, options) for path in ("workers", "client")}
        for path, title in (
            ("workers", "read on the workers (dd.read_parquet)"),
            ("client", "through the client (pandas + load_ratings + scatter)"),
        ):
            print(title)
            print("\n".join(report(figures[path], sizes)))
        same = np.array_equal(figures["workers"]["x"], figures["client"]["x"])
        print(f"same factors on both paths: {same}; load average after: {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
