"""Bytes the workers send each other per inner iteration: V replicated vs V owned, on the message path.

Claim checked (goal): with V owned (cluster.work.OwnedFactorWork: each item shard
V_j handed along the strata to the worker that steps it next, V replicated again at each cycle's
end), the bytes per inner iteration of all workers at 4 workers are <= 1.3x those at 2, and per
worker they fall like items x rank / B. Replicated V (FactorWork: every worker receives every
peer's gV rows) is the "before" column. ml-1m-like, rank 50, STRATA-B with B = workers,
shared_memory=False, a LocalCluster of W worker processes; both runs must give the same
iterates (checked). Bytes are the frames written on the direct links (result.worker_bytes_sent),
summed over the whole run and divided by its inner iterations. More worker processes than cores
is fine for bytes; the ms per inner iteration printed beside them then mean little.

Model (cluster.work.item_rows_per_iteration; items n, width r, 8-byte floats, K = B subsets per
cycle, a pair stored each cycle): replicated (W - 1) n r 8 per inner iteration; owned
(2K - 1 + 3 (W - 1)) / (K + 1) n r 8 (V_j's x and g to its next home, g only in a cycle's first
iteration; at the cycle's end the stepped V_j and its two new pair rows to every peer); the
shard partials add a little to both.

    python benchmarks/bench_message_bytes.py [--workers 2 4 8] [--epochs 3] [--rank 50] [--dataset ml-1m-like]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import partition
from cluster.connect import connect
from cluster.driver import fit_distributed
from cluster.work import item_rows_per_iteration
from hamsi.data.synth import make_ratings

GOAL = 1.3


def modeled_bytes(workers: int, items: int, width: int, owned: bool) -> float:
    """Return the model's bytes per inner iteration of all workers (B = K = workers), partials left out."""
    return item_rows_per_iteration(workers, workers, owned) * items * width * 8


def ms_per_inner(trace) -> float:
    """Return milliseconds per inner iteration after cycle 1 (the first connections are in cycle 1)."""
    time_s, inner = trace.column("time_s"), trace.column("inner")
    return 1e3 * (time_s[-1] - time_s[1]) / (inner[-1] - inner[1])


def measure(ratings, workers: int, rank: int, epochs: int) -> dict:
    """Return bytes and ms per inner iteration of the replicated and owned runs on `workers` processes."""
    part = partition.make("strata-b", ratings, blocks=workers, seed=1)
    out = {"workers": workers}
    with connect(n_workers=workers, threads_per_worker=1, quiet=True) as client:
        for owned in (False, True):
            result = fit_distributed(
                ratings,
                rank=rank,
                partition=part,
                client=client,
                random_state=1,
                max_cycles=epochs,
                chunk_cycles=epochs,
                shared_memory=False,
                owned_v=owned,
            )
            assert result.owned_v is owned and not result.shared_memory
            total = sum(result.worker_bytes_sent.values()) / result.nit
            out["owned" if owned else "replicated"] = {
                "all": total,
                "per_worker": total / workers,
                "ms": ms_per_inner(result.trace),
                "x": result.x,
            }
    out["same"] = bool(np.array_equal(out["owned"].pop("x"), out["replicated"].pop("x")))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rank", type=int, default=50)
    parser.add_argument("--dataset", default="ml-1m-like")
    args = parser.parse_args(argv)
    ratings = make_ratings(args.dataset, seed=1)
    items, width = ratings.shape[1], args.rank
    print(f"load average before: {os.getloadavg()}; {os.cpu_count()} cores")
    rows = [measure(ratings, w, args.rank, args.epochs) for w in args.workers]
    print(
        f"{args.dataset} ({ratings.nnz} ratings, {items} items), rank {args.rank}, STRATA-B B = workers, "
        f"{args.epochs} cycles, shared_memory=False; load average after: {os.getloadavg()}"
    )
    print("MB per inner iteration (model in brackets), ms per inner iteration after cycle 1")
    print(
        f"{'workers':>7s} | {'replicated: all':>22s} {'per worker':>10s} {'ms':>7s} | "
        f"{'owned: all':>22s} {'per worker':>10s} {'ms':>7s} | {'same iterates':>13s}"
    )
    for r in rows:
        rep, own, w = r["replicated"], r["owned"], r["workers"]
        print(
            f"{w:7d} | {rep['all'] / 1e6:9.3f} ({modeled_bytes(w, items, width, False) / 1e6:9.3f}) "
            f"{rep['per_worker'] / 1e6:10.3f} {rep['ms']:7.1f} | "
            f"{own['all'] / 1e6:9.3f} ({modeled_bytes(w, items, width, True) / 1e6:9.3f}) "
            f"{own['per_worker'] / 1e6:10.3f} {own['ms']:7.1f} | {str(r['same']):>13s}"
        )
    by_workers = {r["workers"]: r for r in rows}
    if 2 in by_workers:
        base = by_workers[2]
        for w in sorted(set(by_workers) - {2}):
            replicated = by_workers[w]["replicated"]["all"] / base["replicated"]["all"]
            owned = by_workers[w]["owned"]["all"] / base["owned"]["all"]
            print(f"all workers, {w} / 2 workers: replicated {replicated:.2f}x, owned {owned:.2f}x")
        if 4 in by_workers:
            ratio = by_workers[4]["owned"]["all"] / base["owned"]["all"]
            print(
                f"goal: owned bytes at 4 workers <= {GOAL}x those at 2: {'met' if ratio <= GOAL else 'NOT met'} "
                f"({ratio:.2f}x)"
            )
    if not all(r["same"] for r in rows):
        raise SystemExit("owned and replicated runs gave different iterates")


if __name__ == "__main__":
    main()
