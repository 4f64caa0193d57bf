"""`hamsi factorize DATA --rank K`: fit a matrix factorization with HAMSI or mb-GD and write the results."""

from __future__ import annotations

import math
import os
import sys

from hamsi.errors import InputError


def register(subparsers) -> None:
    """Add the `factorize` sub-command to the CLI."""
    parser = subparsers.add_parser(
        "factorize",
        help="fit Y ~ U V^T on observed ratings with HAMSI (L-BFGS) or mini-batch GD",
        description="Fit a low-rank model to the ratings in DATA. Prints one line per cycle; "
                    "optionally writes the trace (CSV), the factors (.npz) and a convergence plot.",
    )
    parser.add_argument("data", metavar="DATA", help="rating file or MovieLens directory (see `hamsi data`)")
    parser.add_argument("--rank", "-k", type=int, required=True, help="number of latent factors")
    parser.add_argument("--algorithm", choices=("hamsi", "mbgd"), default="hamsi")
    parser.add_argument("--partitioner", default="strata-b", help="partition scheme (default strata-b)")
    parser.add_argument("--blocks", "-B", type=int, default=None, help="blocks per subset (default: cores)")
    parser.add_argument("--subsets", "-K", type=int, default=None, help="number of subsets (color, hogwild)")
    parser.add_argument("--schedule", choices=("det", "stoc"), default="det")
    parser.add_argument("--reg", type=float, default=0.0, help="L2 weight (default 0)")
    parser.add_argument("--biases", action="store_true", help="learn user and item biases")
    parser.add_argument("--eta", type=float, default=None, help="step parameter (default 0.06 hamsi, 0.001 mbgd)")
    parser.add_argument("--gamma", type=float, default=0.51, help="step decay exponent (default 0.51)")
    parser.add_argument("--memory", type=int, default=5, help="L-BFGS memory M (default 5)")
    parser.add_argument("--max-time", type=float, default=None, help="optimization time limit in seconds")
    parser.add_argument("--max-epochs", type=int, default=100, help="maximum cycles (default 100)")
    parser.add_argument("--tol", type=float, default=0.0, help="stop on relative objective change <= tol")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--test-fraction", type=float, default=0.0,
                        help="hold out this fraction of ratings for the test RMSE (default 0)")
    parser.add_argument("--trace", metavar="CSV", default=None, help="write the per-cycle trace")
    parser.add_argument("--out", metavar="NPZ", default=None, help="write the factors")
    parser.add_argument("--plot", metavar="PNG", default=None, help="write a convergence plot")
    parser.add_argument("--workers", type=int, default=None,
                        help="Dask workers (default: a local cluster with one worker per core); "
                             "0: run in this process")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of the in-process engine (--workers 0; default: cores)")
    parser.add_argument("--threads-per-worker", type=int, default=1,
                        help="threads per Dask worker process of the local cluster (default 1)")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="use the running Dask cluster at tcp://host:port instead of a local one")
    parser.add_argument("--checkpoint", metavar="DIR", default=None,
                        help="write the full state to DIR (atomically) every --checkpoint-every cycles")
    parser.add_argument("--checkpoint-every", metavar="N", type=int, default=None,
                        help="cycles between checkpoints (default 10 when --checkpoint is given)")
    parser.add_argument("--resume", metavar="DIR", default=None,
                        help="continue bit-exactly from the checkpoint in DIR (same data and options)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no per-cycle lines")
    parser.set_defaults(run=run)


def _check_args(args) -> None:
    if args.rank < 1:
        raise InputError(f"--rank must be >= 1; got {args.rank}")
    for name in ("max_time", "reg", "eta", "gamma"):
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise InputError(f"--{name.replace('_', '-')} must be a finite number >= 0; got {value}")
    if args.eta is not None and args.eta == 0:
        raise InputError("--eta must be > 0")
    if args.workers is not None and args.workers < 0:
        raise InputError(f"--workers must be >= 0; got {args.workers}")
    if args.threads_per_worker < 1:
        raise InputError(f"--threads-per-worker must be >= 1; got {args.threads_per_worker}")
    in_process = args.workers == 0 and args.scheduler is None
    if in_process and (args.checkpoint or args.resume):
        raise InputError("--checkpoint and --resume need the Dask engine (drop --workers 0)")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise InputError(f"--checkpoint-every must be >= 1; got {args.checkpoint_every}")
    if not 0.0 <= args.test_fraction < 1.0:
        raise InputError(f"--test-fraction must be in [0, 1); got {args.test_fraction}")
    import partition

    if args.partitioner.lower() not in partition.SCHEMES:
        raise InputError(f"unknown partitioner {args.partitioner!r}; choose one of {', '.join(partition.SCHEMES)}")


def run(args) -> int:
    """Fit the model described by args; print a line per cycle and a summary; return the exit code."""
    import numpy as np

    import hamsi
    from hamsi.estimator import MatrixFactorizer
    from hamsi.atomic import atomic_output

    _check_args(args)
    ratings = hamsi.load_ratings(args.data)
    if ratings.nnz == 0:
        raise InputError(f"{args.data}: no ratings")
    train, test = ratings.split(args.test_fraction, seed=args.seed) if args.test_fraction > 0 else (ratings, None)
    params = dict(
        rank=args.rank, algorithm=args.algorithm, partitioner=args.partitioner, blocks=args.blocks,
        subsets=args.subsets, schedule=args.schedule, reg=args.reg, biases=args.biases, eta=args.eta,
        gamma=args.gamma, memory=args.memory, max_time=args.max_time, max_epochs=args.max_epochs,
        tol=args.tol, threads=args.threads, random_state=args.seed, on_divergence="warn",
    )
    if args.workers == 0 and args.scheduler is None:
        model = MatrixFactorizer(**params)
    else:  # the Dask engine; cluster is imported only here (arrows: cluster -> hamsi)
        from cluster.cli import estimator_for

        model = estimator_for(args, params)

    def progress(row):
        if not args.quiet:
            test_part = f"  test {row['test_rmse']:.4f}" if test is not None else ""
            print(f"epoch {row['epoch']:4d}  inner {row['inner']:6d}  {row['time_s']:8.3f} s  "
                  f"train {row['train_rmse']:.4f}{test_part}  f {row['objective']:.6g}", file=sys.stderr)

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        model.fit(train, validation=test, callback=progress)
    result = model.result_
    if args.trace:
        model.trace_.write_csv(args.trace)
    if args.out:
        arrays = {"user_factors": model.user_factors_, "item_factors": model.item_factors_,
                  "user_ids": ratings.user_ids, "item_ids": ratings.item_ids}
        if args.biases:
            arrays.update(user_bias=model.user_bias_, item_bias=model.item_bias_,
                          global_mean=np.array(model.global_mean_))
        with atomic_output(args.out, "wb") as handle:
            np.savez(handle, **arrays)
    if args.plot:
        from hamsi.plots import plot_convergence

        title = f"{os.path.basename(os.path.normpath(args.data))}, rank {args.rank}"
        plot_convergence({args.algorithm: model.trace_}, args.plot, title=title)
    if result.reason == "diverged":
        raise hamsi.DivergenceError(result.message)
    last = model.trace_.rows[-1]
    print(f"{args.algorithm}: {result.message}; {result.n_cycles} cycles, {result.nit} inner iterations, "
          f"{result.time:.3f} s, train RMSE {last[3]:.4f}"
          + (f", test RMSE {last[4]:.4f}" if test is not None else ""))
    return 0
