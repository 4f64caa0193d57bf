"""Claim: LRM's decomposition at the paper's default size (n = 1024, m = 256) and where its time goes.

For each workload: seconds to reach ||W - B L||_F <= gamma, outer (Alg. 1) and inner (Alg. 2)
iterations, the split between the B update (Eq. (9)), the L update (Alg. 2: r^2 n products and the
L1-ball projection) and the residual/multiplier step, and the error ratio to the identity under
Laplace noise. The LRM paper's complexity is O(N_in N_out (r^2 m + r^2 n)); here the r x r Gram
matrices are formed once per outer iteration and every product is BLAS-3. Goal: under
10 s at n = 1024, m = 256 on 2 cores; n = 8192 within 10 minutes (--large).

Recorded runs: docs/benchmarks.md, "LRM speed".

Run: python benchmarks/bench_queries_lrm_speed.py [--n 1024] [--m 256] [--large] [--threads 2] [--repeats 1]
     [--max-time 600] [--refine-max-time 120] [--baseline REF] [--workloads discrete range related]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def alm_line(result, identity: float, seconds: float) -> str:
    """Return seconds, iterations, ms per Alg. 2 step and Alg. 1's ratio to identity of one decomposition."""
    per_step = result.phase_seconds["L update (Alg. 2)"] / max(result.n_inner, 1)
    return (
        f"{seconds:7.2f} s  outer {result.n_outer:4d}  inner {result.n_inner:5d}  {per_step * 1e3:5.2f} ms per "
        f"Alg. 2 step  ratio to identity {result.objective / identity:.4f}  ({result.status}, "
        f"||W - B L||_F = {result.residual:.3g})"
    )


