"""Thesis Table 3.1 at small scale: final train RMSE after a fixed time, HAMSI and mb-GD x 5 schemes x {det, stoc}.

Runs on a local Dask cluster (default 2 workers, B = 2 blocks; K = 20 subsets for HOGWILD, COLOR,
COLOR-B as in the thesis, K = B for STRATA/-B) on ml-1m-like, rank 50, seed 1, for --seconds of
optimization time each (paper: MovieLens 1M, 16 threads, 25 s, mean of 3 seeds). Prints our
table beside the paper's 1M column, and writes the Fig. 3.5 analogue (RMSE against time, STRATA-B
det) and the Fig. 3.7 analogue (time per cycle split into gradient, update, Hessian approximation,
and the exchange among workers that the thread version does not have).

    python benchmarks/bench_table31.py [--seconds 5] [--workers 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import partition
from cluster.connect import connect
from cluster.driver import fit_distributed
from hamsi.data.synth import make_ratings

SCHEMES = ("hogwild", "color", "color-b", "strata", "strata-b")
PAPER_1M = {  # thesis Table 3.1, MovieLens 1M, 25 s, 16 threads
    ("mbgd", "det"): (3.1074, 3.1061, 3.0845, 2.5315, 2.4588),
    ("mbgd", "stoc"): (3.1433, 3.1470, 3.1003, 2.5325, 2.4650),
    ("hamsi", "det"): (0.6901, 0.6955, 0.7102, 0.6133, 0.6022),
    ("hamsi", "stoc"): (0.6900, 0.7987, 0.8017, 0.6088, 0.5994),
}
LABEL = {"mbgd": "mb-GD", "hamsi": "HAMSI"}


def plot_phases(results: dict, path: str):
    """Write the Fig. 3.7 analogue: seconds per cycle by phase, one bar per (method, scheme), det."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hamsi.atomic import atomic_output

    labels, parts = [], {"gradient": [], "update": [], "hessian": [], "exchange": []}
    for method in ("mbgd", "hamsi"):
        for scheme in SCHEMES:
            res = results[(method, "det", scheme)]
            cycles = max(res.n_cycles, 1)
            labels.append(f"{LABEL[method]}\n{scheme}")
            for key in ("gradient", "update", "hessian"):
                parts[key].append(res.phase_times[key] / cycles)
            parts["exchange"].append(res.exchange_time / cycles)
    figure, axis = plt.subplots(figsize=(10, 4))
    bottom = np.zeros(len(labels))
    for key, values in parts.items():
        axis.bar(
            labels,
            values,
            bottom=bottom,
            label=key if key != "hessian" else "Hessian approximation",
        )
        bottom += np.asarray(values)
    axis.set_ylabel("seconds per cycle (worker 0)")
    axis.set_title("time per cycle by phase (thesis Fig. 3.7 analogue), ml-1m-like, det")
    axis.legend()
    axis.tick_params(axis="x", labelsize=7)
    figure.tight_layout()
    with atomic_output(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=120)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="optimization time per run (paper: 25)"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rank", type=int, default=50)
    parser.add_argument("--data", default="ml-1m-like")
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "hamsi-bench"))
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    ratings = make_ratings(args.data, seed=1)
    partitions = {s: partition.make(s, ratings, blocks=args.workers, seed=1) for s in SCHEMES}
    results = {}
    with connect(n_workers=args.workers, threads_per_worker=1, quiet=True) as client:
        for method in ("mbgd", "hamsi"):
            for schedule in ("det", "stoc"):
                for scheme in SCHEMES:
                    results[(method, schedule, scheme)] = fit_distributed(
                        ratings,
                        rank=args.rank,
                        method=method,
                        schedule=schedule,
                        partition=partitions[scheme],
                        random_state=1,
                        max_cycles=None,
                        max_time=args.seconds,
                        client=client,
                        chunk_cycles=50,
                        safeguard=False,
                    )  # the thesis method, as the table measured it
    print(
        f"Table 3.1 rerun: final train RMSE after {args.seconds:g} s on {args.data} ({ratings.nnz} ratings), "
        f"rank {args.rank}, {args.workers} Dask workers; paper: MovieLens 1M, 25 s, 16 threads"
    )
    header = " ".join(f"{s:>17s}" for s in SCHEMES)
    print(f"{'':12s} {header}")
    print(f"{'':12s} " + " ".join(f"{'ours':>8s} {'paper':>8s}" for _ in SCHEMES))
    for method in ("mbgd", "hamsi"):
        for schedule in ("det", "stoc"):
            cells = []
            for scheme, paper in zip(SCHEMES, PAPER_1M[(method, schedule)]):
                res = results[(method, schedule, scheme)]
                cells.append(f"{res.trace.rows[-1][3]:8.4f} {paper:8.4f}")
            print(f"{LABEL[method]:6s} {schedule:5s} " + " ".join(cells))
    print(
        "cycles done: "
        + "; ".join(
            f"{LABEL[m]} {s} {sc}: {results[(m, s, sc)].n_cycles}"
            for m in ("mbgd", "hamsi")
            for s in ("det",)
            for sc in SCHEMES
        )
    )
    from hamsi.plots import plot_convergence

    convergence = os.path.join(args.out, "table31_convergence.png")
    plot_convergence(
        {
            f"{LABEL[m]} {sc}": results[(m, "det", sc)].trace
            for m in ("mbgd", "hamsi")
            for sc in ("strata-b", "hogwild")
        },
        convergence,
        title=f"{args.data}, {args.workers} Dask workers (Fig. 3.5 analogue)",
    )
    phases = os.path.join(args.out, "table31_phases.png")
    plot_phases(results, phases)
    print(f"wrote {convergence} and {phases}")


if __name__ == "__main__":
    main()
