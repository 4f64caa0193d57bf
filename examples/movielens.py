"""Factorize MovieLens 1M / 10M / 20M with HAMSI (STRATA-B) on a local or remote Dask cluster.

    python examples/movielens.py --data 1m                          # download (cached), local cluster
    python examples/movielens.py --data path/to/ml-10M100K --workers 4
    python examples/movielens.py --data 20m --scheduler tcp://head:8786 --max-time 500
    python examples/movielens.py --data synthetic-1m                # no download: ml-1m-like data

Reports train/test RMSE and time, writes the factors (.npz), the trace (.csv) and a convergence plot
into --out. Use --checkpoint DIR to survive interruptions and --resume DIR to continue.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def load(name: str, seed: int):
    """Return Ratings: a local MovieLens copy, a downloaded release (1m/10m/20m), or synthetic data."""
    import hamsi
    from hamsi.data.download import download_movielens
    from hamsi.data.synth import make_ratings

    if name.startswith("synthetic-"):
        return make_ratings(f"ml-{name.split('-', 1)[1]}-like", seed=seed)
    if os.path.exists(name):
        return hamsi.load_ratings(name)
    return hamsi.load_ratings(download_movielens(name, progress=None))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", default="1m", help="1m, 10m, 20m, a local path, or synthetic-100k/1m/10m/20m"
    )
    parser.add_argument(
        "--rank", default="auto", help="number of factors, or auto (default): chosen by validation"
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="local cluster size (default: cores)"
    )
    parser.add_argument("--scheduler", default=None, help="tcp://host:port of an existing cluster")
    parser.add_argument("--blocks", type=int, default=None, help="row shards (default: workers)")
    parser.add_argument(
        "--reg",
        default="auto",
        help="L2 weight, or auto (default): chosen by validation (the thesis' runs used 0)",
    )
    parser.add_argument(
        "--max-time", type=float, default=25.0, help="optimization seconds (thesis: 25 for 1M)"
    )
    parser.add_argument("--max-cycles", type=int, default=None)
    parser.add_argument("--test-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--out", default="movielens-out")
    args = parser.parse_args(argv)

    from cluster import DaskMatrixFactorizer
    from hamsi.atomic import PRIVATE, atomic_output

    ratings = load(args.data, args.seed)
    train, test = ratings.split(args.test_fraction, seed=args.seed)
    print(f"{ratings!r}; train {train.nnz}, test {test.nnz}")
    rank = args.rank if args.rank == "auto" else int(args.rank)
    reg = args.reg if args.reg == "auto" else float(args.reg)
    model = DaskMatrixFactorizer(
        rank=rank,
        partitioner="strata-b",
        blocks=args.blocks,
        reg=reg,
        max_time=args.max_time,
        max_cycles=args.max_cycles,
        random_state=args.seed,
        scheduler=args.scheduler,
        n_workers=args.workers,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every if args.checkpoint else None,
        resume=args.resume,
        on_divergence="warn",
    )
    start = time.perf_counter()
    model.fit(
        train,
        validation=test,
        callback=lambda row: print(
            f"cycle {row['cycle']:4d}  {row['time_s']:8.2f} s  "
            f"train {row['train_rmse']:.4f}  held out {row['validation_rmse']:.4f}"
        ),
    )
    wall = time.perf_counter() - start
    result = model.result_
    print(
        f"{result.message}; {result.n_cycles} cycles, {result.nit} inner iterations on "
        f"{len(result.workers)} workers; optimization {result.trace.rows[-1][2]:.2f} s, wall {wall:.2f} s"
    )
    print(
        f"train RMSE {model.rmse(train):.4f}   test RMSE {model.rmse(test):.4f}   "
        f"(rank {model.rank_}, reg {model.reg_:.4g} {model.reg_weighting_}, damping {model.reg_damping_:g})"
    )
    os.makedirs(args.out, exist_ok=True)
    with atomic_output(os.path.join(args.out, "factors.npz"), "wb", permissions=PRIVATE) as handle:
        np.savez(
            handle,
            user_factors=model.user_factors_,
            item_factors=model.item_factors_,
            user_ids=ratings.user_ids,
            item_ids=ratings.item_ids,
        )
    model.trace_.write_csv(os.path.join(args.out, "trace.csv"))
    from hamsi.plots import plot_convergence

    plot_convergence(
        {"HAMSI STRATA-B": model.trace_},
        os.path.join(args.out, "convergence.png"),
        title=f"MovieLens {args.data}, rank {model.rank_}",
    )
    print(f"wrote {args.out}/factors.npz, trace.csv, convergence.png")


if __name__ == "__main__":
    main()
