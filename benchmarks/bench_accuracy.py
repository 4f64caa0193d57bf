"""Held-out accuracy of `MatrixFactorizer()` with its defaults (auto: chosen by validation) beside the anchors.

Claim: with the defaults, hamsi chooses rank, reg and the penalty's weighting on a
validation split cut from the training ratings and beats a tuned Surprise SVD and Spark ALS on
the same split. The real files cannot be downloaded here, so this runs the presets shaped like
them (hamsi.data.synth: ml-100k-like, ml-1m-like and long-tail-like, the second real set's
statistics) on several seeds, each a random 80/20 split, and prints per preset and seed:

- biases: regularized user + item biases (ALS, reg 15 users / 10 items as Surprise's BaselineOnly);
- hamsi defaults: `MatrixFactorizer(random_state=seed)` (in process, the machine's cores), its
  test RMSE, what the search chose, the fit's wall time and the search's share of it;
- fixed: the previous release's defaults (rank 10, uniform reg 7 sd, 100 cycles, no validation);
- Surprise SVD (defaults; the best grid point on the real file: 100 factors, reg 0.1, lr 0.01, 60 epochs)
  and Spark ALS (the best grid point on the real file: rank 50, reg 0.1, 20 iterations), run by
  benchmarks/accuracy_anchors.py in the interpreter given by --anchor-python (a venv with
  scikit-surprise and pyspark; Java for Spark); without it, a line says they were skipped.

Then a sweep over rank 5..200 and reg 0..50 with the defaults' other values: diverged or not.
This machine is shared: the load average is printed with every row.

    python benchmarks/bench_accuracy.py --anchor-python /tmp/anchors/bin/python
    python benchmarks/bench_accuracy.py --full     # 5 seeds per small preset, 2 on ml-1m-like, the full sweep
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import partition
from hamsi import MatrixFactorizer
from hamsi.data.synth import make_ratings
from hamsi.defaults import REG_PER_SD, choose_hyperparameters, optimizer_options, problem_options
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization

# goal: the figures on the real files (random 80/20 split, 2 shared cores): second set = long-tail-like's model.
REAL = {
    "ml-100k-like": {
        "biases (unregularized)": 0.944,
        "Surprise SVD defaults": 0.939,
        "Surprise SVD best of 72": 0.911,
        "Spark ALS best of 26": 0.921,
        "hamsi by hand": 0.912,
        "goal": 0.905,
    },
    "long-tail-like": {
        "biases (unregularized)": 0.902,
        "Surprise SVD defaults": 0.895,
        "Surprise SVD best of 72": 0.871,
        "Spark ALS best of 26": 0.915,
        "hamsi by hand": 0.876,
        "goal": 0.865,
    },
}
BASELINE_REG_USERS = 15.0
BASELINE_REG_ITEMS = 10.0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="more seeds and the full sweep")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument(
        "--surprise-grid",
        action="store_true",
        help="also Surprise SVD's best of a 72-point grid, chosen on the test split (slow)",
    )
    parser.add_argument(
        "--anchor-python",
        default=os.environ.get("HAMSI_ANCHOR_PYTHON"),
        help="python with scikit-surprise and pyspark, for the anchors (default $HAMSI_ANCHOR_PYTHON)",
    )
    parser.add_argument("--presets", default="ml-100k-like,long-tail-like,ml-1m-like")
    parser.add_argument(
        "--fit-max-time",
        type=float,
        default=None,
        help="max_time of the hamsi defaults' fit (default none; ml-1m-like gets 120)",
    )
    return parser.parse_args(argv)


def rmse(predictions, values) -> float:
    return float(np.sqrt(np.mean((predictions - values) ** 2)))


def bias_baseline(train, test, iterations: int = 10) -> float:
    """Return the test RMSE of mu + b_u + b_i fitted by regularized alternating least squares."""
    m, n = train.shape
    mu = train.values.mean()
    user_counts = np.bincount(train.rows, minlength=m)
    item_counts = np.bincount(train.cols, minlength=n)
    user_bias = np.zeros(m)
    item_bias = np.zeros(n)
    for _ in range(iterations):
        item_bias = np.bincount(
            train.cols, train.values - mu - user_bias[train.rows], minlength=n
        ) / (BASELINE_REG_ITEMS + item_counts)
        user_bias = np.bincount(
            train.rows, train.values - mu - item_bias[train.cols], minlength=m
        ) / (BASELINE_REG_USERS + user_counts)
    return rmse(mu + user_bias[test.rows] + item_bias[test.cols], test.values)


def fit_defaults(
    train,
    test,
    rank,
    *,
    max_time,
    threads,
    safeguard=True,
    early_stop=False,
    reg=None,
    reg_weighting="uniform",
    seed=0,
):
    """Return (test RMSE, result) of HAMSI with the defaults, fitted on train (minus validation)."""
    fit_on, validation = train, None
    if early_stop:
        params = choose_hyperparameters(train, rank)
        fit_on, validation = train.split(params["validation_fraction"], seed=seed)
    cover = partition.make("strata-b", fit_on, blocks=threads, seed=seed)
    params = choose_hyperparameters(
        fit_on, rank, subsets=len(cover.subsets), reg=reg, reg_weighting=reg_weighting
    )
    problem = MatrixFactorization(fit_on, rank, **problem_options(params))
    result = minimize_hamsi(
        problem,
        cover,
        random_state=seed,
        max_cycles=None,
        max_time=max_time,
        validation=validation,
        patience=params["patience"] if early_stop else None,
        threads=threads,
        safeguard=safeguard,
        **optimizer_options(params),
    )
    return problem.heldout_error(result.x, test), result


def describe(value, result) -> str:
    if result.reason == "diverged" or not math.isfinite(value):
        return "diverged"
    return f"{value:.4f} ({result.trace.rows[-1][0]} cycles)"


def anchors(args, train, test, seed: int) -> dict:
    """Return the anchors' {name: {"rmse", "seconds"} or {"skipped"}} on this split (accuracy_anchors.py)."""
    if not args.anchor_python:
        return {
            "Surprise / Spark": {
                "skipped": "no --anchor-python (a venv with scikit-surprise, pyspark)"
            }
        }
    with tempfile.TemporaryDirectory() as directory:
        for name, part in (("train", train), ("test", test)):
            users, items = part.user_ids[part.rows], part.item_ids[part.cols]
            np.save(
                os.path.join(directory, f"{name}.npy"),
                np.column_stack([users, items, part.values]).astype(np.float64),
            )
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "accuracy_anchors.py")
        command = [args.anchor_python, script, directory, str(seed)]
        command += ["grid"] if args.surprise_grid else []
        command += ["svd"] if getattr(args, "svd_only", False) else []
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return {
            "Surprise / Spark": {
                "skipped": f"accuracy_anchors.py failed: {done.stderr.strip()[-300:]}"
            }
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


def fit_auto(train, test, seed: int, max_time):
    """Return (test RMSE, model, wall seconds, search seconds) of MatrixFactorizer's defaults."""
    started = time.perf_counter()
    model = MatrixFactorizer(random_state=seed, max_time=max_time).fit(train)
    wall = time.perf_counter() - started
    return model.rmse(test), model, wall, float(sum(model.search_results_["seconds"]))


def fit_fixed(train, test, seed: int) -> float:
    """Return the test RMSE of the previous release's defaults: rank 10, uniform reg 7 sd, 100 cycles."""
    model = MatrixFactorizer(
        rank=10,
        reg=REG_PER_SD * float(train.values.std()),
        reg_weighting="uniform",
        random_state=seed,
    ).fit(train)
    return model.rmse(test)


def accuracy_row(args, preset: str, seed: int, max_time, first: bool) -> dict:
    """Fit every model on one seed's 80/20 split, print its line, and return {model: test RMSE}."""
    ratings = make_ratings(preset, seed=seed)
    train, test = ratings.split(0.2, seed=seed)
    row = {"biases": bias_baseline(train, test)}
    row["hamsi defaults"], model, wall, searched = fit_auto(train, test, seed, max_time)
    row["fixed (before)"] = fit_fixed(train, test, seed)
    for name, outcome in anchors(args, train, test, seed).items():
        if "params" in outcome:
            print(f"  {name}: {outcome['params']} ({outcome['seconds']:.0f} s for the grid)")
        if "skipped" in outcome:
            if first:
                print(f"  {name}: skipped ({outcome['skipped']})")
        else:
            row[name] = outcome.get("rmse", math.nan)
    chosen = (
        f"rank {model.rank_} {model.reg_weighting_} reg {model.reg_:.3g} damping {model.reg_damping_:g}, "
        f"{model.result_.n_cycles} cycles; fit {wall:.1f} s wall (trials {searched:.1f} s)"
    )
    print(
        f"  seed {seed}: "
        + "  ".join(f"{k} {v:.4f}" for k, v in row.items())
        + f"  | {chosen}  load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return row


def accuracy_table(args) -> None:
    full = args.full
    seeds = {
        "ml-100k-like": (0, 1, 2, 3, 4) if full else (0, 1, 2),
        "long-tail-like": (0, 1, 2, 3, 4) if full else (0, 1, 2),
        "ml-1m-like": (0, 1) if full else (0,),
    }
    for preset in args.presets.split(","):
        print(
            f"\n{preset}, random 80/20 split per seed"
            + (
                "; goal, real file: " + ", ".join(f"{k} {v:.3f}" for k, v in REAL[preset].items())
                if preset in REAL
                else ""
            )
        )
        max_time = args.fit_max_time or (120.0 if preset == "ml-1m-like" else None)
        collected = {}
        for seed in seeds[preset]:
            row = accuracy_row(args, preset, seed, max_time, first=seed == seeds[preset][0])
            for name, value in row.items():
                collected.setdefault(name, []).append(value)
        print("  mean:   " + "  ".join(f"{k} {np.nanmean(v):.4f}" for k, v in collected.items()))


def divergence_sweep(args) -> None:
    ranks = (5, 10, 20, 50, 100, 200)
    regs = (0.0, 0.01, 0.1, 1.0, 10.0, 50.0) if args.full else (0.0, 0.1, 10.0, 50.0)
    weightings = ("uniform", "count") if args.full else ("uniform",)
    seconds = 2.0 if args.full else 0.5
    ratings = make_ratings("ml-100k-like", seed=0)
    train, test = ratings.split(0.2, seed=0)
    for weighting in weightings:
        print(
            f"\ndivergence sweep, ml-100k-like seed 0, defaults with the given reg ({weighting} "
            f"penalty), {seconds:g} s each: test RMSE or 'diverged'"
        )
        print(f"{'rank':>6s}" + "".join(f"{'reg ' + format(r, 'g'):>14s}" for r in regs))
        diverged = 0
        for rank in ranks:
            cells = []
            for reg in regs:
                value, result = fit_defaults(
                    train,
                    test,
                    rank,
                    max_time=seconds,
                    threads=args.threads,
                    reg=reg,
                    reg_weighting=weighting,
                )
                bad = result.reason == "diverged" or not math.isfinite(value)
                diverged += bad
                cells.append("diverged" if bad else f"{value:.4f}")
            print(f"{rank:>6d}" + "".join(f"{c:>14s}" for c in cells), flush=True)
        print(f"diverged: {diverged} of {len(ranks) * len(regs)} runs")


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    print(f"bench_accuracy: {os.cpu_count()} cores, load average {os.getloadavg()}")
    accuracy_table(args)
    if not args.skip_sweep:
        divergence_sweep(args)
    print(f"\ntotal {time.perf_counter() - start:.0f} s, load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
