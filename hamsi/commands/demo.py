"""`hamsi demo`: factorize the embedded MovieLens-shaped sample, by default on a local Dask cluster.

The demo is `hamsi factorize` with fixed, sensible options on the sample shipped in the package,
so it exercises exactly the code path users run on their own data.
"""

from __future__ import annotations

import argparse
import os
import sys

from hamsi import registry
from hamsi.cli_io import add_renamed_flag, auto_or_float, seed_value
from hamsi.data.sample import SAMPLE_FILE


def register(subparsers) -> None:
    """Add the `demo` sub-command to the CLI."""
    parser = subparsers.add_parser(
        "demo",
        help="factorize the embedded ml-100k-like sample (943 x 1682, 100,000 ratings) on a local Dask cluster",
        description="Fit a rank-10 HAMSI model with biases and the default (data-driven) L2 regularization "
        "and steps (STRATA-B) to the embedded sample with a 10% held-out test set, show its progress and write trace.csv, "
        "factors.npz (the model, for `hamsi recommend`) and convergence.png.",
    )
    parser.add_argument(
        "--out-dir", default="hamsi-demo", help="where to write the outputs (default ./hamsi-demo)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="Dask workers of the local cluster (default: cores); 0 runs in this process",
    )
    parser.add_argument(
        "--rank", type=int, default=10, help="number of latent factors (default 10)"
    )
    parser.add_argument("--max-cycles", type=int, default=100, help="maximum cycles (default 100)")
    add_renamed_flag(parser, "--max-epochs", "--max-cycles", type=int)
    parser.add_argument(
        "--max-time", type=float, default=60.0, help="optimization time limit, s (default 60)"
    )
    parser.add_argument(
        "--reg",
        type=auto_or_float,
        default="auto",
        help="L2 weight (count-weighted, as ALS-WR) or 'auto' (default): chosen from the ratings",
    )
    parser.add_argument(
        "--eta",
        type=auto_or_float,
        default="auto",
        help="step parameter or 'auto' (default); larger eta, smaller steps",
    )
    parser.add_argument("--seed", type=seed_value, default=1)
    parser.set_defaults(run=run)


def factorize_arguments(args) -> argparse.Namespace:
    """Return the `hamsi factorize` arguments the demo runs, on the embedded sample file."""
    parser = argparse.ArgumentParser(prog="hamsi factorize")
    registry.command("factorize").register(parser.add_subparsers())
    out = args.out_dir
    return parser.parse_args(
        [
            "factorize",
            str(SAMPLE_FILE),
            "--rank",
            str(args.rank),
            "--partitioner",
            "strata-b",
            "--max-cycles",
            str(args.max_cycles),
            "--max-time",
            str(args.max_time),
            "--reg",
            str(args.reg),
            "--eta",
            str(args.eta),
            "--seed",
            str(args.seed),
            "--test-fraction",
            "0.1",
            "--trace",
            os.path.join(out, "trace.csv"),
            "--plot",
            os.path.join(out, "convergence.png"),
            "--out",
            os.path.join(out, "factors.npz"),
            *(["--workers", str(args.workers)] if args.workers is not None else []),
        ]
    )


def run(args) -> int:
    """Run the demo factorization; return the exit code of `hamsi factorize`."""
    os.makedirs(args.out_dir, exist_ok=True)
    fargs = factorize_arguments(args)
    engine = "in this process" if fargs.workers == 0 else "on a local Dask cluster"
    print(
        f"hamsi demo: rank-{fargs.rank} HAMSI (reg {fargs.reg}, biases) on the embedded ml-100k-like sample "
        f"{engine}",
        file=sys.stderr,
    )
    code = fargs.run(fargs)
    if code == 0:
        print(
            f"wrote {fargs.trace}, {fargs.plot} and {fargs.out}; try `hamsi recommend {fargs.out} --user 196`"
        )
    return code
