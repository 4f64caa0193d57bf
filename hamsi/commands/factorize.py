"""`hamsi factorize DATA`: fit a recommender (matrix factorization by HAMSI or mb-GD) and write the results.

`--out` writes the saved-model file (hamsi.model_io: ids, factors, biases, parameters, trace),
which `hamsi recommend` and `MatrixFactorizer.load` read. Every output path is checked before
the data is read; a diverged run writes nothing and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import warnings

import numpy as np

import hamsi
from hamsi import registry, search
from hamsi.cli_io import (
    add_renamed_flag,
    auto_or_float,
    auto_or_int,
    check_writable,
    describe_ratings,
    rating_columns,
    seed_value,
)
from hamsi.commands.dask_flags import add_dask_options
from hamsi.commands.factorize_output import output_paths, summary, write_outputs
from hamsi.commands.progress import Progress
from hamsi.defaults import VALIDATION_FRACTION
from hamsi.errors import DivergenceError, InputError, flag_name, for_cli
from hamsi.limits import refuse_unless_fits


def register(subparsers) -> None:
    """Add the `factorize` sub-command to the CLI."""
    parser = subparsers.add_parser(
        "factorize",
        help="fit a recommender Y ~ mu + biases + U V^T to observed ratings with HAMSI (L-BFGS) or mb-GD",
        description="Fit a low-rank model with biases to the ratings in DATA. Shows progress on stderr; "
        "optionally writes the trace (CSV), the model (.npz, read by `hamsi recommend`) and a "
        "convergence plot.",
    )
    parser.add_argument(
        "data", metavar="DATA", help="rating file or MovieLens directory (see `hamsi data`)"
    )
    _add_model_options(parser)
    _add_optimizer_options(parser)
    _add_data_and_output_options(parser)
    parser.add_argument("--plot", metavar="PNG", default=None, help="write a convergence plot")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="Dask workers (default: a local cluster with one worker per core); "
        "0: run in this process",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads of the in-process engine (--workers 0; default: cores)",
    )
    add_dask_options(parser)
    parser.add_argument(
        "--columns",
        metavar="USER,ITEM,RATING",
        default=None,
        help="the user, item and rating columns of a CSV/Parquet input, by name",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    parser.set_defaults(run=run)


def _add_model_options(parser) -> None:
    """The flags of the model: rank, method, cover, penalty, biases."""
    parser.add_argument(
        "--rank",
        "-k",
        type=auto_or_int,
        default="auto",
        help="number of latent factors, or 'auto' (default): chosen by validation",
    )
    parser.add_argument("--algorithm", choices=("hamsi", "mbgd"), default="hamsi")
    parser.add_argument(
        "--partitioner", default="strata-b", help="partition scheme (default strata-b)"
    )
    parser.add_argument(
        "--blocks", "-B", type=int, default=None, help="blocks per subset (default: cores)"
    )
    parser.add_argument(
        "--subsets", "-K", type=int, default=None, help="number of subsets (color, hogwild)"
    )
    parser.add_argument("--schedule", choices=("det", "stoc"), default="det")
    parser.add_argument(
        "--reg",
        type=auto_or_float,
        default="auto",
        help="L2 weight, or 'auto' (default): chosen by validation",
    )
    parser.add_argument(
        "--reg-weighting",
        choices=("auto", "uniform", "count"),
        default="auto",
        help="uniform: reg (|U|^2 + |V|^2) as in the thesis; count (ALS-WR): reg per rating; "
        "auto (default): chosen by validation (uniform when --reg is a number)",
    )
    parser.add_argument(
        "--reg-damping",
        type=auto_or_float,
        default="auto",
        help="count weighting only: the penalty is reg (n + damping) |row|^2 for a row with n "
        "ratings, so rarely rated rows are shrunk more (0: ALS-WR); auto (default): chosen "
        "by validation",
    )
    parser.add_argument(
        "--biases",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="learn user and item biases (default on)",
    )


def _add_optimizer_options(parser) -> None:
    """The flags of the optimization: start, steps, L-BFGS memory, stop rules, safeguard, seed."""
    parser.add_argument(
        "--eta",
        type=auto_or_float,
        default="auto",
        help="step parameter, step = 1/(eta t)^gamma: larger eta, smaller steps; 'auto' (default)",
    )
    parser.add_argument(
        "--gamma", type=float, default=0.51, help="step decay exponent (default 0.51)"
    )
    parser.add_argument("--memory", type=int, default=5, help="L-BFGS memory M (default 5)")
    parser.add_argument(
        "--init-scale",
        type=auto_or_float,
        default="auto",
        help="standard deviation of the random start, or 'auto' (default, small); 1: the reference's",
    )
    parser.add_argument(
        "--no-safeguard",
        dest="safeguard",
        action="store_false",
        help="run HAMSI as in the thesis, without the engine's safeguards against divergence",
    )
    parser.add_argument(
        "--max-time", type=float, default=None, help="optimization time limit in seconds"
    )
    parser.add_argument("--max-cycles", type=int, default=100, help="maximum cycles (default 100)")
    add_renamed_flag(parser, "--max-epochs", "--max-cycles", type=int)
    parser.add_argument(
        "--tol", type=float, default=0.0, help="stop on relative objective change <= tol"
    )
    parser.add_argument(
        "--patience",
        type=int,
        default=None,
        help="stop after N cycles without a better validation RMSE, on --validation-fraction "
        "of the training ratings (never on the test set)",
    )
    parser.add_argument(
        "--validation-fraction",
        type=float,
        default=VALIDATION_FRACTION,
        help=f"share of the training ratings held out for --patience "
        f"(default {VALIDATION_FRACTION:g})",
    )
    parser.add_argument("--seed", type=seed_value, default=1, help="random seed (default 1)")


def _add_data_and_output_options(parser) -> None:
    """The flags of the test ratings, the duplicates policy and the output files."""
    parser.add_argument(
        "--test-fraction",
        type=float,
        default=0.0,
        help="hold out this fraction of ratings; their RMSE is reported once, at the end (default 0)",
    )
    parser.add_argument(
        "--test",
        metavar="FILE",
        default=None,
        help="test ratings in their own file (same format as DATA): scored once, at the end; "
        "nothing is chosen on them",
    )
    parser.add_argument(
        "--split-column",
        metavar="NAME",
        default=None,
        help="a column of DATA (a CSV with a header) saying which rows are test ratings: "
        "train/test, 0/1 or false/true; scored once, at the end",
    )
    parser.add_argument(
        "--duplicates",
        default="error",
        choices=("error", "keep-last", "mean"),
        help="what to do with repeated (user, item) pairs in DATA (default error)",
    )
    parser.add_argument("--trace", metavar="CSV", default=None, help="write the per-cycle trace")
    parser.add_argument(
        "--out",
        metavar="NPZ",
        default=None,
        help="write the model (ids, factors, biases, parameters; read by `hamsi recommend`)",
    )


def _check_args(args) -> None:
    """Raise InputError on options the estimator does not check (where to run, splits, outputs)."""
    _check_where_to_run(args)
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise InputError(f"--checkpoint-every must be >= 1; got {args.checkpoint_every}")
    if not (math.isfinite(args.test_fraction) and 0.0 <= args.test_fraction < 1.0):
        raise InputError(f"--test-fraction must be in [0, 1); got {args.test_fraction}")
    given = [
        flag
        for flag, value in (
            ("--test-fraction", args.test_fraction > 0),
            ("--test", args.test is not None),
            ("--split-column", args.split_column is not None),
        )
        if value
    ]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)} both name test ratings: give one")
    for flag, path in output_paths(args):
        check_writable(flag, path)


def _check_where_to_run(args) -> None:
    """Raise InputError on engine flags out of range or given to the in-process engine, which ignores them."""
    if args.workers is not None and args.workers < 0:
        raise InputError(f"--workers must be >= 0; got {args.workers}")
    if args.threads_per_worker < 1:
        raise InputError(f"--threads-per-worker must be >= 1; got {args.threads_per_worker}")
    in_process = args.workers == 0 and args.scheduler is None
    if in_process and (args.checkpoint or args.resume):
        raise InputError("--checkpoint and --resume need the Dask engine (drop --workers 0)")
    if in_process and (args.shared_memory is not None or args.owned_v is not None):
        raise InputError(
            "--shared-memory/--owned-v choose where the Dask engine keeps V (drop --workers 0)"
        )
    if in_process and (args.tls_ca_file or args.tls_cert or args.tls_key):
        raise InputError(
            "--tls-ca-file/--tls-cert/--tls-key need the Dask engine (drop --workers 0)"
        )


def build_model(args):
    """Return the estimator the options describe (in process, or on Dask), its parameters checked."""
    # why lazy: numba's kernels load only when a model is fitted or read
    from hamsi.estimator import MatrixFactorizer

    params = dict(
        rank=args.rank,
        algorithm=args.algorithm,
        partitioner=args.partitioner,
        blocks=args.blocks,
        subsets=args.subsets,
        schedule=args.schedule,
        reg=args.reg,
        reg_weighting=args.reg_weighting,
        reg_damping=args.reg_damping,
        biases=args.biases,
        eta=args.eta,
        gamma=args.gamma,
        memory=args.memory,
        init_scale=args.init_scale,
        max_time=args.max_time,
        max_cycles=args.max_cycles,
        tol=args.tol,
        patience=args.patience,
        validation_fraction=args.validation_fraction,
        safeguard=args.safeguard,
        threads=args.threads,
        random_state=args.seed,
        on_divergence="raise",
        verbose=0 if args.quiet else 1,
    )
    if args.workers == 0 and args.scheduler is None:
        model = MatrixFactorizer(**params)
    else:  # the Dask engine (cluster.cli), which hamsi knows only by name
        model = registry.engine("dask").estimator_for(args, params)
    model.validate_params(name=flag_name)
    return model


def run(args) -> int:
    """Fit the model described by args, showing progress; write the outputs; return the exit code."""
    _check_args(args)
    model = build_model(args)
    columns = rating_columns(args.columns)
    on_workers = _on_workers(args)
    if on_workers:  # Parquet/CSV files read on the workers (cluster.dataset)
        if columns is not None:
            model.set_params(user_col=columns[0], item_col=columns[1], rating_col=columns[2])
        train, test = args.data, None
        if args.test_fraction > 0:  # a hash split of the pairs, held out and scored there
            train = registry.engine("dask").test_split(args.data, args.test_fraction, args.seed)
    else:
        train, test = _read_train_and_test(args, columns)
        check_sizes(args, train)
    scored = _fit_with_progress(args, model, train, test, on_workers and args.test_fraction > 0)
    if not math.isfinite(
        model.trace_.rows[-1].train_rmse
    ):  # whichever engine ran: never write a NaN model
        raise DivergenceError(
            f"diverged: the final train RMSE is {model.trace_.rows[-1].train_rmse}; nothing written"
        )
    write_outputs(args, model)
    if model.search_results_ is not None:
        print("hyper-parameter search (validation split of the training ratings):")
        print(search.format_results(model.search_results_))
    print(summary(args, model, test, test_rmse=scored))
    return 0


def _read_train_and_test(args, columns):
    """Return (training Ratings, test Ratings or None) of DATA and the test flags; say what was read."""
    # why lazy: pandas, only for a file with its split in a column
    from hamsi.data.given_split import read_split_column

    if args.split_column is not None:
        ratings, test = read_split_column(
            args.data, args.split_column, columns=columns, duplicates=args.duplicates
        )
    else:
        ratings = hamsi.load_ratings(args.data, columns=columns, duplicates=args.duplicates)
        test = None
        if args.test is not None:
            test = hamsi.load_ratings(args.test, columns=columns, duplicates=args.duplicates)
    if ratings.nnz == 0:
        raise InputError(f"{args.data}: no ratings")
    if not args.quiet:  # a report of the input, beside the results on stdout
        print(f"read {describe_ratings(ratings, args.duplicates)}")
        if test is not None:
            print(f"test {describe_ratings(test, args.duplicates)}")
    if args.test_fraction > 0:
        return ratings.split(args.test_fraction, seed=args.seed)
    return ratings, test


def _on_workers(args) -> bool:
    """True when the Dask engine runs and the data is read by its workers (cluster.sources).

    That is a directory or glob of Parquet/CSV files, or one such file larger than a read block
    when the Dask engine was asked for (--workers N, --scheduler; by default a single file is read
    here). The workers refuse repeated pairs and take no test file or split
    column: with those flags a single file is read in process, and files only the workers read are
    refused.
    """
    if args.workers == 0 and args.scheduler is None:
        return False
    if not registry.engine("dask").is_distributed_source(args.data):
        return False
    if os.path.isfile(args.data) and args.workers is None and args.scheduler is None:
        return False
    in_process_only = [
        flag
        for flag, given in (
            (f"--duplicates {args.duplicates}", args.duplicates != "error"),
            ("--test", args.test is not None),
            ("--split-column", args.split_column is not None),
        )
        if given
    ]
    if not in_process_only:
        return True
    if os.path.isfile(args.data):
        return False
    raise InputError(
        f"{in_process_only[0]} needs the ratings in this process, and {args.data} is read by the "
        "Dask workers (they refuse repeated pairs; hold out test ratings with --test-fraction)"
    )


def _fit_with_progress(args, model, train, test, test_on_workers: bool) -> float | None:
    """Fit, showing progress; print the UserWarnings (overfitting) as one line each.

    Return the test RMSE computed on the workers when the test split stayed there (--test-fraction
    with ratings read on the workers), before the local cluster closes; else None.
    """
    # why lazy: numba's kernels load only when a model is fitted or read
    from hamsi.estimator import MatrixFactorizer

    column = "validation" if args.patience is not None else "test"
    progress = None if args.quiet else Progress(args.max_cycles, args.max_time, scored=column)
    held = registry.engine("dask").holding_client if test_on_workers else contextlib.nullcontext
    try:
        with warnings.catch_warnings(record=True) as caught, held(model):
            warnings.simplefilter("always", UserWarning)
            # test ratings only fill the trace's held-out column when nothing selects on it (no
            # --patience; the search reads its own split of train); --patience reads a split of train
            model.fit(train, validation=test if args.patience is None else None, callback=progress)
            scored = None
            if test_on_workers:
                scored = registry.engine("dask").test_rmse(model)
    finally:
        if progress is not None:
            progress.close()
        if type(model) is not MatrixFactorizer:
            # the command is one run: close the LocalCluster the Dask estimator opened for it
            registry.engine("dask").close_local_clusters()
    for warning in caught:
        if issubclass(warning.category, UserWarning):
            print(f"hamsi factorize: warning: {for_cli(warning.message)}", file=sys.stderr)
    return scored


def check_sizes(args, ratings) -> None:
    """Raise InputError when --rank or --memory cannot fit these ratings or this machine, before fitting."""
    largest = float(np.max(np.abs(ratings.values)))
    if not math.isfinite(largest * largest * ratings.nnz):
        raise InputError(
            f"{args.data}: rating {largest:g} is too large: the sum of squared errors overflows "
            "float64; rescale the ratings"
        )
    users, items = ratings.shape
    if args.rank != "auto" and args.rank > min(users, items):
        raise InputError(
            f"--rank {args.rank} exceeds min(users, items) = {min(users, items)} of {args.data}: "
            "the product U V^T has no more than that rank"
        )
    rank = (
        max(search.RANKS) if args.rank == "auto" else args.rank
    )  # auto: the largest rank it may try
    parameters = (users + items) * (rank + 1)
    # the iterate, gradient and step copies, the 2 M L-BFGS pairs and the M x M compact-form matrices
    refuse_unless_fits(
        f"--rank {args.rank} with --memory {args.memory} on {users} users x {items} items",
        8.0 * (parameters * (2 * args.memory + 8) + 4 * args.memory**2),
    )
