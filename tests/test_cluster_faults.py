"""Faults of a distributed run (issue 21): a hung worker, two deaths at once, memory limits, a dead
scheduler, stale shared-memory files. Real worker processes on 127.0.0.1, always stopped."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from test_cluster_cli import dask_cluster  # noqa: F401  (the fixture: `dask scheduler` + 2 workers)

import partition
from cluster import ClusterError
from cluster.connect import connect, worker_memory_limits
from cluster.driver import fit_distributed
from hamsi.data.synth import make_ratings
from hamsi.data.writers import write_ratings

pytestmark = pytest.mark.cluster

RANK = 4


@pytest.fixture(scope="module")
def ratings():
    return make_ratings(users=200, items=150, ratings=3000, seed=5)


@pytest.mark.parametrize("owned", [None, True])
def test_a_stopped_worker_is_declared_lost_within_the_peer_timeout(ratings, owned):
    timeout = 2.0
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    options = dict(
        rank=RANK,
        partition=part,
        random_state=1,
        max_epochs=6,
        chunk_epochs=2,
        shared_memory=False,
        owned_v=owned,
    )
    with connect(n_workers=2, quiet=True) as client:
        start = time.monotonic()
        undisturbed = fit_distributed(ratings, client=client, **options)
        clean = time.monotonic() - start
        pids = client.run(os.getpid)
        stopped = []

        def stop_second_worker(info):
            if info["chunk"] == 1 and not stopped:  # after chunk 0: its snapshot is on the buddy
                stopped.append(pids[info["workers"][1]])
                os.kill(stopped[0], signal.SIGSTOP)

        try:
            start = time.monotonic()
            got = fit_distributed(
                ratings, client=client, on_chunk=stop_second_worker, peer_timeout=timeout, **options
            )
            took = time.monotonic() - start
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
    assert stopped and got.recoveries and "not answering" in got.recoveries[0]["error"]
    assert len(got.workers) == 1  # the stopped worker is not used again
    assert np.array_equal(got.x, undisturbed.x)
    # the timeout, the grace for the abort (capped by the timeout), a rerun of the chunk, slack for a busy host
    assert took < 2 * clean + 2 * timeout + 20


@pytest.mark.slow
@pytest.mark.parametrize("owned", [False, True])
def test_two_workers_killed_together_recover_from_buddies_or_name_the_lost_shards(ratings, owned):
    part = partition.make("strata-b", ratings, blocks=4, seed=1)
    options = dict(
        rank=RANK,
        partition=part,
        random_state=1,
        max_epochs=6,
        chunk_epochs=2,
        shared_memory=False,
        owned_v=owned,
    )
    with connect(n_workers=4, quiet=True) as client:
        undisturbed = fit_distributed(ratings, client=client, **options)

        def gone(addresses, timeout=30.0):
            # the scheduler has dropped the killed workers (their nannies restart them at new addresses)
            deadline = time.monotonic() + timeout
            while (
                set(addresses) & set(client.scheduler_info()["workers"])
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)

        def killer(which):
            def kill(info):
                if info["chunk"] == 1 and not kill.done:
                    pids = info["client"].run(os.getpid)
                    kill.done = True
                    killed = [info["workers"][index] for index in which]
                    for i, address in enumerate(killed):
                        time.sleep(0.3 * i)
                        os.kill(pids[address], signal.SIGKILL)
                    gone(killed)  # killed together: the driver sees both deaths at once
                    kill.killed = killed

            kill.done = False
            return kill

        # buddies are the next worker in order: 1 and 3 each keep the other's neighbours' snapshots
        first = killer([1, 3])
        recovered = fit_distributed(ratings, client=client, on_chunk=first, **options)
        assert recovered.recoveries and np.array_equal(recovered.x, undisturbed.x)
        assert (
            recovered.owned_v is undisturbed.owned_v is owned
        )  # 2 survivors with 2 shards each: still owned
        client.wait_for_workers(4, timeout=60)  # the nannies restart the killed workers
        gone(first.killed)
        # 1 and 2: the shards of worker 1 had their only snapshot on worker 2
        with pytest.raises(ClusterError) as caught:
            fit_distributed(ratings, client=client, on_chunk=killer([1, 2]), **options)
    message = str(caught.value)
    assert "\n" not in message and "shards 1 were lost" in message and "--resume" in message


def test_the_memory_check_counts_the_workers_own_memory(ratings):
    from cluster.driver import _DistributedRun
    from hamsi.problems import MatrixFactorization

    with connect(n_workers=1, memory_limit="1GiB", quiet=True) as client:
        ((address, (limit, baseline)),) = worker_memory_limits(client).items()
        assert 20 * 2**20 < baseline < limit  # a Python process with numpy and Dask loaded

        def need(rank):
            problem = MatrixFactorization(ratings, rank)
            run = _DistributedRun(
                problem,
                partition.make("strata-b", ratings, blocks=1, seed=1),
                client,
                [address],
                heldout=None,
                backup=True,
                peer_timeout=10,
                quiet=True,
                memory=5,
            )
            return run._needed_bytes([0])

        # a rank whose shards alone fit the share of the limit, but not on top of the worker's baseline
        slope = (need(40) - need(20)) / 20  # need is affine in the rank
        rank = int((0.6 * limit - baseline / 2 - (need(20) - 20 * slope)) / slope)
        assert need(rank) < 0.6 * limit < need(rank) + baseline
        with pytest.raises(ClusterError, match="uses already") as caught:
            fit_distributed(ratings, rank=rank, client=client, max_epochs=1, quiet=True)
        held = client.run(lambda dask_worker: len(dask_worker.data))
    assert "\n" not in str(caught.value) and held == {
        address: 0
    }  # refused before anything was sent


def test_a_killed_scheduler_is_one_line_naming_it(dask_cluster, tmp_path):  # noqa: F811
    import psutil

    data = tmp_path / "ratings.csv"
    write_ratings(make_ratings(users=300, items=200, ratings=6000, seed=1), data)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hamsi",
            "factorize",
            str(data),
            "--scheduler",
            dask_cluster,
            "--rank",
            "4",
            "--max-epochs",
            "1000000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(dask_cluster.rsplit(":", 1)[1])
        scheduler = next(
            p
            for p in psutil.process_iter()
            if any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in _listening(p))
        )
        seen = []
        while not any(line.startswith("epoch    2") for line in seen):  # the run is under way
            line = proc.stderr.readline()
            assert line, "".join(seen)
            seen.append(line)
        scheduler.kill()
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("epoch")]
    assert proc.returncode == 2 and len(lines) == 1, stderr
    assert "lost the connection to the Dask scheduler" in lines[0] and "--resume" in lines[0]


def test_a_worker_lost_while_receiving_data_is_one_line_and_other_failures_pass(monkeypatch):
    """A worker killed at its memory limit during placement surfaced as a KeyError traceback."""
    from types import SimpleNamespace

    from cluster import driver

    alive = {"tcp://127.0.0.1:2": {}}
    monkeypatch.setattr(driver, "_scheduler_answers", lambda client: True)
    monkeypatch.setattr(driver, "worker_info", lambda client: alive)
    client = SimpleNamespace(
        status="running", scheduler=SimpleNamespace(address="tcp://127.0.0.1:1")
    )
    error = driver.cluster_lost(
        client, KeyError("('data', 3)"), {"tcp://127.0.0.1:2", "tcp://127.0.0.1:3"}
    )
    assert isinstance(error, ClusterError) and "\n" not in str(error)
    assert "worker tcp://127.0.0.1:3 died during the run (KeyError" in str(
        error
    ) and "memory" in str(error)
    assert (
        driver.cluster_lost(client, KeyError("x"), set(alive)) is None
    )  # every worker alive: shown as it is
    assert (
        driver.cluster_lost(client, ClusterError("x"), {"tcp://127.0.0.1:3"}) is None
    )  # already one line
    monkeypatch.setattr(driver, "_scheduler_answers", lambda client: False)
    assert "lost the connection to the Dask scheduler at tcp://127.0.0.1:1" in str(
        driver.cluster_lost(client, OSError("Stream is closed\nmore"), set(alive))
    )


def _listening(process):
    try:
        return (
            process.net_connections("tcp")
            if hasattr(process, "net_connections")
            else process.connections("tcp")
        )
    except Exception:  # a process of another user, or one that just exited
        return []


def test_stale_shared_memory_of_dead_runs_is_removed_and_live_ones_kept(tmp_path):
    from cluster import shared

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    files = {
        "dead": f"hamsi-{dead.pid}-0123456789ab",
        "live": f"hamsi-{os.getpid()}-0123456789ab",
        "other": "hamsi-notapid",
        "foreign": "somebody-else",
    }
    for name in files.values():
        (tmp_path / name).write_bytes(b"x")
    removed = shared.remove_stale(str(tmp_path))
    assert removed == [str(tmp_path / files["dead"])]
    assert sorted(os.listdir(tmp_path)) == sorted(v for k, v in files.items() if k != "dead")


@pytest.mark.parametrize("stopped_by", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_or_failed_fit_leaves_no_snapshots_and_gone_runs_lose_theirs(
    ratings, stopped_by
):
    part = partition.make("strata-b", ratings, blocks=2, seed=1)

    def listing(client):
        return client.run(
            lambda dask_worker: sorted(
                n for n in os.listdir(dask_worker.local_directory) if n.startswith("hamsi-snap")
            )
        )

    with connect(n_workers=2, quiet=True) as client:
        gone = "hamsi-snapshots-Client-gone-0123456789ab"  # a driver killed before it cleaned up
        live = f"hamsi-snapshots-{client.id}-0123456789ab"  # another run of a connected client
        client.run(
            lambda dask_worker: [
                os.makedirs(os.path.join(dask_worker.local_directory, n)) for n in (gone, live)
            ]
        )
        during = []

        def stop(row):
            during.append(listing(client))
            raise stopped_by("stop")

        with pytest.raises(stopped_by):
            fit_distributed(
                ratings,
                rank=RANK,
                partition=part,
                random_state=1,
                max_epochs=6,
                chunk_epochs=2,
                client=client,
                shared_memory=False,
                callback=stop,
            )
        after = listing(client)
    assert len(during[0]) == len(after) == 2
    for names in during[
        0
    ].values():  # the run's own files beside the live run's; the gone ones went
        assert gone not in names and live in names and len(names) == 2
    assert all(names == [live] for names in after.values())
