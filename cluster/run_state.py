"""The typed records a distributed run keeps between chunks: where it starts from, what a chunk reported."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.errors import PeerLost


@dataclass
class RunState:
    """The state a chunk starts from: full vectors (or None: the workers build the start), the decisions.

    full holds x, the L-BFGS memory rows and the stepper's saved vectors ({} entries at a new start);
    it is None when the layout builds the start point on the workers (ratings that never reach the
    client). stepper, stop: the Stepper and StopRules; time_used and cycles_done: the clocks.
    """

    full: dict | None
    stepper: object
    stop: object
    time_used: float = 0.0
    cycles_done: int = 0
    started: bool = False

    def decisions(self) -> dict:
        """Return the fields a worker's CommonState takes (cluster.shard.CommonState)."""
        return dict(
            stepper=self.stepper,
            stop=self.stop,
            time_used=self.time_used,
            cycles_done=self.cycles_done,
            started=self.started,
        )


@dataclass
class ChunkSummary:
    """The small part of one worker's chunk result that the client receives (cluster.exchange.run_chunk).

    records: the cycles' trace rows; phases: seconds per phase; stepper, stop: the decisions after the
    chunk; reason, message: why the run stopped (None, "" to go on); bytes_sent: to the worker's peers.
    """

    records: list
    phases: dict
    stepper: object
    stop: object
    reason: str | None
    message: str
    cycles_done: int
    time_used: float
    worker: str
    bytes_sent: int = 0

    def decisions(self) -> dict:
        """Return the decisions a rerun of the next chunk starts from (as RunState.decisions)."""
        state = RunState(None, self.stepper, self.stop, self.time_used, self.cycles_done, True)
        return state.decisions()


# The reason of a chunk task the driver aborted (cluster.exchange.run_chunk): it holds no state
ABORTED = "aborted by the driver"


def summarize(result: dict) -> ChunkSummary:
    """Return the ChunkSummary of a chunk task's result (a task on the worker that ran the chunk)."""
    if result["reason"] == ABORTED:  # the driver never reads an aborted chunk; refuse if it did
        raise PeerLost(f"the chunk on {result['worker']} was aborted by the driver")
    common = result["common"]
    return ChunkSummary(
        records=result["records"],
        phases=result["phases"],
        stepper=common.stepper,
        stop=common.stop,
        reason=result["reason"],
        message=result["message"],
        cycles_done=common.cycles_done,
        time_used=common.time_used,
        worker=result["worker"],
        bytes_sent=result["bytes_sent"],
    )
