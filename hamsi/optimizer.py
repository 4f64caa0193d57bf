"""HAMSI (thesis Alg. 3) and the mb-GD baseline in one process: the loop with a LocalExchange.

`hamsi.loop` runs the cycles, `hamsi.stepper.Stepper` makes every decision (see its docstring
for the reference behaviour and the safeguard), `hamsi.stop_rules.StopRules` decides when to
stop; every vector operation goes through the sharded kernels of `hamsi.kernels` (per-shard
partials summed in shard order), the same calls a Dask worker makes per shard
(`cluster.minimize_hamsi` runs this loop with a MailboxExchange).

Time counts the gradient, pair, step and safeguard work; evaluation for the trace is excluded
(except the objective the safeguard needs). max_time is checked after every inner iteration
(like the reference), so the last trace row may close a partial cycle. The trace has a row for
the starting point (cycle 0) and one per cycle (mb-GD: per epoch, its cycle).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numba
import numpy as np

from hamsi import kernels, lbfgs, loop
from hamsi.exchange import LocalExchange
from hamsi.options import GAMMA, GD_ETA, HAMSI_ETA
from hamsi.parameters import DEPRECATED, renamed_keyword
from hamsi.stepper import Stepper, beta_schedule, engine_rngs
from hamsi.stop_rules import StopRules, overfitting_note
from hamsi.trace import PhaseTimes, Trace, make_result

__all__ = [
    "minimize_hamsi",
    "minimize_mbgd",
    "beta_schedule",
    "engine_rngs",
    "finish_result",
    "HAMSI_ETA",
    "GD_ETA",
    "GAMMA",
]


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


def finish_result(x, reason, message, trace, phases, stepper, stop, epoch, **extra):
    """Return the OptimizeResult of a run (both engines): x, fun, trace, reason, best_cycle, overfitting.

    x is the best-validation iterate when the stop rules keep it (patience): fun is then that
    cycle's objective, else the last row's.
    """
    note = overfitting_note(trace.rows, stop.best_epoch, stop.metric)
    if note:
        message = f"{message}; {note}"
    fun = None
    if stop.keeps_best and stop.best_epoch is not None:
        fun = next((row.objective for row in trace.rows if row.cycle == stop.best_epoch), None)
    return make_result(
        x,
        reason,
        message,
        trace,
        phases,
        stepper.inner,
        epoch,
        fun=fun,
        sigma=stepper.lbfgs.sigma,
        pairs_accepted=stepper.pairs_accepted,
        pairs_rejected=stepper.pairs_rejected,
        fallbacks=stepper.fallbacks,
        safeguard=stepper.safeguard,
        best_cycle=stop.best_epoch,
        overfitting=bool(note),
        **extra,
    )


def start_point(problem, x0, random_state) -> np.ndarray:
    """Return the run's start: a float64 copy of x0, else the problem's seeded start (both engines)."""
    if x0 is None:
        return problem.initial_point(engine_rngs(random_state)[0])
    return np.array(x0, dtype=np.float64, copy=True)


def stepper_and_stop_rules(
    problem, n_subsets: int, *, has_validation: bool, max_cycles: int | None, **options
):
    """Return the (Stepper, StopRules) of a run: every decision of both engines comes from these two.

    options: method, schedule, memory, eta, gamma, eta_gd, safeguard, random_state (the Stepper's)
    and max_cycles, max_time, tol, target, patience (the stop rules').
    """
    rules = {k: options.pop(k) for k in ("max_time", "tol", "target", "patience")}
    stepper = Stepper(n_subsets=n_subsets, n_params=problem.n_params, **options)
    stop = StopRules(
        **rules,
        max_epochs=max_cycles,
        has_heldout=has_validation,
        eta=options["eta"],
        safeguard=stepper.safeguard,
        metric=problem.metric,
    )
    return stepper, stop


class InProcessRun:
    """A run of the loop in this process that can stop and go on: `advance` runs more cycles.

    Advancing to c1 and then to c2 gives the iterates of one run to c2, bit for bit (the stepper,
    the L-BFGS memory, the stop rules and the kept best iterate carry over): the hyper-parameter
    search continues a promoted trial instead of rerunning its first cycles (ASHA's promotion,
    Li et al. 2020). `finish` returns the OptimizeResult of the cycles run so far.
    """

    def __init__(self, problem, partition, *, x0, validation, threads, callback, **options):
        self.problem, self.threads, self.callback = problem, threads, callback
        self.layout = problem.arrange(partition)
        self.bounds = problem.shard_bounds(partition)
        x = start_point(problem, x0, options["random_state"])
        self.stepper, self.stop = stepper_and_stop_rules(
            problem, self.layout.n_subsets, has_validation=validation is not None, **options
        )
        self.phases, self.trace = PhaseTimes(), Trace()
        self.reason, self.message, self.epoch = None, "", 0
        with numba_threads(threads):
            # compile (or load) the kernels this run uses before its clock starts
            disjoint = bool(np.all(getattr(self.layout, "disjoint", True)))
            kernels.warm_up(problem.n_params, disjoint=disjoint)
            lbfgs.warm_up()
            self.exchange = LocalExchange(
                problem, self.bounds, x, options["memory"], validation, self.phases
            )
            loop.start(self.stepper, self.exchange, self.stop, self.trace, callback)

    @property
    def stopped(self) -> bool:
        """True once a stop rule other than the cycle and time limits ended the run."""
        return self.reason not in (None, "epoch_limit", "time_limit")

    def advance(self, max_cycles: int | None, max_time: float | None = None, deadline=None):
        """Run cycles until cycle max_cycles (None: no limit) or a stop rule; return self.

        max_time: the run's optimization-time limit (hamsi.stop_rules); deadline: a
        time.monotonic() instant after which no new cycle starts (a wall-clock bound that
        includes the evaluations).
        """
        if self.stopped:
            return self
        self.stop.max_epochs, self.stop.max_time = max_cycles, max_time
        last = max_cycles
        with numba_threads(self.threads):
            epoch = self.epoch
            while last is None or epoch < last:
                if deadline is not None and time.monotonic() >= deadline:
                    self.reason, self.message = "time_limit", "the search's deadline passed"
                    break
                epoch += 1
                reason, message, _ = loop.run_cycles(
                    self.stepper, self.exchange, self.stop, self.trace, self.callback, (epoch,)
                )
                self.epoch = epoch
                self.reason, self.message = reason, message
                if reason is not None:
                    break
        if self.epoch == 0 and self.reason is None:  # max_cycles = 0
            self.reason, self.message = "epoch_limit", f"reached max_cycles = {max_cycles}"
        return self

    def use_threads(self, threads: int) -> None:
        """Run the next cycles on `threads` numba threads: the vector kernels for that count, warmed first.

        Same bits on any count (every reduction is per shard, in shard order): a search trial
        left alone in its rung takes the cores the others freed (hamsi.trials.LocalTrials).
        """
        if threads == self.threads:
            return
        self.threads = threads
        with numba_threads(threads):
            disjoint = bool(np.all(getattr(self.layout, "disjoint", True)))
            kernels.warm_up(self.problem.n_params, disjoint=disjoint)
            self.exchange.k = kernels.vector_kernels(self.problem.n_params)

    def finish(self):
        """Return the OptimizeResult: the best-validation iterate when the stop rules keep it."""
        if self.stop.keeps_best and self.stop.best_epoch is not None:
            self.exchange.restore("best")
        return finish_result(
            self.exchange.x,
            self.reason,
            self.message,
            self.trace,
            self.phases,
            self.stepper,
            self.stop,
            self.epoch,
            layout=self.layout,
            shard_bounds=self.bounds,
        )


def run_in_process(problem, partition, *, max_cycles, max_time, **options):
    """Run the loop with a LocalExchange and return the OptimizeResult (both methods; hamsi.engine).

    options: those of InProcessRun (x0, validation, threads, callback) and of
    stepper_and_stop_rules (method, schedule, eta, ...; tol, target, patience).
    """
    run = InProcessRun(problem, partition, max_cycles=max_cycles, max_time=max_time, **options)
    return run.advance(max_cycles, max_time).finish()


def minimize_hamsi(
    problem,
    partition,
    *,
    schedule: str = "det",
    eta: float = HAMSI_ETA,
    gamma: float = GAMMA,
    eta_gd: float = GD_ETA,
    memory: int = 5,
    x0=None,
    random_state=None,
    max_cycles: int | None = 100,
    max_time: float | None = None,
    tol: float = 0.0,
    target: float | None = None,
    patience: int | None = None,
    validation=None,
    threads: int | None = None,
    callback=None,
    safeguard: bool = True,
    max_epochs=DEPRECATED,
    heldout=None,
):
    """Return the OptimizeResult of HAMSI with L-BFGS updates (thesis Alg. 3) from a seeded N(0,1) start.

    partition: the cover (partition.Partition); one trace row per cycle. The step is
    1/beta_t = (eta t)^-gamma: a LARGER eta gives SMALLER steps. Stops at the first of:
    divergence (NaN/inf, status 2), train error <= target, no validation gain for `patience`
    cycles, relative objective change <= tol, max_cycles cycles, max_time seconds.

    safeguard (default True) guards against divergence (hamsi.stepper docstring): a pair is kept
    only when s'y > c |s||y|; each step is capped at STEP_RADIUS max(|x|, sqrt(n)) (computed from
    g'g, W'g and the memory's Gram matrix: no extra reduction); when a cycle's objective is not
    finite or more than doubles the best, the last good iterate is restored, the memory cleared
    and the steps halved. Its work (including the objective it evaluates) counts in time_s.
    safeguard=False runs thesis Alg. 3 exactly (the reference comparisons, Table 3.1).

    With `validation` (a problem's validation ratings, which steer: never the test set) and
    `patience`, result.x is the best-validation iterate (result.best_cycle
    says which cycle); result.overfitting is True, and the message says so, when the validation
    error at the end is above its best while the training error fell. max_epochs and heldout
    are deprecated names of max_cycles and validation (FutureWarning).
    """
    return run_in_process(
        problem,
        partition,
        method="hamsi",
        schedule=schedule,
        eta=eta,
        gamma=gamma,
        eta_gd=eta_gd,
        memory=memory,
        x0=x0,
        random_state=random_state,
        max_cycles=renamed_keyword(
            "minimize_hamsi", "max_epochs", max_epochs, "max_cycles", max_cycles
        ),
        max_time=max_time,
        tol=tol,
        target=target,
        patience=patience,
        validation=renamed_keyword("minimize_hamsi", "heldout", heldout, "validation", validation),
        threads=threads,
        callback=callback,
        safeguard=safeguard,
    )


def minimize_mbgd(
    problem,
    partition,
    *,
    schedule: str = "det",
    eta: float = GD_ETA,
    gamma: float = GAMMA,
    x0=None,
    random_state=None,
    max_cycles: int | None = 100,
    max_time: float | None = None,
    tol: float = 0.0,
    target: float | None = None,
    patience: int | None = None,
    validation=None,
    threads: int | None = None,
    callback=None,
    max_epochs=DEPRECATED,
    heldout=None,
):
    """Return the OptimizeResult of mini-batch GD: x -= g_k / (eta t)^gamma over K subsets per epoch.

    Same cover, schedules (without the repeated subset), start, stopping rules and trace as
    `minimize_hamsi`; one trace row per epoch.
    """
    return run_in_process(
        problem,
        partition,
        method="mbgd",
        schedule=schedule,
        eta=eta,
        gamma=gamma,
        eta_gd=GD_ETA,
        memory=1,
        x0=x0,
        random_state=random_state,
        max_cycles=renamed_keyword(
            "minimize_mbgd", "max_epochs", max_epochs, "max_cycles", max_cycles
        ),
        max_time=max_time,
        tol=tol,
        target=target,
        patience=patience,
        validation=renamed_keyword("minimize_mbgd", "heldout", heldout, "validation", validation),
        threads=threads,
        callback=callback,
        safeguard=False,
    )