def measure(
    kind: str,
    m: int,
    n: int,
    repeats: int,
    max_time: float | None,
    refine_max_time: float | None,
    seed: int,
    baseline,
    threads: int,
) -> None:
    """Run LRM (Alg. 1, then the finish/refinement) `repeats` times on one workload; print times and phases.

    With a baseline module (--baseline REF), its low_rank_decomposition runs first on the same W and
    seed, then this code with the paper's schedule (PAPER_SCHEDULE: 10 Alg. 2 steps per B update,
    beta doubling every 10), so old code, new code with the old schedule and the new default are
    timed side by side in one run.
    """
    from dp import queries

    W = queries.make_workload(kind, m, n, random_state=seed)
    identity = float(np.sum(W**2))  # Laplace identity: sensitivity 1, R = W
    if baseline is not None:
        from dp.queries.lrm import PAPER_SCHEDULE, low_rank_decomposition

        started = time.perf_counter()
        old = baseline.low_rank_decomposition(W, max_time=max_time, random_state=seed)
        print(
            f"{kind:>9} m={m:<5} n={n:<5} baseline Alg. 1: {alm_line(old, identity, time.perf_counter() - started)}; "
            f"loadavg {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        started = time.perf_counter()
        paper = low_rank_decomposition(
            W,
            max_time=max_time,
            random_state=seed,
            threads=threads,
            max_inner=PAPER_SCHEDULE[0],
            beta_period=PAPER_SCHEDULE[1],
        )
        print(
            f"{kind:>9} m={m:<5} n={n:<5} paper schedule: {alm_line(paper, identity, time.perf_counter() - started)}; "
            f"loadavg {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    runs = [
        queries.optimize(
            W,
            "lrm",
            solver="alm",
            max_time=max_time,
            refine_max_time=refine_max_time,
            random_state=seed,
            threads=threads,
        )
        for _ in range(repeats)
    ]
    alm_seconds = sorted(r.seconds - r.info["finish_seconds"] for r in runs)
    total = sorted(r.seconds for r in runs)
    last = runs[-1]
    alm_total = alm_seconds[-1] if repeats == 1 else last.seconds - last.info["finish_seconds"]
    phases = ", ".join(
        f"{k} {v:.1f} s ({v / alm_total:.0%})" for k, v in last.info["phase_seconds"].items()
    )
    print(
        f"{kind:>9} m={m:<5} n={n:<5} r={last.info['alm_rank']:<5} Alg. 1: best {alm_seconds[0]:7.2f} s  median "
        f"{np.median(alm_seconds):7.2f} s  outer {last.info['outer']:4d}  inner {last.info['inner']:5d}  "
        f"ratio to identity {last.info['alm_objective'] / identity:.4f} (||W - B L||_F = {last.info['alm_residual']:.3g}); "
        f"loadavg {os.getloadavg()[0]:.1f}"
    )
    per_step = last.info["phase_seconds"]["L update (Alg. 2)"] / max(last.info["inner"], 1)
    print(f"{'':>9} {phases}; {per_step * 1e3:.2f} ms per Alg. 2 step")
    print(
        f"{'':>9} with finish/refinement: best {total[0]:7.2f} s  median {np.median(total):7.2f} s  "
        f"(finish {last.info['finish_seconds']:.1f} s)  ratio to identity {last.objective / identity:.4f}  "
        f"{last.status}; {last.message.split('; ')[-1]}",
        flush=True,
    )
    measure_auto(W, identity, seed, threads)


def measure_auto(W: np.ndarray, identity: float, seed: int, threads: int) -> None:
    """Run optimize(W, "lrm") with the default solver="auto" once; print its time split and the kept solver."""
    from dp import queries

    started = time.perf_counter()
    auto = queries.optimize(W, "lrm", random_state=seed, threads=threads)
    seconds = time.perf_counter() - started
    alm = auto.info.get("alm_seconds", 0.0) + auto.info.get("finish_seconds", 0.0)
    print(
        f"{'':>9} solver='auto': {seconds:7.2f} s (Alg. 1 + finish {alm:.1f} s, p-Identity sweep "
        f"{auto.info['p_identity_seconds']:.1f} s)  ratio to identity {auto.objective / identity:.4f}, kept "
        f"{auto.info['solver']} ({auto.status}); loadavg {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def sorted_projection(V: np.ndarray) -> np.ndarray:
    """The sort-based column-wise L1-ball projection this project used before (Duchi et al. Fig. 1, numpy)."""
    magnitudes = np.abs(V)
    outside = np.flatnonzero(magnitudes.sum(axis=0) > 1.0)
    out = V.copy()
    block = np.ascontiguousarray(magnitudes[:, outside].T)
    descending = -np.sort(-block, axis=1)
    sums = np.cumsum(descending, axis=1) - 1.0
    rho = np.maximum(
        np.count_nonzero(descending * np.arange(1, block.shape[1] + 1) > sums, axis=1), 1
    )
    theta = np.maximum(sums[np.arange(block.shape[0]), rho - 1] / rho, 0.0)
    out[:, outside] = np.copysign(np.maximum(block - theta[:, None], 0.0).T, V[:, outside])
    return out


def best_and_median(candidates: dict, repeats: int) -> str:
    """Return 'name best x ms median y ms' of every callable, timed interleaved (two rounds of `repeats`)."""
    timings = {}
    for name, run in list(candidates.items()) * 2:
        run()
        for _ in range(repeats):
            started = time.perf_counter()
            run()
            timings.setdefault(name, []).append(time.perf_counter() - started)
    return (
        ", ".join(
            f"{name} best {min(t) * 1e3:.2f} ms median {np.median(t) * 1e3:.2f} ms"
            for name, t in timings.items()
        )
        + f"; loadavg {os.getloadavg()[0]:.1f}"
    )


def measure_step(r: int, n: int, baseline_projection, repeats: int = 20) -> None:
    """Print the parts of one Alg. 2 step on an r x n iterate, side by side.

    The L1 projection: sort-based (numpy), the baseline's (--baseline: Condat's one-column filter), the
    blocked Michelot kernel on 1 and 2 threads; the r x r by r x n product with 1 and 2 BLAS threads;
    the whole step without the product: seven numpy passes around the projection (the loop before
    the fused kernel) vs the fused kernel.
    """
    from threadpoolctl import threadpool_limits

    from dp.queries.l1_ball import project_columns_l1, projected_gradient_step

    rng = np.random.default_rng(0)
    V = (
        rng.standard_normal((r, n)) * 0.01 - rng.standard_normal((r, n)) * 1e-3
    )  # columns of L1 norm ~2.5
    assert np.allclose(sorted_projection(V), project_columns_l1(V), atol=1e-15)
    out = np.empty_like(V)
    projections = {
        "sort-based": lambda: sorted_projection(V),
        "Michelot blocks 1 thread": lambda: project_columns_l1(V, out=out, threads=1),
        "2 threads": lambda: project_columns_l1(V, out=out, threads=2),
    }
    if baseline_projection is not None:
        projections["baseline"] = lambda: baseline_projection(V)
    print(f"L1 projection r={r} n={n}: " + best_and_median(projections, repeats))
    gram = rng.standard_normal((r, r))
    gram = gram @ gram.T
    products = {}
    for threads in (1, 2):

        def product(threads=threads):
            with threadpool_limits(threads):
                np.matmul(gram, V, out=out)

        products[f"{threads} BLAS thread{'s' if threads > 1 else ''}"] = product
    print(f"gram @ search ({r} x {r} by {r} x {n}): " + best_and_median(products, repeats))
    zeros, current, search, following = (
        np.zeros_like(V),
        np.zeros_like(V),
        V.copy(),
        np.empty_like(V),
    )

    def numpy_step():
        step = np.subtract(zeros, zeros)
        step /= 1.0
        np.subtract(search, step, out=step)
        project_columns_l1(step, out=following)
        np.linalg.norm(search - following), np.linalg.norm(following)
        np.add(following, 0.5 * (following - current), out=step)

    def fused(threads):
        search[...] = V
        projected_gradient_step(search, zeros, zeros, 1.0, current, following, 0.5, threads=threads)

    print(
        "Alg. 2 step without the product: "
        + best_and_median(
            {
                "numpy passes + projection": numpy_step,
                "fused 1 thread": lambda: fused(1),
                "fused 2 threads": lambda: fused(2),
            },
            repeats,
        )
    )


def load_baseline(ref: str):
    """Return (lrm module, l1_ball module) of git revision `ref`, imported from a temporary directory."""
    import importlib.util
    import subprocess
    import sys
    import tempfile

    folder = tempfile.mkdtemp(prefix="lrm-baseline-")
    modules = []
    for name in ("l1_ball", "lrm"):
        source = subprocess.run(
            ["git", "show", f"{ref}:dp/queries/{name}.py"],
            check=True,
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        ).stdout
        source = source.replace("from dp.queries.l1_ball import", "from baseline_l1_ball import")
        path = os.path.join(folder, f"baseline_{name}.py")
        with open(path, "w") as handle:
            handle.write(source)
        spec = importlib.util.spec_from_file_location(f"baseline_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        modules.append(module)
    return modules[1], modules[0]


def main():
    ap = argparse.ArgumentParser(description="LRM speed at the paper's default size")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--workloads", nargs="+", default=["discrete", "range", "related"])
    ap.add_argument("--large", action="store_true", help="also n = 8192 (10-minute goal)")
    ap.add_argument(
        "--threads", type=int, default=2, help="BLAS threads and threads of the fused Alg. 2 step"
    )
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument(
        "--max-time", type=float, default=600.0, help="cap on Alg. 1 per solve (seconds)"
    )
    ap.add_argument(
        "--refine-max-time", type=float, default=120.0, help="cap on the refinement (seconds)"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--baseline",
        metavar="REF",
        help="also run Alg. 1 of git revision REF side by side (e.g. main)",
    )
    args = ap.parse_args()

    from threadpoolctl import threadpool_limits

    print(
        f"LRM speed (LRM paper Alg. 1-2), gamma 0.01, r = 1.2 rank(W), {args.threads} BLAS threads; "
        f"paper: Matlab, 2.5 GHz quad-core; goal < 10 s at n = 1024, m = 256"
    )
    started = time.perf_counter()
    baseline, baseline_l1 = load_baseline(args.baseline) if args.baseline else (None, None)
    measure_step(308, args.n, None if baseline_l1 is None else baseline_l1.project_columns_l1)
    with threadpool_limits(args.threads):
        for kind in args.workloads:
            measure(
                kind,
                args.m,
                args.n,
                args.repeats,
                args.max_time,
                args.refine_max_time,
                args.seed,
                baseline,
                args.threads,
            )
        if args.large:
            for kind in args.workloads:
                measure(
                    kind,
                    args.m,
                    8192,
                    1,
                    args.max_time,
                    args.refine_max_time,
                    args.seed,
                    None,
                    args.threads,
                )
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
