"""Recovery of a distributed run: buddy backups of every shard, waiting for the dead to settle, reruns.

After each chunk every shard's new state is written to its buddy's disk (the next worker in order;
cluster.snapshot), and every worker keeps its own chunk-start files. When a chunk fails, the
survivors take their states back to the chunk's start, a dead host's shards come from their
buddies' files, the shards are placed again on the survivors and the chunk reruns: a worker's
death costs one chunk, and the iterates stay the ones of an undisturbed run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

from cluster.connect import worker_info
from cluster.errors import ClusterError
from cluster.settings import setting
from cluster.snapshot import PIECES, chunk_start, commit_backup, load_backup, piece_of, store_piece
from hamsi.errors import InputError

RESUME_HINT = (
    "resume from the last checkpoint with `hamsi factorize ... --resume DIR` (API: resume=DIR; "
    "checkpoints are written with --checkpoint DIR)"
)


class Recovery:
    """The buddy backups of one run and the re-placement of its shards after lost workers."""

    def __init__(self, client, placement, alive, snapshot_token: str, backup: bool):
        self.client, self.placement, self.alive = client, placement, alive
        self.snapshot_token, self.backup = snapshot_token, backup
        self.backups: dict[int, str] = {}  # shard -> the worker holding its chunk-start backup
        self.recoveries: list[dict] = []

    # ------------------------------------------------------------------ backups
    def write_backups(self) -> None:
        """Write every shard's new state on its buddy's disk (the next worker in order).

        Array by array (cluster.snapshot.PIECES), each buddy receiving one at a time: a piece is a
        key of its own on the host (the array itself, no copy), released once written, so neither
        worker keeps a second copy in memory.
        """
        used = self.placement.used
        if not self.backup or len(used) < 2:
            self.backups = {}
            return
        # why lazy: distributed loads only when a run recovers
        from distributed import wait

        client, token = self.client, self.snapshot_token
        owner, states = self.placement.owner, self.placement.states
        buddy = dict(zip(used, used[1:] + used[:1]))
        hosts = {p: buddy[owner[p]] for p in sorted(states)}
        queues = [
            [(p, name) for p in hosts if hosts[p] == b for name in PIECES]
            for b in dict.fromkeys(hosts.values())
        ]
        for wave in itertools.zip_longest(*queues):
            written = [
                client.submit(
                    store_piece,
                    client.submit(piece_of, states[p], name, workers=[owner[p]], pure=False),
                    token,
                    p,
                    name,
                    workers=[hosts[p]],
                    allow_other_workers=False,
                    pure=False,
                )
                for p, name in filter(None, wave)
            ]
            with client.as_current():
                wait(written)
            client.gather(written)
        client.gather(
            [
                client.submit(
                    commit_backup,
                    token,
                    p,
                    workers=[hosts[p]],
                    allow_other_workers=False,
                    pure=False,
                )
                for p in hosts
            ]
        )
        self.backups = hosts

    # ------------------------------------------------------------------ rerun
    def settled_alive(self) -> set:
        """Return alive() once it has stayed the same for settle-seconds (at most settle-limit s)."""
        settle, limit = setting("settle-seconds"), setting("settle-limit")
        alive, since = self.alive(), time.monotonic()
        deadline = since + limit
        while time.monotonic() - since < settle and time.monotonic() < deadline:
            time.sleep(0.05)
            now = self.alive()
            if now != alive:
                alive, since = now, time.monotonic()
        return alive

    def recover(self, error, workers: list[str], origin, decisions: dict, chunk_first: int):
        """Re-place the shards of dead workers on the survivors, their states as at the chunk's start.

        origin: the RunState the first chunk started from (None after it: the states then come back
        from the chunk-start files and backups); decisions: {worker: the decisions after the last
        chunk}; chunk_first names the failed chunk's files. Returns the survivors.
        """
        alive = self.settled_alive()
        survivors = [a for a in workers if a in alive]
        if not survivors:
            raise ClusterError(f"no workers left after: {error}; {RESUME_HINT}") from error
        self.recoveries.append({"error": str(error), "survivors": len(survivors)})
        placed = self.placement
        if origin is not None:  # failed in the first chunk: the client still has the start
            placed.place(survivors)
            self.backups = {}
            return survivors

        states, lost = self._chunk_start_states(alive, chunk_first)
        holder = next((a for a in placed.used if a in alive), None)
        if lost or holder is None:
            raise ClusterError(f"{self._loss(lost)}; {RESUME_HINT}") from error
        commons = placed.commons
        placed.place(survivors)
        placed.states = states
        # one CommonState per worker (each steps its own in place): a worker new to the chunk gets a
        # copy of the holder's; the decisions are those of the last chunk's summaries
        decided = decisions.get(holder) or next(iter(decisions.values()))
        placed.commons = {}
        for a in placed.used:
            source = a if a in commons else holder
            placed.commons[a] = self.client.submit(
                chunk_start,
                commons[source],
                self.snapshot_token,
                chunk_first,
                decisions.get(source, decided),
                source != a,
                workers=[source],
                pure=False,
            )
        return survivors

    def _chunk_start_states(self, alive: set, chunk_first: int):
        """Return ({shard: future of its chunk-start state}, [shards lost for good]).

        The failed chunk stepped the survivors' states in place: each is taken back to the chunk's
        start (its file); a dead host's shards come from their buddies' files.
        """
        client, token, placed = self.client, self.snapshot_token, self.placement
        states, lost = {}, []
        for p, fut in placed.states.items():
            if placed.owner[p] in alive:
                states[p] = client.submit(
                    chunk_start, fut, token, chunk_first, workers=[placed.owner[p]], pure=False
                )
            elif p in self.backups and self.backups[p] in alive:
                states[p] = client.submit(
                    load_backup, token, p, workers=[self.backups[p]], pure=False
                )
            else:
                lost.append(p)
        return states, lost

    def _loss(self, lost: list) -> str:
        """Return what was lost for good: shards with their hosts and backups, or the replicated state."""
        if not lost:
            return "every copy of the replicated state was lost"
        owner = self.placement.owner
        dead = sorted(
            {owner[p] for p in lost} | {self.backups[p] for p in lost if p in self.backups}
        )
        return (
            f"shards {', '.join(map(str, sorted(lost)))} were lost with their hosts and backups "
            f"({', '.join(dead)})"
        )


@contextlib.contextmanager
def reporting_cluster_losses(client):
    """Turn whatever Dask raises once the scheduler or a worker is gone into one ClusterError (cluster_lost)."""
    before = set(worker_info(client))
    try:
        yield
    except (Exception, asyncio.CancelledError) as exc:
        raise cluster_lost(client, exc, before) or exc  # noqa: B904 (exc is the context already)


def cluster_lost(client, error, workers_before: set) -> ClusterError | None:
    """Return one clear ClusterError when `error` came from losing the scheduler or a worker, else None.

    Dask reports a dead scheduler, or a worker that died while it received data (killed at its
    memory limit during placement: a KeyError), through many exceptions with multi-line texts;
    the client's status and the scheduler's list of workers say which case it is. Errors the
    run reports itself (InputError, ClusterError) and failures with every worker alive pass.
    """
    if isinstance(error, InputError):
        return None
    text = str(error).strip().splitlines()
    why = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    if client.status != "running" or not _scheduler_answers(client):
        return ClusterError(
            f"lost the connection to the Dask scheduler at {client.scheduler.address} ({why}); "
            f"{RESUME_HINT}"
        )
    gone = sorted(workers_before - set(worker_info(client)))
    if not gone:
        return None
    return ClusterError(
        f"worker {', '.join(gone)} died during the run ({why}); if it was killed at its memory "
        f"limit, use more workers or a larger limit; {RESUME_HINT}"
    )


def _scheduler_answers(client, timeout: float = 3.0) -> bool:
    """True when the scheduler answers an identity request within `timeout` s."""
    try:
        client.sync(client.scheduler.identity, callback_timeout=timeout)
        return True
    except Exception:
        return False
