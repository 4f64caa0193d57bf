"""Unit tests of the cluster pieces that need no running cluster: placement, checkpoints, stop rules."""

import os
import sys
import time

import numpy as np
import pytest
from helpers import checkpoint_state

import partition
from cluster import checkpoint as ckpt
from cluster.placement import assign_shards, assign_v_homes, split_by_row_shard, touched_items
from hamsi.data.synth import make_ratings
from hamsi.errors import InputError
from hamsi.problems import MatrixFactorization
from hamsi.stop_rules import StopRules


@pytest.fixture(scope="module")
def ratings():
    return make_ratings(users=120, items=80, ratings=1500, seed=2)


@pytest.mark.parametrize("scheme", ["strata-b", "hogwild", "color"])
def test_every_rating_lands_once_on_its_row_shard_in_engine_order(ratings, scheme):
    part = partition.make(
        scheme, ratings, blocks=3, subsets=4 if scheme != "strata-b" else None, seed=0
    )
    problem = MatrixFactorization(ratings, 3)
    layout = problem.arrange(part)
    bounds = problem.shard_bounds(part)
    row_bounds = bounds[: len(bounds) // 2 + 1] // problem.width
    datas = split_by_row_shard(problem, row_bounds)
    for k in range(layout.n_subsets):
        lo, hi = layout.starts[k][0], layout.ends[k][-1]
        engine = list(zip(problem.rows[lo:hi], problem.cols[lo:hi]))
        ours = [(int(r) + d.row_lo, int(c)) for d in datas for r, c in zip(d.rows[k], d.cols[k])]
        assert sorted(ours) == sorted(engine)
        for d in datas:  # the shard's ratings keep the engine's relative order
            mine = [(int(r) + d.row_lo, int(c)) for r, c in zip(d.rows[k], d.cols[k])]
            assert mine == [e for e in engine if d.row_lo <= e[0] < d.row_hi]
            assert np.all((d.rows[k] >= 0) & (d.rows[k] < d.row_hi - d.row_lo))


def test_v_homes_exist_exactly_for_strata(ratings):
    for scheme, expect_homes in (("strata", True), ("hogwild", False)):
        part = partition.make(
            scheme, ratings, blocks=2, subsets=4 if scheme == "hogwild" else None, seed=0
        )
        problem = MatrixFactorization(ratings, 3)
        problem.arrange(part)
        bounds = problem.shard_bounds(part)
        row_bounds = bounds[:3] // 3
        col_bounds = np.concatenate([[0], bounds[3:] // 3 - ratings.shape[0]])
        datas = split_by_row_shard(problem, row_bounds)
        assign_v_homes(datas, col_bounds)
        homes = [d.v_home[k] for d in datas for k in range(part.n_subsets)]
        assert all(h >= 0 for h in homes) if expect_homes else all(h < 0 for h in homes)
        if expect_homes:  # block (p, (p + k) mod B) of subset k makes shard p the home of V_(p+k)
            assert [d.v_home for d in datas] == [[0, 1], [1, 0]]
            assert datas[0].touched[0] == (0, int(col_bounds[1]))


def test_touched_items_dense_range_or_indices():
    assert touched_items(np.array([3, 4, 6, 5], dtype=np.int32)) == (3, 7)
    assert np.array_equal(touched_items(np.array([1, 90, 50], dtype=np.int32)), [1, 50, 90])
    assert touched_items(np.zeros(0, dtype=np.int32)) == (0, 0)


def test_assign_shards_contiguous_balanced_and_total():
    workers = ["a", "b", "c"]
    assert assign_shards(3, workers) == {0: "a", 1: "b", 2: "c"}
    owner = assign_shards(6, workers[:2], sizes=[5, 1, 1, 1, 1, 1])
    assert [owner[p] for p in range(6)] == ["a", "b", "b", "b", "b", "b"]  # 5 ratings each
    owner = assign_shards(2, workers)  # more workers than shards: the extra ones host nothing
    assert sorted(set(owner.values())) == ["a", "b"]
    for n_shards in range(2, 9):
        owner = assign_shards(n_shards, workers, sizes=np.arange(1, n_shards + 1))
        hosts = [owner[p] for p in range(n_shards)]
        assert hosts == sorted(hosts) and set(hosts) == set(workers[: min(3, n_shards)])


def test_checkpoint_round_trip_keeps_every_bit_and_refuses_other_runs(tmp_path):
    state = checkpoint_state(n=7, memory=2)
    memory = state["meta"]["stepper"].lbfgs
    ckpt.save(tmp_path, **state)
    assert os.listdir(tmp_path) == ["state.npz"]  # the temp file was renamed into place
    fingerprint = state["fingerprint"]
    back, back_meta = ckpt.load(tmp_path, fingerprint)
    for key in ("x", "S", "Y"):
        assert np.array_equal(back[key], state["arrays"][key])
    assert back_meta["stepper"].lbfgs.sigma == memory.sigma and back_meta["cycles_done"] == 1
    assert back_meta["stop"].max_epochs == 5
    with pytest.raises(InputError, match="differs in random_state"):
        ckpt.load(tmp_path, dict(fingerprint, random_state=4))
    with pytest.raises(InputError, match="no checkpoint"):
        ckpt.load(tmp_path / "missing", fingerprint)


def test_chunk_start_snapshots_round_trip_every_bit_whole_or_piece_by_piece(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from cluster import snapshot
    from cluster.shard import CommonState, ShardState

    monkeypatch.setattr(snapshot, "directory", lambda token, worker=None: str(tmp_path / token))
    rng = np.random.default_rng(3)
    state = ShardState(
        4,
        rng.standard_normal((6, 3)),
        rng.standard_normal((2, 18)),
        rng.standard_normal((2, 18)),
        rng.standard_normal(18),
        rng.standard_normal(18),
        {"best": rng.standard_normal(18)},
    )
    common = CommonState(
        rng.standard_normal((5, 3)),
        rng.standard_normal((2, 15)),
        rng.standard_normal((2, 15)),
        rng.standard_normal(15),
        rng.standard_normal(15),
        None,
        None,
        {},
    )
    decisions = dict(
        stepper=SimpleNamespace(inner=7), stop=None, time_used=1.5, cycles_done=3, started=True
    )
    assert snapshot.chunk_start(state, "run", 7) is state  # no file: the chunk's task never started
    snapshot.write_own("run", 4, [state], common)  # an older chunk's files: removed by the next
    snapshot.write_own("run", 7, [state], common)
    assert sorted(os.listdir(tmp_path / "run")) == ["common-0-chunk-7", "own-4-chunk-7"]
    stale = ShardState(
        4,
        *(np.zeros_like(a) for a in (state.U, state.S, state.Y, state.x_start, state.g_start)),
        {"good": np.zeros(18)},
    )
    for name in snapshot.PIECES:  # an older backup is replaced whole, its other saved iterates too
        snapshot.store_piece(snapshot.piece_of(stale, name), "run", 4, name)
    snapshot.commit_backup("run", 4)
    for name in snapshot.PIECES:
        snapshot.store_piece(snapshot.piece_of(state, name), "run", 4, name)
    snapshot.commit_backup("run", 4)
    start_U = state.U.copy()
    state.U[0, 0] = 42.0  # the chunk then steps the state in place: the files keep its start
    for back in (snapshot.chunk_start(state, "run", 7), snapshot.load_backup("run", 4)):
        assert back.shard == 4 and set(back.saved) == {"best"} and np.array_equal(back.U, start_U)
        for name in ("S", "Y", "x_start", "g_start"):
            assert np.array_equal(getattr(back, name), getattr(state, name))
        assert np.array_equal(back.saved["best"], state.saved["best"])
    back = snapshot.chunk_start(common, "run", 7, decisions)
    assert np.array_equal(back.x_rep, common.x_rep) and np.array_equal(back.Y, common.Y)
    assert back.stepper.inner == 7 and back.cycles_done == 3 and back.started and back.saved == {}


def test_stop_rules_follow_the_engine_order():
    rules = StopRules(max_epochs=10, target=0.5, tol=1e-3, previous_objective=1.0)
    assert rules.check(1, 3, 0.1, 0.9, np.nan, 0.9) is None
    assert rules.check(2, 6, 0.2, 0.4, np.nan, 0.8)[0] == "target"
    assert StopRules(previous_objective=1.0).check(1, 1, 0.0, np.nan, np.nan, 1.0)[0] == "diverged"
    assert (
        StopRules(tol=1e-3, previous_objective=1.0).check(1, 1, 0.0, 1.0, np.nan, 1.0)[0]
        == "tolerance"
    )
    assert (
        StopRules(max_time=1.0, previous_objective=2.0).check(1, 1, 1.5, 1.0, np.nan, 1.0)[0]
        == "time_limit"
    )
    patient = StopRules(patience=2, has_heldout=True, previous_objective=9.0)
    verdicts = [
        patient.check(e, e, 0.0, 1.0, h, 9.0 - e) for e, h in enumerate([1.0, 1.1, 1.2], start=1)
    ]
    assert verdicts[:2] == [None, None] and verdicts[2][0] == "early_stop"


def test_local_cluster_refused_in_a_reimported_worker_process(monkeypatch):
    """A script without a __main__ guard is re-run by spawned workers: say so instead of a nanny traceback."""
    import multiprocessing

    from cluster.connect import connect
    from cluster.errors import ClusterError

    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    with pytest.raises(ClusterError, match="__name__"):
        with connect(n_workers=1):
            pass


def test_mailbox_start_barrier_names_the_missing_peer_and_late_mail_is_dropped(monkeypatch):
    import asyncio

    from cluster.errors import StartTimeout
    from cluster.mailbox import Mailbox

    box = Mailbox("tcp://127.0.0.1:1", loop=None)
    monkeypatch.setattr(box, "send", lambda *args: None)  # our own "ready" goes nowhere here
    with pytest.raises(StartTimeout, match="tcp://127.0.0.1:2 did not start within 0.2 s"):
        box.start("run-a", ["tcp://127.0.0.1:2"], 0.2)
    asyncio.run(box.deliver("run-b", 1, "tcp://127.0.0.1:2", "hello"))
    assert box.collect("run-b", 1, ["tcp://127.0.0.1:2"], 1.0) == ["hello"]
    box.forget("run-b")
    asyncio.run(
        box.deliver("run-b", 2, "tcp://127.0.0.1:2", "late")
    )  # a finished run's late message
    assert box._messages == {}
    asyncio.run(box.close())
    asyncio.run(box.deliver("run-c", 1, "tcp://127.0.0.1:2", "after close"))
    assert box._messages == {}


def test_an_abort_ends_a_post_still_connecting_to_a_dead_peer():
    """A connect to a dead peer retries for Dask's connect timeout (30 s): the driver's abort ends
    the wait at once, so the task frees its worker's thread for the rerun of the chunk."""
    import concurrent.futures
    import threading

    from cluster.errors import PeerLost
    from cluster.mailbox import Mailbox

    box = Mailbox("tcp://127.0.0.1:1", loop=None)
    still_connecting = concurrent.futures.Future()
    threading.Timer(0.2, box.abort, args=("run-a",)).start()
    started = time.monotonic()
    with pytest.raises(PeerLost, match="aborted"):
        box.wait_posted(still_connecting, ["tcp://127.0.0.1:2"], 60.0, "run-a")
    assert time.monotonic() - started < 5.0
    assert still_connecting.cancelled()
    with pytest.raises(PeerLost, match="TimeoutError"):  # without an abort: the timeout still holds
        box.wait_posted(concurrent.futures.Future(), ["tcp://127.0.0.1:2"], 0.2, "run-b")


def test_scheduler_address_without_port_is_refused_in_one_line():
    from cluster.connect import scheduler_address
    from cluster.errors import ClusterError

    assert scheduler_address("127.0.0.1:8786") == "tcp://127.0.0.1:8786"
    for bad in ("tcp://127.0.0.1", "127.0.0.1", "tcp://:8786"):
        with pytest.raises(ClusterError, match="has no port|not host:port"):
            scheduler_address(bad)


def test_a_partition_with_ratings_on_the_workers_is_refused_before_any_cluster(
    tmp_path, monkeypatch
):
    from cluster import driver

    def no_cluster(**kwargs):
        raise AssertionError("connect() was called")

    monkeypatch.setattr(driver, "connect", no_cluster)
    ratings = make_ratings(users=20, items=15, ratings=100, seed=0)
    with pytest.raises(ValueError, match="not a partition"):
        driver.fit_distributed(
            str(tmp_path / "part-*.parquet"),  # a glob: read by the workers
            rank=2,
            partition=partition.make("strata", ratings, blocks=2),
            scheduler="tcp://127.0.0.1:9",
        )


def test_a_port_that_is_not_a_dask_scheduler_fails_in_seconds_naming_it():
    """A plain TCP server that accepts and stays silent: distributed's client would wait forever."""
    import socket
    import threading
    import time

    from cluster.connect import check_scheduler
    from cluster.errors import ClusterError

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    accepted = []

    def accept():
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        start = time.monotonic()
        with pytest.raises(
            ClusterError, match=f"{address} accepted a connection but did not answer as a Dask"
        ):
            check_scheduler(address, timeout=1.0)
        assert time.monotonic() - start < 10 and accepted
    finally:
        server.close()
        for conn in accepted:
            conn.close()


def test_a_recovery_waits_until_workers_dying_together_are_all_dropped():
    import dask

    from cluster.recovery import Recovery

    # the scheduler drops the second dead worker 0.3 s after the first
    started = time.monotonic()

    def alive():
        return {"a", "c"} if time.monotonic() - started > 0.3 else {"a", "b", "c"}

    with dask.config.set({"hamsi.settle-seconds": 0.5}):
        recovery = Recovery(None, None, alive, "token", backup=True)
        assert recovery.settled_alive() == {"a", "c"}
        assert time.monotonic() - started >= 0.8  # settled for 0.5 s after the last change
    flips = iter(range(10**6))
    with dask.config.set({"hamsi.settle-limit": 0.1}):  # a list that keeps changing: bounded wait
        recovery = Recovery(None, None, lambda: {next(flips)}, "token", backup=True)
        begun = time.monotonic()
        recovery.settled_alive()
        assert time.monotonic() - begun < 1.0


def test_failed_chunks_rerun_until_workers_are_lost_too_often_or_a_fault_does_not_pass(monkeypatch):
    from cluster import errors
    from cluster.errors import ChunkFailed, ChunkFailures, ClusterError

    monkeypatch.setattr(errors, "RERUN_PAUSE", (0.0, 0.0))
    lost = ChunkFailed("chunk a failed; lost workers: tcp://127.0.0.1:9", ["tcp://127.0.0.1:9"])
    flaky = ChunkFailed(
        "chunk b failed (PeerLost: boom); lost workers: none", cause="PeerLost: boom"
    )
    failures = ChunkFailures(losses=2)
    for chunk in (
        1,
        1,
        11,
        11,
        21,
        21,
    ):  # two failures in a row of a chunk, or of two chunks: rerun
        failures.before_rerun(flaky, chunk, "resume")
    failures.before_rerun(lost, 21, "resume")  # a loss starts the count of failures in a row over
    failures.before_rerun(flaky, 21, "resume")
    failures.before_rerun(flaky, 21, "resume")
    failures.before_rerun(lost, 31, "resume")
    with pytest.raises(ClusterError) as caught:
        failures.before_rerun(lost, 31, "resume")  # the third loss of the run
    assert str(caught.value).startswith("giving up after 2 recoveries from lost workers")
    failures = ChunkFailures(losses=2)
    failures.before_rerun(flaky, 31, "resume")
    failures.before_rerun(flaky, 31, "resume")
    with pytest.raises(ClusterError) as caught:
        failures.before_rerun(flaky, 31, "resume")
    message = str(caught.value)
    assert "\n" not in message and "failed 3 times in a row with every worker answering" in message
    assert "PeerLost: boom" in message and "lost workers: none" not in message


STOPPED_CHILD = """
import time
from cluster.mailbox import stall_clock
clock = stall_clock()
print("ready", flush=True)
time.sleep(4.0)  # stopped for 2 s by the parent meanwhile
print(clock.total(), flush=True)
"""


def test_the_stall_clock_counts_the_seconds_its_process_was_stopped():
    import signal
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", STOPPED_CHILD], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(2.0)
        os.kill(child.pid, signal.SIGCONT)
        stalled = float(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
    assert 1.5 < stalled < 2.5


def test_a_stop_during_a_rounds_wait_is_off_the_clock_before_the_time_limit_is_checked():
    """The stopped worker's own stop counts at once, not only from its next message."""
    from types import SimpleNamespace

    from cluster.exchange import MailboxExchange
    from cluster.messages import Message
    from hamsi.trace import PhaseTimes

    pause = 8.0

    class Stalls:
        seconds = 0.0

        def total(self):
            return self.seconds

    class StoppedInTheWait:
        """A mailbox whose round's wait held a stop of `pause` s (the peer's message says none)."""

        stalls = Stalls()

        def round(self, run, step, peers, message, timeout):
            self.stalls.seconds += pause
            return [Message(step, peers[0])], 0.01, pause + 0.02, 100

    plan = SimpleNamespace(workers=["me", "peer"], run_id="r", timeout=60.0)
    exchange = MailboxExchange(StoppedInTheWait(), plan, "me", None, PhaseTimes(), 0.5)
    exchange.start_clock()
    exchange.phases.gradient = 0.1
    exchange.barrier()
    assert exchange.phases.wait == pytest.approx(pause + 0.02)
    assert exchange.clock() == pytest.approx(0.5 + 0.1 + 0.01 + 0.02)
    assert not StopRules(max_time=6.0).out_of_time(exchange.clock())
    assert exchange.phases.stalled == pytest.approx(pause)


def test_flat_keywords_are_sorted_into_the_two_option_groups_and_checked():
    from cluster.options import DaskOptions, grouped
    from hamsi.options import EngineOptions

    options, dask = grouped(None, None, dict(max_cycles=7, chunk_cycles=3, owned_v=True, threads=4))
    assert options == EngineOptions(max_cycles=7) and dask == DaskOptions(
        chunk_cycles=3, owned_v=True
    )
    with pytest.raises(TypeError, match="unexpected keyword argument.*max_epoch"):
        grouped(None, None, dict(max_epoch=3))  # a typo is refused, never dropped
    with pytest.raises(TypeError, match="both in the EngineOptions and as keywords"):
        grouped(EngineOptions(), None, dict(max_cycles=3))
    with pytest.warns(FutureWarning, match="chunk_epochs"):
        assert grouped(None, None, dict(chunk_epochs=4))[1].chunk_cycles == 4


class _Client:
    """Just enough of a distributed.Client for a Future's finalizer to reach its `_cleared` check."""

    generation = 0

    def __init__(self):
        self.futures = {}

    def _inc_ref(self, key):
        pass


def _half_built_future():
    """A Future as an interrupt inside its __init__ leaves it: client and key set, `_cleared` not."""
    from distributed import Future

    future = Future.__new__(Future)
    future.key, future._client, future._input_state, future._state = "x", _Client(), None, None
    future._id = ("x", 0)
    return future


class _Unraisable:
    def __del__(self):
        raise AttributeError("not a Future's")


def test_ctrl_c_inside_connect_silences_only_half_built_futures(monkeypatch):
    from cluster.connect import connect

    seen = []
    monkeypatch.setattr("sys.unraisablehook", lambda unraisable: seen.append(unraisable.exc_type))
    future = _half_built_future()
    del future  # before any Ctrl-C its error is reported
    assert seen == [AttributeError]
    seen.clear()
    with pytest.raises(KeyboardInterrupt):
        with connect(client=object()):
            raise KeyboardInterrupt
    future, other = _half_built_future(), _Unraisable()
    del future, other
    assert seen == [AttributeError]  # the other object's, not the Future's
    installed = sys.unraisablehook
    with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C installs no second filter
        with connect(client=object()):
            raise KeyboardInterrupt
    assert sys.unraisablehook is installed


class _StallClock:
    def total(self):
        return 0.0


class _Box:
    """A mailbox whose peer answers with `theirs` (its partials) by record or by Message."""

    def __init__(self, theirs, linked=True):
        self.theirs, self.stalls, self.calls = theirs, _StallClock(), []
        self._linked = linked

    def linked(self, run):
        return self._linked

    def record_round(self, run, peers, record, items, timeout):
        from cluster.messages import partials_record, record_layout

        self.calls.append("record")
        theirs = partials_record(record_layout(self.theirs), record[0], False, 0.5, self.theirs)
        return theirs[None, :], {}, 0.0, 0.0, 8 * record.size

    def round(self, run, step, peers, message, timeout):
        from cluster.messages import Message

        self.calls.append("message")
        return [Message(step, peers[0], stalled=0.5, shards=self.theirs)], 0.0, 0.0, 100


class _Work:
    shared, owned = True, False

    def __init__(self, mine):
        self.mine = mine

    def compute(self, request):
        return [], self.mine

    def complete(self, request, parts, partials):
        return sorted(partials, key=lambda p: p.shard)


@pytest.mark.parametrize(
    "owner, linked, path",
    [
        ({0: "a", 1: "b"}, True, "record"),
        ({0: "a", 1: "b", 2: "b"}, True, "message"),  # uneven row shards: records of two layouts
        ({0: "a", 1: "b"}, False, "message"),  # a tls:// cluster: no direct links
    ],
)
def test_an_inner_iteration_stacks_the_same_partials_by_record_or_by_message(owner, linked, path):
    from cluster.exchange import MailboxExchange
    from cluster.messages import ShardPartials
    from cluster.plan import ChunkPlan
    from hamsi.exchange import Request
    from hamsi.trace import PhaseTimes

    rng = np.random.default_rng(3)

    def partials(shard):
        return ShardPartials(
            shard,
            pair=rng.standard_normal(12),
            new_pair_g=rng.standard_normal(2),
            wtg=rng.standard_normal(10),
            norms=rng.standard_normal(2),
        )

    mine, theirs = [partials(0), partials(3)], [partials(1), partials(2)]
    box = _Box(theirs, linked)
    plan = ChunkPlan("run", ["a", "b"], owner, range(0, 1), config=None)
    exchange = MailboxExchange(box, plan, "a", _Work(mine), PhaseTimes(), 0.0)
    got = exchange.iterate(Request(0, pair=True, wtg=True, norms=True))
    assert box.calls == [path] and exchange.phases.stalled == 0.5
    in_order = sorted(mine + theirs, key=lambda p: p.shard)
    for name in ("pair", "new_pair_g", "wtg", "norms"):
        np.testing.assert_array_equal(
            getattr(got, name), np.vstack([getattr(p, name) for p in in_order])
        )
    assert got.gram is None and not got.stopped


def _name_error_from(filename: str):
    """Return the exc_info of a NameError raised in a function `cancel` compiled as `filename`."""
    space: dict = {}
    exec(compile("def cancel():\n    return unbound_future\n", filename, "exec"), space)
    try:
        space["cancel"]()
    except NameError:
        return sys.exc_info()
    raise AssertionError("no NameError")


def test_distributeds_failed_cancel_after_an_early_ctrl_c_is_not_logged_and_nothing_else_is_lost():
    import logging
    import os

    from cluster.connect import connect

    logger = logging.getLogger("tornado.application")
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            tb = record.exc_info[2] if record.exc_info else None
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            seen.append(tb.tb_frame.f_code.co_filename if tb is not None else None)

    handler = Keep()
    logger.addHandler(handler)
    filters = list(logger.filters)
    try:
        with connect(client=object()):
            pass
        with connect(client=object()):  # installed once
            pass
        assert len(logger.filters) <= len(filters) + 1
        theirs = os.path.join("site-packages", "distributed", "utils.py")
        for filename in (theirs, "elsewhere.py"):
            logger.error("Exception in callback", exc_info=_name_error_from(filename))
        logger.error("no exception at all")
    finally:
        logger.removeHandler(handler)
        logger.filters[:] = filters
    assert seen == ["elsewhere.py", None]
