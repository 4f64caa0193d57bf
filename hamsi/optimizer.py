"""HAMSI (thesis Alg. 3) and the mb-GD baseline on a `PartiallySeparableProblem` and a cover.

Both loops run in one process on plain arrays; every vector operation goes through the sharded
kernels of `hamsi.kernels` (per-shard partials summed in shard order) and the small algebra
through `hamsi.lbfgs.LBFGSMemory`, the same calls the Dask driver makes per shard.

Behaviour taken from the reference implementation (spartensor/hamsi-mf), where the thesis text
leaves a choice:
- beta_t = (eta t)^gamma with t the inner-iteration counter (1-based), not the cycle number;
- until M curvature pairs are accepted, plain gradient steps x -= g / (eta_GD t)^gamma,
  eta_GD = 0.001; the pairs are collected meanwhile;
- with one subset (K = 1) a cycle is one inner iteration and the pair is formed between
  consecutive iterates (the reference's single-thread path); for K > 1 a cycle visits K + 1
  subsets, x and g are remembered after the first gradient and the pair is formed after the
  last one (same subset), before that iteration's step;
- time counts the gradient, pair and step work only; evaluation is excluded. max_time is
  checked after every inner iteration (like the reference), so the last trace row may close a
  partial cycle.

The trace has a row for the starting point (epoch 0) and one per cycle (mb-GD: per epoch).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager

import numba
import numpy as np

from hamsi import kernels, lbfgs
from hamsi.lbfgs import LBFGSMemory
from hamsi.schedules import hamsi_cycle, mbgd_epoch
from hamsi.trace import PhaseTimes, Trace, make_result

HAMSI_ETA = 0.06
GD_ETA = 0.001
GAMMA = 0.51


def beta_schedule(eta: float, gamma: float, t: int) -> float:
    """Return beta_t = (eta t)^gamma (thesis Alg. 3, line 5); the step is 1 / beta_t."""
    return (eta * t) ** gamma


def engine_rngs(random_state) -> tuple[np.random.Generator, np.random.Generator]:
    """Return (initialization rng, schedule rng), both determined by random_state (an int or None)."""
    init_seed, schedule_seed = np.random.SeedSequence(random_state).spawn(2)
    return np.random.default_rng(init_seed), np.random.default_rng(schedule_seed)


@contextmanager
def numba_threads(threads: int | None):
    """Run the body with numba's thread count set to `threads` (None: leave it), then restore it."""
    previous = numba.get_num_threads()
    if threads is not None:
        numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(previous)


