"""Time and peak memory of generating, writing and loading 1M (and optionally 20M) ratings.

Each case runs in a fresh subprocess so that its peak resident memory (ru_maxrss) is its own;
the baseline of an interpreter with numpy/pandas/pyarrow imported is printed for reference.

    python benchmarks/bench_data.py            # ml-1m-like cases
    python benchmarks/bench_data.py --large    # also ml-20m-like (about a minute, ~3 GB disk free in TMPDIR)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CASE_SCRIPT = r"""
import json, resource, sys, time
import numpy, pandas, pyarrow.csv  # imported before timing: part of the baseline
action, preset, path = sys.argv[1:4]
start = time.perf_counter()
if action == "baseline":
    count = 0
elif action == "generate":
    from hamsi.data.synth import make_ratings
    count = make_ratings(preset, seed=0).nnz
elif action == "generate+write":
    from hamsi.data.synth import make_ratings
    from hamsi.data.writers import write_ratings
    ratings = make_ratings(preset, seed=0)
    write_ratings(ratings, path)
    count = ratings.nnz
else:
    from hamsi.data.readers import load_ratings
    count = load_ratings(path).nnz
seconds = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_mib": peak_kib / 1024, "ratings": count}))
"""


def run_case(action: str, preset: str, path: str) -> dict:
    """Return {"seconds", "peak_mib", "ratings"} measured in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", CASE_SCRIPT, action, preset, path],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="include the ml-20m-like cases")
    args = parser.parse_args()
    presets = ["ml-1m-like"] + (["ml-20m-like"] if args.large else [])
    baseline = run_case("baseline", "", "")
    print(f"baseline interpreter (numpy, pandas, pyarrow imported): {baseline['peak_mib']:.0f} MiB")
    print(f"{'preset':<12} {'case':<22} {'ratings':>12} {'seconds':>9} {'peak MiB':>9}")
    with tempfile.TemporaryDirectory() as folder:
        for preset in presets:
            files = {suffix: str(Path(folder) / f"{preset}{suffix}") for suffix in (".csv", ".dat")}
            cases = [("generate", "", ".csv")]
            cases += [("generate+write", files[s], s) for s in files]
            cases += [("load", files[s], s) for s in files]
            for action, path, suffix in cases:
                result = run_case(action, preset, path)
                label = action if action == "generate" else f"{action} {suffix}"
                size = (
                    f" ({Path(path).stat().st_size / 2**20:.0f} MiB file)"
                    if action == "load"
                    else ""
                )
                print(
                    f"{preset:<12} {label:<22} {result['ratings']:>12,} {result['seconds']:>9.2f} "
                    f"{result['peak_mib']:>9.0f}{size}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
