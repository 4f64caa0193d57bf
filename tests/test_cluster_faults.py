"""Faults of a distributed run: a hung worker, two deaths at once, memory limits, a dead
scheduler, stale shared-memory files. Real worker processes on 127.0.0.1, always stopped."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

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
        max_cycles=6,
        chunk_cycles=2,
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
        max_cycles=6,
        chunk_cycles=2,
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
    from cluster.layout import layout_for
    from cluster.placed import Placement
    from hamsi.problems import MatrixFactorization

    with connect(n_workers=1, memory_limit="1GiB", quiet=True) as client:
        ((address, (limit, baseline)),) = worker_memory_limits(client).items()
        assert 20 * 2**20 < baseline < limit  # a Python process with numpy and Dask loaded

        def need(rank):
            problem = MatrixFactorization(ratings, rank)
            cover = partition.make("strata-b", ratings, blocks=1, seed=1)
            problem.arrange(cover)
            layout = layout_for(problem, cover, problem.shard_bounds(cover), None)
            placed = Placement(client, problem, layout, 5, shared_memory=None, owned_v=None)
            return placed.needed_bytes([0])

        # a rank whose shards alone fit the share of the limit, but not on top of the worker's baseline
        slope = (need(40) - need(20)) / 20  # need is affine in the rank
        rank = int((0.6 * limit - baseline / 2 - (need(20) - 20 * slope)) / slope)
        assert need(rank) < 0.6 * limit < need(rank) + baseline
        with pytest.raises(ClusterError, match="uses already") as caught:
            fit_distributed(ratings, rank=rank, client=client, max_cycles=1, quiet=True)
        held = client.run(lambda dask_worker: len(dask_worker.data))
    assert "\n" not in str(caught.value) and held == {
        address: 0
    }  # refused before anything was sent


def test_a_killed_scheduler_is_one_line_naming_it(dask_cluster, tmp_path):
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
            "--max-cycles",
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
        while not any(line.startswith("cycle    2") for line in seen):  # the run is under way
            line = proc.stderr.readline()
            assert line, "".join(seen)
            seen.append(line)
        scheduler.kill()
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("cycle")]
    assert proc.returncode == 2 and len(lines) == 1, stderr
    assert "lost the connection to the Dask scheduler" in lines[0] and "--resume" in lines[0]


def test_a_worker_lost_while_receiving_data_is_one_line_and_other_failures_pass(monkeypatch):
    """A worker killed at its memory limit during placement surfaced as a KeyError traceback."""
    from types import SimpleNamespace

    from cluster import recovery

    alive = {"tcp://127.0.0.1:2": {}}
    monkeypatch.setattr(recovery, "_scheduler_answers", lambda client: True)
    monkeypatch.setattr(recovery, "worker_info", lambda client: alive)
    client = SimpleNamespace(
        status="running", scheduler=SimpleNamespace(address="tcp://127.0.0.1:1")
    )
    error = recovery.cluster_lost(
        client, KeyError("('data', 3)"), {"tcp://127.0.0.1:2", "tcp://127.0.0.1:3"}
    )
    assert isinstance(error, ClusterError) and "\n" not in str(error)
    assert "worker tcp://127.0.0.1:3 died during the run (KeyError" in str(
        error
    ) and "memory" in str(error)
    assert (
        recovery.cluster_lost(client, KeyError("x"), set(alive)) is None
    )  # every worker alive: shown as it is
    assert (
        recovery.cluster_lost(client, ClusterError("x"), {"tcp://127.0.0.1:3"}) is None
    )  # already one line
    monkeypatch.setattr(recovery, "_scheduler_answers", lambda client: False)
    assert "lost the connection to the Dask scheduler at tcp://127.0.0.1:1" in str(
        recovery.cluster_lost(client, OSError("Stream is closed\nmore"), set(alive))
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
                max_cycles=6,
                chunk_cycles=2,
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


def _links_open(dask_worker):
    """True while a chunk of this worker has its links open (its rounds run)."""
    from cluster.mailbox import _BOXES

    return bool(_BOXES[dask_worker.address].links._runs)


def test_a_stopped_worker_does_not_count_against_max_time(ratings):
    import threading

    max_time, pause = 6.0, 8.0
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    with connect(n_workers=2, quiet=True) as client:
        pids = client.run(os.getpid)
        stops = []

        def stop_in_the_rounds(info):
            victim = info["workers"][1]

            def stop():
                deadline = time.monotonic() + 60
                while not client.run(_links_open, workers=[victim])[victim]:
                    assert time.monotonic() < deadline, "the chunk's rounds never began"
                    time.sleep(0.05)
                time.sleep(0.5)
                os.kill(pids[victim], signal.SIGSTOP)
                try:
                    stops.append(time.monotonic())
                    time.sleep(pause)
                finally:
                    os.kill(pids[victim], signal.SIGCONT)

            if not stops:
                stops.append(threading.Thread(target=stop, daemon=True))
                stops[0].start()

        started = time.monotonic()
        got = fit_distributed(
            ratings,
            rank=RANK,
            partition=part,
            random_state=1,
            max_cycles=10**6,
            max_time=max_time,
            chunk_cycles=10**6,
            client=client,
            shared_memory=False,
            on_chunk=stop_in_the_rounds,
            peer_timeout=60.0,
        )
        wall = time.monotonic() - started
        stops[0].join(pause + 5)
    assert len(stops) == 2 and not got.recoveries
    assert got.reason == "time_limit"
    # the stop is measured and not counted: the fit optimized for max_time besides it
    assert pause - 1 < got.phase_times["stalled"] < pause + 1
    assert max_time <= got.time < max_time + 2 and got.trace.rows[-1][2] < max_time + 2
    assert wall > pause + max_time


def test_a_chunk_the_driver_aborts_ends_without_a_task_error_and_is_never_read(ratings):
    """Ctrl-C aborts the chunk on every worker: their tasks return, so no worker logs "Compute Failed".

    The abort here comes from outside the driver, which then finds the chunk finished: the aborted
    results are refused (summarize) and the chunk is rerun, to the undisturbed factors.
    """
    import threading

    from cluster.mailbox import abort_run

    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    options = dict(rank=RANK, partition=part, random_state=1, max_cycles=300, chunk_cycles=150)
    with connect(n_workers=2, quiet=True) as client:
        ended = []

        def abort_in_the_rounds(info):
            if ended:
                return
            futures = dict(info["futures"])
            key = next(iter(futures.values())).key  # hamsi-chunk-<run>-<worker index>
            run_id = key.rsplit("-", 1)[0].removeprefix("hamsi-chunk-")

            def abort():
                deadline = time.monotonic() + 60
                while not all(client.run(_links_open).values()):
                    assert time.monotonic() < deadline, "the chunk's rounds never began"
                    time.sleep(0.02)
                client.run(abort_run, run_id)
                while any(f.status == "pending" for f in futures.values()):
                    assert time.monotonic() < deadline + 60, "the aborted tasks did not end"
                    time.sleep(0.02)
                ended.extend(
                    (f.status, f.result()["reason"] if f.status == "finished" else None)
                    for f in futures.values()
                )

            ended.append(threading.Thread(target=abort, daemon=True))
            ended[0].start()

        got = fit_distributed(
            ratings, client=client, shared_memory=False, on_chunk=abort_in_the_rounds, **options
        )
        ended[0].join(60)
        undisturbed = fit_distributed(ratings, client=client, shared_memory=False, **options)
    assert ended[1:] == [("finished", "aborted by the driver")] * 2
    assert len(got.recoveries) == 1 and "aborted by the driver" in got.recoveries[0]["error"]
    np.testing.assert_array_equal(got.x, undisturbed.x)


INTERRUPTED_GATHER = """
import os, signal, sys, threading, time
from cluster.connect import connect

