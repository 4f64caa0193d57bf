"""Direct worker-to-worker links (cluster.links): frames, rounds, failures. Loopback only, no Dask."""

import os
import socket
import threading
import time

import numpy as np
import pytest
from helpers import ConnectionFlood

from cluster import links as links_module
from cluster.errors import PeerLost
from cluster.link_frames import encode_record
from cluster.links import FrameLimit, Links, encode, frame_nbytes
from cluster.messages import (
    RECORD_ITEMS,
    EvaluationPart,
    GradientPart,
    ItemShard,
    MalformedMessage,
    Message,
    ShardPartials,
    from_arrays,
    partials_record,
    record_layout,
    stacked_fields,
    to_arrays,
)

SECRET = b"k" * 32
LIMIT = FrameLimit(max_array_bytes=1 << 26)


@pytest.fixture
def pair():
    a, b = Links("tcp://127.0.0.1:1", "127.0.0.1"), Links("tcp://127.0.0.1:2", "127.0.0.1")
    yield a, b
    a.shutdown()
    b.shutdown()


def open_both(a, b, run, secret_a=SECRET, secret_b=SECRET):
    a.expect(run, secret_a, LIMIT)
    b.expect(run, secret_b, LIMIT)
    threads = [
        threading.Thread(target=a.open, args=(run, {b.worker_address: b.address}, 5.0)),
        threading.Thread(target=b.open, args=(run, {a.worker_address: a.address}, 5.0)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_rounds(links, peer, messages, out):
    for m in messages:
        out.append(links.round("r", [peer], m, 10.0)[0][0])


def test_rounds_carry_typed_messages_of_every_size_both_ways(pair):
    a, b = pair
    open_both(a, b, "r")
    rng = np.random.default_rng(0)
    sizes = [
        0,
        1,
        1000,
        3_000_000,
    ]  # 3e6 doubles = 24 MB: far beyond the socket buffers, both sides writing
    mine = [
        Message(
            i,
            "a",
            gradient=[GradientPart(i, rng.integers(0, 9, 5), rng.standard_normal(n))],
            shards=[ShardPartials(i, pair=rng.standard_normal(12))],
        )
        for i, n in enumerate(sizes)
    ]
    theirs = [
        Message(i, "b", gradient=[GradientPart(i, (0, n), rng.standard_normal(n)[::2])])
        for i, n in enumerate(sizes)
    ]  # strided arrays too
    got_a, got_b = [], []
    tb = threading.Thread(target=run_rounds, args=(b, a.worker_address, theirs, got_b))
    tb.start()
    run_rounds(a, b.worker_address, mine, got_a)
    tb.join()
    assert len(got_a) == len(got_b) == len(sizes)
    for sent, received in zip(theirs, got_a):
        np.testing.assert_array_equal(received.gradient[0].rows, sent.gradient[0].rows)
        assert received.gradient[0].where == sent.gradient[0].where
    for sent, received in zip(mine, got_b):
        assert received.step == sent.step
        np.testing.assert_array_equal(received.gradient[0].rows, sent.gradient[0].rows)
        np.testing.assert_array_equal(received.gradient[0].where, sent.gradient[0].where)
        np.testing.assert_array_equal(received.shards[0].pair, sent.shards[0].pair)


def test_a_round_sends_each_peer_its_own_message_and_counts_its_bytes(pair):
    a, b = pair
    open_both(a, b, "r")
    rng = np.random.default_rng(2)
    to_b = Message(
        1, "a", items=[ItemShard(4, x=rng.standard_normal(50), g=rng.standard_normal(50))]
    )
    to_a = Message(1, "b", shards=[ShardPartials(0, norms=rng.standard_normal(2))])
    got_b = []
    tb = threading.Thread(target=lambda: got_b.append(b.round("r", [a.worker_address], to_a, 10.0)))
    tb.start()
    received, _, sent = a.round("r", [b.worker_address], {b.worker_address: to_b}, 10.0)
    tb.join()
    ((theirs, _, sent_b),) = got_b
    np.testing.assert_array_equal(theirs[0].items[0].g, to_b.items[0].g)
    np.testing.assert_array_equal(received[0].shards[0].norms, to_a.shards[0].norms)
    assert sent == frame_nbytes(encode(to_b)) > 800 and sent_b == frame_nbytes(encode(to_a))


def round_fails_within(a, b, match: str, timeout: float = 30.0, seconds: float = 5.0):
    """Assert that a's next round with b raises PeerLost matching `match` within `seconds`."""
    start = time.monotonic()
    with pytest.raises(PeerLost, match=match):
        a.round("r", [b.worker_address], Message(1, "a", clock=1.0), timeout)
    assert time.monotonic() - start < seconds


def test_a_closed_peer_fails_the_round_at_once_naming_it(pair):
    a, b = pair
    open_both(a, b, "r")
    b.close("r")
    round_fails_within(a, b, "127.0.0.1:2")


def test_a_peer_closing_while_we_wait_fails_the_round_at_once_naming_it(pair):
    a, b = pair
    open_both(a, b, "r")
    threading.Timer(0.3, b.close, args=("r",)).start()
    round_fails_within(a, b, "127.0.0.1:2 failed")


def test_a_silent_peer_times_out_naming_it(pair):
    a, b = pair
    open_both(a, b, "r")
    round_fails_within(a, b, "no message from .*127.0.0.1:2.* within 0.3 s", timeout=0.3)


def test_abort_wakes_a_waiting_round(pair):
    a, b = pair
    open_both(a, b, "r")
    threading.Timer(0.3, a.abort, args=("r",)).start()
    round_fails_within(a, b, "aborted")


def test_open_fails_clearly_when_the_peer_never_connects(pair):
    a, b = pair
    b.expect("r", SECRET, LIMIT)
    with pytest.raises(PeerLost, match="127.0.0.1:1 did not open its link"):
        b.open("r", {a.worker_address: a.address}, 0.3)  # a (below b) never connects


def test_late_connections_of_a_finished_run_are_refused(pair):
    a, b = pair
    b.expect("old", SECRET, LIMIT)
    b.close("old")
    a.expect("old", SECRET, LIMIT)
    with pytest.raises(
        PeerLost, match="cannot open the link"
    ):  # a connects to b after b finished the run
        a.open("old", {b.worker_address: b.address}, 1.0)  # tried again until then
    time.sleep(0.3)
    assert not b._accepted
    a.close("old")


def test_a_peer_without_the_run_secret_is_refused_both_ways(pair):
    a, b = pair
    b.expect("r", SECRET, LIMIT)
    a.expect("r", b"x" * 32, LIMIT)
    with pytest.raises(PeerLost):  # b closes the connection: a's proof does not match b's secret
        a.open("r", {b.worker_address: b.address}, 2.0)
    time.sleep(0.2)
    assert not b._accepted


def test_a_hello_has_one_deadline_for_the_whole_exchange(pair, monkeypatch):
    monkeypatch.setattr(links_module, "HELLO_DEADLINE", 1.0)
    _, b = pair
    start = time.monotonic()
    with socket.create_connection(b.address, timeout=5) as sock:
        try:
            while time.monotonic() - start < 10:  # one byte every 0.2 s: each read comes in time
                sock.sendall(b"H")
                sock.settimeout(0.2)
                try:
                    if sock.recv(1) == b"":
                        break
                except TimeoutError:
                    pass
        except OSError:  # reset by the listener
            pass
    # closed at the 1 s deadline, long before 10 s of bytes that each came in time (slack for load)
    assert 0.9 < time.monotonic() - start < 5.0


def test_idle_and_slow_drip_connections_keep_no_peer_out(pair):
    a, b = pair
    with ConnectionFlood([a.address[1], b.address[1]], idle=200, drip=64, every=0.3) as flood:
        # the flood is in force (it holds every hello slot) before the peers connect
        flood.wait_opened(2 * (200 + 64), 120)
        for run in ("r1", "r2", "r3"):
            errors = []

            def opening(x, y, run=run, errors=errors):
                try:
                    x.open(run, {y.worker_address: y.address}, 20.0)
                except Exception as exc:
                    errors.append(exc)

            for x in (a, b):
                x.expect(run, SECRET, LIMIT)
            threads = [threading.Thread(target=opening, args=p) for p in ((a, b), (b, a))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors
            got = []
            tb = threading.Thread(
                target=lambda run=run: got.append(
                    b.round(run, [a.worker_address], Message(1, "b"), 10.0)
                )
            )
            tb.start()
            received = a.round(run, [b.worker_address], Message(1, "a"), 10.0)[0]
            tb.join()
            assert received[0].sender == "b" and got[0][0][0].sender == "a"
            a.close(run)
            b.close(run)
        opened = flood.opened
    assert opened >= 2 * (200 + 64)


def test_typed_messages_survive_the_binary_form_field_by_field():
    rng = np.random.default_rng(3)
    sent = Message(
        7,
        "tcp://127.0.0.1:5",
        vote=True,
        clock=2.5,
        stalled=0.75,
        gradient=[
            GradientPart(1, (3, 9), rng.standard_normal((6, 4))),
            GradientPart(0, np.array([4, 2, 8]), rng.standard_normal((3, 4))),
        ],
        shards=[
            ShardPartials(2, pair=rng.standard_normal(12), norms=rng.standard_normal(2)),
            ShardPartials(5),
        ],
        evaluation=[EvaluationPart(1, [0.5, 1.5], 0.25, np.nan)],
        items=[
            ItemShard(3, x=rng.standard_normal(8), g=rng.standard_normal(8)),
            ItemShard(
                0,
                x=rng.standard_normal(4),
                s_new=rng.standard_normal(4),
                y_new=rng.standard_normal(4),
            ),
        ],
    )
    frame = encode(sent)
    assert all(
        isinstance(b, (bytes, np.ndarray)) for b in frame
    )  # numbers only: no pickle anywhere
    got = from_arrays([np.array(a) for a in to_arrays(sent)])
    assert (got.step, got.sender, got.vote, got.clock, got.stalled) == (
        7,
        "tcp://127.0.0.1:5",
        True,
        2.5,
        0.75,
    )
    assert got.gradient[0].where == (3, 9) and np.array_equal(got.gradient[1].where, [4, 2, 8])
    for mine, theirs in zip(sent.gradient, got.gradient):
        assert mine.key == theirs.key and np.array_equal(mine.rows, theirs.rows)
    assert np.array_equal(got.shards[0].pair, sent.shards[0].pair) and got.shards[0].gram is None
    assert got.shards[1] == ShardPartials(5)
    assert got.evaluation[0].sse == [0.5, 1.5] and np.isnan(got.evaluation[0].test)
    assert (
        [i.shard for i in got.items] == [3, 0]
        and got.items[0].s_new is None
        and got.items[1].g is None
    )
    for mine, theirs in zip(sent.items, got.items):
        for name in ("x", "g", "s_new", "y_new", "x_start", "g_start"):
            assert (getattr(mine, name) is None) == (getattr(theirs, name) is None)
            if getattr(mine, name) is not None:
                np.testing.assert_array_equal(getattr(theirs, name), getattr(mine, name))


def test_shared_replica_round_trips_the_common_state(tmp_path, monkeypatch):
    from cluster import shared
    from cluster.shard import CommonState

    rng = np.random.default_rng(1)
    common = CommonState(
        rng.standard_normal((7, 3)),
        rng.standard_normal((2, 21)),
        rng.standard_normal((2, 21)),
        rng.standard_normal(21),
        rng.standard_normal(21),
        None,
        None,
    )
    path = str(tmp_path / "replica")
    lead = shared.SharedReplica.create(path, common)
    other = shared.SharedReplica.attach(path, common)
    other.x[3] = 42.0  # one mapping: a write is seen by every worker
    assert lead.x[3] == 42.0
    out = common.copy()
    lead.copy_out(out)
    assert (
        out.x_rep.reshape(-1)[3] == 42.0
        and np.array_equal(out.S, common.S)
        and np.array_equal(out.Y, common.Y)
    )
    lead.close()
    other.close()
    assert shared.available(1) == (os.access("/dev/shm", os.W_OK))
    assert not shared.available(1 << 60)  # no host has an exabyte of /dev/shm


def test_a_reader_keeps_bytes_of_the_next_frame_for_the_next_round():
    """A peer one round ahead sends its next frame before we read this one: both arrive whole, in order."""
    from cluster.link_frames import FrameReader

    rng = np.random.default_rng(4)
    first = Message(1, "a", shards=[ShardPartials(0, wtg=rng.standard_normal(10))])
    big = rng.standard_normal(300_000)  # beyond one buffered read: straight into its array
    second = Message(2, "a", items=[ItemShard(3, x=big)])
    third = Message(3, "a", vote=True)
    left, right = socket.socketpair()
    right.setblocking(False)
    reader = FrameReader(LIMIT)
    got = []
    try:
        writer = threading.Thread(
            target=lambda: [left.sendmsg(encode(m)) for m in (first, second, third)]
        )
        writer.start()
        for _ in range(3):
            deadline = time.monotonic() + 10
            while not reader.done and time.monotonic() < deadline:
                reader.feed(right)
            got.append(reader.value())
            reader.next()
        writer.join()
    finally:
        left.close()
        right.close()
    assert [m.step for m in got] == [1, 2, 3] and got[2].vote
    np.testing.assert_array_equal(got[0].shards[0].wtg, first.shards[0].wtg)
    np.testing.assert_array_equal(got[1].items[0].x, big)


def test_one_message_for_several_peers_is_encoded_once():
    from cluster.link_frames import addressed_frames

    shared = Message(1, "a", shards=[ShardPartials(0, norms=np.ones(2))])
    own = Message(1, "a", items=[ItemShard(2, g=np.ones(4))])
    frames = addressed_frames({"p": shared, "q": own, "r": shared}, ["p", "q", "r"])
    assert frames["p"] is frames["r"] and frames["q"] is not frames["p"]
    assert frame_nbytes(frames["q"]) == frame_nbytes(encode(own))


def test_partials_with_a_negative_length_are_refused():
    arrays = to_arrays(Message(1, "a", shards=[ShardPartials(0, norms=np.ones(2))]))
    skeleton = arrays[0].copy()
    skeleton[-1] = -1  # the norms' length
    with pytest.raises(MalformedMessage, match="negative length"):
        from_arrays([skeleton, *arrays[1:]])


def test_one_reader_decodes_frames_of_many_layouts_in_turn_and_again():
    """A link's reader keeps the checked layouts of small frames: more distinct layouts than it
    keeps, each read twice, decode to what was sent (shapes, dtypes, values), in order."""
    from cluster.link_frames import FrameReader

    rng = np.random.default_rng(6)
    messages = []
    for k in range(2 * FrameReader.LAYOUTS + 3):
        messages.append(
            Message(
                k,
                f"tcp://127.0.0.1:{k}",
                gradient=[
                    GradientPart(j, (j, j + 2), rng.standard_normal((2, k % 3 + 1)))
                    for j in range(k % 4)
                ],
                shards=[ShardPartials(j, wtg=rng.standard_normal(k + 1)) for j in range(k % 3)],
                items=[ItemShard(7, x=rng.standard_normal(k))] if k % 2 else [],
            )
        )
    messages += messages  # the same layouts again
    reader, got = FrameReader(LIMIT), []
    left, right = socket.socketpair()
    right.setblocking(False)
    try:
        for m in messages:
            left.sendmsg(encode(m))
            while not reader.done:
                reader.feed(right)
            got.append(reader.value())
            reader.next()
    finally:
        left.close()
        right.close()
    for sent, back in zip(messages, got):
        assert (back.step, back.sender) == (sent.step, sent.sender)
        assert [(p.key, p.where, p.rows.shape) for p in back.gradient] == [
            (p.key, p.where, p.rows.shape) for p in sent.gradient
        ]
        for a, b in zip(sent.gradient, back.gradient):
            np.testing.assert_array_equal(a.rows, b.rows)
        assert [p.shard for p in back.shards] == [p.shard for p in sent.shards]
        for a, b in zip(sent.shards, back.shards):
            np.testing.assert_array_equal(a.wtg, b.wtg)
        assert len(back.items) == len(sent.items)
        for a, b in zip(sent.items, back.items):
            np.testing.assert_array_equal(a.x, b.x)


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda sk, v: (sk[:5], v), "before its header"),
        (lambda sk, v: (sk, v[:1]), "before its header"),
        (lambda sk, v: (sk[:7], v), "before its shard"),
        (lambda sk, v: (sk[:-1], v), "before its partial lengths"),
        (lambda sk, v: (sk, v[:-1]), "before its partials"),
        (lambda sk, v: (sk, np.append(v, 1.0)), "more entries"),
        (lambda sk, v: ([*sk, 0], v), "more entries"),
    ],
)
def test_a_message_cut_short_or_padded_is_refused(change, match):
    arrays = to_arrays(Message(1, "a", shards=[ShardPartials(0, wtg=np.ones(4), norms=np.ones(2))]))
    skeleton, values = change(arrays[0].tolist(), arrays[1])
    with pytest.raises(MalformedMessage, match=match):
        from_arrays([np.array(skeleton, dtype=np.int64), values, *arrays[2:]])


