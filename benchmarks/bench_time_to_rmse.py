"""Time to train RMSE 0.30 on ml-100k-like (rank 50, seed 1): Dask 2 workers vs in-process vs the C++ reference.

The reference C++/OpenMP HAMSI (2 threads) reaches train RMSE 0.30 on MovieLens-100K in ~4.4 s.
Optimization time = the trace's time_s (gradient + step + curvature + exchange, evaluation
excluded, as in the engine); wall time adds placement, evaluation and the per-chunk round trips.

    python benchmarks/bench_time_to_rmse.py [--target 0.30] [--max-time 60] [--chunk-epochs 20]
"""

from __future__ import annotations

import argparse
import time

import partition
from cluster.connect import connect
from cluster.driver import fit_distributed
from hamsi.data.synth import make_ratings
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization

REFERENCE_SECONDS = 4.4


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=0.30)
    parser.add_argument("--max-time", type=float, default=60.0)
    parser.add_argument("--rank", type=int, default=50)
    parser.add_argument("--chunk-epochs", type=int, default=20)
    args = parser.parse_args(argv)
    ratings = make_ratings("ml-100k-like", seed=1)
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    options = dict(random_state=1, max_epochs=None, max_time=args.max_time, target=args.target)
    minimize_hamsi(MatrixFactorization(ratings, args.rank), part, random_state=1, max_epochs=1, threads=2)  # warm
    start = time.perf_counter()
    local = minimize_hamsi(MatrixFactorization(ratings, args.rank), part, threads=2, **options)
    local_wall = time.perf_counter() - start
    with connect(n_workers=2, threads_per_worker=1, quiet=True) as client:
        start = time.perf_counter()
        dask = fit_distributed(ratings, rank=args.rank, partition=part, client=client,
                               chunk_epochs=args.chunk_epochs, **options)
        dask_wall = time.perf_counter() - start
    print(f"time to train RMSE {args.target} on ml-100k-like, rank {args.rank}, STRATA-B B=2, seed 1")
    print(f"{'engine':28s} {'reached':>8s} {'cycles':>7s} {'inner':>7s} {'opt. time s':>12s} {'wall s':>8s} "
          f"{'final RMSE':>11s}")
    print(f"{'C++ reference (2 threads)':28s} {'yes':>8s} {'':>7s} {'':>7s} {REFERENCE_SECONDS:12.2f} {'':>8s} "
          f"{args.target:11.4f}")
    for name, res, wall in (("in-process (2 threads)", local, local_wall), ("Dask (2 workers)", dask, dask_wall)):
        last = res.trace.rows[-1]
        print(f"{name:28s} {str(res.reason == 'target'):>8s} {last[0]:7d} {last[1]:7d} {last[2]:12.2f} "
              f"{wall:8.2f} {last[3]:11.4f}")
    print(f"Dask / reference: {dask.trace.rows[-1][2] / REFERENCE_SECONDS:.2f}x; "
          f"Dask / in-process: {dask.trace.rows[-1][2] / local.trace.rows[-1][2]:.2f}x (optimization time)")


if __name__ == "__main__":
    main()