def slow(x):
    time.sleep(3)
    return x

if __name__ == "__main__":
    with connect(n_workers=2, quiet=True) as client:
        futures = [client.submit(slow, i, pure=False) for i in range(4)]
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            client.gather(futures)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
        for future in futures:
            future.cancel()
        del futures
        time.sleep(1.0)
"""


def test_an_interrupted_gather_prints_no_dask_traceback(tmp_path):
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED_GATHER)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert done.stderr.strip() == "interrupted"


def test_ctrl_c_during_a_fit_prints_one_line(tmp_path):
    data = tmp_path / "ratings.csv"
    write_ratings(make_ratings(users=943, items=1682, ratings=20_000, seed=1), data)
    command = [sys.executable, "-m", "hamsi", "factorize", str(data), "--workers", "2"]
    command += ["--rank", "10", "--reg", "0.05", "--max-cycles", "100000"]
    fit = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    try:
        lines = []
        while not any(line.startswith("cycle") for line in lines[-1:]):
            lines.append(fit.stderr.readline())
            assert lines[-1], "the fit ended before its first cycle"
        time.sleep(1.5)
        fit.send_signal(signal.SIGINT)
        lines += fit.stderr.read().splitlines()
        assert fit.wait(60) == 130
    finally:
        if fit.poll() is None:  # it should have ended: let it close its cluster, then make sure
            fit.terminate()
            try:
                fit.wait(30)
            except subprocess.TimeoutExpired:
                fit.kill()
                fit.wait()
    said = [
        line.strip()
        for line in lines
        if line.strip() and not line.startswith(("cycle", "hamsi: local Dask cluster"))
    ]
    assert said == ["hamsi: interrupted"]
