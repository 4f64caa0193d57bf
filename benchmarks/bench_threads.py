"""In-process engine, 1 vs 2 threads, with and without a busy process on the machine.

Claim: with numba's OpenMP threads waiting passively (hamsi/threading_setup.py, the default),
the 2-thread time of the in-process engine stays within 1.5x of its 1-thread time while another
process keeps a core busy; with OpenMP's default spinning (GOMP_SPINCOUNT = 300,000, what ran
before) it collapses (many times the 1-thread time).

Each wait setting runs in its own child process, because OpenMP reads it once, when numba loads
the threading layer. A child times `--cycles` HAMSI cycles (optimization time of the trace,
evaluation excluded) with 1 and 2 threads, alternating, `--repeats` times, first alone and then
beside `python -c "while True: pass"`, which it starts and kills. Printed: best and median
seconds, the ratio 2 threads / 1 thread of the medians, the threading layer in use and the
load average (this machine is shared, so "alone" means without our busy process).

    python benchmarks/bench_threads.py                 # ml-100k-like, rank 10, 20 cycles, 5 repeats (~1 min)
    python benchmarks/bench_threads.py --repeats 9 --rank 50
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

WAIT_SETTINGS = {
    # a user's GOMP_SPINCOUNT keeps hamsi from setting anything: libgomp's own default then runs
    "spin (OpenMP default)": {"GOMP_SPINCOUNT": "300000"},
    "passive (hamsi default)": {},
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="ml-100k-like", help="synthetic preset")
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def child(args) -> dict:
    """Return {"alone"/"busy": {threads: [seconds, ...]}, "layer": ...} measured in this process."""
    import partition
    from hamsi.data.synth import make_ratings
    from hamsi.optimizer import minimize_hamsi
    from hamsi.problems import MatrixFactorization
    from hamsi.threading_setup import threading_report

    ratings = make_ratings(args.data, seed=1)
    cover = partition.make("strata-b", ratings, blocks=2, seed=0)

    def seconds(threads: int, cycles: int) -> float:
        problem = MatrixFactorization(
            ratings, args.rank, reg=0.1, biases=True, reg_weighting="count", init_scale=0.1
        )
        result = minimize_hamsi(problem, cover, random_state=0, max_cycles=cycles, threads=threads)
        return float(result.trace.rows[-1][2])

    seconds(2, 2)  # compile / load the cache and start the threading layer
    times = {}
    for situation in ("alone", "busy"):
        busy = (
            subprocess.Popen([sys.executable, "-c", "while True: pass"])
            if situation == "busy"
            else None
        )
        try:
            if busy is not None:
                time.sleep(0.5)
            runs = {1: [], 2: []}
            for _ in range(args.repeats):
                for threads in (1, 2):
                    runs[threads].append(seconds(threads, args.cycles))
            times[situation] = {"runs": runs, "load": os.getloadavg()}
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
    return {"times": times, "report": threading_report()}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    print(
        f"{args.data}, rank {args.rank}, {args.cycles} cycles, {args.repeats} repeats; "
        f"{os.cpu_count()} cores; load average {os.getloadavg()}"
    )
    command = [
        sys.executable,
        __file__,
        "--child",
        "--data",
        args.data,
        "--rank",
        str(args.rank),
        "--cycles",
        str(args.cycles),
        "--repeats",
        str(args.repeats),
    ]
    for name, settings in WAIT_SETTINGS.items():
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
        }
        env.update(settings)
        output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        measured = json.loads(output.strip().splitlines()[-1])
        report = measured["report"]
        print(
            f"\n{name}: layer {report['layer']}, OMP_WAIT_POLICY={report['OMP_WAIT_POLICY'] or '-'}, "
            f"GOMP_SPINCOUNT={report['GOMP_SPINCOUNT'] or '-'}"
        )
        for situation, data in measured["times"].items():
            runs = {int(k): v for k, v in data["runs"].items()}
            medians = {t: statistics.median(v) for t, v in runs.items()}
            cells = "  ".join(
                f"{t} thread{'s' if t > 1 else ''}: best {min(runs[t]):.3f} s, "
                f"median {medians[t]:.3f} s"
                for t in (1, 2)
            )
            print(
                f"  {situation:5s} {cells}  ratio 2/1 {medians[2] / medians[1]:.2f}x "
                f"(goal <= 1.5x when busy)  load {tuple(round(v, 2) for v in data['load'])}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
