"""The Exchange protocol: where HAMSI's vectors live and how their reductions are formed.

The stepper (`hamsi.stepper`) makes every decision of an inner iteration from a few reduced
numbers; an Exchange owns x, g, the memory rows S, Y and the cycle-start copies, cut into the
problem's parameter shards, and answers one `Request` per inner iteration with the per-shard
partials (rows in shard order; the stepper sums them with `kernels.sum_partials_in_order`, so
every exchange gives the same bits). `LocalExchange` keeps everything in this process;
`cluster.exchange.MailboxExchange` spreads the shards over Dask workers and sends the partials
peer to peer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hamsi import kernels
from hamsi.memory5_kernels import MEMORY
from hamsi.touched import touched_rows
from hamsi.trace import PhaseTimes


@dataclass(frozen=True)
class Request:
    """What one inner iteration needs: the subset's gradient and which partials (thesis Alg. 3, l. 9-14).

    vote: this process's clock reached max_time after the previous step; when any process voted
    the iteration is not run (`Reductions.stopped`). next_subset: the subset of the cycle's next
    inner iteration (-1 at the cycle's end), so an exchange may prepare for it.
    """

    subset: int
    pair: bool = False  # form the curvature pair s, y and its products (line 14)
    wtg: bool = False  # W^T g with the memory before the pair update (line 13)
    gram: bool = False  # s.s, S_j.s, Y_j.s (safeguard step cap)
    norms: bool = False  # g.g, x.x (safeguard step cap)
    vote: bool = False
    next_subset: int = -1


@dataclass
class Reductions:
    """Per-shard partials of one inner iteration, each (n_shards, width) in shard order, or None."""

    pair: np.ndarray | None = None  # [s.y, y.y, S_j.y, Y_j.y] (2M + 2)
    new_pair_g: np.ndarray | None = None  # [s.g, y.g]
    gram: np.ndarray | None = None  # [s.s, S_j.s, Y_j.s] (2M + 1)
    wtg: np.ndarray | None = None  # [S_j.g, Y_j.g] (2M)
    norms: np.ndarray | None = None  # [g.g, x.x]
    stopped: bool = False


@dataclass(frozen=True)
class Evaluation:
    """The numbers of one trace row: train error, objective, held-out error, optimization time.

    time_s is the same on every process (the Dask exchange agrees on the largest clock);
    seconds is what forming train error and objective cost (the safeguard counts it as its time).
    """

    train: float
    objective: float
    heldout: float
    time_s: float
    seconds: float = 0.0


class Exchange(Protocol):
    """Where the vectors of one run live; every method acts on all shards (see module docstring)."""

    phases: PhaseTimes

    def clock(self) -> float:
        """Return this process's optimization time so far (its phases)."""

    def iterate(self, request: Request) -> Reductions:
        """Set g to the gradient of request.subset at x and return the requested partials."""

    def store_pair(self, slot: int) -> None:
        """Write the candidate pair into memory row `slot` (line 17)."""

    def remember_start(self) -> None:
        """Keep x and g as the cycle's start (line 12)."""

    def step(self, coef, sigma: float, inv_beta: float) -> None:
        """x -= inv_beta (sigma g + W coef), or x -= inv_beta g when coef is None (line 13)."""

    def evaluate(self) -> Evaluation:
        """Return the current iterate's Evaluation."""

    def save(self, name: str) -> None:
        """Keep a copy of x under `name` (the safeguard's last good iterate, the best-validation one)."""

    def restore(self, name: str) -> None:
        """Set x to the copy saved under `name`."""


class LocalExchange:
    """All shards in this process: the sharded numba kernels, parallel over shards (kernels.vector_kernels)."""

    def __init__(
        self, problem, bounds: np.ndarray, x: np.ndarray, memory: int, heldout, phases: PhaseTimes
    ):
        self.problem, self.bounds, self.heldout, self.phases = problem, bounds, heldout, phases
        n, n_shards = problem.n_params, bounds.size - 1
        self.x = x
        self.g = np.zeros(n)
        self.S, self.Y = kernels.memory_rows(memory, n)
        self.x_start, self.g_start = np.zeros(n), np.zeros(n)
        self.s_new, self.y_new = np.zeros((1, n)), np.zeros((1, n))
        self._out = Reductions(
            pair=np.zeros((n_shards, 2 * memory + 2)),
            new_pair_g=np.zeros((n_shards, 2)),
            gram=np.zeros((n_shards, 2 * memory + 1)),
            wtg=np.zeros((n_shards, 2 * memory)),
            norms=np.zeros((n_shards, 2)),
        )
        self._saved: dict[str, np.ndarray] = {}
        self.k = kernels.vector_kernels(n)  # created under the run's numba thread count
        # the rows each subset's gradient can be nonzero on (None: every entry); g is zero off
        # the rows of the gradient it holds (`_holds`), so only those are cleared before the next
        self.touched = touched_rows(problem, bounds)
        self._holds: int | None = None
        self._store_slot: int | None = None  # a pair store_pair left for the step to write
        self._five = memory == MEMORY

    def clock(self) -> float:
        return self.phases.total

    def iterate(self, request: Request) -> Reductions:
        if request.vote:
            return Reductions(stopped=True)
        start = time.perf_counter()
        self._store_now()
        self._clear_gradient()
        self.problem.add_subset_gradient(self.x, self.g, request.subset)
        self._holds = request.subset
        middle = time.perf_counter()
        out = self._out
        if not self._touched_partials(request):
            self.k.sharded_iteration_partials(
                self.x,
                self.x_start,
                self.g,
                self.g_start,
                self.S,
                self.Y,
                self.s_new,
                self.y_new,
                self.bounds,
                request.pair,
                request.wtg,
                request.gram,
                request.norms,
                out.pair,
                out.new_pair_g,
                out.gram,
                out.wtg,
                out.norms,
            )
        self.phases.gradient += middle - start
        seconds = time.perf_counter() - middle
        if (
            request.pair
        ):  # the curvature pair (Alg. 3, line 14); otherwise W^T g belongs to the step
            self.phases.hessian += seconds
        else:
            self.phases.update += seconds
        return Reductions(
            pair=out.pair if request.pair else None,
            new_pair_g=out.new_pair_g if request.pair else None,
            gram=out.gram if request.gram else None,
            wtg=out.wtg if request.wtg else None,
            norms=out.norms if request.norms else None,
        )

    def _clear_gradient(self) -> None:
        """Set g to zero: on the rows of the gradient it holds, or everywhere (hamsi.touched)."""
        if self.touched is None or self._holds is None:
            self.k.sharded_fill_zero(self.g, self.bounds)
            return
        t = self.touched
        self.k.sharded_touched_zero(
            self.g, self.bounds, t.rows[self._holds], t.cuts[self._holds], t.width
        )

    def _touched_partials(self, request: Request) -> bool:
        """Write an iteration's W^T g and norms over the touched rows only; False when it cannot.

        Iterations without a pair (with M = 5 when W^T g is wanted); the sums keep their bits
        (hamsi.touched_kernels).
        """
        if self.touched is None or request.pair or (request.wtg and not self._five):
            return False
        if request.wtg or request.norms:
            t, out = self.touched, self._out
            self.k.sharded_touched_partials(
                self.x,
                self.g,
                self.S,
                self.Y,
                self.bounds,
                t.rows[request.subset],
                t.cuts[request.subset],
                t.width,
                request.wtg,
                request.norms,
                out.wtg,
                out.norms,
            )
        return True

    def store_pair(self, slot: int) -> None:
        # written by the step that follows, in its pass over the memory rows (same bits)
        self._store_slot = slot

    def _store_now(self) -> None:
        """Write a pair store_pair left for the step (before anything else reads S, Y)."""
        if self._store_slot is not None:
            self.k.sharded_copy_pair(
                self.s_new, self.y_new, self.S, self.Y, self._store_slot, self.bounds
            )
            self._store_slot = None

    def remember_start(self) -> None:
        self.k.sharded_copy(self.x, self.x_start, self.bounds)
        self.k.sharded_copy(self.g, self.g_start, self.bounds)

    def step(self, coef, sigma: float, inv_beta: float) -> None:
        if coef is None:
            self._store_now()
            self._gradient_step(inv_beta)
        elif self._store_slot is not None:  # the pair's row is written in the step's pass
            slot, self._store_slot = self._store_slot, None
            self.k.sharded_store_pair_and_step(
                self.x,
                self.g,
                self.S,
                self.Y,
                self.s_new,
                self.y_new,
                slot,
                coef,
                sigma,
                inv_beta,
                self.bounds,
            )
        else:
            self.k.sharded_lbfgs_step(
                self.x, self.g, self.S, self.Y, coef, sigma, inv_beta, self.bounds
            )

    def _gradient_step(self, inv_beta: float) -> None:
        """x -= inv_beta g: on the rows g's subset touches when known (x - inv_beta 0.0 == x)."""
        if self.touched is None or self._holds is None:
            self.k.sharded_gradient_step(self.x, self.g, inv_beta, self.bounds)
            return
        t = self.touched
        self.k.sharded_touched_gradient_step(
            self.x, self.g, inv_beta, self.bounds, t.rows[self._holds], t.cuts[self._holds], t.width
        )

    def evaluate(self) -> Evaluation:
        clock = self.clock()
        start = time.perf_counter()
        train, objective = self.problem.evaluate(self.x)
        seconds = time.perf_counter() - start
        heldout = (
            self.problem.heldout_error(self.x, self.heldout)
            if self.heldout is not None
            else float("nan")
        )
        return Evaluation(train, objective, heldout, clock, seconds)

    def save(self, name: str, x: np.ndarray | None = None) -> None:
        """Keep a copy of the iterate (or of `x`, a point of the same shape) under `name`."""
        kept = self._saved.setdefault(name, np.empty_like(self.x))
        self.k.sharded_copy(self.x if x is None else x, kept, self.bounds)

    def restore(self, name: str) -> None:
        self.k.sharded_copy(self._saved[name], self.x, self.bounds)
