"""COA's objective and speed goals: error ratio to identity, certified gap, time, cost split.

For WRange, WDiscrete and WRelated (s = n/2) at m = 1024 drawn with default_rng(1), and n = 256,
512, 1024 (and, with --largest, for WRange and WDiscrete doubling n from 2048 until a solve exceeds
--budget seconds or n passes --max-n), runs
  coa-dual   the same program through its n-variable dual (dp.queries.dual_newton; recommended)
  coa-schur  the same program with exact Newton directions (dp.queries.schur_direction)
  coa        Yuan et al. Alg. 1-3 (Newton, CG on the Hessian operator, Armijo, homotopy)
best (and median) of --repeats runs each, side by side, and prints beside ours the optimum pinned
by an independent dual solve, HDMM's ratio and time, and the seed's corrected Matlab code run in
Octave (theta = 1e-3, 30-iteration cap). Cost split (seconds of the best run): chol = Cholesky
tests, grad = X^-1 / B = F'U and diag X, hess = Hessian or multiplier products, eig =
eigendecompositions, cert = dual bounds (coa-dual: free, from the same eigendecomposition).

    python benchmarks/bench_queries_coa.py --threads 1 --methods coa-dual,coa-schur --repeats 2   # ~4 min
    python benchmarks/bench_queries_coa.py --threads 1 --sizes "" --largest --budget 600          # <= 10 min

Measured: see docs/queries.md, "Linear queries under (epsilon, delta)-DP: COA".
"""

from __future__ import annotations

import argparse
import os
import sys
import time

if (
    "--threads" in sys.argv
):  # must precede numpy's import: runtime limits leave OpenBLAS threads spinning
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = sys.argv[
        sys.argv.index("--threads") + 1
    ]

import numpy as np  # noqa: E402

OPTIMUM = {  # error ratio to identity, from the dual (goal); WRelated: a lower bound
    "range": {256: 0.09324, 512: 0.05548, 1024: 0.03146},
    "discrete": {256: 0.10993, 512: 0.09240, 1024: 0.07255},
    "related": {256: 0.4327, 512: 0.41451, 1024: 0.38501},
}
HDMM = {  # (ratio, seconds) on this kind of 2-core machine
    "range": {256: (0.0932, 1.0), 512: (0.0567, 6.3), 1024: (0.0331, 29)},
    "discrete": {256: (0.1099, 0.8), 512: (0.0924, 2.9), 1024: (0.0725, 134)},
    "related": {256: (0.4373, 13), 512: (0.4177, 33), 1024: (0.3889, 117)},
}
SEED_OCTAVE = {  # (ratio at n = 512, seconds at n = 256, seconds at n = 512)
    "range": 0.060,
    "discrete": 0.115,
    "related": 0.435,
    "seconds": {256: "4-5", 512: "40-44"},
}


def solve(kind: str, n: int, m: int, method: str, gap_tol: float, max_time: float | None):
    """Return (strategy, seconds) for the workload drawn with default_rng(1)."""
    from dp import queries

    W = queries.make_workload(kind, m, n, random_state=1)
    started = time.perf_counter()
    strategy = queries.optimize(W, method, gap_tol=gap_tol, max_time=max_time)
    return W, strategy, time.perf_counter() - started