class _Run:
    """Shared state of one optimization: buffers, clock, evaluation, trace and stopping rules."""

    def __init__(self, problem, partition, *, x0, random_state, max_epochs, max_time, tol, target,
                 patience, heldout, callback, eta):
        self.problem = problem
        kernels.warm_up()
        lbfgs.warm_up()
        self.layout = problem.arrange(partition)
        self.bounds = problem.shard_bounds(partition)
        init_rng, self.schedule_rng = engine_rngs(random_state)
        self.x = (problem.initial_point(init_rng) if x0 is None
                  else np.array(x0, dtype=np.float64, copy=True))
        self.g = np.zeros(problem.n_params)
        self.max_epochs, self.max_time, self.tol = max_epochs, max_time, tol
        self.target, self.patience, self.heldout = target, patience, heldout
        self.callback = callback
        self.eta = eta
        self.phases = PhaseTimes()
        self.trace = Trace()
        self.inner = 0
        self.best_heldout = math.inf
        self.cycles_without_gain = 0
        self.previous_objective = None
        self.reason = None
        self.message = ""

    @property
    def n_subsets(self) -> int:
        return self.layout.n_subsets

    def gradient(self, subset: int) -> None:
        """Set g to the gradient of one subset (thesis Alg. 3, lines 9-10), timing the gradient phase."""
        start = time.perf_counter()
        kernels.sharded_fill_zero(self.g, self.bounds)
        self.problem.add_subset_gradient(self.x, self.g, subset)
        self.phases.gradient += time.perf_counter() - start

    def out_of_time(self) -> bool:
        return self.max_time is not None and self.phases.total >= self.max_time

    def record(self, epoch: int) -> bool:
        """Evaluate (untimed), append a trace row, and return True when the run must stop."""
        train_error, objective = self.problem.evaluate(self.x)
        heldout_error = (self.problem.heldout_error(self.x, self.heldout) if self.heldout is not None
                         else math.nan)
        self.trace.append(epoch, self.inner, self.phases.total, train_error, heldout_error, objective)
        if self.callback is not None:
            self.callback(dict(zip(("epoch", "inner", "time_s", "train_rmse", "test_rmse", "objective"),
                                   self.trace.rows[-1])))
        if epoch == 0:
            self.previous_objective = objective
            return False
        return self._stop_reason(epoch, train_error, heldout_error, objective)

    def _stop_reason(self, epoch, train_error, heldout_error, objective) -> bool:
        metric = self.problem.metric
        if not (math.isfinite(objective) and math.isfinite(train_error)):
            self.reason = "diverged"
            self.message = (f"diverged: the objective became {objective} in cycle {epoch} (inner iteration "
                            f"{self.inner}); the steps 1/beta_t = (eta t)^-gamma are too large for this "
                            f"problem - try a larger eta (now {self.eta:g})")
            return True
        if self.target is not None and train_error <= self.target:
            self.reason = "target"
            self.message = f"train {metric} {train_error:.6g} reached the target {self.target:g} in cycle {epoch}"
            return True
        if self.patience is not None and self.heldout is not None and math.isfinite(heldout_error):
            if heldout_error < self.best_heldout:
                self.best_heldout = heldout_error
                self.cycles_without_gain = 0
            else:
                self.cycles_without_gain += 1
                if self.cycles_without_gain >= self.patience:
                    self.reason = "early_stop"
                    self.message = (f"validation {metric} did not improve on {self.best_heldout:.6g} for "
                                    f"{self.patience} cycles (cycle {epoch})")
                    return True
        change = abs(self.previous_objective - objective)
        self.previous_objective = objective
        if self.tol > 0 and change <= self.tol * abs(objective):
            self.reason = "tolerance"
            self.message = (f"the objective changed by {change:.3g} <= tol * |f| (tol {self.tol:g}) "
                            f"in cycle {epoch}")
            return True
        if self.max_epochs is not None and epoch >= self.max_epochs:
            self.reason = "epoch_limit"
            self.message = f"reached max_epochs = {self.max_epochs}"
            return True
        if self.out_of_time():
            self.reason = "time_limit"
            self.message = (f"optimization time {self.phases.total:.3f} s reached max_time = "
                            f"{self.max_time:g} s in cycle {epoch}")
            return True
        return False

    def result(self, epoch: int, **extra):
        """Return the OptimizeResult of the run (see hamsi.trace.make_result)."""
        return make_result(self.x, self.reason, self.message, self.trace, self.phases, self.inner, epoch,
                           layout=self.layout, shard_bounds=self.bounds, **extra)


