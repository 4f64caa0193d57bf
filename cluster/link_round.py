"""One all-to-all round over a run's direct links: every peer's frame sent and theirs read at once.

Every frame is first written as far as the socket takes it and every link read as far as its
bytes are in (small frames: no select at all); a single `selectors` loop then moves the rest,
on the links that still have something to move (no deadlock when both sides write at once, and
no polling: the thread blocks in select while it waits). Each link's FrameReader lives as long
as the run, so bytes of a peer's next frame read early wait there for the next round.
"""

from __future__ import annotations

import selectors
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
    """Move the frames still unwritten or unread in a selectors loop; return the seconds waiting with all written."""
    waited = 0.0
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(wake, selectors.EVENT_READ, None)
        for p, writer in outbound.items():
            wanted = (selectors.EVENT_READ if p in pending else 0) | (
                0 if writer.done else selectors.EVENT_WRITE
            )
            if wanted:
                selector.register(links[p], wanted, p)
        while pending or any(not o.done for o in outbound.values()):
            check_aborted(run)
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerLost(f"no message from {sorted(pending)} within {timeout:g} s")
            start = time.perf_counter()
            events = selector.select(left)
            if all(o.done for o in outbound.values()):
                waited += time.perf_counter() - start
            for key, mask in events:
                _serve_link(key.data, mask, wake, links, readers, outbound, pending, selector)
    return waited


def _serve_link(peer, mask, wake, links, readers, outbound, pending, selector) -> None:
    """Move what the selector reported for one link (or drain the wake-up socket, peer None)."""
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
        outbound[peer] if mask & selectors.EVENT_WRITE else None,
        readers[peer] if mask & selectors.EVENT_READ and peer in pending else None,
    )
    if readers[peer].done:
        pending.discard(peer)
    events = (selectors.EVENT_READ if peer in pending else 0) | (
        0 if outbound[peer].done else selectors.EVENT_WRITE
    )
    if events:
        selector.modify(sock, events, peer)
    else:
        selector.unregister(sock)
