"""Claim: reproduce the Low-Rank Mechanism's experiments (LRM paper, Figs. 2-9) under epsilon-DP.

Average squared error ||W x - answer||^2 of LRM and its baselines, all with Laplace noise from the
exact discrete sampler: LM (Laplace on W x, "workload"), NOD (Laplace on the counts, "identity"),
WM (Haar wavelet), HM (binary tree), AMM (App. B: the L2-optimal strategy paid with L1
sensitivity; only in Figs. 4-6, as the paper drops it afterwards). Each grid cell (workload,
size, method) is one Dask task on a LocalCluster at 127.0.0.1; a cell optimizes the strategy,
prints the closed-form error (LRM: with its data-dependent bias ||(W - B L) x||^2) and the mean
of --reps private releases (paper: 20).

Data: the paper's Search Logs / Net Trace / Social Network histograms are not reachable here;
every cell uses a synthetic power-law histogram of 100,000 records (dp.queries.power_law_histogram),
the same for every method. The figures are plots without printed values; the paper's claims are
printed beside ours.

Defaults use reduced sizes (m = 64, n = 256; n up to 512, m up to 256): all 77 cells take a few
minutes on 2 cores (one figure, e.g. --figures 9, less); --paper runs the paper's grid (n up to
8192, m = 256 at n = 1024, s = 0.5 min(m, n)): hours.

Run: python benchmarks/bench_queries_lrm.py [--figures 2 3 4 5 6 7 8 9] [--paper] [--reps 20] [--workers 2]
     [--solver alm|auto]
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

WORKLOADS = ("discrete", "range", "related")
BASELINES = ("workload", "identity", "wavelet", "hierarchical")
LABELS = {
    "lrm": "LRM",
    "workload": "LM",
    "identity": "NOD",
    "wavelet": "WM",
    "hierarchical": "HM",
    "amm": "AMM",
}
PAPER_CLAIMS = {
    "2": "paper Fig. 2: error flat in gamma from 1e-4 to 10 on all three workloads; larger gamma runs faster",
    "3": "paper Fig. 3: r < rank(W) up to 100x worse; stable from r = 1.2 rank(W); time grows with r",
    "4": "paper Fig. 4 (WDiscrete): LM best at small n; LRM's error stops growing beyond n = 512, all others grow",
    "5": "paper Fig. 5 (WRange): WM, HM below LM from n = 512; LRM best; AMM worst everywhere",
    "6": "paper Fig. 6 (WRelated): LRM best everywhere, > 100x ahead at n = 8192",
    "7": "paper Fig. 7 (WRange vs m): LRM best for m << n; all converge as m grows; WM best at m = 1024",
    "8": "paper Fig. 8 (WRelated vs m): LRM far ahead for every m",
    "9": "paper Fig. 9 (WRelated vs s): LRM > 100x ahead at small s, its error grows with s, others flat",
}


def grid(args) -> list[dict]:
    """Return the cells of the chosen figures: one dict per (figure, workload, x value)."""
    n0, m0 = (1024, 256) if args.paper else (256, 64)
    n_values = [128, 256, 512, 1024, 2048, 4096, 8192] if args.paper else [64, 128, 256, 512]
    m_values = [64, 128, 256, 512, 1024] if args.paper else [16, 32, 64, 128, 256]
    cells = []
    for figure in args.figures:
        cells += figure_cells(figure, n0, m0, n_values, m_values)
    return cells


def figure_cells(figure: str, n0: int, m0: int, n_values: list, m_values: list) -> list[dict]:
    """Return one figure's cells: 2-3 over gamma / the rank factor, 4-6 over n, 7-8 over m, 9 over s."""
    if figure in ("2", "3"):
        values = (
            [1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0]
            if figure == "2"
            else [0.8, 1.0, 1.2, 1.4, 1.7, 2.1, 2.5, 3.0, 3.6]
        )
        return [
            dict(figure=figure, kind=kind, m=m0, n=n0, x=v, methods=("lrm",))
            for kind in WORKLOADS
            for v in values
        ]
    if figure in ("4", "5", "6"):
        kind = WORKLOADS[int(figure) - 4]
        return [
            dict(figure=figure, kind=kind, m=m0, n=n, x=n, methods=("lrm", *BASELINES, "amm"))
            for n in n_values
        ]
    if figure in ("7", "8"):
        kind = "range" if figure == "7" else "related"
        return [
            dict(figure=figure, kind=kind, m=m, n=n0, x=m, methods=("lrm", *BASELINES))
            for m in m_values
            if m <= n0
        ]
    if figure == "9":
        return [
            dict(figure=figure, kind="related", m=m0, n=n0, x=f, methods=("lrm", *BASELINES))
            for f in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
        ]
    return []


