"""One distributed run: its Placement, ChunkRunner and Recovery, and the loop over chunks.

The client places every shard's data on its host once (cluster.placed), then per chunk of cycles
submits one pinned task per worker (cluster.chunks), which runs `hamsi.loop` with a
MailboxExchange: the workers exchange gradients and reductions peer to peer (no client, no
scheduler inside a chunk), and the client receives only the per-cycle records. Between chunks it
keeps buddy copies of the state (cluster.recovery: a lost worker costs a rerun of one chunk) and
writes checkpoints.
"""

from __future__ import annotations

import itertools
import secrets
import sys
import time
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from cluster import checkpoint as ckpt
from cluster.chunks import ChunkRunner
from cluster.errors import ChunkFailures, PeerLost
from cluster.layout import layout_for
from cluster.mailbox import install
from cluster.placed import Placement
from cluster.plan import ChunkPlan
from cluster.recovery import RESUME_HINT, Recovery
from cluster.run_state import ChunkSummary, RunState
from cluster.settings import setting
from cluster.snapshot import new_run, remove
from cluster.warm import warm_up
from hamsi.optimizer import finish_result, start_point
from hamsi.problems import MatrixFactorization
from hamsi.trace import PhaseTimes, Trace


class DistributedRun:
    """One distributed run: its Placement, ChunkRunner and Recovery, and the loop over chunks."""

    def __init__(
        self,
        problem,
        partition,
        client,
        workers,
        *,
        heldout,
        backup,
        peer_timeout,
        quiet,
        memory,
        shared_memory=None,
        owned_v=None,
    ):
        self.problem, self.partition, self.client = problem, partition, client
        self.heldout, self.quiet = heldout, quiet
        self.peer_timeout = setting("peer-timeout") if peer_timeout is None else peer_timeout
        self.layout_k = problem.arrange(partition).n_subsets
        self.bounds = problem.shard_bounds(partition)
        self.layout = layout_for(problem, partition, self.bounds, heldout)
        self.memory_size = int(memory)
        self.workers = list(workers)
        self.fingerprint_extra: dict = {}
        self.placement = Placement(
            client, problem, self.layout, memory, shared_memory=shared_memory, owned_v=owned_v
        )
        self.runner = ChunkRunner(client, self.placement, self.peer_timeout)
        # the token names the run's chunk-start files on the workers' disks; those of runs whose
        # client is gone are removed (cluster.snapshot)
        self.recovery = Recovery(client, self.placement, self.runner.alive, new_run(client), backup)
        self.failures = ChunkFailures(setting("max-recoveries"))  # when a failed chunk is rerun
        self.shared_used = False  # any chunk ran with V in shared memory
        self.owned_used = False  # any chunk ran with V owned on the message path
        self.random_state = None
        self.origin: RunState | None = None  # the first chunk's start, while it has not finished
        self.decisions: dict = {}  # {worker: its decisions after the last chunk}
        install(client)
        # numba loads its cached kernels on first call; do it before the clock starts
        client.run(warm_up, getattr(problem, "width", 2), int(memory))

    @property
    def used(self) -> list[str]:
        """The workers of the current placement, in order (the first is the lead)."""
        return self.placement.used

    # ------------------------------------------------------------------ start
    # ------------------------------------------------------------------ start
    def _start(self, stepper, stop, x0, random_state, resume, trace) -> RunState:
        """Return the RunState of a new run, or of a resumed one (its trace rows appended to `trace`)."""
        self.random_state = random_state
        if resume is not None:
            return resumed_state(resume, self.fingerprint(), stop, trace)
        if x0 is None and getattr(self.layout, "builds_start", False):
            return RunState(None, stepper, stop)
        return RunState(
            start_vectors(self.problem, x0, random_state, self.memory_size), stepper, stop
        )

    def fingerprint(self) -> dict:
        """Return what a checkpoint must match to be resumed: data, cover and constants."""
        return dict(
            fingerprint(self.problem, self.partition, self.bounds, self.layout_k, self.memory_size),
            **self.fingerprint_extra,
        )

    # ------------------------------------------------------------------ one chunk
    def _plan(self, epochs) -> ChunkPlan:
        """Return the plan of the next chunk of cycles `epochs` on the current placement."""
        placed = self.placement
        shared = placed.can_share()
        return ChunkPlan(
            run_id=uuid.uuid4().hex[:12],
            workers=list(placed.used),
            owner=dict(placed.owner),
            epochs=epochs,
            config=self.layout.config,
            timeout=self.peer_timeout,
            shared=shared,
            v_holders=None if shared else placed.v_holders(self.layout_k),
            secret=secrets.token_bytes(32),
            snapshot=self.recovery.snapshot_token if len(placed.used) > 1 else "",
        )

    def _run_chunk(self, epochs, chunk_index, on_chunk) -> dict[str, ChunkSummary]:
        """Run one chunk to completion (rerunning it on the survivors after a loss); return the summaries."""
        while True:
            plan = self._plan(epochs)
            self.shared_used = self.shared_used or plan.shared
            self.owned_used = self.owned_used or plan.v_holders is not None
            futures = self.runner.submit(plan)
            if on_chunk is not None:
                on_chunk(
                    {
                        "chunk": chunk_index,
                        "first_cycle": epochs.start,
                        "workers": list(self.used),
                        "client": self.client,
                        "futures": futures,
                    }
                )
            try:
                self.runner.watch(futures, plan)
                summaries = self.runner.collect(futures)
            except PeerLost as error:
                self._recover(error, epochs.start)
                continue
            except BaseException:  # KeyboardInterrupt: stop the workers' tasks, then let it through
                # released, not cancelled: cancelling a chunk whose results' tasks the interrupt
                # just released trips the scheduler (an AssertionError traceback before the line)
                self.runner.abort(futures, plan, self.used, cancel=False)
                raise
            self.recovery.write_backups()
            self.decisions = {a: s.decisions() for a, s in summaries.items()}
            self.origin = None
            return summaries

    def _recover(self, error: PeerLost, chunk_first: int) -> None:
        """Give up after max-recoveries (naming --resume), else re-place the shards on the survivors."""
        self.failures.before_rerun(error, chunk_first, RESUME_HINT)
        if not self.quiet:
            where = "on the survivors" if getattr(error, "lost", True) else "after a pause"
            print(f"hamsi: {error}; rerunning the chunk {where}", file=sys.stderr, flush=True)
        self.workers = self.recovery.recover(
            error, self.workers, self.origin, self.decisions, chunk_first
        )
        if self.origin is not None:
            self.placement.scatter_start(self.origin, self.random_state)

    # ------------------------------------------------------------------ the run
    def optimize(
        self,
        stepper,
        stop,
        *,
        x0,
        random_state,
        chunk_cycles,
        checkpoint,
        checkpoint_every,
        resume,
        callback,
        on_chunk,
    ):
        """Run chunks until a stop rule fires; return the OptimizeResult (see finish_result)."""
        tally = _Tally()
        state = self._begin(stepper, stop, x0, random_state, resume, tally.trace)
        reason, message = _limit_at_start(state)
        wall_start = time.perf_counter()
        for chunk_index in itertools.count():
            if reason is not None:
                break
            last = chunk_end(
                state.cycles_done, state.stop, checkpoint, checkpoint_every, chunk_cycles
            )
            summaries = self._run_chunk(
                range(state.cycles_done + 1, last + 1), chunk_index, on_chunk
            )
            lead = summaries[self.used[0]]
            tally.add(summaries, lead, callback)
            reason, message = lead.reason, lead.message
            state = _state_after(lead, summaries)
            if _checkpoint_due(checkpoint, checkpoint_every, state.cycles_done, reason):
                self._save(checkpoint, tally.trace, state)
        x = self.layout.join(*self._gather(with_memory=False))["x"]
        wall = time.perf_counter() - wall_start
        self.release()
        return self._result(x, reason, message, state, tally, wall)

    def _begin(self, stepper, stop, x0, random_state, resume, trace) -> RunState:
        """Return the first chunk's RunState (see _start), the shards placed and that start scattered."""
        state = self._start(stepper, stop, x0, random_state, resume, trace)
        self.placement.place(self.workers)
        self.origin = state
        self.placement.scatter_start(state, random_state)
        return state

    def _result(self, x, reason, message, state: RunState, tally: _Tally, wall: float):
        """Return the OptimizeResult of the run (finish_result), with where and how it ran."""
        phases = tally.phases
        return finish_result(
            x,
            reason,
            message,
            tally.trace,
            phases,
            state.stepper,
            state.stop,
            state.cycles_done,
            shard_bounds=self.bounds,
            exchange_time=phases.exchange + phases.wait,
            worker_phases=tally.worker_phases,
            wall_time=wall,
            workers=list(self.used),
            shard_owner=dict(self.placement.owner),
            recoveries=list(self.recovery.recoveries),
            shared_memory=self.shared_used,
            owned_v=self.owned_used,
            worker_bytes_sent=tally.worker_bytes,
            time=max(state.time_used, phases.total),
        )

    def _save(self, directory, trace, state: RunState) -> None:
        """Write a checkpoint of the whole state (factors, memory, decisions, trace) to `directory`."""
        full = self.layout.join(*self._gather(with_memory=True))
        arrays = {k: v for k, v in full.items() if k != "saved"}
        arrays.update({f"saved_{k}": v for k, v in full["saved"].items()})
        ckpt.save(
            directory,
            arrays=arrays,
            meta={
                "trace": list(trace.rows),
                "stepper": state.stepper,
                "stop": state.stop,
                "time_used": state.time_used,
                "cycles_done": state.cycles_done,
            },
            fingerprint=self.fingerprint(),
        )

    def _gather(self, with_memory: bool):
        """Return (shard states in shard order, the lead's CommonState): see gather_states."""
        return gather_states(self.client, self.placement, self.layout.n_shards, with_memory)

    def release(self) -> None:
        """Drop every future of the run (the workers free the shards) and the chunk-start files."""
        self.placement.release()
        self.recovery.backups = {}
        # the workers of the last chunk, which just answered (a stopped one would never reply)
        self.client.run(
            remove, self.recovery.snapshot_token, workers=list(self.used), on_error="ignore"
        )


