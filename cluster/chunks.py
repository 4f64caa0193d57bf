"""Run one chunk of cycles on the workers: submit one pinned task per worker, watch, abort, collect.

A chunk task (cluster.exchange.run_chunk) runs the HAMSI loop on its worker and talks to its peers
directly; the client only watches that every task is alive and, at the end, receives each worker's
ChunkSummary. A failure anywhere aborts the chunk on every survivor and raises PeerLost, which the
run answers with a recovery (cluster.recovery).
"""

from __future__ import annotations

import threading
import time

from cluster.connect import worker_info
from cluster.errors import ChunkFailed, PeerLost
from cluster.exchange import run_chunk
from cluster.mailbox import abort_run
from cluster.run_state import ChunkSummary, summarize
from cluster.settings import setting


class ChunkRunner:
    """Submits, watches, aborts and collects the chunk tasks of one run on its Placement."""

    def __init__(self, client, placement, peer_timeout: float):
        self.client, self.placement, self.peer_timeout = client, placement, peer_timeout
        self.unresponsive: set = (
            set()
        )  # workers that stopped answering: never used again by this run

    def alive(self) -> set:
        """Return the workers the scheduler knows, without those this run found unresponsive."""
        return set(worker_info(self.client)) - self.unresponsive

    def submit(self, plan) -> dict:
        """Submit one pinned run_chunk per worker; return {address: future}."""
        placed, futures = self.placement, {}
        for addr in placed.used:
            mine = plan.shards_of(addr)
            datas = (
                [placed.data[p] for p in mine] if placed.layout.n_shards else [placed.data[addr]]
            )
            futures[addr] = self.client.submit(
                run_chunk,
                plan,
                datas,
                [placed.states[p] for p in mine],
                placed.commons[addr],
                workers=[addr],
                allow_other_workers=False,
                pure=False,
                retries=0,
                key=f"hamsi-chunk-{plan.run_id}-{placed.used.index(addr)}",
            )
        return futures

    def watch(self, futures: dict, plan) -> None:
        """Return when every chunk task finished; raise PeerLost when a task failed or a worker died or hung.

        A hung worker (stopped, swapping) still looks alive to the scheduler: its peers' rounds time
        out after peer_timeout and fail; when no worker died, a worker whose task then neither
        finishes nor fails within the hung grace of the abort is declared lost for the rest of the run.
        """
        changed = threading.Event()
        for f in futures.values():
            f.add_done_callback(lambda _: changed.set())
        interval = setting("watch-interval")
        while True:
            failed = [f for f in futures.values() if f.status in ("error", "cancelled")]
            alive = self.alive()
            lost = [a for a in self.placement.used if a not in alive]
            if failed or lost:
                raise self._failure(futures, plan, failed, lost, alive)
            if all(f.status == "finished" for f in futures.values()):
                return
            changed.wait(interval)
            changed.clear()

    def _failure(self, futures: dict, plan, failed: list, lost: list, alive: set) -> Exception:
        """Abort the chunk and return what to raise: the task's own error, or PeerLost naming the lost."""
        used = self.placement.used
        self.abort(futures, plan, [a for a in used if a in alive], cancel=False)
        # only when no worker died: a stopped worker still looks alive, and its peers' timeouts are
        # the failures; after a death the survivors are merely slow to report their abort
        grace = min(self.peer_timeout, setting("hung-grace"))
        hung = self._unresponsive(futures, lost, grace) if failed and not lost else []
        for f in futures.values():
            f.cancel()
        self.unresponsive.update(hung)
        lost = lost + hung
        errors = [f.exception() for f in failed if f.status == "error"]
        real = [e for e in errors if not isinstance(e, PeerLost)]  # StartTimeout is a ClusterError
        if real and not lost:  # a failure of the computation itself: rerunning would repeat it
            return real[0]
        why = f"{type(errors[0]).__name__}: {errors[0]}" if errors else "worker lost"
        return ChunkFailed(_lost_message(plan.run_id, why, lost, hung), lost, why)

    def _unresponsive(self, futures: dict, lost: list, grace: float) -> list:
        """Return the workers (not already lost) whose chunk task is still running `grace` s after the abort."""
        deadline = time.monotonic() + grace
        while True:
            running = [a for a, f in futures.items() if f.status == "pending" and a not in lost]
            if not running or time.monotonic() >= deadline:
                return running
            time.sleep(0.05)

    def abort(self, futures: dict, plan, survivors, cancel: bool = True) -> None:
        """Wake the survivors' waiting tasks, cancel the chunk and drop its mail (after a failure or Ctrl-C).

        The wake-up waits at most the abort wait: a stopped worker never answers it.
        """

        def wake():
            try:
                self.client.run(abort_run, plan.run_id, workers=survivors, on_error="ignore")
            except Exception:  # a survivor may be dying too; the recovery re-checks who is alive
                pass

        waker = threading.Thread(target=wake, daemon=True)
        waker.start()
        waker.join(setting("abort-wait"))
        if cancel:
            for f in futures.values():
                f.cancel()

    def collect(self, futures: dict) -> dict[str, ChunkSummary]:
        """Split chunk outputs into the Placement's state and CommonState futures; return the summaries."""
        client, placed = self.client, self.placement
        states, commons, summaries = {}, {}, {}
        for addr, fut in futures.items():
            for i, p in enumerate(placed.shards_of(addr)):
                states[p] = client.submit(_pick, fut, "states", i, workers=[addr], pure=False)
            commons[addr] = client.submit(_pick, fut, "common", workers=[addr], pure=False)
            summaries[addr] = client.submit(summarize, fut, workers=[addr], pure=False)
        gathered = dict(zip(placed.used, client.gather([summaries[a] for a in placed.used])))
        placed.states, placed.commons = states, commons
        return gathered


def _lost_message(run_id: str, why: str, lost: list, hung: list) -> str:
    """Return the one-line account of a failed chunk: the first error and the workers lost."""
    shown = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
    if hung:
        shown += f" ({len(hung)} not answering: hung or stopped)"
    return f"chunk {run_id} failed ({why}); lost workers: {shown or 'none'}"


def _pick(result: dict, key, index=None):
    """Return result[key] (or result[key][index]): split a chunk's output into per-shard futures."""
    value = result[key]
    return value if index is None else value[index]
