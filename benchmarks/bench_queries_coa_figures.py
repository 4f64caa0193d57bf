"""Yuan et al. (COA) Figs. 1-13 as tables: convergence, error vs n, m and s, and time.

Every grid cell (workload, method, m, n, s) is one Dask task on a LocalCluster (worker processes
on 127.0.0.1, one BLAS thread each). Error = average squared error per query at epsilon = 0.1,
delta = 1e-4 (analytic Gaussian; Laplace for epsilon-DP methods): the closed form, and the mean
of 5 private releases of a power-law histogram (the paper's real data sets are not reachable here).
Methods: GM (noise on W x), identity, WM (wavelet), HM (hierarchical), COA (coa-schur: the
paper's program, certified within gap_tol), and any other registered method named by --methods
(e.g. lrm when present). Not built: AM (Li-Miklau eigen-design: superseded here by the exact
optimum of the same program family), ESM (a non-convex smoothing of program (6) that the
paper shows is dominated by COA), DAWA (epsilon-DP, data-dependent; sec. 5.6 compares only on
ranges under delta = 0).

    python benchmarks/bench_queries_coa_figures.py                  # small grid, ~5 min on 2 cores
    python benchmarks/bench_queries_coa_figures.py --paper          # the paper's sizes (hours)
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: workers inherit it

import numpy as np  # noqa: E402

EPSILON, DELTA = 0.1, 1e-4
RELEASES = 5  # private releases averaged for the empirical error
PAPER_NOTES = {
    "n": "paper Figs. 2-5: COA ~ LRM best everywhere, >100x below GM at large n; WM/HM close on WRange only",
    "m": "paper Figs. 6-9: COA ~ LRM best in all cases; WM/HM worse than GM on WMarginal",
    "s": "paper Fig. 10: COA ~ LRM >= 10x below the others at small s; the gap closes as s -> min(m, n)",
    "time": "paper Figs. 11-13: COA's time independent of m, cubic in n (faster than LRM below n ~ 5000)",
}


def cell(kind: str, method: str, m: int, n: int, s: int | None, gap_tol: float) -> dict:
    """Return the errors and time of one method on one workload (runs on a Dask worker)."""
    from dp import queries

    extra = {"s": s} if kind == "related" and s is not None else {}
    W = queries.make_workload(kind, m, n, random_state=1, **extra)
    x = queries.power_law_histogram(n, random_state=2)
    options = {"gap_tol": gap_tol} if method.startswith("coa") else {}
    started = time.perf_counter()
    strategy = queries.optimize(W, method, **options)
    seconds = time.perf_counter() - started
    expected = queries.expected_error(W, strategy, EPSILON, DELTA, x=x)
    errors = [
        np.sum(
            (queries.answer(W, x, strategy, EPSILON, DELTA, random_state=seed).values - W @ x) ** 2
        )
        for seed in range(RELEASES)
    ]
    return {
        "expected": expected / m,
        "empirical": float(np.mean(errors)) / m,
        "seconds": seconds,
        "status": strategy.status,
        "history": [
            (h.iteration, h.error_ratio, h.gradient_norm, h.theta) for h in strategy.history
        ],
    }


def grid(args) -> dict:
    """Return {figure: [(key, kind, method, m, n, s)]} for the chosen sizes."""
    cells = {"n": [], "m": [], "s": [], "time": [], "convergence": []}
    for kind in args.workloads:
        for n in args.ns:
            cells["n"] += [(kind, method, 1024, n, None) for method in args.methods]
        for m in args.ms:
            cells["m"] += [(kind, method, m, args.n_for_m, None) for method in args.methods]
        cells["convergence"].append((kind, "coa", 1024, args.n_for_m, None))
    for fraction in (0.1, 0.2, 0.4, 0.6, 0.8, 1.0):
        s = max(int(fraction * args.n_for_s), 1)
        cells["s"] += [
            ("related", method, args.n_for_s, args.n_for_s, s) for method in args.methods
        ]
    for kind in args.workloads:
        cells["time"] += [
            (kind, method, m, args.n_for_time, None)
            for m in args.ms
            for method in ("coa", "coa-schur")
        ]
    return cells


def print_table(title: str, rows: dict, x_name: str, methods: list[str], note: str) -> None:
    print(
        f"\n=== {title} ===  (average squared error per query, closed form / mean of 5 releases)\n  {note}"
    )
    print(f"  {x_name:>6} " + "".join(f"{m:>22}" for m in methods))
    for x in sorted(rows):
        print(
            f"  {x:>6} "
            + "".join(
                f"{rows[x][m]['expected']:>11.4g}/{rows[x][m]['empirical']:<10.4g}"
                if m in rows[x]
                else f"{'-':>22}"
                for m in methods
            )
        )


def main() -> None:
    from dp.queries import METHODS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--paper", action="store_true", help="the paper's sizes: n, m up to 8192 (hours)"
    )
    ap.add_argument("--workloads", default="discrete,marginal,range,related")
    ap.add_argument(
        "--methods",
        default="workload,identity,wavelet,hierarchical,coa-schur"
        + (",lrm" if "lrm" in METHODS else ""),
    )
    ap.add_argument("--gap-tol", type=float, default=1e-3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    args.workloads, args.methods = args.workloads.split(","), args.methods.split(",")
    if args.paper:
        args.ns, args.ms, args.n_for_m, args.n_for_s, args.n_for_time = (
            [128, 256, 512, 1024, 2048, 4096, 8192],
            [128, 256, 512, 1024, 2048, 4096, 8192],
            512,
            1024,
            1024,
        )
    else:
        args.ns, args.ms, args.n_for_m, args.n_for_s, args.n_for_time = (
            [64, 128, 256],
            [64, 256, 1024],
            128,
            128,
            128,
        )
    from cluster.connect import connect

    cells = grid(args)
    started = time.perf_counter()
    print(
        f"load average before: {tuple(round(v, 2) for v in os.getloadavg())}; epsilon={EPSILON}, delta={DELTA}",
        flush=True,
    )  # an unflushed buffer would be copied into forked workers and printed twice
    with connect(n_workers=args.workers, quiet=True) as client:
        futures = {
            fig: [client.submit(cell, *spec, args.gap_tol, pure=False) for spec in specs]
            for fig, specs in cells.items()
        }
        results = {fig: list(zip(cells[fig], client.gather(futs))) for fig, futs in futures.items()}
    report(args, results)
    print(
        f"\nwall time {time.perf_counter() - started:.0f} s on {args.workers} Dask workers; "
        f"load average after: {tuple(round(v, 2) for v in os.getloadavg())}"
    )


def report(args, results: dict) -> None:
    """Print Figs. 1-13 as tables."""
    print(
        f"\n=== Fig. 1: convergence of COA (Alg. 1-3, CG directions), m=1024, n={args.n_for_m} ==="
    )
    print(
        "  paper: objective and ||G|| fall monotonically; stable after ~10 iterations. Shown: the unregularized"
        " ratio, which may rise a little while F_theta falls (it falls monotonically within each theta)"
    )
    for (kind, *_), out in results["convergence"]:
        trace = " ".join(
            f"{ratio:.4f}"
            for _, ratio, _, _ in out["history"][:: max(len(out["history"]) // 12, 1)]
        )
        print(
            f"  {kind:>9}: {len(out['history']) - 1} iterations, error ratio to identity: {trace}"
        )
    for kind in args.workloads:
        rows: dict = {}
        for (k, method, _m, n, _s), out in results["n"]:
            if k == kind:
                rows.setdefault(n, {})[method] = out
        print_table(
            f"W{kind.capitalize()}: error vs n, m = 1024 (Figs. 2-5)",
            rows,
            "n",
            args.methods,
            PAPER_NOTES["n"],
        )
        rows = {}
        for (k, method, m, _n, _s), out in results["m"]:
            if k == kind:
                rows.setdefault(m, {})[method] = out
        print_table(
            f"W{kind.capitalize()}: error vs m, n = {args.n_for_m} (Figs. 6-9)",
            rows,
            "m",
            args.methods,
            PAPER_NOTES["m"],
        )
    rows = {}
    for (_k, method, _m, _n, s), out in results["s"]:
        rows.setdefault(s, {})[method] = out
    print_table(
        f"WRelated: error vs s, m = n = {args.n_for_s} (Fig. 10)",
        rows,
        "s",
        args.methods,
        PAPER_NOTES["s"],
    )
    print(
        f"\n=== time (s) of COA vs m at n = {args.n_for_time} (Figs. 11-13) ===\n  {PAPER_NOTES['time']}"
    )
    for (kind, method, m, _n, _s), out in results["time"]:
        print(f"  {kind:>9} {method:>10} m={m:>5}: {out['seconds']:7.2f} s [{out['status']}]")


if __name__ == "__main__":
    main()
