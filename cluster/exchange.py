"""MailboxExchange: hamsi's Exchange protocol on Dask workers, and the chunk task that runs the loop.

Every worker runs `hamsi.loop` with its own copy of the Stepper and StopRules; one inner
iteration is one all-to-all round of typed Messages among the workers (no client, no scheduler):
1. the work (cluster.work) adds the subset's gradient on its shards and forms their partials;
2. the Message {gradient rows of the replicated part, shard partials, clock vote} goes to every
   peer (cluster.mailbox), and the peers' messages of the same step come back; with V shared or
   owned over the direct links, a partials record instead (cluster.messages.partials_record),
   and with V owned (cluster.work.OwnedFactorWork) a Message of the V shards a peer steps next;
3. the replicated gradient is assembled in a fixed order, the remaining partials formed, and all
   partials handed to the stepper in shard order, which decides exactly as in one process.
A cycle's evaluation is one more small round (train/test sums, clocks: the largest is the
agreed optimization time, so every worker applies the same stop rules).

A worker that is stopped (SIGSTOP, a frozen host) makes its peers wait in their rounds: that is
no optimization time. Each worker's StallClock (cluster.mailbox) measures the seconds it was
stopped in the chunk's timed phases, every message carries them, and every worker takes the
largest it heard off its clock (PhaseTimes.stalled). A worker also reads its own stops at every
reading of its clock: a stop while it waited in a round is in that round's wait, and must be off
the clock before the clock is compared with max_time, not only once its next message leaves. So
the stopped worker's clock and the agreed one are the time spent optimizing. Stops in untimed
spans (the start barrier; a cycle's evaluation without the safeguard, which counts it) are not
counted, as those spans are not. Two workers stopped at different times count only the longer
stop off; a worker cut off by the network is not stopped and still counts.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time

import numpy as np

from cluster.errors import PeerLost
from cluster.links import MAX_ARRAYS, FrameLimit
from cluster.messages import (
    MAX_SENDER_BYTES,
    RECORD_STALLED,
    RECORD_VOTE,
    Message,
    partials_record,
    record_layout,
    stacked_fields,
)
from cluster.run_state import ABORTED
from cluster.shared import SharedReplica, find, path_of, remove_stale
from cluster.snapshot import write_own
from hamsi import kernels, loop
from hamsi.exchange import Evaluation, Reductions
from hamsi.optimizer import numba_threads
from hamsi.trace import PhaseTimes, Trace

FIELDS = ("pair", "new_pair_g", "gram", "wtg", "norms")


class MailboxExchange:
    """The Exchange of one worker: its work, its mailbox, and the round counter of this chunk."""

    def __init__(
        self,
        box,
        plan,
        me: str,
        work,
        phases: PhaseTimes,
        time_used: float,
        evaluation_timed: bool = True,
    ):
        self.box, self.plan, self.me, self.work, self.phases = box, plan, me, work, phases
        self.evaluation_timed = evaluation_timed  # the safeguard counts a cycle's evaluation
        self.peers = [a for a in plan.workers if a != me]
        self.time_used = time_used
        self._step = 0
        self.bytes_sent = 0  # over the links (or the comms) in this chunk
        self._stall_base = None  # the stall clock when the chunk's rounds began
        self._stall_untimed = 0.0  # seconds stopped in untimed spans since then
        self._records: bool | None = None  # inner iterations trade partials records (_records_fit)

    def start_clock(self) -> None:
        """Start counting this worker's stops (after the start barrier, which is not timed)."""
        self._stall_base = self.box.stalls.total()

    def stalled(self) -> float:
        """Return the seconds this worker was stopped in the chunk's timed phases."""
        if self._stall_base is None:
            return 0.0
        return self.box.stalls.total() - self._stall_base - self._stall_untimed

    @contextlib.contextmanager
    def _untimed(self):
        """A span not timed in the phases: a stop in it is not taken off the clock either."""
        before = self.box.stalls.total()
        try:
            yield
        finally:
            self._stall_untimed += self.box.stalls.total() - before

    def _take_off(self, *heard: float) -> None:
        """Take off the clock the longest stop known: this worker's own so far, or one a peer reported."""
        self.phases.stalled = max(self.phases.stalled, self.stalled(), *heard)

    def clock(self) -> float:
        """This worker's optimization time: before the chunk plus this chunk's phases, less stops (module docstring).

        Its own stops are read at every call: a stop while it waited in a round or stepped is
        already in those phases, and must be off the clock before the clock is compared with
        max_time, not only from the next message it sends.
        """
        self._take_off()
        return self.time_used + self.phases.total

    def _round(
        self,
        message: Message,
        timed: bool = True,
        addressed: dict | None = None,
        counted: bool = False,
    ) -> list[Message]:
        """Send `message` to every peer and return all messages of this round (ours included).

        addressed: {peer: Message} sent instead, each peer its own (`message` is then ours).
        timed: add the round's sending and waiting to the exchange and wait phases (the
        evaluation's round is not: like the in-process evaluation it counts only as the
        safeguard's time, through Evaluation.seconds, and only when the safeguard is on).
        counted: an untimed round that the clock counts all the same (a stop in it is taken off).
        """
        self._step += 1
        stalled = self.stalled()
        for m in [message, *(addressed or {}).values()]:
            m.step, m.stalled = self._step, stalled
        self._take_off(stalled)
        if not self.peers:
            return [message]
        with contextlib.nullcontext() if timed or counted else self._untimed():
            received, sending, waiting, nbytes = self.box.round(
                self.plan.run_id,
                self._step,
                self.peers,
                message if addressed is None else addressed,
                self.plan.timeout,
            )
        self._take_off(*(m.stalled for m in received))
        self.bytes_sent += nbytes
        if timed:
            self.phases.exchange += sending
            self.phases.wait += waiting
        return [message] + received

    def iterate(self, request) -> Reductions:
        start = time.perf_counter()
        parts, partials = self.work.compute(request)
        self.phases.gradient += time.perf_counter() - start
        if self._records is None:
            self._records = self._records_fit()
        if self._records:
            return self._iterate_records(request, parts, partials)
        messages = self._send_parts(request.vote, parts, partials)
        if any(m.vote for m in messages):
            return Reductions(stopped=True)
        start = time.perf_counter()
        every = self.work.complete(
            request,
            [p for m in messages for p in m.gradient + m.items],
            [p for m in messages for p in m.shards],
        )
        self.phases.update += time.perf_counter() - start
        return stacked_reductions(request, every)

    def _records_fit(self) -> bool:
        """Whether this chunk's inner iterations trade partials records (cluster.messages): the same
        answer on every worker, from the plan alone.

        They do when V is shared or owned (no gradient rows travel), the run's rounds go over the
        direct links, and every worker hosts as many row shards (so every record has one layout).
        """
        hosted = [list(self.plan.owner.values()).count(w) for w in self.plan.workers]
        return bool(
            self.peers
            and (self.work.shared or self.work.owned)
            and self.box.linked(self.plan.run_id)
            and len(set(hosted)) == 1
        )

    def _iterate_records(self, request, parts, partials) -> Reductions:
        """One inner iteration's round of partials records (and V shards handed on, with V owned)."""
        layout = record_layout(partials)
        if layout is None:
            raise RuntimeError("this worker's shards formed partials of different fields")
        self._step += 1
        stalled = self.stalled()
        self._take_off(stalled)
        record = partials_record(layout, self._step, request.vote, stalled, partials)
        items = {
            p: Message(self._step, self.me, stalled=stalled, items=shards)
            for p, shards in (parts or {}).items()
            if shards
        }
        records, received, sending, waiting, nbytes = self.box.record_round(
            self.plan.run_id, self.peers, record, items, self.plan.timeout
        )
        self._take_off(float(records[:, RECORD_STALLED].max()))
        self.bytes_sent += nbytes
        self.phases.exchange += sending
        self.phases.wait += waiting
        if request.vote or records[:, RECORD_VOTE].any():
            return Reductions(stopped=True)
        start = time.perf_counter()
        self.work.complete(request, [item for m in received.values() for item in m.items], [])
        _, fields = stacked_fields(layout, np.vstack([record, records]))
        self.phases.update += time.perf_counter() - start
        requested = {name: getattr(request, name) for name in FIELDS if name != "new_pair_g"}
        return Reductions(
            **{name: fields[name] if wanted else None for name, wanted in requested.items()},
            new_pair_g=fields["new_pair_g"] if request.pair else None,
        )

    def _send_parts(self, vote: bool, parts, partials) -> list:
        """Run the iteration's round: this worker's gradient parts and partials to every peer.

        With owned V, `parts` maps each peer to the V shards it holds next (a message per peer;
        peers that get no V shard share one Message, so one frame is encoded for them).
        """
        if not isinstance(parts, dict):
            return self._round(Message(0, self.me, vote=vote, gradient=parts, shards=partials))
        mine = Message(0, self.me, vote=vote, shards=partials)
        addressed = {
            p: Message(0, self.me, vote=vote, shards=partials, items=parts[p])
            if parts.get(p)
            else mine
            for p in self.peers
        }
        return self._round(mine, addressed=addressed)

    def store_pair(self, slot: int) -> None:
        self.work.store_pair(slot)

    def remember_start(self) -> None:
        self.work.remember_start()

    def step(self, coef, sigma: float, inv_beta: float) -> None:
        self.work.step(coef, sigma, inv_beta)

    def save(self, name: str) -> None:
        self.work.save(name)

    def restore(self, name: str) -> None:
        self.work.restore(name)
        if self.work.shared:  # the lead wrote the shared V: nobody reads it before that is done
            self.barrier()

    def barrier(self, timed: bool = True) -> None:
        """Return once every worker reached this point (one round of empty messages)."""
        self._round(Message(0, self.me), timed=timed)

    def evaluate(self) -> Evaluation:
        if self.work.shared:  # the last steps of the shared V are done before anyone reads it
            self.barrier()
        if (
            self.work.owned and not self.work.replicated
        ):  # every worker gets the V shards stepped elsewhere
            messages = self._round(Message(0, self.me, items=self.work.sync_items()))
            self.work.receive_sync([item for m in messages[1:] for item in m.items])
        start = time.perf_counter()
        with contextlib.nullcontext() if self.evaluation_timed else self._untimed():
            mine = self.work.evaluation()
        clock = self.clock()
        messages = self._round(
            Message(0, self.me, clock=clock, evaluation=mine),
            timed=False,
            counted=self.evaluation_timed,
        )
        train, objective, heldout = self.work.reduce_evaluation(
            [e for m in messages for e in m.evaluation]
        )
        return Evaluation(
            train, objective, heldout, max(m.clock for m in messages), time.perf_counter() - start
        )


