"""`hamsi factorize --scheduler` against a real cluster: `dask scheduler` + two `dask worker` processes."""

import csv
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import free_port, real_cluster

from hamsi.data.synth import make_ratings
from hamsi.data.writers import write_ratings

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """One `dask scheduler` + two `dask worker` processes for the module's tests that leave them running."""
    yield from real_cluster(tmp_path_factory.mktemp("cluster"), 2)


def test_factorize_on_an_existing_cluster(dask_cluster, tmp_path):
    data = tmp_path / "ratings.csv"
    write_ratings(make_ratings(users=943, items=1682, ratings=20_000, seed=1), data)
    trace = tmp_path / "trace.csv"
    checkpoint = tmp_path / "ckpt"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hamsi",
            "factorize",
            str(data),
            "--scheduler",
            dask_cluster,
            "--rank",
            "10",
            "--max-cycles",
            "6",
            "--trace",
            str(trace),
            "--checkpoint",
            str(checkpoint),
            "--checkpoint-every",
            "3",
            "--init-scale",
            "1",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "ran the 6 cycles the search chose" in done.stdout
    with open(trace) as handle:
        rows = list(csv.DictReader(handle))
    rmse = [float(row["train_rmse"]) for row in rows]
    # HAMSI's first quasi-Newton cycles may wobble (the in-process engine does the same); the trend falls
    # (from the reference's N(0, 1) start, --init-scale 1: the default start is already the biases' fit)
    assert len(rmse) == 7 and rmse[1] < rmse[0] and rmse[-1] < 0.75 * rmse[0]
    assert (checkpoint / "state.npz").exists()

    # --resume continues from cycle 6 on the same cluster; its trace repeats the first 6 cycles bit for bit
    resumed_trace = tmp_path / "resumed.csv"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hamsi",
            "factorize",
            str(data),
            "--scheduler",
            dask_cluster,
            "--rank",
            "10",
            "--max-cycles",
            "8",
            "--trace",
            str(resumed_trace),
            "--resume",
            str(checkpoint),
            "--init-scale",
            "1",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with open(resumed_trace) as handle:
        resumed = list(csv.DictReader(handle))
    assert [r["train_rmse"] for r in resumed[:7]] == [r["train_rmse"] for r in rows]
    assert [int(r["cycle"]) for r in resumed] == list(range(9))


def test_unreachable_scheduler_exits_with_a_clear_message(tmp_path):
    data = tmp_path / "ratings.csv"
    write_ratings(make_ratings(users=50, items=40, ratings=500, seed=1), data)
    port = free_port()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hamsi",
            "factorize",
            str(data),
            "--rank",
            "2",
            "--scheduler",
            f"tcp://127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}" in done.stderr


def test_scheduler_without_port_is_one_line(tmp_path):
    data = tmp_path / "ratings.csv"
    write_ratings(make_ratings(users=50, items=40, ratings=500, seed=1), data)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hamsi",
            "factorize",
            str(data),
            "--rank",
            "2",
            "--scheduler",
            "tcp://127.0.0.1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "has no port" in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr


def test_ctrl_c_prints_one_line_exits_130_and_stops_the_workers(tmp_path):
    data = tmp_path / "ratings.csv"
    write_ratings(make_ratings(users=943, items=1682, ratings=20_000, seed=1), data)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hamsi",
            "factorize",
            str(data),
            "--rank",
            "10",
            "--workers",
            "2",
            "--max-cycles",
            "1000000",
            "--reg",  # every value given: no search, whose refit could end before the signal lands
            "7.9",
            "--reg-weighting",
            "uniform",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=dict(os.environ, PYTHONFAULTHANDLER="1"),  # SIGABRT prints every thread's stack
        # as in a terminal: a shell's background job (a CI runner's `&`) starts with SIGINT ignored,
        # which the child would inherit, and Python then never raises KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        seen = []
        while not any(line.startswith("cycle    2") for line in seen):  # the run is under way
            line = proc.stderr.readline()
            assert line, "".join(seen)
            seen.append(line)
        children = [
            int(pid)
            for pid in subprocess.run(
                ["pgrep", "-P", str(proc.pid), "-f", "spawn_main"], capture_output=True, text=True
            ).stdout.split()
        ]
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # say where it stayed: the stacks faulthandler prints
            os.kill(proc.pid, signal.SIGABRT)
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"still running 120 s after SIGINT; its stderr ends:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130
    # one message line and no traceback or worker log; a blank line was seen once in a full-suite run
    # under load (never reproduced alone, source unknown) and is not what this test is about
    rest = [line for line in err.splitlines() if line.strip() and not line.startswith("cycle")]
    assert rest == ["hamsi: interrupted"], err[-2000:]
    assert len(children) == 2
    time.sleep(0.5)
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_real_cluster_gives_the_in_process_iterates(dask_cluster):
    """On `dask scheduler` + `dask worker` processes: MF (V shared, and sent) and least squares, bitwise."""
    import numpy as np
    from helpers import block_least_squares, least_squares_cover

    import partition
    from cluster.connect import connect
    from cluster.driver import fit_distributed
    from cluster.driver import minimize_hamsi as dask_minimize_hamsi
    from hamsi.optimizer import minimize_hamsi
    from hamsi.problems import MatrixFactorization, SparseLeastSquares

    ratings = make_ratings(users=300, items=400, ratings=6000, seed=4)
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    ref = minimize_hamsi(
        MatrixFactorization(ratings, 5), part, random_state=1, max_cycles=6, threads=2
    )
    A, b = block_least_squares()
    cover = least_squares_cover(A)
    ls_ref = minimize_hamsi(
        SparseLeastSquares(A, b), cover, random_state=0, max_cycles=20, threads=1
    )
    with connect(scheduler=dask_cluster, quiet=True) as client:
        client.wait_for_workers(2, timeout=60)
        for shared in (None, False):
            got = fit_distributed(
                ratings,
                rank=5,
                partition=part,
                client=client,
                random_state=1,
                max_cycles=6,
                chunk_cycles=3,
                shared_memory=shared,
            )
            assert got.shared_memory is (shared is None) and len(got.workers) == 2
            np.testing.assert_array_equal(got.x, ref.x)
        ls = dask_minimize_hamsi(
            SparseLeastSquares(A, b), cover, client=client, random_state=0, max_cycles=20
        )
        np.testing.assert_array_equal(ls.x, ls_ref.x)


def test_real_cluster_owned_v_gives_the_in_process_iterates(dask_cluster4):
    """On `dask scheduler` + 4 `dask worker` processes: V owned on the message path, B = 2, 3, 4 workers."""
    import numpy as np

    import partition
    from cluster.connect import connect
    from cluster.driver import fit_distributed
    from hamsi.optimizer import minimize_hamsi
    from hamsi.problems import MatrixFactorization

    ratings = make_ratings(users=300, items=400, ratings=6000, seed=4)
    with connect(scheduler=dask_cluster4, quiet=True) as client:
        client.wait_for_workers(4, timeout=60)
        # memory 2: quasi-Newton steps within the few cycles (before the plain method diverges on these data)
        for blocks, schedule, safeguard, epochs in (
            (2, "det", True, 4),
            (3, "stoc", False, 4),
            (4, "det", False, 3),
        ):
            part = partition.make("strata-b", ratings, blocks=blocks, seed=1)
            options = dict(
                random_state=1, max_cycles=epochs, schedule=schedule, safeguard=safeguard, memory=2
            )
            ref = minimize_hamsi(MatrixFactorization(ratings, 5), part, threads=2, **options)
            got = fit_distributed(
                ratings,
                rank=5,
                partition=part,
                client=client,
                chunk_cycles=3,
                shared_memory=False,
                owned_v=True,
                **options,
            )
            assert (
                got.owned_v
                and len(got.workers) == blocks
                and got.pairs_accepted == ref.pairs_accepted >= 2
            )
            np.testing.assert_array_equal(got.x, ref.x)


@pytest.mark.parametrize(
    "flags,expected",
    [
        ([], (None, None)),
        (["--no-shared-memory", "--owned-v"], (False, True)),
        (["--shared-memory", "--no-owned-v"], (True, False)),
    ],
)
def test_factorize_flags_choose_where_v_lives(flags, expected):
    """--[no-]shared-memory and --[no-]owned-v reach DaskMatrixFactorizer (None: the engine chooses)."""
    from cluster.cli import estimator_for
    from hamsi.cli import build_parser

    args = build_parser().parse_args(["factorize", "ratings.csv", *flags])
    model = estimator_for(args, {})
    assert (model.shared_memory, model.owned_v) == expected
    options = model._engine_options()
    assert (options["shared_memory"], options["owned_v"]) == expected
