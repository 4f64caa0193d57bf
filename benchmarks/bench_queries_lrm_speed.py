"""Claim: LRM's decomposition at the paper's default size (n = 1024, m = 256) and where its time goes.

For each workload: seconds to reach ||W - B L||_F <= gamma, outer (Alg. 1) and inner (Alg. 2)
iterations, the split between the B update (Eq. (9)), the L update (Alg. 2: r^2 n products and the
L1-ball projection) and the residual/multiplier step, and the error ratio to the identity under
Laplace noise. Seed 001's complexity is O(N_in N_out (r^2 m + r^2 n)); here the r x r Gram
matrices are formed once per outer iteration and every product is BLAS-3. Goal (issue 14): under
10 s at n = 1024, m = 256 on 2 cores; n = 8192 within 10 minutes (--large).

Measured (--threads 1 --workloads discrete --max-time 150, loadavg 1.0, after the revival, the
sort-free projection and the refinement): 27.9 s, 154 outer / 1,540 inner iterations at 15.2 ms, 84 %
in Alg. 2 of which 35 % in the L1 projection; ratio to identity 0.8925 (r = 308 < n: the refinement
cannot act). --threads 2 --max-time 100 (loadavg 1.8-2.8): WDiscrete 38.1 s, WRange 96.4 s (beta
limit, ratio 0.561), WRelated 28.7 s (9.9 x identity: identity fallback). Projection side by side
(r = 308, n = 1024, loadavg 0.6): sort-based 21.9 ms best, sort-free 5.7 ms. Before this change:
50 s at loadavg 1.5, 28.7 ms per step, 66 % in the projection, ratio 1.085. Goal not met.

Run: python benchmarks/bench_queries_lrm_speed.py [--n 1024] [--m 256] [--large] [--threads 2] [--repeats 1]
     [--max-time 600] [--refine-max-time 120]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def measure(kind: str, m: int, n: int, repeats: int, max_time: float | None, refine_max_time: float | None,
            seed: int) -> None:
    """Run LRM (Alg. 1, then the finish/refinement) `repeats` times on one workload; print times and phases."""
    from dp import queries

    W = queries.make_workload(kind, m, n, random_state=seed)
    identity = float(np.sum(W**2))  # Laplace identity: sensitivity 1, R = W
    runs = [queries.optimize(W, "lrm", max_time=max_time, refine_max_time=refine_max_time, random_state=seed)
            for _ in range(repeats)]
    alm_seconds = sorted(r.seconds - r.info["finish_seconds"] for r in runs)
    total = sorted(r.seconds for r in runs)
    last = runs[-1]
    alm_total = alm_seconds[-1] if repeats == 1 else last.seconds - last.info["finish_seconds"]
    phases = ", ".join(f"{k} {v:.1f} s ({v / alm_total:.0%})" for k, v in last.info["phase_seconds"].items())
    print(f"{kind:>9} m={m:<5} n={n:<5} r={last.info['alm_rank']:<5} Alg. 1: best {alm_seconds[0]:7.2f} s  median "
          f"{np.median(alm_seconds):7.2f} s  outer {last.info['outer']:4d}  inner {last.info['inner']:5d}  "
          f"ratio to identity {last.info['alm_objective'] / identity:.4f} (||W - B L||_F = {last.info['alm_residual']:.3g}); "
          f"loadavg {os.getloadavg()[0]:.1f}")
    per_step = last.info["phase_seconds"]["L update (Alg. 2)"] / max(last.info["inner"], 1)
    print(f"{'':>9} {phases}; {per_step * 1e3:.1f} ms per Alg. 2 step")
    print(f"{'':>9} with finish/refinement: best {total[0]:7.2f} s  median {np.median(total):7.2f} s  "
          f"(finish {last.info['finish_seconds']:.1f} s)  ratio to identity {last.objective / identity:.4f}  "
          f"{last.status}; {last.message.split('; ')[-1]}")


def sorted_projection(V: np.ndarray) -> np.ndarray:
    """The sort-based column-wise L1-ball projection this project used before (Duchi et al. Fig. 1, numpy)."""
    magnitudes = np.abs(V)
    outside = np.flatnonzero(magnitudes.sum(axis=0) > 1.0)
    out = V.copy()
    block = np.ascontiguousarray(magnitudes[:, outside].T)
    descending = -np.sort(-block, axis=1)
    sums = np.cumsum(descending, axis=1) - 1.0
    rho = np.maximum(np.count_nonzero(descending * np.arange(1, block.shape[1] + 1) > sums, axis=1), 1)
    theta = np.maximum(sums[np.arange(block.shape[0]), rho - 1] / rho, 0.0)
    out[:, outside] = np.copysign(np.maximum(block - theta[:, None], 0.0).T, V[:, outside])
    return out


def measure_projection(r: int, n: int, repeats: int = 20) -> None:
    """Print the L1-ball projection of an r x n Alg. 2 iterate: sort-based vs sort-free, side by side."""
    from dp.queries.l1_ball import project_columns_l1

    rng = np.random.default_rng(0)
    V = rng.standard_normal((r, n)) * 0.01 - rng.standard_normal((r, n)) * 1e-3  # columns of L1 norm ~2.5
    assert np.allclose(sorted_projection(V), project_columns_l1(V), atol=1e-15)
    timings = {}
    for name, project in (("sort-based", sorted_projection), ("sort-free (numba)", project_columns_l1)) * 2:
        project(V)
        for _ in range(repeats):
            started = time.perf_counter()
            project(V)
            timings.setdefault(name, []).append(time.perf_counter() - started)
    print(f"L1 projection r={r} n={n}: " + ", ".join(
        f"{name} best {min(t) * 1e3:.2f} ms median {np.median(t) * 1e3:.2f} ms" for name, t in timings.items())
        + f"; loadavg {os.getloadavg()[0]:.1f}")


def main():
    ap = argparse.ArgumentParser(description="LRM speed at the paper's default size")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--workloads", nargs="+", default=["discrete", "range", "related"])
    ap.add_argument("--large", action="store_true", help="also n = 8192 (10-minute goal)")
    ap.add_argument("--threads", type=int, default=2, help="BLAS threads")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--max-time", type=float, default=600.0, help="cap on Alg. 1 per solve (seconds)")
    ap.add_argument("--refine-max-time", type=float, default=120.0, help="cap on the refinement (seconds)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    from threadpoolctl import threadpool_limits

    print(f"LRM speed (seed 001 Alg. 1-2), gamma 0.01, r = 1.2 rank(W), {args.threads} BLAS threads; "
          f"paper: Matlab, 2.5 GHz quad-core; goal < 10 s at n = 1024, m = 256")
    started = time.perf_counter()
    with threadpool_limits(args.threads):
        measure_projection(308, args.n)
        for kind in args.workloads:
            measure(kind, args.m, args.n, args.repeats, args.max_time, args.refine_max_time, args.seed)
        if args.large:
            for kind in args.workloads:
                measure(kind, args.m, 8192, 1, args.max_time, args.refine_max_time, args.seed)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