def test_a_frame_is_its_arrays_bytes_and_a_small_one_is_one_buffer():
    """encode writes to_arrays' arrays (header, descriptors, raw bytes) without building them."""
    import struct

    from cluster.link_frames import SMALL_ARRAY, FrameReader

    rng = np.random.default_rng(5)
    large = rng.standard_normal(SMALL_ARRAY // 8 + 1)
    message = Message(
        4,
        "tcp://127.0.0.1:7",
        clock=1.25,
        gradient=[GradientPart(1, np.array([5, 1], dtype=np.int32), rng.standard_normal((2, 3)))],
        shards=[
            ShardPartials(0, gram=rng.standard_normal((3, 2)).T, norms=np.arange(2)),
            ShardPartials(1, wtg=rng.standard_normal(10).astype(np.float32)),
        ],
        evaluation=[EvaluationPart(2, [3.0, 4.0], 0.5, 6.0)],
        items=[ItemShard(3, x=large, g=rng.standard_normal(4)), ItemShard(4, g=large[::-1])],
    )
    arrays = [np.ascontiguousarray(a) for a in to_arrays(message)]
    codes = {
        np.dtype(np.float64): 1,
        np.dtype(np.int64): 2,
        np.dtype(np.int32): 3,
        np.dtype(np.uint8): 4,
    }
    expected = struct.pack("!4sI", b"HMSF", len(arrays)) + b"".join(
        struct.pack("!BBQQ", codes[a.dtype], a.ndim, *(a.shape + (0,) * (2 - a.ndim)))
        for a in arrays
    )
    expected += b"".join(a.tobytes() for a in arrays)
    frame = encode(message)
    assert b"".join(memoryview(b).cast("B").tobytes() for b in frame) == expected
    assert len(frame) == 1 + 3  # small parts in one buffer; the two large arrays, then g after x
    assert len(encode(Message(1, "a", shards=message.shards))) == 1
    left, right = socket.socketpair()
    try:
        left.sendmsg(frame)
        reader = FrameReader(LIMIT)
        while not reader.done:
            reader.feed(right)
        got = reader.value()
    finally:
        left.close()
        right.close()
    np.testing.assert_array_equal(got.shards[0].gram, message.shards[0].gram.ravel())
    np.testing.assert_array_equal(got.shards[1].wtg, message.shards[1].wtg)
    np.testing.assert_array_equal(got.items[1].g, large[::-1])
    assert (got.clock, got.evaluation[0].sse, got.gradient[0].where.dtype) == (
        1.25,
        [3.0, 4.0],
        np.int32,
    )


def record_of(step: int, shards: list, items: bool = False) -> np.ndarray:
    record = partials_record(record_layout(shards), step, False, 0.25 * step, shards)
    record[RECORD_ITEMS] = float(items)
    return record


def some_partials(rng, first_shard: int, pair: bool) -> list:
    out = []
    for shard in (first_shard, first_shard + 2):
        p = ShardPartials(shard, wtg=rng.standard_normal(10), norms=rng.standard_normal(2))
        if pair:
            p.pair, p.new_pair_g = rng.standard_normal(12), rng.standard_normal(2)
            p.gram = rng.standard_normal(11)
        out.append(p)
    return out


def test_record_rounds_carry_partials_and_handed_shards_and_stack_in_shard_order(pair):
    """Records of both kinds of iteration, V shards handed on in some rounds, then a Message round."""
    a, b = pair
    open_both(a, b, "r")
    rng = np.random.default_rng(7)
    rounds = []
    for step in range(1, 7):
        pair_iteration = step % 3 == 0
        mine, theirs = some_partials(rng, 0, pair_iteration), some_partials(rng, 1, pair_iteration)
        handed = ItemShard(5, x=rng.standard_normal(3000), g=rng.standard_normal(3000))
        to_a = {a.worker_address: Message(step, "b", items=[handed])} if step % 2 else {}
        rounds.append((step, mine, theirs, to_a))
    got_b = []

    def b_side():
        for step, _, theirs, to_a in rounds:
            got_b.append(
                b.record_round("r", [a.worker_address], record_of(step, theirs), to_a, 10.0)
            )
        got_b.append(b.round("r", [a.worker_address], Message(9, "b", clock=2.0), 10.0))

    tb = threading.Thread(target=b_side)
    tb.start()
    got_a = [
        a.record_round("r", [b.worker_address], record_of(s, m), {}, 10.0) for s, m, _, _ in rounds
    ]
    after = a.round("r", [b.worker_address], Message(9, "a", clock=1.0), 10.0)
    tb.join()
    assert after[0][0].clock == 2.0 and got_b[-1][0][0].clock == 1.0  # the stream stayed in step
    for (step, mine, theirs, to_a), (records, items, _, sent) in zip(rounds, got_a):
        assert records.shape == (1, record_of(step, mine).size)
        np.testing.assert_array_equal(records[0], record_of(step, theirs, bool(to_a)))
        assert sent == len(encode_record(record_of(step, mine)))
        if to_a:
            np.testing.assert_array_equal(
                items[b.worker_address].items[0].x, to_a[a.worker_address].items[0].x
            )
        else:
            assert items == {}
        ids, fields = stacked_fields(
            record_layout(mine), np.vstack([record_of(step, mine), records])
        )
        in_order = sorted(mine + theirs, key=lambda p: p.shard)
        np.testing.assert_array_equal(ids, [p.shard for p in in_order])
        for name in record_layout(mine).names:
            np.testing.assert_array_equal(
                fields[name], np.vstack([getattr(p, name) for p in in_order])
            )
    for (step, _, theirs, to_a), (_, items, _, sent) in zip(rounds, got_b[:-1]):
        handed = sum(frame_nbytes(encode(m)) for m in to_a.values())
        assert items == {} and sent == len(encode_record(record_of(step, theirs))) + handed


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda r: np.concatenate([[7.0], r[1:]]), "malformed partials record .* step 7.0"),
        (lambda r: np.where(np.arange(r.size) == RECORD_ITEMS, 0.5, r), "malformed .* items 0.5"),
        (lambda r: r[:-3], "malformed partials record"),  # another layout, shorter
        (lambda r: np.concatenate([r, r]), "malformed partials record"),  # longer
    ],
)
def test_a_record_of_another_step_or_layout_is_refused_naming_the_peer(pair, change, match):
    a, b = pair
    open_both(a, b, "r")
    shards = some_partials(np.random.default_rng(8), 0, False)
    wrong = np.ascontiguousarray(change(record_of(3, shards).copy()))
    b._runs["r"][a.worker_address].sendall(encode_record(wrong))  # b's end of the link, raw
    start = time.monotonic()
    with pytest.raises(PeerLost, match=f"127.0.0.1:2 sent a {match}"):
        a.record_round("r", [b.worker_address], record_of(3, shards), {}, 30.0)
    assert time.monotonic() - start < 5.0  # refused, not waited for
