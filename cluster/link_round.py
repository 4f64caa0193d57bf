"""One all-to-all round over a run's direct links: every peer's frame sent and theirs read at once.

Every frame is first written as far as the socket takes it and every link read as far as its
bytes are in (small frames: no wait at all); a single `select.poll` loop then moves the rest,
on the links that still have something to move (no deadlock when both sides write at once, and
no busy waiting: the thread blocks in poll while it waits). Each link's FrameReader lives as long
as the run, so bytes of a peer's next frame read early wait there for the next round.
"""

from __future__ import annotations

import select
import time

from cluster.errors import PeerLost
from cluster.link_frames import FrameRefused, FrameWriter, addressed_frames
from cluster.messages import MalformedMessage


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
    sent = sum(o.nbytes for o in outbound.values())
    for p in peers:
        _move(p, links[p], outbound[p], None)
    pending = set()
    for p in peers:
        _move(p, links[p], None, readers[p])
        if not readers[p].done:
            pending.add(p)
    waited = 0.0
    if pending or any(not o.done for o in outbound.values()):
        waited = _select_rest(links, readers, outbound, pending, wake, check_aborted, run, timeout)
    try:
        received = [readers[p].value() for p in peers]
    except MalformedMessage as exc:
        raise PeerLost(f"run {run}: a peer sent a malformed message ({exc})") from exc
    for p in peers:
        readers[p].next()
    return received, waited, sent


def _move(peer, sock, writer, reader) -> None:
    """Write what `writer` has left and read what `reader` can take (either may be None)."""
    try:
        if writer is not None and not writer.done:
            writer.push(sock)
        if reader is not None and not reader.done:
            reader.feed(sock)
    except (OSError, FrameRefused) as exc:
        raise PeerLost(f"the link to {peer} failed: {type(exc).__name__}: {exc}") from exc


def _select_rest(links, readers, outbound, pending, wake, check_aborted, run, timeout) -> float:
    """Move the frames still unwritten or unread in a poll loop; return the seconds waiting with all written.

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
            _serve_link(peer_of[fd], event, wake, links, readers, outbound, pending, poller)
    return waited


def _serve_link(peer, event, wake, links, readers, outbound, pending, poller) -> None:
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
    _move(
        peer,
        sock,
        outbound[peer] if event & ~select.POLLIN else None,
        readers[peer] if event & ~select.POLLOUT and peer in pending else None,
    )
    if readers[peer].done:
        pending.discard(peer)
    wanted = (select.POLLIN if peer in pending else 0) | (
        0 if outbound[peer].done else select.POLLOUT
    )
    if wanted:
        poller.modify(sock, wanted)
    else:
        poller.unregister(sock)