def run_cell(cell: dict, epsilons: list[float], reps: int, seed: int, lrm_options: dict) -> dict:
    """Optimize every method of one cell and return its errors (closed form and Monte-Carlo) and times."""
    from threadpoolctl import threadpool_limits

    from dp import queries

    with threadpool_limits(1):  # one BLAS thread per worker process: 2 workers fill the 2 cores
        m, n = cell["m"], cell["n"]
        s = None
        if cell["kind"] == "related":
            s = (
                max(1, round(cell["x"] * min(m, n)))
                if cell["figure"] == "9"
                else max(1, min(m, n) // 2)
            )
        extra = {"s": s} if s is not None else {}
        W = queries.make_workload(cell["kind"], m, n, random_state=seed, **extra)
        x = queries.power_law_histogram(n, random_state=seed + 1)
        out = {}
        for method in cell["methods"]:
            options = {"noise": "laplace"} if method in BASELINES else {}
            if method == "lrm":
                options = dict(lrm_options)
                if cell["figure"] in ("2", "3"):
                    options["solver"] = "alm"
                if cell["figure"] == "2":
                    options["gamma"] = cell["x"]
                if cell["figure"] == "3":
                    options["rank"] = max(1, math.ceil(cell["x"] * np.linalg.matrix_rank(W)))
            started = time.perf_counter()
            strategy = queries.optimize(W, method, **options)
            seconds = time.perf_counter() - started
            rng = np.random.default_rng(seed + 2)
            empirical = [
                float(
                    np.sum(
                        (queries.answer(W, x, strategy, 0.1, random_state=rng).values - W @ x) ** 2
                    )
                )
                for _ in range(reps)
            ]
            out[method] = {
                "expected": {
                    eps: queries.expected_error(W, strategy, eps, x=x) for eps in epsilons
                },
                "empirical": float(np.mean(empirical)),
                "stderr": float(np.std(empirical, ddof=1) / np.sqrt(reps))
                if reps > 1
                else float("nan"),
                "seconds": seconds,
                "status": strategy.status,
                "rank": strategy.matrix.shape[0],
                "residual": strategy.info.get("residual", 0.0),
            }
    return {"cell": cell, "results": out}


def print_sweep(figure: str, rows: list[dict], epsilons: list[float]) -> None:
    """Print Fig. 2/3: LRM error at each epsilon and time per (workload, gamma or r factor)."""
    name = "gamma" if figure == "2" else "r/rank(W)"
    print(
        f"\n=== Fig. {figure}: LRM vs {name} (m={rows[0]['cell']['m']}, n={rows[0]['cell']['n']}) ==="
    )
    print(PAPER_CLAIMS[figure])
    eps_cols = "".join(f"{f'err eps={e:g}':>15}" for e in epsilons)
    print(
        f"{'workload':>9} {name:>10} {'r':>5}{eps_cols}{'empirical(0.1)':>16}{'||W-BL||_F':>12}{'time s':>8}  status"
    )
    for row in rows:
        r = row["results"]["lrm"]
        errs = "".join(f"{r['expected'][e]:>15.4g}" for e in epsilons)
        print(
            f"{row['cell']['kind']:>9} {row['cell']['x']:>10g} {r['rank']:>5}{errs}{r['empirical']:>16.4g}"
            f"{r['residual']:>12.3g}{r['seconds']:>8.2f}  {r['status']}"
        )


def print_comparison(figure: str, rows: list[dict]) -> None:
    """Print Figs. 4-9: expected (empirical) error at eps = 0.1 per method, LRM time and ratio."""
    cell = rows[0]["cell"]
    axis = {"4": "n", "5": "n", "6": "n", "7": "m", "8": "m", "9": "s/min(m,n)"}[figure]
    print(
        f"\n=== Fig. {figure}: {cell['kind']} vs {axis}, eps = 0.1 (expected error; Monte-Carlo mean below) ==="
    )
    print(PAPER_CLAIMS[figure])
    methods = list(rows[0]["results"])
    print(
        f"{axis:>11}"
        + "".join(f"{LABELS[mt]:>12}" for mt in methods)
        + f"{'LRM s':>8}{'LRM/best other':>16}"
    )
    for row in rows:
        res = row["results"]
        best_other = min(res[mt]["expected"][0.1] for mt in methods if mt != "lrm")
        print(
            f"{row['cell']['x']:>11g}"
            + "".join(f"{res[mt]['expected'][0.1]:>12.4g}" for mt in methods)
            + f"{res['lrm']['seconds']:>8.2f}{res['lrm']['expected'][0.1] / best_other:>16.3g}"
        )
        print(f"{'(MC)':>11}" + "".join(f"{res[mt]['empirical']:>12.4g}" for mt in methods))


def main():
    ap = argparse.ArgumentParser(description="Reproduce the LRM paper's Figs. 2-9 (LRM)")
    ap.add_argument("--figures", nargs="+", default=["2", "3", "4", "5", "6", "7", "8", "9"])
    ap.add_argument(
        "--paper", action="store_true", help="the paper's sizes (n = 1024, m = 256, n up to 8192)"
    )
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lrm-max-time", type=float, default=None, help="cap each LRM solve (seconds)")
    ap.add_argument(
        "--solver",
        choices=["alm", "auto"],
        default="alm",
        help="LRM's solver: alm (default: the paper's Alg. 1, with our finish) or auto (the library's "
        "default, p-Identity search beside it); Figs. 2-3 sweep Alg. 1's gamma and r: always alm",
    )
    args = ap.parse_args()
    epsilons = [1.0, 0.1, 0.01]
    lrm_options = {"max_time": args.lrm_max_time} if args.lrm_max_time else {}
    lrm_options["solver"] = args.solver

    from distributed import Client, LocalCluster

    cells = grid(args)
    started = time.perf_counter()
    cluster = LocalCluster(
        n_workers=args.workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",
    )
    client = Client(cluster)
    try:
        # the biggest cells first, so the slowest task does not start last
        order = sorted(range(len(cells)), key=lambda i: -cells[i]["m"] * cells[i]["n"])
        futures = {
            i: client.submit(
                run_cell, cells[i], epsilons, args.reps, args.seed, lrm_options, pure=False
            )
            for i in order
        }
        rows = [futures[i].result() for i in range(len(cells))]
    finally:
        client.close()
        cluster.close()
    print(
        f"LRM paper reproduction: {len(cells)} cells as Dask tasks on {args.workers} workers, "
        f"{time.perf_counter() - started:.0f} s wall, loadavg {os.getloadavg()[0]:.1f}; "
        f"{'paper sizes' if args.paper else 'reduced sizes (--paper for the full grid)'}; "
        f"power-law synthetic histogram (real data unreachable); {args.reps} releases per cell"
    )
    for figure in args.figures:
        mine = [row for row in rows if row["cell"]["figure"] == figure]
        if figure in ("2", "3"):
            print_sweep(figure, mine, epsilons)
        else:
            print_comparison(figure, mine)


if __name__ == "__main__":
    main()