def minimize_hamsi(problem, partition, *, schedule: str = "det", eta: float = HAMSI_ETA,
                   gamma: float = GAMMA, eta_gd: float = GD_ETA, memory: int = 5, x0=None,
                   random_state=None, max_epochs: int | None = 100, max_time: float | None = None,
                   tol: float = 0.0, target: float | None = None, patience: int | None = None,
                   heldout=None, threads: int | None = None, callback=None):
    """Return the OptimizeResult of HAMSI with L-BFGS updates (thesis Alg. 3) from a seeded N(0,1) start.

    partition: the cover (partition.Partition); one epoch of the trace is one cycle. Stops at the
    first of: divergence (NaN/inf, status 2), train error <= target, no validation gain for
    `patience` cycles, relative objective change <= tol, max_epochs cycles, max_time seconds.
    """
    run = _Run(problem, partition, x0=x0, random_state=random_state, max_epochs=max_epochs,
               max_time=max_time, tol=tol, target=target, patience=patience, heldout=heldout,
               callback=callback, eta=eta)
    x, g, bounds = run.x, run.g, run.bounds
    n_params, n_shards, K = problem.n_params, bounds.size - 1, run.n_subsets
    curvature = LBFGSMemory(memory)
    M = curvature.memory
    S = np.zeros((M, n_params))
    Y = np.zeros((M, n_params))
    x_start = np.zeros(n_params)
    g_start = np.zeros(n_params)
    wtg_partials = np.zeros((n_shards, 2 * M))
    wtg = np.zeros(2 * M)
    pair_partials = np.zeros((n_shards, 2 * M + 2))
    pair_products = np.zeros(2 * M + 2)

    with numba_threads(threads):
        epoch = 0
        stop = run.record(epoch)
        while not stop:
            epoch += 1
            cycle = np.zeros(1, dtype=np.int64) if K == 1 else hamsi_cycle(schedule, K, epoch, run.schedule_rng)
            last = cycle.size - 1
            for position, subset in enumerate(cycle):
                run.inner += 1
                run.gradient(int(subset))
                start = time.perf_counter()
                if (position == last and K > 1) or (K == 1 and run.inner > 1):  # Alg. 3, lines 14-19
                    kernels.sharded_pair_products(x, x_start, g, g_start, S, Y, bounds, pair_partials,
                                                  pair_products)
                    slot = curvature.next_slot
                    if curvature.consider_pair(pair_products):
                        kernels.sharded_store_pair(x, x_start, g, g_start, S, Y, slot, bounds)
                if position == 0:  # Alg. 3, line 12
                    kernels.sharded_copy(x, x_start, bounds)
                    kernels.sharded_copy(g, g_start, bounds)
                step_start = time.perf_counter()
                run.phases.hessian += step_start - start
                if curvature.full:  # Alg. 3, line 13, applied right to left: W (N (W^T g))
                    kernels.sharded_wtg(g, S, Y, bounds, wtg_partials, wtg)
                    coefficients = curvature.coefficients(wtg)
                    inv_beta = 1.0 / beta_schedule(eta, gamma, run.inner)
                    kernels.sharded_lbfgs_step(x, g, S, Y, coefficients, curvature.sigma, inv_beta, bounds)
                else:
                    inv_beta = 1.0 / beta_schedule(eta_gd, gamma, run.inner)
                    kernels.sharded_gradient_step(x, g, inv_beta, bounds)
                run.phases.update += time.perf_counter() - step_start
                if run.out_of_time():
                    break
            stop = run.record(epoch)
    return run.result(epoch, sigma=curvature.sigma, pairs_accepted=curvature.n_accepted,
                      pairs_rejected=curvature.n_rejected)


def minimize_mbgd(problem, partition, *, schedule: str = "det", eta: float = GD_ETA, gamma: float = GAMMA,
                  x0=None, random_state=None, max_epochs: int | None = 100, max_time: float | None = None,
                  tol: float = 0.0, target: float | None = None, patience: int | None = None,
                  heldout=None, threads: int | None = None, callback=None):
    """Return the OptimizeResult of mini-batch GD: x -= g_k / (eta t)^gamma over K subsets per epoch.

    Same cover, schedules (without the repeated subset), start, stopping rules and trace as
    `minimize_hamsi`; one trace row per epoch.
    """
    run = _Run(problem, partition, x0=x0, random_state=random_state, max_epochs=max_epochs,
               max_time=max_time, tol=tol, target=target, patience=patience, heldout=heldout,
               callback=callback, eta=eta)
    with numba_threads(threads):
        epoch = 0
        stop = run.record(epoch)
        while not stop:
            epoch += 1
            for subset in mbgd_epoch(schedule, run.n_subsets, epoch, run.schedule_rng):
                run.inner += 1
                run.gradient(int(subset))
                start = time.perf_counter()
                kernels.sharded_gradient_step(run.x, run.g, 1.0 / beta_schedule(eta, gamma, run.inner),
                                              run.bounds)
                run.phases.update += time.perf_counter() - start
                if run.out_of_time():
                    break
            stop = run.record(epoch)
    return run.result(epoch)
