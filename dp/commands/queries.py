"""`hamsi queries`: answer a batch of linear queries under (epsilon, delta)-DP through a strategy."""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from hamsi.cli_io import seed_value
from hamsi.errors import InputError
from hamsi.limits import refuse_unless_fits

WORKLOADS = ("range", "discrete", "marginal", "related")
# The empirical error is a mean over releases; its standard error falls as 1/sqrt(repeats), so
# 10^5 releases pin it to 0.3 % of one release's spread (more only costs minutes of W x products).
MAX_REPEATS = 100_000
DATASETS = ("random", "power-law", "alternating", "laplace", "gaussian", "uniform")


def register(subparsers) -> None:
    """Add the `queries` sub-command to the CLI."""
    p = subparsers.add_parser(
        "queries",
        help="answer a workload of linear queries with a DP strategy (COA, hierarchical, ...)",
        description=(
            "Draw a workload W (m queries over n cells) and a histogram x, find a strategy with "
            "--method, and print its expected error (closed form) beside the empirical error of "
            "--repeats private releases of W x, and the time. COA: Yuan, Yang, Zhang and Hao."
        ),
    )
    _add_workload_arguments(p)
    _add_method_arguments(p)
    _add_privacy_arguments(p)
    _add_data_arguments(p)
    _add_solver_arguments(p)
    _add_repeat_arguments(p)
    p.set_defaults(run=run)


def _add_workload_arguments(p) -> None:
    """The workload W: its kind and shape."""
    p.add_argument("--workload", choices=WORKLOADS, default="range")
    p.add_argument(
        "-m", "--queries", dest="m", type=int, default=1024, help="number of queries (default 1024)"
    )
    p.add_argument(
        "-n", "--cells", dest="n", type=int, default=512, help="histogram cells (default 512)"
    )
    p.add_argument(
        "-s", "--rank", dest="s", type=int, default=None, help="WRelated rank (default min(m,n)/2)"
    )


def _add_method_arguments(p) -> None:
    """The strategy's method."""
    p.add_argument(
        "--method",
        default="coa",
        help="coa (paper, default), coa-dual (fastest), coa-schur, lrm (eps-DP), identity, workload, hierarchical, wavelet, ...",
    )


def _add_privacy_arguments(p) -> None:
    """Epsilon, delta, the neighbouring relation and the calibration."""
    p.add_argument(
        "--epsilon", type=float, default=0.1, help="privacy budget epsilon (> 0; default 0.1)"
    )
    p.add_argument(
        "--delta", type=float, default=1e-4, help="privacy delta in (0, 1) (default 1e-4)"
    )
    p.add_argument(
        "--neighbouring",
        choices=["add-remove", "replace-one"],
        default="add-remove",
        help="neighbour relation of the guarantee: add-remove (one count changes by 1, the "
        "papers'; default) or replace-one (a record moves between cells: up to 2x the noise)",
    )
    p.add_argument(
        "--calibration",
        choices=["analytic", "classical"],
        default="analytic",
        help="Gaussian noise scale: Balle-Wang analytic (default) or Dwork-Roth classical",
    )


def _add_data_arguments(p) -> None:
    """The histogram x."""
    p.add_argument(
        "--data", choices=DATASETS, default="random", help="histogram x (default random counts)"
    )


def _add_solver_arguments(p) -> None:
    """The solvers' tolerance, choice and time limit."""
    p.add_argument(
        "--gap-tol",
        type=float,
        default=1e-3,
        help="COA: certified relative duality gap (default 1e-3)",
    )
    p.add_argument(
        "--solver",
        choices=["auto", "alm", "p-identity"],
        default="auto",
        help="LRM: auto (default: p-Identity search, with Alg. 1 beside it when 1.2 rank(W) < n), "
        "alm (LRM paper Alg. 1 + finish) or p-identity",
    )
    p.add_argument(
        "--max-time",
        type=float,
        default=None,
        help="COA, LRM: stop after this many seconds (LRM: Alg. 1 and the refinement each)",
    )


def _add_repeat_arguments(p) -> None:
    """The number of releases and the seeds."""
    p.add_argument(
        "--repeats",
        type=int,
        default=20,
        help="private releases for the empirical error (default 20)",
    )
    p.add_argument(
        "--seed",
        type=seed_value,
        default=1,
        help="seed of the workload and the histogram (default 1)",
    )
    p.add_argument(
        "--noise-seed",
        type=seed_value,
        default=None,
        help="seed the noise (reproducible, NOT secure); default: os.urandom",
    )


def _check_args(args: argparse.Namespace) -> None:
    # why lazy: dp.queries loads SciPy's solvers, only when the command runs
    from dp.queries.api import METHODS

    if args.method not in METHODS:
        raise InputError(
            f"--method must be one of {', '.join(sorted(METHODS))}, got {args.method!r}"
        )
    _check_sizes(args)
    _check_privacy_and_solver(args)
    if args.workload == "marginal" and args.n < 4:
        raise InputError(f"--workload marginal needs -n >= 4 (two attributes), got {args.n}")


def _check_sizes(args: argparse.Namespace) -> None:
    """Raise InputError on a query count, domain size, repeat count or s out of range."""
    for flag, value in (("-m", args.m), ("-n", args.n), ("--repeats", args.repeats)):
        if value < 1:
            raise InputError(f"{flag} must be an integer >= 1, got {value}")
    if args.repeats > MAX_REPEATS:
        raise InputError(
            f"--repeats must be at most {MAX_REPEATS} (the standard error of the mean falls as "
            f"1/sqrt(repeats)), got {args.repeats}"
        )
    if args.s is not None and args.s < 1:
        raise InputError(f"-s must be an integer >= 1, got {args.s}")


