"""Time and memory of refusing a zip-bomb model file, beside loading a real model of the same file size.

Claim (a model file of a few MB can declare gigabytes of arrays): a model whose
user_factors declare GIGABYTES of deflated zeros is refused from its zip and npy headers alone, in
milliseconds and without allocating the array; a genuine model is read as before.

Prints, for each declared size: the file size on disk, the seconds and the peak traced allocation
(tracemalloc, which numpy reports to) of `hamsi.model_io.read_model`, and the refusal message; then
the same for a genuine model. The machine is shared: the load average is printed with the figures.

    python benchmarks/bench_model_bomb.py                 # 0.5 and 2 GB declared (~15 s to build)
    python benchmarks/bench_model_bomb.py --gigabytes 6   # the size of the report
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import tracemalloc
import zipfile

import numpy as np

from hamsi import MatrixFactorizer
from hamsi.data.synth import make_ratings
from hamsi.errors import InputError
from hamsi.model_io import read_model


def genuine_model(folder: str) -> str:
    """Return the path of a small fitted model (ml-100k-like shape cut to 2000 ratings)."""
    ratings = make_ratings(users=200, items=300, ratings=2000, rank=3, seed=0)
    model = MatrixFactorizer(rank=3, max_cycles=3, threads=1, random_state=0).fit(ratings)
    path = os.path.join(folder, "model.npz")
    model.save(path)
    return path


def bomb(genuine: str, path: str, gigabytes: float) -> None:
    """Write `genuine` with user_factors replaced by `gigabytes` of deflated float64 zeros."""
    with np.load(genuine, allow_pickle=False) as npz:
        contents = {name: npz[name] for name in npz.files}
    rows = int(gigabytes * 2**30 / 8 / 3)
    with zipfile.ZipFile(path, "w") as archive:
        for name, value in contents.items():
            if name != "user_factors":
                with archive.open(f"{name}.npy", "w") as member:
                    np.lib.format.write_array(member, value, allow_pickle=False)
        info = zipfile.ZipInfo("user_factors.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(
                member, {"descr": "<f8", "fortran_order": False, "shape": (rows, 3)}
            )
            chunk, left = bytes(1 << 24), rows * 3 * 8
            while left:
                member.write(chunk[: min(left, len(chunk))])
                left -= min(left, len(chunk))


def measure(path: str) -> tuple[float, float, str]:
    """Return (seconds, peak traced MB, outcome) of read_model(path)."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        read_model(path)
        outcome = "loaded"
    except InputError as exc:
        outcome = f"refused: {str(exc)[len(path) + 2 :][:90]}"
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gigabytes",
        type=float,
        nargs="+",
        default=[0.5, 2.0],
        help="declared size of the bomb's user_factors",
    )
    args = parser.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}"
    )
    print(f"{'file':>22} {'on disk':>10} {'declared':>10} {'seconds':>9} {'peak MB':>8}  outcome")
    with tempfile.TemporaryDirectory() as folder:
        genuine = genuine_model(folder)
        for gigabytes in args.gigabytes:
            path = os.path.join(folder, f"bomb-{gigabytes:g}GB.npz")
            bomb(genuine, path, gigabytes)
            seconds, peak, outcome = measure(path)
            print(
                f"{os.path.basename(path):>22} {os.path.getsize(path) / 2**20:>8.2f}MB {gigabytes:>8.2f}GB "
                f"{seconds:>9.4f} {peak:>8.2f}  {outcome}"
            )
        seconds, peak, outcome = measure(genuine)
        print(
            f"{'genuine model.npz':>22} {os.path.getsize(genuine) / 2**20:>8.2f}MB {'-':>10} {seconds:>9.4f} "
            f"{peak:>8.2f}  {outcome}"
        )
    print(
        f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}"
    )


if __name__ == "__main__":
    main()
