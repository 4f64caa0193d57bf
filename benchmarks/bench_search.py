"""The defaults' cost: one `MatrixFactorizer()` fit (search + refit) beside one Surprise SVD fit.

For each preset and seed (a random 80/20 split), after one warm-up fit in this process:
- hamsi defaults: wall seconds of fit (the search, the refit, everything), test RMSE, the choice;
- Surprise SVD at its defaults on the same split (benchmarks/accuracy_anchors.py in the
  interpreter of --anchor-python, a venv with scikit-surprise): fit seconds and test RMSE;
- the ratio of the two walls, measured side by side in one run;
- with --budgets: `max_time=T` fits, their wall and test RMSE against the biases model's;
- with --without-refit: the test RMSE of the search winner's trial model (no refit).
Medians over the seeds are printed last. Quote medians, never the best run.

    python benchmarks/bench_search.py --anchor-python /tmp/anchors/bin/python
    python benchmarks/bench_search.py --presets ml-100k-like --seeds 0,1,2 --budgets 2,5,20
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
from bench_accuracy import anchors, bias_baseline

from hamsi import MatrixFactorizer
from hamsi.data.synth import make_ratings


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="ml-100k-like,long-tail-like")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--budgets", default="", help="max_time values to try, e.g. 2,5,20")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--without-refit",
        action="store_true",
        help="also score the search winner's trial model (fitted on the search's fit part, no refit)",
    )
    parser.add_argument(
        "--anchor-python",
        default=os.environ.get("HAMSI_ANCHOR_PYTHON"),
        help="python with scikit-surprise (default $HAMSI_ANCHOR_PYTHON)",
    )
    args = parser.parse_args(argv)
    args.surprise_grid, args.svd_only = False, True
    return args


def fit(train, seed: int, threads, max_time=None):
    """Return (model, wall seconds) of MatrixFactorizer's defaults on train."""
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a budget's one-line warning is reported by the table
        model = MatrixFactorizer(random_state=seed, threads=threads, max_time=max_time).fit(train)
    return model, time.perf_counter() - started


def one_split(args, preset: str, seed: int, budgets: list[float]) -> dict:
    ratings = make_ratings(preset, seed=seed)
    train, test = ratings.split(0.2, seed=seed)
    model, wall = fit(train, seed, args.threads)
    row = {
        "hamsi wall": wall,
        "hamsi RMSE": model.rmse(test),
        "biases RMSE": bias_baseline(train, test),
    }
    if args.without_refit:  # what the refit is worth: the winner's trial model, never refitted
        row["no-refit RMSE"] = model._fallback.fitted(model._fallback_candidate).rmse(test)
    svd = anchors(args, train, test, seed).get("Surprise SVD defaults", {})
    if "seconds" in svd:
        row.update({"SVD wall": svd["seconds"], "SVD RMSE": svd["rmse"]})
        row["wall / SVD"] = wall / svd["seconds"]
    for budget in budgets:
        budgeted, seconds = fit(train, seed, args.threads, max_time=budget)
        row[f"T={budget:g} wall"] = seconds
        row[f"T={budget:g} RMSE"] = budgeted.rmse(test)
    chosen = (
        f"rank {model.rank_} {model.reg_weighting_} reg {model.reg_:.3g} damping "
        f"{model.reg_damping_:g}, {model.result_.n_cycles} cycles"
    )
    print(
        f"  seed {seed}: "
        + "  ".join(f"{k} {v:.4f}" if "RMSE" in k else f"{k} {v:.2f}" for k, v in row.items())
        + f"  | {chosen}  load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return row


def main(argv=None) -> int:
    args = parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    budgets = [float(b) for b in args.budgets.split(",") if b]
    warm = make_ratings(users=300, items=200, ratings=6000, seed=0)
    fit(warm, 0, args.threads)  # compile and load every kernel before any clock starts
    for preset in args.presets.split(","):
        print(f"\n{preset}, random 80/20 split per seed, after a warm-up fit")
        rows = [one_split(args, preset, seed, budgets) for seed in seeds]
        keys = [k for k in rows[0] if all(k in row for row in rows)]
        print(
            "  median: "
            + "  ".join(
                f"{k} {np.median([r[k] for r in rows]):.4f}"
                if "RMSE" in k
                else f"{k} {np.median([r[k] for r in rows]):.2f}"
                for k in keys
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
