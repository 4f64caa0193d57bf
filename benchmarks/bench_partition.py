"""Benchmark: partitioner speed and peak memory on power-law data (goals in the docstring).

Targets: STRATA-B on 20M ratings < 5 s; COLOR and COLOR-B on 1M ratings < 10 s; peak extra memory
< 3x the rating arrays. Each run happens in a fresh subprocess that loads the saved index arrays,
compiles the kernels on a tiny input, then measures wall time and the growth of ru_maxrss.
The thesis reports no timings; its balance figures (Fig. 3.4, MovieLens 100K, B = 4: STRATA
blocks 6624/3492/2449/13585, STRATA-B 6395/6232/6204/6183) are printed beside ours.

    python benchmarks/bench_partition.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD = r"""
import json, resource, sys, time
import numpy as np
import partition
from partition.testing import CoordinateRatings, random_ratings

rows = np.load(sys.argv[1], mmap_mode=None); cols = np.load(sys.argv[2])
shape = tuple(json.loads(sys.argv[3])); scheme = sys.argv[4]; blocks = int(sys.argv[5])
partition.make(scheme, random_ratings(30, 30, 200), blocks=2, subsets=None if scheme.startswith("strata") else 4)
import threading
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
high_water = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
# ru_maxrss alone can hide make()'s peak behind an earlier one, so also sample the resident size
sampled, running = [resident()], True
def sample():
    while running:
        sampled.append(resident()); time.sleep(0.002)
baseline, high_before = resident(), high_water()
sampler = threading.Thread(target=sample); sampler.start()
started = time.perf_counter()
result = partition.make(scheme, CoordinateRatings(rows, cols, shape), blocks=blocks)
seconds = time.perf_counter() - started
running = False; sampler.join()
peak = max(max(sampled), high_water() if high_water() > high_before else 0)
stats = result.stats()
print(json.dumps({"seconds": seconds, "extra_bytes": peak - baseline,
                  "imbalance": stats["imbalance"], "largest_color": stats.get("largest_color"),
                  "n_colors": stats.get("n_colors"), "first_blocks": stats["block_sizes"][0][:4]}))
"""


def measure(workdir, ratings, scheme, blocks):
    """Return the child's measurements of one partitioning run."""
    rows_path, cols_path = os.path.join(workdir, "rows.npy"), os.path.join(workdir, "cols.npy")
    np.save(rows_path, ratings.rows)
    np.save(cols_path, ratings.cols)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            rows_path,
            cols_path,
            json.dumps(list(ratings.shape)),
            scheme,
            str(blocks),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller inputs (a smoke run)")
    args = parser.parse_args()
    from partition.testing import power_law_ratings

    scale = 10 if args.quick else 1
    cases = [  # (label, shape, nnz, schemes, target seconds)
        ("ML-100K-like", (943, 1682), 100_000, ["strata", "strata-b"], None),
        ("ML-1M-like", (6040, 3706), 1_000_000 // scale, ["color", "color-b", "hogwild"], 10.0),
        (
            "20M, Netflix-shaped",
            (240_000, 18_000),
            20_000_000 // scale,
            ["strata", "strata-b"],
            5.0,
        ),
    ]
    print(
        f"{'data':<22} {'ratings':>10} {'scheme':<9} {'seconds':>8} {'target':>7} {'mem/arrays':>10} "
        f"{'imbalance':>9}  notes"
    )
    with tempfile.TemporaryDirectory() as workdir:
        for label, shape, nnz, schemes, target in cases:
            started = time.perf_counter()
            ratings = power_law_ratings(*shape, nnz, seed=1)
            made = time.perf_counter() - started
            array_bytes = ratings.rows.nbytes + ratings.cols.nbytes
            for scheme in schemes:
                r = measure(workdir, ratings, scheme, blocks=4)
                notes = f"first subset {r['first_blocks']}"
                if r["n_colors"]:
                    notes = f"{r['n_colors']} colors, largest set {r['largest_color']}"
                if label.startswith("ML-100K") and scheme == "strata":
                    notes += "   thesis: [6624, 3492, 2449, 13585]"
                if label.startswith("ML-100K") and scheme == "strata-b":
                    notes += "   thesis: [6395, 6232, 6204, 6183]"
                goal = f"<{target:g}" if target else "-"
                print(
                    f"{label:<22} {ratings.rows.size:>10} {scheme:<9} {r['seconds']:>8.2f} {goal:>7} "
                    f"{r['extra_bytes'] / array_bytes:>10.2f} {r['imbalance']:>9.3f}  {notes}",
                    flush=True,
                )
            print(
                f"{'':<22} (data generated in {made:.1f} s; mem/arrays = peak RSS during make() minus RSS before, "
                f"over the bytes of rows+cols int32; the int64 result alone is 1.0)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
