"""What one search trial's cycle costs: a rank-50 fit on a preset's search fit part, one thread.

The search's trials run one numba thread each on the fit part of the training split
(hamsi.search.validation_split). This runs one such fit (no validation, no early stop) after a
one-cycle warm-up and prints its wall per cycle; with --profile, the engine kernels' shares
(cProfile). The iterates do not depend on the timing: --save writes the factors, to compare two
trees bit for bit.

    python benchmarks/bench_trial_cycle.py --preset book-like --cycles 25 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
import warnings

import numpy as np

from hamsi import MatrixFactorizer, search
from hamsi.data.synth import make_ratings


def trial(cycles: int, rank: int) -> MatrixFactorizer:
    """Return an unfitted rank-`rank` model of a trial's kind, run for exactly `cycles` cycles."""
    return MatrixFactorizer(
        rank=rank,
        reg=0.1,
        reg_weighting="count",
        search=False,
        max_cycles=cycles,
        patience=None,
        tol=0.0,
        random_state=0,
        threads=1,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="book-like")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rank", type=int, default=50)
    parser.add_argument("--cycles", type=int, default=25)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--save", default=None, help="write the fitted factors (.npy) here")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    train, _ = make_ratings(args.preset, seed=args.seed).split(0.2, seed=args.seed)
    fit_part, _ = search.validation_split(train, seed=args.seed)
    trial(1, args.rank).fit(fit_part)  # compile or load the kernels
    model = trial(args.cycles, args.rank)
    profile = cProfile.Profile() if args.profile else None
    started = time.perf_counter()
    if profile is not None:
        profile.runcall(model.fit, fit_part)
    else:
        model.fit(fit_part)
    wall = time.perf_counter() - started
    print(
        f"{args.preset} seed {args.seed} rank {args.rank}: {args.cycles} cycles {wall:.2f} s, "
        f"{1000 * wall / args.cycles:.0f} ms per cycle, load {os.getloadavg()[0]:.1f}"
    )
    if profile is not None:
        stats = pstats.Stats(profile)
        rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:10]
        for (_, _, name), (_, calls, own, _, _) in rows:
            print(f"  {name:34s} {own:6.2f} s {100 * own / stats.total_tt:5.1f} %  ({calls} calls)")
    if args.save:
        np.save(
            args.save, np.concatenate([model.user_factors_.ravel(), model.item_factors_.ravel()])
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