def gather_states(client, placed, n_shards: int, with_memory: bool):
    """Return (shard states in shard order, the lead's CommonState), whole or factors only.

    Only at checkpoints and at the end; without with_memory just x travels (small tasks on the
    hosts pick it out of their states), not the 2M memory rows.
    """
    lead = placed.used[0]
    pick = _state_whole if with_memory else _state_vector
    futures = [
        client.submit(pick, placed.states[p], workers=[placed.owner[p]], pure=False)
        for p in range(n_shards)
    ]
    futures.append(client.submit(pick, placed.commons[lead], workers=[lead], pure=False))
    parts = client.gather(futures)
    return parts[:-1], parts[-1]


def start_vectors(problem, x0, random_state, memory: int) -> dict:
    """Return the full vectors of a new run: x (x0, else the problem's seeded start), empty L-BFGS memory."""
    n, M = problem.n_params, memory
    return {
        "x": start_point(problem, x0, random_state),
        "S": np.zeros((M, n)),
        "Y": np.zeros((M, n)),
        "x_start": np.zeros(n),
        "g_start": np.zeros(n),
        "saved": {},
    }


def resumed_state(resume: str, fingerprint: dict, stop, trace) -> RunState:
    """Return the RunState saved in checkpoint directory `resume` (its trace rows appended to `trace`).

    The stop rules' state carries over; their limits are this call's.
    """
    arrays, meta = ckpt.load(resume, fingerprint)
    for row in meta["trace"]:
        trace.append(*row)
    full = {k: v for k, v in arrays.items() if not k.startswith("saved_")}
    full["saved"] = {k[len("saved_") :]: v for k, v in arrays.items() if k.startswith("saved_")}
    saved_stop = meta["stop"]
    for name in ("best_heldout", "best_epoch", "new_best", "without_gain", "previous_objective"):
        setattr(stop, name, getattr(saved_stop, name))
    return RunState(
        full, meta["stepper"], stop, meta["time_used"], meta["cycles_done"], started=True
    )


