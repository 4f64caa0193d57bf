"""A new install's first fit, in several processes at once on a busy machine, never fails.

numba's on-disk cache is shared by the processes of a host; partition.jit makes each kernel compile
(load, or compile and save) in one process at a time. HAMSI_COLD_START_ROUNDS sets the rounds of
the stress test (default 1, to stay within CI's time on 2 cores; the full check is 10).
"""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from hamsi.data.synth import make_ratings
from hamsi.data.writers import write_ratings

ROUNDS = int(os.environ.get("HAMSI_COLD_START_ROUNDS", "1"))
PROCESSES = 4
BURNERS = 2


def test_a_process_waits_while_another_holds_a_kernels_compile_lock(tmp_path):
    import fcntl

    (tmp_path / "kernel.py").write_text(
        textwrap.dedent(
            """
            from partition.jit import cached_njit


            @cached_njit
            def double(x):
                return 2 * x
            """
        )
    )
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    env.pop("NUMBA_CACHE_DIR", None)  # the cache beside kernel.py, in tmp_path/__pycache__
    with open(cache / "double-5.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import kernel; print('ready', flush=True); print(kernel.double(21))",
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout.readline() == "ready\n"  # numba imported; the call compiles
            time.sleep(2.0)
            assert child.poll() is None  # waiting for the lock: nothing loaded, compiled or saved
            assert not list(cache.glob("*.nbi"))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    out, _ = child.communicate(timeout=300)
    assert child.returncode == 0 and out.strip() == "42"
    assert len(list(cache.glob("kernel.double-5.*.nbi"))) == 1


@pytest.mark.slow
@pytest.mark.timeout(600 * ROUNDS)
def test_first_fits_from_an_empty_cache_in_four_processes_on_a_busy_machine_never_fail(tmp_path):
    data = tmp_path / "ratings.csv"
    write_ratings(make_ratings(users=30, items=40, ratings=400, rank=3, seed=2), data)
    fit = [sys.executable, "-m", "hamsi", "factorize", str(data), "--workers", "0"]
    fit += ["--rank", "2", "--blocks", "2", "--threads", "1", "--max-cycles", "3", "-q"]
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(BURNERS)]
    failures = []
    try:
        for r in range(ROUNDS):
            env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / f"numba-{r}"))
            runs = [
                subprocess.Popen(
                    fit + ["--out", str(tmp_path / f"model-{r}-{p}.npz")],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for p in range(PROCESSES)
            ]
            for p, run in enumerate(runs):
                _, err = run.communicate(timeout=600)
                if run.returncode != 0 or "Traceback" in err:
                    failures.append(f"round {r}, process {p}: exit {run.returncode}: {err[-2000:]}")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert not failures, "\n".join(failures)
    assert len(list(tmp_path.glob("model-*.npz"))) == ROUNDS * PROCESSES
