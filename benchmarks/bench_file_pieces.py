"""One large CSV file on the workers: read in pieces (cluster.file_pieces) vs read whole by one task.

Claim checked: cut into pieces of `hamsi.read-block-bytes`, the file's ratings are read by both
workers and no worker holds more than about a piece's frame at a time, so the workers' peak RSS
above idle during `load_worker_ratings` falls with the block; the time is printed beside it.

Each variant runs in a fresh process with its own LocalCluster of 2 single-thread workers on
127.0.0.1 (so the peak RSS is its own); the runs alternate between the variants. Idle: the workers'
RSS once pyarrow and pandas are imported there, before the file is read; RSS sampled every 20 ms.

    python benchmarks/bench_file_pieces.py [--ratings 1000000] [--blocks 4,1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def _one(path: str, block_mib: int) -> dict:
    """Load `path` on a fresh 2-worker cluster with pieces of block_mib MiB; return time and peak RSS above idle."""
    import dask.config
    import psutil
    from distributed import Client, LocalCluster

    from cluster.dataset import load_worker_ratings

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(lambda: [__import__(m) for m in ("pyarrow.csv", "pandas", "fsspec")])
        pids = list(client.run(os.getpid).values())
        procs = [psutil.Process(p) for p in pids]
        idle = [p.memory_info().rss for p in procs]
        peak, done = list(idle), threading.Event()

        def sample():
            while not done.is_set():
                for k, p in enumerate(procs):
                    peak[k] = max(peak[k], p.memory_info().rss)
                time.sleep(0.02)

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        with dask.config.set({"hamsi.read-block-bytes": block_mib << 20}):
            started = time.perf_counter()
            data = load_worker_ratings(client, path, n_blocks=2)
            seconds = time.perf_counter() - started
        done.set()
        watcher.join()
        return {
            "seconds": seconds,
            "peak_mb": max(p - i for p, i in zip(peak, idle)) / 2**20,
            "partitions": len(data.labels),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratings", type=int, default=1_000_000)
    parser.add_argument("--blocks", default="4,1024", help="block sizes in MiB, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("PATH", "MIB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_one(args.child[0], int(args.child[1]))))
        return
    from hamsi.data.synth import make_ratings
    from hamsi.data.writers import write_ratings

    blocks = [int(b) for b in args.blocks.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ratings.csv")
        write_ratings(make_ratings(users=6040, items=3706, ratings=args.ratings, seed=1), path)
        print(
            f"{args.ratings} ratings, {os.path.getsize(path) / 2**20:.1f} MiB CSV; load {os.getloadavg()[0]:.1f}"
        )
        runs: dict = {b: [] for b in blocks}
        for _ in range(args.repeats):
            for b in blocks:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", path, str(b)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs[b].append(json.loads(out.stdout.strip().splitlines()[-1]))
        for b in blocks:
            seconds = [r["seconds"] for r in runs[b]]
            peaks = [r["peak_mb"] for r in runs[b]]
            print(
                f"block {b:>5} MiB: {runs[b][0]['partitions']:>3} pieces, load median "
                f"{statistics.median(seconds):.2f} s (range {min(seconds):.2f}-{max(seconds):.2f}), "
                f"worker peak above idle median {statistics.median(peaks):.0f} MB "
                f"(range {min(peaks):.0f}-{max(peaks):.0f})"
            )
        print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