def fingerprint(problem, partition, bounds, n_subsets: int, memory: int) -> dict:
    """Return what a checkpoint must match to be resumed: data, cover and constants."""
    out = {
        "problem": type(problem).__name__,
        "n_params": int(problem.n_params),
        "n_functions": int(problem.n_functions),
        "scheme": getattr(partition, "scheme", None),
        "n_shards": int(bounds.size - 1),
        "n_subsets": int(n_subsets),
        "memory": memory,
    }
    if isinstance(problem, MatrixFactorization):
        p = problem
        out["ratings_checksum"] = float(np.sum(p.vals * (1.0 + p.rows % 7) * (1.0 + p.cols % 11)))
    return out


def chunk_end(cycles_done: int, stop, checkpoint, checkpoint_every, chunk_cycles) -> int:
    """Return the last cycle of the next chunk: chunk_cycles on, cut at max_cycles and checkpoints."""
    last = cycles_done + max(1, int(chunk_cycles))
    if stop.max_epochs is not None:
        last = min(last, stop.max_epochs)
    if checkpoint and checkpoint_every:
        last = min(last, (cycles_done // checkpoint_every + 1) * checkpoint_every)
    return last


@dataclass
class _Tally:
    """What the chunks reported, summed over the run: the lead's trace and phases, every worker's own."""

    trace: Trace = field(default_factory=Trace)
    phases: PhaseTimes = field(default_factory=PhaseTimes)
    worker_phases: dict = field(default_factory=dict)  # {worker: its phases' seconds}
    worker_bytes: dict = field(default_factory=dict)  # {worker: bytes it sent its peers}

    def add(self, summaries: dict[str, ChunkSummary], lead: ChunkSummary, callback) -> None:
        """Append the lead's cycle records to the trace (each to `callback`); add phases and bytes."""
        for row in lead.records:
            self.trace.append(*row)
            if callback is not None:
                callback(self.trace.rows[-1].record())
        _add_phases(self.phases, self.worker_phases, summaries)
        for addr, summary in summaries.items():
            self.worker_bytes[addr] = self.worker_bytes.get(addr, 0) + summary.bytes_sent


def _limit_at_start(state: RunState) -> tuple[str | None, str]:
    """Return (reason, message) of a run that starts at max_cycles (a resumed one), else (None, "")."""
    if state.stop.max_epochs is not None and state.cycles_done >= state.stop.max_epochs:
        return "epoch_limit", f"reached max_cycles = {state.stop.max_epochs}"
    return None, ""


def _state_after(lead: ChunkSummary, summaries: dict[str, ChunkSummary]) -> RunState:
    """Return the RunState after a chunk: the lead's stepper, stop rules and cycles; the slowest worker's time."""
    return RunState(
        None,
        lead.stepper,
        lead.stop,
        max(s.time_used for s in summaries.values()),
        lead.cycles_done,
        started=True,
    )


def _checkpoint_due(checkpoint, checkpoint_every, cycles_done: int, reason) -> bool:
    """Return True when a chunk ending at cycles_done writes a checkpoint: every checkpoint_every, and the last."""
    return bool(
        checkpoint
        and checkpoint_every
        and (cycles_done % checkpoint_every == 0 or reason is not None)
    )


def _add_phases(phases, worker_phases: dict, summaries: dict[str, ChunkSummary]) -> None:
    """Add the lead's phases to the run's and every worker's to its own (load balance diagnostics)."""
    lead = next(iter(summaries.values()))
    for key, value in lead.phases.items():
        setattr(phases, key, getattr(phases, key) + value)
    for addr, summary in summaries.items():
        mine = worker_phases.setdefault(addr, dict.fromkeys(summary.phases, 0.0))
        for key, value in summary.phases.items():
            mine[key] += value


def _state_whole(state):
    """Return the state unchanged (a checkpoint needs everything)."""
    return state


def _state_vector(state):
    """Return the state's vector only (U of a shard, x_rep of the replicated part): what the result needs."""
    if hasattr(state, "U"):
        return SimpleNamespace(U=state.U)
    return SimpleNamespace(x_rep=state.x_rep)
