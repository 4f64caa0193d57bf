"""One all-to-all round over a run's direct links: every peer's frame sent and theirs read at once.

A single `selectors` loop writes and reads all links (no deadlock when both sides write at once,
and no polling: the thread blocks in select while it waits).
"""

from __future__ import annotations

import selectors
import time

from cluster.errors import PeerLost
from cluster.link_frames import FrameReader, FrameRefused, FrameWriter, addressed_frames
from cluster.messages import MalformedMessage


def exchange_round(
    links: dict, limit, wake, check_aborted, run: str, peers: list[str], message, timeout: float
) -> tuple[list, float, int]:
    """Send `message` to every peer; return (their messages in `peers` order, seconds blocked waiting, bytes sent).

    message: one Message for every peer, or {peer: Message} (each peer its own). Raises
    PeerLost naming the peers whose message is missing after `timeout` seconds, or whose
    connection failed.
    """
    frames = addressed_frames(message, peers)
    outbound = {p: FrameWriter(frames[p]) for p in peers}
    sent = sum(o.nbytes for o in outbound.values())
    inbound = {p: FrameReader(limit) for p in peers}
    waited = 0.0
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(wake, selectors.EVENT_READ, None)
        for p in peers:
            outbound[p].push(links[p])
            selector.register(
                links[p],
                selectors.EVENT_READ | (0 if outbound[p].done else selectors.EVENT_WRITE),
                p,
            )
        pending = set(peers)
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
                _serve_link(key.data, mask, wake, links, inbound, outbound, pending, selector)
    try:
        return [inbound[p].value() for p in peers], waited, sent
    except MalformedMessage as exc:
        raise PeerLost(f"run {run}: a peer sent a malformed message ({exc})") from exc


def _serve_link(peer, mask, wake, links, inbound, outbound, pending, selector) -> None:
    """Move what the selector reported for one link (or drain the wake-up socket, peer None)."""
    if peer is None:  # the wake-up socket
        try:
            wake.recv(4096)
        except BlockingIOError:
            pass
        return
    sock = links[peer]
    try:
        if mask & selectors.EVENT_WRITE:
            outbound[peer].push(sock)
        if mask & selectors.EVENT_READ and peer in pending:
            inbound[peer].feed(sock)
    except (OSError, FrameRefused) as exc:
        raise PeerLost(f"the link to {peer} failed: {type(exc).__name__}: {exc}") from exc
    if inbound[peer].done:
        pending.discard(peer)
    events = (selectors.EVENT_READ if peer in pending else 0) | (
        0 if outbound[peer].done else selectors.EVENT_WRITE
    )
    if events:
        selector.modify(sock, events, peer)
    else:
        selector.unregister(sock)
