"""Memory and time of refusing a checkpoint with a zip-bomb member, beside checking a genuine one.

Claim: a state.npz carrying an extra member of GIGABYTES of deflated zeros is refused from its zip
and npy headers (cluster.checkpoint.check: the model loader's limits), without inflating it: the
peak traced allocation stays far below 100 MB.

Prints, for a genuine checkpoint and for the same with a bomb member: the file size, the seconds and
the traced peak (tracemalloc, which numpy reports to) of the check, and its outcome.

    python benchmarks/bench_checkpoint_bomb.py                  # 3 GB declared (~10 s to build)
    python benchmarks/bench_checkpoint_bomb.py --gigabytes 1
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc
import zipfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from helpers import checkpoint_state  # noqa: E402  (the tests' builder of a driver run state)

from cluster import checkpoint as ckpt  # noqa: E402
from hamsi.errors import InputError  # noqa: E402


def add_bomb(directory: str, gigabytes: float) -> str:
    """Append to DIR/state.npz a member declaring `gigabytes` GB of float64 zeros, deflated."""
    path = os.path.join(directory, ckpt.FILENAME)
    left = int(gigabytes * 2**30)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("extra.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(
                member, {"descr": "<f8", "fortran_order": False, "shape": (left // 8,)}
            )
            chunk = bytes(1 << 24)
            while left:
                member.write(chunk[: min(left, len(chunk))])
                left -= min(left, len(chunk))
    return path


def measure(directory: str) -> str:
    """Return one line: seconds and traced peak of ckpt.check(directory), and its outcome."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        ckpt.check(directory)
        outcome = "accepted"
    except InputError as exc:
        outcome = f"refused: {exc}"
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return f"{seconds:.3f} s, traced peak {peak / 2**20:.2f} MB: {outcome}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=3.0)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as folder:
        genuine = os.path.join(folder, "genuine")
        ckpt.save(genuine, **checkpoint_state(n=200_000, memory=5))
        size = os.path.getsize(os.path.join(genuine, ckpt.FILENAME))
        print(f"genuine ({size / 2**20:.1f} MB): {measure(genuine)}")
        bombed = os.path.join(folder, "bombed")
        ckpt.save(bombed, **checkpoint_state(n=200_000, memory=5))
        path = add_bomb(bombed, args.gigabytes)
        size = os.path.getsize(path)
        print(
            f"with {args.gigabytes:g} GB of zeros declared ({size / 2**20:.1f} MB): {measure(bombed)}"
        )


if __name__ == "__main__":
    main()
