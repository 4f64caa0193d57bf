"""What a chunk task needs besides its data and state: the run's constants and the chunk's cycles."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class FactorConfig:
    """Constants of a matrix-factorization run, identical on every worker (copied from the problem).

    n_shards: B row shards U_0..U_{B-1} (shards 0..B-1 of the engine), V_0..V_{B-1} are shards
    B..2B-1; v_bounds: offsets of V's shards inside V's flat buffer; heldout_range: the (lo, hi)
    the test predictions are clipped to (the problem's, hamsi.problems.matrix_factorization.heldout_range).
    """

    rank: int
    width: int
    n_items: int
    n_ratings: int
    n_test: int
    scale: float
    offset: float
    reg: float
    col_reg: np.ndarray
    col_norm_weight: np.ndarray
    n_subsets: int
    v_bounds: np.ndarray
    n_shards: int
    heldout_range: tuple


@dataclass(frozen=True)
class ReplicatedConfig:
    """Constants of a run with x replicated on every worker: the engine's shard bounds."""

    bounds: np.ndarray


@dataclass
class ChunkPlan:
    """One chunk of cycles for all workers: who hosts which shard, the cycles, the constants.

    epochs: the cycle numbers of the chunk (the subset orders come from each worker's copy of the
    Stepper, whose schedule rng is part of the replicated state).
    """

    run_id: str
    workers: list
    owner: dict
    epochs: range
    config: object
    timeout: float = 60.0
    shared: bool = False  # V in shared memory (cluster.shared): all workers on one host, STRATA/-B
    v_holders: list | None = (
        None  # V owned on the message path: [k][j] -> the worker of V_j's home in subset k
    )
    secret: bytes = field(
        default=b"", repr=False
    )  # authenticates the chunk's direct links (cluster.links)
    snapshot: str = (
        ""  # the run's token of the chunk-start files (cluster.snapshot); "" writes none
    )

    @property
    def lead(self) -> str:
        """The worker that creates the chunk's shared memory and writes restores into it."""
        return self.workers[0]

    def shards_of(self, address: str) -> list[int]:
        """Return the shards hosted by `address`, in shard order."""
        return sorted(p for p, a in self.owner.items() if a == address)

    def make_work(self, datas, states, common, me, replica=None):
        """Return this worker's work object (cluster.work) for the chunk (replica: the shared V, or None)."""
        # why lazy: cluster.work compiles numba kernels, needed only when a plan is run
        from cluster.work import FactorWork, OwnedFactorWork, ReplicatedWork, SharedFactorWork

        if isinstance(self.config, FactorConfig):
            if replica is not None:
                return SharedFactorWork(
                    self.config, datas, states, common, replica, me == self.lead
                )
            if self.v_holders is not None:
                return OwnedFactorWork(self.config, datas, states, common, me, self.v_holders)
            return FactorWork(self.config, datas, states, common)
        problem, heldout = datas[0]
        return ReplicatedWork(
            self.config, problem, heldout, common, self.workers.index(me), len(self.workers)
        )
