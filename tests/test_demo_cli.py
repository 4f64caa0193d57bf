"""`hamsi demo`: the README's main job, on the embedded sample, in-process and on a local Dask cluster."""

import csv
import os
import stat

import numpy as np
import pytest

from hamsi.cli import main


def read_trace(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_demo_in_process_writes_outputs_and_learns(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--workers", "0", "--max-cycles", "20", "--out-dir", str(out)]) == 0
    rows = read_trace(out / "trace.csv")
    cycles = len(rows) - 1  # what the search chose on validation, at most --max-cycles
    assert 10 <= cycles <= 20 and [int(r["cycle"]) for r in rows] == list(range(cycles + 1))
    train = [float(r["train_rmse"]) for r in rows]
    test = [float(r["test_rmse"]) for r in rows]
    # The default start is the biases' penalized least-squares fit (below the ratings' sd, 1.13)
    # plus the spectral start (hamsi.spectral_start); the refit's cycles must improve on it.
    assert train[0] < 1.0 and train[-1] < 0.92 * train[0] and test[-1] < test[0] - 0.015
    factors = np.load(out / "factors.npz")
    assert factors["user_factors"].shape == (943, 10) and factors["item_factors"].shape == (
        1682,
        10,
    )
    assert (out / "convergence.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Outputs get the permissions a plain open() would give, not mkstemp's owner-only 0600.
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((out / "trace.csv").stat().st_mode) == 0o666 & ~umask
    assert "wrote" in capsys.readouterr().out


@pytest.mark.cluster
def test_demo_on_local_dask_cluster_matches_in_process(tmp_path, capsys):
    """STRATA-B blocks on Dask workers give the same iterates as the in-process engine."""
    args = ["demo", "--max-cycles", "4", "--max-time", "600"]
    assert main(args + ["--workers", "0", "--out-dir", str(tmp_path / "local")]) == 0
    assert main(args + ["--workers", "2", "--out-dir", str(tmp_path / "dask")]) == 0
    assert "local Dask cluster, 2 workers" in capsys.readouterr().err
    local = np.load(tmp_path / "local" / "factors.npz")
    dask = np.load(tmp_path / "dask" / "factors.npz")
    np.testing.assert_allclose(dask["user_factors"], local["user_factors"], rtol=1e-10, atol=1e-12)


def test_demo_fails_cleanly_when_out_dir_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    assert main(["demo", "--workers", "0", "--out-dir", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert "taken" in err and "Traceback" not in err
