"""One all-to-all round over a run's direct links: every peer's frame sent and theirs read at once.

Every frame is first written as far as the socket takes it and every link read as far as its
bytes are in (small frames: no wait at all); a single `select.poll` loop then moves the rest,
on the links that still have something to move (no deadlock when both sides write at once, and
no busy waiting: the thread blocks in poll while it waits). Each link's FrameReader lives as long
as the run, so bytes of a peer's next frame read early wait there for the next round.

Two kinds of round: `exchange_round` trades Messages (any content); `record_round` trades the
fixed-layout partials records of an inner iteration (cluster.messages.partials_record), read
straight into the rows of one array, plus a Message of V shards to the peers that step them next.
"""

from __future__ import annotations

import select
import time

import numpy as np

from cluster.errors import PeerLost
from cluster.link_frames import (
    FrameRefused,
    FrameWriter,
    addressed_frames,
    encode,
    encode_record,
)
from cluster.messages import RECORD_ITEMS, RECORD_STEP, MalformedMessage


def exchange_round(
    links: dict,
    readers: dict,
    wake,
    check_aborted,
    run: str,
    peers: list[str],
    message,
    timeout: float,
) -> tuple[list, float, int]:
    """Send `message` to every peer; return (their messages in `peers` order, seconds blocked waiting, bytes sent).

    message: one Message for every peer, or {peer: Message} (each peer its own; a Message given
    to several peers is encoded once). readers: {peer: FrameReader} of the run's links. Raises
    PeerLost naming the peers whose message is missing after `timeout` seconds, or whose
    connection failed.
    """
    frames = addressed_frames(message, peers)
    outbound = {p: FrameWriter(frames[p]) for p in peers}

    def read(p) -> bool:
        _move(p, links[p], None, readers[p].feed)
        return readers[p].done

    waited = _run(links, outbound, read, peers, wake, check_aborted, run, timeout)
    received = [_message(readers[p], run) for p in peers]
    for p in peers:
        readers[p].next()
    return received, waited, sum(o.nbytes for o in outbound.values())


def record_round(
    links: dict,
    readers: dict,
    wake,
    check_aborted,
    run: str,
    peers: list[str],
    record: np.ndarray,
    items: dict,
    timeout: float,
) -> tuple[np.ndarray, dict, float, int]:
    """Send `record` to every peer (and items[peer], a Message, after it); return (the peers' records
    as rows in `peers` order, {peer: their Message of items}, seconds blocked waiting, bytes sent).

    Every peer's record has the length of ours: each is read straight into its row, and the rows'
    headers and steps are checked at once; a record whose items_follow is set is followed by a
    Message. The first pass (one send and one receive per peer, no object per peer when the
    frames are in) is written out for speed; the rest goes through the poll loop. Raises PeerLost
    naming the peers whose record is missing after `timeout` seconds or malformed, or whose
    connection failed.
    """
    plain = encode_record(record)
    size = len(plain)
    flagged = record.copy()
    flagged[RECORD_ITEMS] = 1.0
    handed = encode_record(flagged)
    rows = _RecordRows(links, readers, run, peers, plain, record[RECORD_STEP])
    view = rows.view
    outbound: dict = {}
    sent = 0
    peer = None
    try:
        for peer in peers:
            if peer in items:
                writer = outbound[peer] = FrameWriter([handed, *encode(items[peer])])
                sent += writer.nbytes
                writer.push(links[peer])
                continue
            sent += size
            try:
                n = links[peer].send(plain)
            except BlockingIOError:
                n = 0
            outbound[peer] = _SENT if n == size else FrameWriter([plain[n:]])
        waiting = []
        for i, peer in enumerate(peers):
            reader = readers[peer]
            reader.feed_record(links[peer], view[i * size : (i + 1) * size])
            if not reader.done:
                waiting.append(peer)
    except (OSError, FrameRefused) as exc:
        raise PeerLost(f"the link to {peer} failed: {type(exc).__name__}: {exc}") from exc
    for p in waiting:
        rows.check_partial(p)
    pending = set(waiting)
    if rows.values[:, RECORD_ITEMS].any():  # rows still being read are zeros there
        pending.update(p for p in peers if p not in pending and not rows.follow(p))
    waited = 0.0
    if pending or any(not o.done for o in outbound.values()):
        waited = _select_rest(
            links, outbound, rows.read, pending, wake, check_aborted, run, timeout
        )
    rows.check_all()
    received = {p: _message(readers[p], run) for p in peers if p in rows.following}
    for p in peers:
        readers[p].next()
    return rows.values, received, waited, sent


