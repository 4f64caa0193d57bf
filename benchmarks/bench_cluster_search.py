"""The defaults' search on ratings kept on the workers against the in-memory defaults, in one run.

Claim checked: on an ml-1m-like preset written as --files Parquet files, `DaskMatrixFactorizer()`
with its defaults (the search on the workers, cluster.search_sample, then the refit on the shards)
on a 2-worker LocalCluster reaches the in-process `MatrixFactorizer()` defaults' test RMSE within
0.002, while the client's RSS stays within 64 MB + 16 bytes per user and item above its idle size.

The test split is a seeded 10 % of the pairs (Ratings.split, as `hamsi factorize --test-fraction`);
both models fit the other 90 %, in the same order (the files are its consecutive slices), and are
scored on the test pairs in this process. Wall times are printed beside each other; the client RSS
is sampled every 50 ms during the worker fit ("idle": after the cluster is up and warm).

    python benchmarks/bench_cluster_search.py [--preset ml-1m-like] [--files 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cluster_data import CLIENT_BASE, CLIENT_PER_ID, RssSampler, import_readers  # noqa: E402

RMSE_MARGIN = 0.002


def split_files(preset: str, files: int, seed: int, directory: str):
    """Write the preset's training 90 % as `files` Parquet slices; return (train frame, test frame)."""
    import pandas as pd

    from hamsi.data.synth import make_ratings

    ratings = make_ratings(preset, seed=seed)
    train, test = ratings.split(0.1, seed=seed)

    def frame(r):
        return pd.DataFrame(
            {"user": r.user_ids[r.rows], "item": r.item_ids[r.cols], "rating": r.values}
        )

    train_frame = frame(train)
    cuts = np.linspace(0, len(train_frame), files + 1).astype(np.int64)
    for f in range(files):
        train_frame.iloc[cuts[f] : cuts[f + 1]].to_parquet(
            os.path.join(directory, f"part-{f:03d}.parquet"), index=False
        )
    return train_frame, frame(test)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="ml-1m-like")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import psutil

    from cluster import DaskMatrixFactorizer
    from cluster.connect import connect
    from hamsi import MatrixFactorizer

    with tempfile.TemporaryDirectory() as directory:
        train, test = split_files(args.preset, args.files, args.seed, directory)
        n_ids = train["user"].nunique() + train["item"].nunique()
        print(
            f"{args.preset}: {len(train):,} training ratings in {args.files} files, {len(test):,} test"
        )

        started = time.perf_counter()
        memory = MatrixFactorizer(random_state=args.seed).fit(train)
        memory_wall = time.perf_counter() - started
        memory_rmse = memory.rmse(test)

        with connect(n_workers=2, threads_per_worker=1) as client:
            client.run(import_readers)
            import_readers()
            idle = psutil.Process().memory_info().rss
            started = time.perf_counter()
            with RssSampler({"client": os.getpid()}) as rss:
                workers = DaskMatrixFactorizer(client=client, random_state=args.seed).fit(directory)
            workers_wall = time.perf_counter() - started
            workers_rmse = workers.rmse(test)

    above = (rss.peak["client"] - idle) / 2**20
    bound = (CLIENT_BASE + CLIENT_PER_ID * n_ids) / 2**20
    print(f"{'':24}{'wall s':>8}{'test RMSE':>11}  chosen")
    for name, model, wall, rmse in (
        ("in process (pandas)", memory, memory_wall, memory_rmse),
        ("on the workers (files)", workers, workers_wall, workers_rmse),
    ):
        print(
            f"{name:24}{wall:8.1f}{rmse:11.4f}  rank {model.rank_}, {model.reg_weighting_} "
            f"reg {model.reg_:.4g}, {model.result_.n_cycles} cycles"
        )
    print(f"client RSS above idle during the worker fit: {above:.0f} MiB (bound {bound:.0f} MiB)")
    gap = abs(workers_rmse - memory_rmse)
    ok = gap <= RMSE_MARGIN and above <= bound
    print(
        f"test RMSE gap {gap:.4f} (goal <= {RMSE_MARGIN}); client {'within' if above <= bound else 'OVER'} "
        f"its bound: {'OK' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
