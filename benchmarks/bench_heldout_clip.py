"""Cost of scoring held-out pairs on clipped predictions (one definition of the test RMSE).

Claim: the trace's held-out RMSE, now of the predictions clipped to the training range
(`kernels.mf_squared_error_chunked` with the range), costs about what the unclipped one
((-inf, inf), the training SSE's call) costs when few predictions leave the range, as on fitted
ratings; when most do (factors far from fitted) the data-dependent branch costs more.

Both calls run on the same pairs, `--repeats` times each per factor scale; printed: the
share of predictions outside the range, best and median ms of each, the ratio of the medians and
the load average (the machine is shared).

    python benchmarks/bench_heldout_clip.py                  # 2M pairs, rank 10 (~10 s)
    python benchmarks/bench_heldout_clip.py --pairs 500000 --rank 50
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from hamsi import kernels
from hamsi.problems.base import equal_bounds
from hamsi.problems.matrix_factorization import HELDOUT_CHUNKS

LO, HI, OFFSET = 1.0, 5.0, 3.5


def timed(call, repeats: int) -> list:
    """Return the seconds of `repeats` calls (after one call that compiles or loads the kernel)."""
    call()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2_000_000)
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    m, n = 6000, 4000
    rows = rng.integers(0, m, args.pairs).astype(np.int32)
    cols = rng.integers(0, n, args.pairs).astype(np.int32)
    vals = rng.integers(1, 6, args.pairs).astype(np.float64)
    chunks = equal_bounds(args.pairs, HELDOUT_CHUNKS)
    print(
        f"{args.pairs} pairs, rank {args.rank}, range [{LO:g}, {HI:g}], {args.repeats} repeats; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'scale':>6} {'outside':>8} {'unclipped ms (best/median)':>27} {'clipped ms (best/median)':>25} "
        f"{'ratio':>6}"
    )
    for scale in (0.1, 0.3, 1.0):
        U = scale * rng.standard_normal((m, args.rank))
        V = scale * rng.standard_normal((n, args.rank))
        served = np.einsum("ij,ij->i", U[rows], V[cols]) + OFFSET
        outside = float(np.mean((served < LO) | (served > HI)))

        def sse(lo, hi):
            return lambda: kernels.mf_squared_error_chunked(
                rows, cols, vals, U, V, args.rank, OFFSET, lo, hi, chunks
            )

        plain, clipped = timed(sse(-np.inf, np.inf), args.repeats), timed(sse(LO, HI), args.repeats)
        ratio = statistics.median(clipped) / statistics.median(plain)
        print(
            f"{scale:>6g} {outside:>8.2f} {1e3 * min(plain):>13.1f} / {1e3 * statistics.median(plain):<11.1f} "
            f"{1e3 * min(clipped):>12.1f} / {1e3 * statistics.median(clipped):<10.1f} {ratio:>6.2f}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
