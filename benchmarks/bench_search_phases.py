"""Where one default fit's time goes: the split, the trials (start, cycles, per rung), the refit.

After a warm-up fit in this process, one `MatrixFactorizer()` fit on a preset's 80/20 split, with
wall clocks around its phases (wrappers on the functions that run them; the fit is unchanged):
the validation split, the trials' start (partition, problem, first evaluation) and cycles summed
over the threads that run them, each rung's wall, the whole search, the refit's partition and
solve. With --kernels, the share of the engine's kernels in one trial-like run on one thread
(cProfile of a fit with search=False at the chosen values).

    python benchmarks/bench_search_phases.py --preset ml-100k-like --seed 0
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import os
import pstats
import time
import warnings

from hamsi import MatrixFactorizer, auto_values, engine_fit, search, trials
from hamsi.data.synth import make_ratings

SECONDS: dict = collections.defaultdict(float)
CALLS: collections.Counter = collections.Counter()
PHASES = (
    (search, "validation_split", "validation split"),
    (trials.TrialRun, "__init__", "trials: start (sum over threads)"),
    (trials.TrialRun, "advance", "trials: cycles (sum over threads)"),
    (trials.LocalTrials, "__call__", "rungs: wall"),
    (auto_values.AutoValues, "_choose", "search: wall"),
    (engine_fit.EngineFit, "_partition", "partition (trials and refit)"),
    (engine_fit.EngineFit, "_solve", "refit: solve"),
)


def timed(owner, name: str, label: str) -> None:
    """Wrap owner.name so its wall seconds add up under `label`."""
    function = getattr(owner, name)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            SECONDS[label] += time.perf_counter() - started
            CALLS[label] += 1

    setattr(owner, name, wrapper)


def kernel_shares(train, model) -> None:
    """Print the engine kernels' share of a one-thread fit at the chosen values (cProfile)."""
    fixed = MatrixFactorizer(
        rank=model.rank_,
        reg=model.reg_,
        reg_weighting=model.reg_weighting_,
        reg_damping=model.reg_damping_,
        max_epochs=model.result_.n_cycles,
        threads=1,
        random_state=0,
    )
    profile = cProfile.Profile()
    profile.runcall(fixed.fit, train)
    stats = pstats.Stats(profile)
    total = stats.total_tt
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:8]
    print(f"\n  one-thread fit at the chosen values: {total:.2f} s under cProfile")
    for (_, _, name), (_, calls, own, _, _) in rows:
        print(f"    {name:32s} {own:6.2f} s {100 * own / total:5.1f} %  ({calls} calls)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="ml-100k-like")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--kernels", action="store_true")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    for owner, name, label in PHASES:
        timed(owner, name, label)
    warm = make_ratings(users=300, items=200, ratings=6000, seed=0)
    MatrixFactorizer(random_state=0, threads=args.threads).fit(warm)
    SECONDS.clear()
    CALLS.clear()
    train, test = make_ratings(args.preset, seed=args.seed).split(0.2, seed=args.seed)
    started = time.perf_counter()
    model = MatrixFactorizer(random_state=args.seed, threads=args.threads).fit(train)
    wall = time.perf_counter() - started
    print(
        f"{args.preset} seed {args.seed}: fit {wall:.2f} s wall, test RMSE {model.rmse(test):.4f}, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    for label, seconds in SECONDS.items():
        print(f"  {label:36s} {seconds:7.2f} s  ({CALLS[label]} calls)")
    if args.kernels:
        kernel_shares(train, model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