def _check_privacy_and_solver(args: argparse.Namespace) -> None:
    """Raise InputError on epsilon, delta, the calibration, gap_tol or max_time out of range."""
    if not (args.epsilon > 0 and math.isfinite(args.epsilon)):
        raise InputError(f"--epsilon must be a finite number > 0, got {args.epsilon}")
    if not 0 < args.delta < 1:
        raise InputError(f"--delta must lie in (0, 1), got {args.delta}")
    if args.calibration == "classical" and args.epsilon >= 1:
        raise InputError(f"--calibration classical needs --epsilon < 1, got {args.epsilon}")
    if not 0 < args.gap_tol < 1:
        raise InputError(f"--gap-tol must lie in (0, 1), got {args.gap_tol}")
    if args.max_time is not None and not args.max_time >= 0:
        raise InputError(f"--max-time must be >= 0 seconds, got {args.max_time}")


def _histogram(args: argparse.Namespace):
    from dp import queries  # why lazy: dp.queries loads SciPy's solvers, only when the command runs

    if args.data == "random":
        return queries.random_histogram(args.n, random_state=args.seed + 1)
    if args.data == "power-law":
        return queries.power_law_histogram(args.n, random_state=args.seed + 1)
    return queries.synthetic_histogram(args.data, args.n, random_state=args.seed + 1)


def _solver_options(args: argparse.Namespace) -> dict:
    """Return the keyword options `queries.optimize` takes for --method (COA's gap and time, LRM's)."""
    if args.method == "lrm":
        return {
            "solver": args.solver,
            "max_time": args.max_time,
            "refine_max_time": args.max_time,
            "p_identity_max_time": args.max_time,
        }
    if args.method.startswith("coa"):
        return {"gap_tol": args.gap_tol, "max_time": args.max_time}
    return {}


def _empirical_errors(queries, W, x, strategy, args: argparse.Namespace) -> list[float]:
    """Return the squared error of --repeats private releases of W x (the noise from --noise-seed)."""
    rng = np.random.default_rng(args.noise_seed) if args.noise_seed is not None else None
    truth = W @ x
    return [
        float(
            np.sum(
                (
                    queries.answer(
                        W,
                        x,
                        strategy,
                        args.epsilon,
                        args.delta,
                        rng,
                        args.calibration,
                        neighbouring=args.neighbouring,
                    ).values
                    - truth
                )
                ** 2
            )
        )
        for _ in range(args.repeats)
    ]


def _print_report(args, W, x, strategy, seconds, expected, identity, errors) -> None:
    """Print the run's settings, the strategy, the time, the expected and the empirical error."""
    m, relation = args.m, args.neighbouring
    print(
        f"workload: {args.workload}  m={m}  n={args.n}  method: {args.method}  "
        f"epsilon={args.epsilon:g}  delta={args.delta:g} ({args.calibration}, {relation} neighbours)"
    )
    print(
        f"strategy: {strategy.matrix.shape[0]} x {strategy.matrix.shape[1]}  noise: {strategy.noise}  "
        f"sensitivity {strategy.sensitivity_for(relation):.4g}  status: {strategy.status}"
    )
    if strategy.message:
        print(f"solver: {strategy.message}")
    print(f"time: {seconds:.2f} s")
    print(
        f"expected error: {expected:.6g} total, {expected / m:.6g} per query "
        f"(ratio to identity {expected / identity:.5f})"
    )
    if args.method == "lrm":
        bias = float(np.sum(((W - strategy.reconstruction @ strategy.matrix) @ x) ** 2))
        print(
            f"bias ||(W - B L) x||^2: {bias:.6g} (data-dependent, in the empirical error, not in the expected)"
        )
    stderr = (
        float(np.std(errors, ddof=1) / np.sqrt(len(errors))) if len(errors) > 1 else float("nan")
    )
    print(
        f"empirical error: {np.mean(errors):.6g} total, {np.mean(errors) / m:.6g} per query "
        f"(mean of {len(errors)} releases, standard error {stderr:.3g})"
    )


def run(args: argparse.Namespace) -> int:
    """Optimize the strategy, release the answers --repeats times, print errors and time; return 0."""
    from dp import queries  # why lazy: dp.queries loads SciPy's solvers, only when the command runs

    _check_args(args)
    # dense W (m x n) with its products, and strategy matrices of up to n x n and m x m (Gram, inverse, factors)
    m, n = args.m, args.n
    refuse_unless_fits(f"-m {m} -n {n}", 8.0 * (3 * m * n + 4 * n * n + 2 * m * m))
    extra = {"s": args.s} if args.workload == "related" and args.s is not None else {}
    W = queries.make_workload(args.workload, args.m, args.n, random_state=args.seed, **extra)
    x = _histogram(args)
    started = time.perf_counter()
    strategy = queries.optimize(W, args.method, **_solver_options(args))
    seconds = time.perf_counter() - started
    relation = args.neighbouring
    expected = queries.expected_error(
        W, strategy, args.epsilon, args.delta, args.calibration, neighbouring=relation
    )
    identity = queries.expected_error(
        W,
        queries.optimize(W, "identity", noise=strategy.noise),
        args.epsilon,
        args.delta,
        args.calibration,
        neighbouring=relation,
    )
    errors = _empirical_errors(queries, W, x, strategy, args)
    _print_report(args, W, x, strategy, seconds, expected, identity, errors)
    return 0
