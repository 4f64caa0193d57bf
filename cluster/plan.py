"""What a chunk task needs to know besides its data and state: the run's constants and the chunk's cycles."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Imported here, not inside inv_beta: a worker's first import of hamsi.optimizer (scipy.optimize
# included) took ~0.2 s and fell inside the first cycle's timed step.
from hamsi.optimizer import beta_schedule


@dataclass(frozen=True)
class RunConfig:
    """Constants of one run, identical on every worker (copied from the engine's problem and options).

    method: "hamsi" (Alg. 3) or "mbgd" (x -= g / beta). As in hamsi.optimizer, beta_t = (eta t)^gamma
    with t the inner-iteration counter, and HAMSI takes gradient steps with eta_gd until its memory
    holds M pairs. v_bounds: offsets of V_0..V_{B-1} inside V's flat buffer (the engine's V shards).
    """

    method: str
    rank: int
    width: int
    n_items: int
    n_ratings: int
    scale: float
    offset: float
    reg: float
    col_reg: np.ndarray
    col_norm_weight: np.ndarray
    memory: int
    eta: float
    gamma: float
    eta_gd: float
    n_subsets: int
    v_bounds: np.ndarray
    n_shards: int

    def inv_beta(self, inner: int, quasi_newton: bool) -> float:
        """Return 1 / beta_t for inner iteration t (thesis Alg. 3, line 5; hamsi.optimizer.beta_schedule)."""
        eta = self.eta if (quasi_newton or self.method == "mbgd") else self.eta_gd
        return 1.0 / beta_schedule(eta, self.gamma, inner)


@dataclass
class ChunkPlan:
    """One chunk of cycles for all workers: who hosts which shard, the subset orders, stop rules.

    cycles: [(t, order)] with order the subset indices of cycle t (computed once on the client,
    so stochastic schedules need no shared random state on the workers).
    """

    run_id: str
    workers: list
    owner: dict
    cycles: list
    config: RunConfig
    stop: "StopRules"
    timeout: float = 60.0
    n_test: int = 0

    @property
    def first_cycle(self) -> int:
        """The number of the chunk's first cycle (1-based)."""
        return int(self.cycles[0][0])

    def shards_of(self, address: str) -> list[int]:
        """Return the shards hosted by `address`, in shard order."""
        return sorted(p for p, a in self.owner.items() if a == address)


@dataclass
class StopRules:
    """The engine's stopping rules (hamsi.optimizer._Run), applied by every worker to the same numbers.

    time_used is the optimization time spent before this chunk; best_heldout, without_gain and
    previous_objective carry the patience / tol state across chunks.
    """

    max_epochs: int | None = None
    max_time: float | None = None
    tol: float = 0.0
    target: float | None = None
    patience: int | None = None
    eta: float = 0.0
    has_heldout: bool = False
    time_used: float = 0.0
    best_heldout: float = float("inf")
    without_gain: int = 0
    previous_objective: float | None = None

    def check(self, epoch: int, inner: int, time_total: float, train: float, heldout: float,
              objective: float) -> tuple[str, str] | None:
        """Return (reason, message) when the run must stop after cycle `epoch`, else None."""
        import math

        if not (math.isfinite(objective) and math.isfinite(train)):
            return "diverged", (f"diverged: the objective became {objective} in cycle {epoch} (inner iteration "
                                f"{inner}); the steps 1/beta_t are too large for this problem - try a "
                                f"smaller eta (now {self.eta})")
        if self.target is not None and train <= self.target:
            return "target", f"train rmse {train:.6g} reached the target {self.target:g} in cycle {epoch}"
        if self.patience is not None and self.has_heldout and math.isfinite(heldout):
            if heldout < self.best_heldout:
                self.best_heldout = heldout
                self.without_gain = 0
            else:
                self.without_gain += 1
                if self.without_gain >= self.patience:
                    return "early_stop", (f"validation rmse did not improve on {self.best_heldout:.6g} for "
                                          f"{self.patience} cycles (cycle {epoch})")
        previous, self.previous_objective = self.previous_objective, objective
        if previous is not None and self.tol > 0 and abs(previous - objective) <= self.tol * abs(objective):
            return "tolerance", (f"the objective changed by {abs(previous - objective):.3g} <= tol * |f| "
                                 f"(tol {self.tol:g}) in cycle {epoch}")
        if self.max_epochs is not None and epoch >= self.max_epochs:
            return "epoch_limit", f"reached max_epochs = {self.max_epochs}"
        if self.max_time is not None and time_total >= self.max_time:
            return "time_limit", (f"optimization time {time_total:.3f} s reached max_time = "
                                  f"{self.max_time:g} s in cycle {epoch}")
        return None
