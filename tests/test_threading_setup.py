"""OpenMP wait policy set before numba loads its threading layer (hamsi.threading_setup)."""

import json
import os
import subprocess
import sys

from hamsi import threading_setup


def test_passive_waits_unless_the_user_chose(monkeypatch):
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"):
        monkeypatch.delenv(name, raising=False)
    assert threading_setup.configure_waiting() == {
        "OMP_WAIT_POLICY": "PASSIVE",
        "KMP_BLOCKTIME": "0",
    }
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.delenv("KMP_BLOCKTIME")
    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    assert threading_setup.configure_waiting() == {}
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    assert threading_setup.configure_waiting() == {}


def test_importing_hamsi_sets_it_before_the_first_parallel_kernel():
    code = (
        "import os, json\n"
        "os.environ.pop('OMP_WAIT_POLICY', None); os.environ.pop('GOMP_SPINCOUNT', None)\n"
        "import numpy as np\n"
        "from hamsi import kernels\n"
        "from hamsi.threading_setup import threading_report\n"
        "kernels.sharded_fill_zero(np.ones(4), np.array([0, 2, 4], dtype=np.int64))\n"
        "print(json.dumps(threading_report()))\n"
    )
    env_free = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
    }
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env_free
    ).stdout
    report = json.loads(output.strip().splitlines()[-1])
    assert report["OMP_WAIT_POLICY"] == "PASSIVE"
    assert report["layer"] in ("omp", "tbb", "workqueue")
