"""Time of the exact noise samplers (dp.laplace_mechanism, dp.gaussian_mechanism) per released value.

The mechanisms draw discrete Laplace / Gaussian noise on a grid from secure random bits (CKS 2020),
not numpy's floating-point samplers (open to floating-point attacks). Their price is time: this
prints microseconds per value, medians of alternating repeats, for the upper triangle of a 200 x 200
covariance (20,100 values; the private covariance's release) and for 10^6 values, beside numpy's
rng.laplace / rng.normal on the same sizes (not usable for privacy; a scale for the figures).

    python benchmarks/bench_noise.py               # 5 repeats
    python benchmarks/bench_noise.py --repeats 11
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import dp

SIZES = {"200 x 200 upper triangle": 200 * 201 // 2, "1e6 values": 10**6}


def samplers(values: np.ndarray, rng: np.random.Generator) -> dict:
    """Return name -> a call releasing `values` with noise (sensitivity 1, eps 1, delta 1e-5)."""
    return {
        "laplace_mechanism": lambda: dp.laplace_mechanism(values, 1.0, 1.0),
        "gaussian_mechanism": lambda: dp.gaussian_mechanism(values, 1.0, 1.0, 1e-5),
        "numpy rng.laplace": lambda: values + rng.laplace(0.0, 1.0, values.size),
        "numpy rng.normal": lambda: values + rng.normal(0.0, 4.0, values.size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    rng = np.random.default_rng(0)
    for label, size in SIZES.items():
        values = rng.random(size) / 100
        calls = samplers(values, rng)
        for call in calls.values():  # warm-up (imports, first allocations)
            call()
        seconds = {name: [] for name in calls}
        for _ in range(args.repeats):  # alternating: each repeat runs every sampler once
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                seconds[name].append(time.perf_counter() - start)
        print(f"{label} ({size} values), median of {args.repeats}:")
        for name, times in seconds.items():
            median = float(np.median(times))
            print(
                f"  {name:20s} {median * 1e3:9.2f} ms  {median / size * 1e6:7.3f} us per value"
                f"  (range {min(times) * 1e3:.2f}-{max(times) * 1e3:.2f} ms)"
            )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
