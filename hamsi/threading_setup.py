"""Make numba's OpenMP worker threads sleep, not spin, while they wait for each other.

Imported first by `hamsi/__init__.py`, because OpenMP reads these settings once, when numba
loads its threading layer (the first parallel kernel call), and never again.

Why: numba's default layer here is "omp" (GNU OpenMP). At the end of every parallel region a
thread that finished its block spins for GOMP_SPINCOUNT = 300,000 iterations before it sleeps.
HAMSI runs several short parallel regions per inner iteration (gradient, pair products, step),
so on a machine where another process holds a core, the spinning thread burns the time slice
that the thread it waits for needs, and two threads run many times slower than one.
OMP_WAIT_POLICY=passive makes a waiting thread sleep at once (a futex wait), which
costs a wake-up of a few microseconds per region on an idle machine and removes the collapse
(benchmarks/bench_threads.py measures both). KMP_BLOCKTIME=0 is the same for Intel's OpenMP,
which numba uses when it comes from conda with intel-openmp; TBB and numba's own workqueue
layer do not spin like this.

A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins: nothing is set when either is present.
"""

from __future__ import annotations

import os

WAIT_SETTINGS = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
USER_OVERRIDES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def configure_waiting() -> dict:
    """Return the settings put into os.environ (none when the user chose a wait policy)."""
    if any(name in os.environ for name in USER_OVERRIDES):
        return {}
    applied = {}
    for name, value in WAIT_SETTINGS.items():
        if name not in os.environ:
            os.environ[name] = value
            applied[name] = value
    return applied


def threading_report() -> dict:
    """Return numba's threading layer in use (after a parallel call), its thread count and wait settings."""
    # why lazy: numba must load after this module has set its threading environment
    import numba

    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet, so no layer is loaded
        layer = "not loaded yet"
    return {
        "layer": layer,
        "threads": numba.get_num_threads(),
        **{name: os.environ.get(name, "") for name in (*WAIT_SETTINGS, "GOMP_SPINCOUNT")},
    }


configure_waiting()