class _RecordRows:
    """The receiving side of one record round: peer i's record lands in row i of one array.

    A row is the record's header word, then its values. `read` and `follow` are the poll loop's
    reads after the first pass; the checks refuse a row that is not a record of our layout and
    step (PeerLost naming the peer, `_refuse`).
    """

    def __init__(self, links, readers, run: str, peers: list, plain: bytes, step: float):
        self.links, self.readers, self.run, self.peers = links, readers, run, peers
        self.size = len(plain)
        buffer = bytearray(len(peers) * self.size)
        self.view = memoryview(buffer)
        table = np.frombuffer(buffer, dtype=np.float64).reshape(len(peers), self.size // 8)
        self.values, self.words = table[:, 1:], table[:, 0].view(np.uint64)
        self.header, self.step = np.frombuffer(plain[:8], dtype=np.uint64)[0], step
        self.index = {p: i for i, p in enumerate(peers)}
        self.following: set = (
            set()
        )  # peers whose record is in and whose Message of items is read next

    def _refuse_unless(self, ok: bool, i: int) -> None:
        if not ok:
            _refuse(self.peers[i], self.run, self.words[i], self.values[i], self.header, self.step)

    def check_partial(self, p) -> None:
        """Refuse p's record once its header is in and is not ours (its length differs: never wait for it)."""
        i = self.index[p]
        self._refuse_unless(self.readers[p].filled < 8 or self.words[i] == self.header, i)

    def follow(self, p) -> bool:
        """The record of p is in: if it says items follow, check it and read them; return whether p is done."""
        i, reader = self.index[p], self.readers[p]
        values = self.values[i]
        if values[RECORD_ITEMS] == 0.0:
            return True  # its header is checked with every other row's after the round
        self._refuse_unless(
            self.words[i] == self.header
            and values[RECORD_STEP] == self.step
            and values[RECORD_ITEMS] == 1,
            i,
        )
        reader.next()
        self.following.add(p)
        _move(p, self.links[p], None, reader.feed)
        return reader.done

    def read(self, p) -> bool:
        """Read what p's link has: the rest of its record, or of the Message following it."""
        i, reader = self.index[p], self.readers[p]
        if p in self.following:
            _move(p, self.links[p], None, reader.feed)
            return reader.done
        row = self.view[i * self.size : (i + 1) * self.size]
        _move(p, self.links[p], None, lambda sock: reader.feed_record(sock, row))
        if reader.done:
            return self.follow(p)
        self.check_partial(p)
        return False

    def check_all(self) -> None:
        """Refuse the first row whose header or step is not ours, or whose items flag is not 0 or 1."""
        flag = self.values[:, RECORD_ITEMS]
        bad = (
            (self.words != self.header)
            | (self.values[:, RECORD_STEP] != self.step)
            | (flag * flag != flag)
        )
        if bad.any():
            self._refuse_unless(False, int(np.flatnonzero(bad)[0]))


def _refuse(peer, run, word, values, header, step) -> None:
    """Raise PeerLost: `peer`'s row is not a record of our layout and step, or says items 0 or 1."""
    raise PeerLost(
        f"run {run}: {peer} sent a malformed partials record (header "
        f"{np.uint64(word).tobytes()!r}, step {float(values[RECORD_STEP])!r}, items "
        f"{float(values[RECORD_ITEMS])!r}; expected {np.uint64(header).tobytes()!r}, step "
        f"{float(step)!r}, items 0 or 1)"
    )


class _Sent:
    """The writer of a frame that one send wrote whole."""

    done = True


_SENT = _Sent()


def _message(reader, run: str):
    """Return the Message a reader holds; PeerLost when its arrays do not form one."""
    try:
        return reader.value()
    except MalformedMessage as exc:
        raise PeerLost(f"run {run}: a peer sent a malformed message ({exc})") from exc


def _run(links, outbound, read, peers, wake, check_aborted, run, timeout) -> float:
    """Write every frame and read every link once, then poll for the rest; return the seconds waited."""
    for p in peers:
        _move(p, links[p], outbound[p], None)
    pending = {p for p in peers if not read(p)}
    if pending or any(not o.done for o in outbound.values()):
        return _select_rest(links, outbound, read, pending, wake, check_aborted, run, timeout)
    return 0.0


def _move(peer, sock, writer, feed) -> None:
    """Write what `writer` has left and call `feed(sock)` to read (either may be None)."""
    try:
        if writer is not None and not writer.done:
            writer.push(sock)
        if feed is not None:
            feed(sock)
    except (OSError, FrameRefused) as exc:
        raise PeerLost(f"the link to {peer} failed: {type(exc).__name__}: {exc}") from exc


def _select_rest(links, outbound, read, pending, wake, check_aborted, run, timeout) -> float:
    """Move the frames still unwritten or unread in a poll loop; return the seconds waiting with all written.

    read(peer) reads what a readable link has and returns whether the peer's part is complete.
    One `select.poll` per round: registering is bookkeeping in this process, and each wait is one
    system call (a selector would add one to create it and one per registration).
    """
    waited = 0.0
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(wake, select.POLLIN)
    peer_of = {wake.fileno(): None}
    for p, writer in outbound.items():
        wanted = (select.POLLIN if p in pending else 0) | (0 if writer.done else select.POLLOUT)
        if wanted:
            peer_of[links[p].fileno()] = p
            poller.register(links[p], wanted)
    while pending or any(not o.done for o in outbound.values()):
        check_aborted(run)
        left = deadline - time.monotonic()
        if left <= 0:
            raise PeerLost(f"no message from {sorted(pending)} within {timeout:g} s")
        start = time.perf_counter()
        events = poller.poll(left * 1000.0)
        if all(o.done for o in outbound.values()):
            waited += time.perf_counter() - start
        for fd, event in events:
            _serve_link(peer_of[fd], event, wake, links, outbound, read, pending, poller)
    return waited


def _serve_link(peer, event, wake, links, outbound, read, pending, poller) -> None:
    """Move what poll reported for one link (or drain the wake-up socket, peer None).

    A hang-up or an error counts as readable and writable, as in `selectors`: the move then
    raises PeerLost with the socket's own error.
    """
    if peer is None:  # the wake-up socket
        try:
            wake.recv(4096)
        except BlockingIOError:
            pass
        return
    sock = links[peer]
    if event & ~select.POLLIN:
        _move(peer, sock, outbound[peer], None)
    if event & ~select.POLLOUT and peer in pending and read(peer):
        pending.discard(peer)
    wanted = (select.POLLIN if peer in pending else 0) | (
        0 if outbound[peer].done else select.POLLOUT
    )
    if wanted:
        poller.modify(sock, wanted)
    else:
        poller.unregister(sock)