def stacked_reductions(request, every: list) -> Reductions:
    """Return the Reductions of `request`: each requested field's per-shard rows stacked in shard order."""
    stacked = {
        name: np.vstack([getattr(p, name) for p in every]) if getattr(request, name) else None
        for name in FIELDS
        if name != "new_pair_g"
    }
    pair_g = np.vstack([p.new_pair_g for p in every]) if request.pair else None
    return Reductions(**stacked, new_pair_g=pair_g)


@contextlib.contextmanager
def frozen_heap():
    """Keep the objects that exist now out of the cyclic collector's passes while the block runs.

    A Dask worker holds some 10^5 long-lived objects; a full collection of them, triggered by the
    rounds' short-lived ones, is a pause of tens of milliseconds in the middle of a chunk that
    every peer waits for (docs/benchmarks.md). gc.freeze moves them to the permanent generation,
    which no collection scans; gc.unfreeze gives them back afterwards. Nothing is kept alive
    longer: reference counting frees what it freed before, and only cyclic garbage among the
    frozen objects waits for the next collection after the block.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_chunk(plan, datas: list, states: list, common) -> dict:
    """Return {"states", "common", "records", "reason", "message", "phases", "bytes_sent", "worker"} after the cycles.

    The pinned task of one worker: builds its work and MailboxExchange and runs hamsi.loop on the
    chunk's cycles, stepping `states` and `common` in place (no working copy: the returned states
    are the inputs). What the driver reruns the chunk from if a worker dies is on disk: with
    plan.snapshot set, the inputs are written to this worker's snapshot files first
    (cluster.snapshot.write_own). A chunk the driver aborts (Ctrl-C, a failure elsewhere)
    returns {"reason": ABORTED, "worker"} instead of raising: the driver says what happened, and
    a task error would be logged by the worker first. The driver never reads it (summarize refuses it).
    """
    # why lazy: distributed loads only on the workers that run the mailbox
    from distributed import get_worker

    from cluster.mailbox import local_mailbox

    me = get_worker().address
    box = local_mailbox()
    if plan.snapshot:
        write_own(plan.snapshot, plan.epochs.start, states, common)
    for holder in (
        *states,
        common,
    ):  # the L-BFGS rows in the kernels' layout (a copy only when they arrived)
        if getattr(holder, "S", None) is not None:
            holder.S, holder.Y = kernels.as_memory_rows(holder.S, holder.Y)
    phases = PhaseTimes()
    stepper, stop, trace = common.stepper, common.stop, Trace()
    exchange = MailboxExchange(box, plan, me, None, phases, common.time_used, stepper.safeguard)
    replica = None
    try:
        box.start(
            plan.run_id,
            exchange.peers,
            plan.timeout,
            plan.secret or None,
            frame_limit(plan.config, common.S.shape[0]),
        )
        exchange.start_clock()
        replica = open_replica(plan, exchange, common, me) if plan.shared else None
        exchange.work = plan.make_work(datas, states, common, me, replica)
        # one numba thread: the kernels run one block each (cluster.work), and a second OpenMP
        # thread would only join every kernel's barrier (a stall when the machine is busy)
        with numba_threads(1), frozen_heap():
            if not common.started:
                loop.start(stepper, exchange, stop, trace, None)
                common.started = True
            reason, message, epoch = loop.run_cycles(
                stepper, exchange, stop, trace, None, plan.epochs
            )
            if reason is not None and stop.keeps_best and stop.best_epoch is not None:
                exchange.restore("best")
        if replica is not None:
            replica.copy_out(common)
    except PeerLost:
        if not box.aborted(plan.run_id):
            raise
        # the driver stopped the chunk (Ctrl-C, or a failure elsewhere) and says so itself: an
        # error here would be logged by the worker ("Compute Failed") before the driver's line
        return {"reason": ABORTED, "worker": me}
    finally:
        box.forget(plan.run_id)
        if replica is not None:
            exchange.work = None
            replica.close()
    common.time_used = exchange.clock()
    common.cycles_done = epoch if epoch is not None else common.cycles_done
    return {
        "states": states,
        "common": common,
        "records": trace.rows,
        "reason": reason,
        "message": message,
        "phases": phases.as_dict(),
        "bytes_sent": exchange.bytes_sent,
        "worker": me,
    }


def frame_limit(config, memory: int) -> FrameLimit:
    """Return what a frame of this run may declare: no array longer than the longest this run sends.

    Matrix factorization: gV rows of a shard (n_items x width), the partials (2M + 2), a worker's
    evaluation sums (shards x (subsets + 2)); a replicated run: one block's contribution to x.
    """
    if hasattr(config, "n_items"):
        longest = max(config.n_items * config.width, (config.n_shards + 1) * (config.n_subsets + 3))
    else:
        longest = int(config.bounds[-1])
    longest = max(
        longest, 2 * memory + 2, 4 * MAX_ARRAYS + 8, MAX_SENDER_BYTES
    )  # + the skeleton of counts
    return FrameLimit(max_arrays=MAX_ARRAYS, max_array_bytes=8 * longest)


def open_replica(plan, exchange, common, me: str):
    """Return this worker's map of the chunk's shared V (cluster.shared): the lead creates it, all map it.

    The lead unlinks the file once every worker has mapped it, so /dev/shm keeps nothing (and
    first removes the files of dead leads: cluster.shared.remove_stale).
    """
    lead = me == plan.lead
    path = path_of(plan.run_id, os.getpid()) if lead else None
    try:
        if lead:
            remove_stale()
        replica = SharedReplica.create(path, common) if lead else None
        exchange.barrier(timed=False)
        if not lead:
            replica = SharedReplica.attach(find(plan.run_id), common)
        exchange.barrier(timed=False)
    finally:
        if lead and path is not None and os.path.exists(path):
            os.unlink(path)
    return replica
