"""`hamsi recommend MODEL --user ID`: the top-N items of a user from a model written by `hamsi factorize --out`."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from hamsi import registry
from hamsi.cli_io import check_writable
from hamsi.errors import InputError


def register(subparsers) -> None:
    """Add the `recommend` sub-command to the CLI."""
    parser = subparsers.add_parser(
        "recommend",
        help="list the best items for a user from a saved model (hamsi factorize --out)",
        description="Rank the items a user has not rated by the model's score and print the predicted "
        "rating (the score clipped to the training range) beside it. A user the model has "
        "not seen gets the items with the largest global mean + item bias.",
    )
    parser.add_argument(
        "model", metavar="MODEL", help="model file written by `hamsi factorize --out` or save()"
    )
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="the user's id, as in the rating file")
    who.add_argument(
        "--all",
        action="store_true",
        help="every user's top-N, ranked on Dask workers and written to --out (Parquet)",
    )
    parser.add_argument(
        "--out",
        metavar="PARQUET",
        default=None,
        help="with --all: the Parquet directory of (user, rank, item, rating, score) rows",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="with --all: workers of a local Dask cluster (default: one per core)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="with --all: use the running Dask cluster at tcp://host:port",
    )
    parser.add_argument(
        "--seen",
        metavar="DATA",
        default=None,
        help="with --all: the ratings the model was fitted on (Parquet/CSV files, a directory or a "
        "glob), read by the workers; every item a user rated there is left out (a model fitted "
        "on ratings kept on the workers keeps no list of them)",
    )
    parser.add_argument("-n", type=int, default=10, help="how many items (default 10)")
    parser.add_argument(
        "--include-seen", action="store_true", help="also rank the items the user rated"
    )
    parser.add_argument(
        "--json", action="store_true", help='print {"user", "items", "ratings", "scores"} as JSON'
    )
    parser.set_defaults(run=run)


def parse_user(text: str, ids):
    """Return --user as the model's id type (an integer unless the model's ids are strings)."""
    if ids.dtype.kind == "U":
        return text
    try:
        value = int(text)
    except ValueError:
        raise InputError(
            f"--user must be an integer id (the model's user ids are integers); got {text!r}"
        ) from None
    bounds = np.iinfo(ids.dtype) if ids.dtype.kind in "iu" else np.iinfo(np.int64)
    if not bounds.min <= value <= bounds.max:
        raise InputError(
            f"--user {text} is outside the range of the model's integer ids "
            f"({bounds.min}..{bounds.max})"
        )
    return value


def run(args) -> int:
    """Print the top --n items of --user; return the exit code."""
    # why lazy: numba's kernels load only when a model is fitted or read
    from hamsi.estimator import MatrixFactorizer

    if args.n < 1:
        raise InputError(f"-n must be >= 1; got {args.n}")
    if args.seen is not None and not args.all:
        raise InputError("--seen DATA goes with --all (every user's list, ranked on the workers)")
    if args.seen is not None and args.include_seen:
        raise InputError(
            "--seen leaves the rated items out and --include-seen ranks them: give one"
        )
    if args.all:
        return _run_all(args)
    model = MatrixFactorizer.load(args.model)
    user = parse_user(args.user, model.user_ids_)
    known = bool((model.user_ids_ == user).any())
    items, ratings = model.recommend(user, n=args.n, exclude_seen=not args.include_seen)
    if items.size == 0:
        print(
            f"hamsi recommend: no items to rank for user {user}: the model's {model.item_ids_.size} items are "
            f"all rated by this user (--include-seen ranks them too)",
            file=sys.stderr,
        )
    if not known:
        print(
            f"hamsi recommend: user {user} is not in {args.model}; showing the items a new user would get "
            f"(global mean + item bias)",
            file=sys.stderr,
        )
    # the ranking score (unclipped): several items may reach the top of the rating range
    scores = model.predict([user] * len(items), items, clip=False)
    if args.json:
        print(
            json.dumps(
                {
                    "user": user,
                    "items": items.tolist(),
                    "ratings": ratings.tolist(),
                    "scores": scores.tolist(),
                }
            )
        )
        return 0
    print(f"{'rank':>4}  {'item':>10}  {'rating':>6}  {'score':>6}")
    for position, (item, rating, score) in enumerate(zip(items, ratings, scores), start=1):
        print(f"{position:>4}  {item!s:>10}  {rating:6.3f}  {score:6.3f}")
    return 0


def _run_all(args) -> int:
    """Write every user's top --n items, ranked on Dask workers (cluster.scoring), to --out; return the exit code."""
    # why lazy: numba's kernels load only when a model is fitted or read
    from hamsi.estimator import MatrixFactorizer

    if not args.out:
        raise InputError("--all writes a Parquet directory: pass --out PATH")
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers must be >= 1; got {args.workers}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise InputError(f"--out {args.out}: exists and is not a directory")
    check_writable(
        "--out", os.path.join(args.out, "part.parquet") if os.path.isdir(args.out) else args.out
    )
    model = MatrixFactorizer.load(args.model)
    registry.engine("dask").write_top_n(
        model,
        n=args.n,
        exclude_seen=not args.include_seen,
        seen=args.seen,
        out=args.out,
        scheduler=args.scheduler,
        n_workers=args.workers,
    )
    print(
        f"hamsi recommend: top {args.n} items of {model.user_ids_.size} users written to {args.out}",
        file=sys.stderr,
    )
    return 0