def report(kind: str, n: int, method: str, W, strategy, seconds: float, median: float) -> None:
    """Print one row: ratio, certified bound, gap, time, iterations, cost split, anchors."""
    base = float(np.sum(W * W))
    cert = strategy.certificate
    costs = strategy.info["costs"]
    newton = max(costs.counts["newton"], 1)
    optimum = OPTIMUM.get(kind, {}).get(n)
    hdmm = HDMM.get(kind, {}).get(n)
    seed = SEED_OCTAVE[kind] if n == 512 else None
    above = f"{strategy.objective / base / optimum - 1:+.2%}" if optimum else "-"
    print(
        f"{kind:>9} {n:>5} {method:>10} {strategy.objective / base:>9.5f} {cert.lower_bound / base:>9.5f} "
        f"{cert.gap:>8.1e} {seconds:>7.2f} {costs.counts['newton']:>4} {costs.counts['hessian']:>5} "
        f"{seconds / newton:>6.2f}  chol {costs.cholesky:5.1f} grad {costs.gradient:5.1f} "
        f"hess {costs.hessian:5.1f} eig {costs.eigen:5.1f} cert {costs.certificate:5.1f} | "
        f"opt {optimum if optimum else '-'} ({above}) HDMM {hdmm if hdmm else '-'} seed {seed if seed else '-'} "
        f"[{strategy.status}] med {median:.1f} load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def parse_args():
    """Return the command line's arguments."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="range,discrete,related")
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--methods", default="coa-dual,coa-schur,coa")
    ap.add_argument(
        "--paper-max-n", type=int, default=512, help="largest n for method coa (slow; default 512)"
    )
    ap.add_argument("-m", type=int, default=1024)
    ap.add_argument("--gap-tol", type=float, default=1e-3)
    ap.add_argument(
        "--repeats", type=int, default=1, help="runs per cell; the best is reported (default 1)"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="BLAS threads, set before numpy loads (default: the library's; 1 on a loaded machine)",
    )
    ap.add_argument(
        "--largest", action="store_true", help="double n from 2048 until a solve exceeds --budget"
    )
    ap.add_argument(
        "--largest-method", default="coa-dual", help="method for --largest (default coa-dual)"
    )
    ap.add_argument(
        "--largest-workloads",
        default="range,discrete",
        help="workloads for --largest (default range,discrete: WDiscrete has no equal columns)",
    )
    ap.add_argument(
        "--max-n", type=int, default=16384, help="last n tried by --largest (default 16384)"
    )
    ap.add_argument(
        "--budget", type=float, default=600.0, help="seconds per solve for --largest (default 600)"
    )
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    print(
        f"m={args.m}, workloads default_rng(1), gap_tol={args.gap_tol:g}; load average before: "
        f"{tuple(round(v, 2) for v in os.getloadavg())}; BLAS threads: {args.threads or 'default'}; "
        f"best of {args.repeats}"
    )
    print(
        "ratio = expected error / identity's; bound = certified lower bound on the optimum; "
        "s/it = seconds per Newton iteration; cost split in seconds; med = median time; load = 1-min average"
    )
    print(
        f"{'workload':>9} {'n':>5} {'method':>10} {'ratio':>9} {'bound':>9} {'gap':>8} {'time':>7} "
        f"{'it':>4} {'Hv':>5} {'s/it':>6}"
    )
    run_table(args)
    if args.largest:
        run_largest(args)
    print(
        f"load average after: {tuple(round(v, 2) for v in os.getloadavg())}; seed's Octave times: "
        f"n=256 {SEED_OCTAVE['seconds'][256]} s, n=512 {SEED_OCTAVE['seconds'][512]} s"
    )


def run_table(args) -> None:
    """Solve and report every (workload, n, method) cell of the table."""
    for kind in args.workloads.split(","):
        for n in (int(v) for v in args.sizes.split(",") if v):
            for method in args.methods.split(","):
                if method == "coa" and n > args.paper_max_n:
                    continue
                runs = [
                    solve(kind, n, args.m, method, args.gap_tol, None) for _ in range(args.repeats)
                ]
                W, strategy, seconds = min(runs, key=lambda run: run[2])
                report(
                    kind,
                    n,
                    method,
                    W,
                    strategy,
                    seconds,
                    float(np.median([run[2] for run in runs])),
                )


def run_largest(args) -> None:
    """Double n from 2048 until a solve does not converge or exceeds --budget."""
    for kind in args.largest_workloads.split(","):
        n = 2048
        while n <= args.max_n:
            W, strategy, seconds = solve(
                kind, n, args.m, args.largest_method, args.gap_tol, args.budget
            )
            report(kind, n, args.largest_method, W, strategy, seconds, seconds)
            if strategy.status != "converged" or seconds > args.budget:
                break
            n *= 2


if __name__ == "__main__":
    main()
