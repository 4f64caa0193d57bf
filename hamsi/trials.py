"""A trial of the hyper-parameter search: one candidate's run, paused between rungs.

Successive halving promotes a candidate by running it longer. `TrialRun` keeps the run (its
iterate, L-BFGS memory, stop rules and best iterate) between rungs and continues it, so a
promoted trial's 60 cycles are its first 30 plus 30 more, bit for bit what one 60-cycle run
gives (hamsi.optimizer.InProcessRun); rerunning from scratch would pay the first rung twice.
This is ASHA's promotion (Li et al., "A System for Massively Parallel Hyperparameter Tuning",
MLSys 2020). A TrialRun runs in the process that holds it: this one, or a Dask worker
(cluster.search keeps it there as a future).
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed

from hamsi import search
from hamsi.stepper import engine_rngs
from hamsi.training import InMemoryRatings

# from the spectral start, patience 10 (with a first rung of 10 cycles) chose the candidate of
# patience 25 on 5 of the 6 preset splits replayed, and one 0.0004 behind it on validation on the
# sixth; from the small random start the validation could rise for 20 cycles first (docs/accuracy.md)
TRIAL_PATIENCE = 10


class TrialRun:
    """Candidate `params` of estimator_class(**base_params) on fit_part, scored on `validation`.

    The trial keeps its best-validation iterate (patience TRIAL_PATIENCE); its score is that
    iterate's validation RMSE of clipped predictions (what MatrixFactorizer.rmse gives).
    """

    def __init__(self, estimator_class, base_params: dict, params: dict, fit_part, validation):
        self.params = dict(params)
        self.model = estimator_class(
            **dict(base_params, **params, patience=TRIAL_PATIENCE, max_time=None)
        )
        self.data = InMemoryRatings(fit_part)
        self.seconds = 0.0
        started = time.perf_counter()
        self.problem, self.run = self.model.start_run(self.data, validation)
        self._keep_the_better_start()
        self.seconds += time.perf_counter() - started

    def _keep_the_better_start(self) -> None:
        """Make the bias start the trial's cycle-0 best when its validation RMSE beats the spectral start's.

        The run goes on from the spectral start (hamsi.spectral_start); only the kept best iterate
        changes, so a trial's score, and the model of a search the budget cut, is never worse on
        validation than the biases fit (with small random factors, the start before the spectral one).
        """
        problem, run = self.problem, self.run
        if getattr(problem, "init_factors", "random") != "spectral" or not run.stop.keeps_best:
            return
        exchange = run.exchange
        biases = problem.initial_point(engine_rngs(self.model.random_state)[0], "random")
        rmse = problem.heldout_error(biases, exchange.heldout)
        if rmse < run.stop.best_heldout:
            run.stop.best_heldout = rmse
            exchange.save("best", biases)

    def advance(self, cycles: int, deadline: float | None = None, threads=None) -> dict:
        """Run the trial to `cycles` cycles, or until time.time() `deadline`; return its outcome.

        outcome: validation_rmse (NaN when the run diverged), best_epoch, cycles (run so far),
        complete (it reached `cycles` or a stop rule ended it: its score is that of `cycles`
        cycles), seconds (wall, all rungs). threads: None, or a function returning the numba
        threads for the next cycle (asked before each; the bits do not depend on it).
        """
        started = time.perf_counter()
        monotonic = None if deadline is None else time.monotonic() + (deadline - time.time())
        run = self.run
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a trial's overfitting or divergence is its score
            if threads is None:
                run.advance(int(cycles), deadline=monotonic)
            else:
                while run.epoch < cycles:
                    run.use_threads(threads())
                    run.advance(run.epoch + 1, deadline=monotonic)  # one run's cycles, bit for bit
                    if run.reason not in (None, "epoch_limit"):
                        break  # a stop rule, or the deadline
        self.seconds += time.perf_counter() - started
        return self.outcome(cycles)

    def outcome(self, cycles: int) -> dict:
        """Return the outcome of the cycles run so far against a rung of `cycles` cycles."""
        run, stop = self.run, self.run.stop
        diverged = run.reason == "diverged"
        best = stop.best_epoch if stop.best_epoch is not None else run.epoch
        return {
            "validation_rmse": math.nan if diverged else float(stop.best_heldout),
            "best_epoch": int(best),
            "cycles": int(run.epoch),
            "complete": bool(run.epoch >= cycles or run.stopped),
            "seconds": self.seconds,
        }

    def fitted(self):
        """Return the estimator fitted by this trial: its best-validation iterate (on fit_part)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.model.finish_run(self.data, self.problem, self.run.finish())


def not_started() -> dict:
    """Return the outcome of a trial the deadline kept from starting (never compared)."""
    return {
        "validation_rmse": math.nan,
        "best_epoch": 0,
        "cycles": 0,
        "complete": False,
        "seconds": 0.0,
    }


def start_trial(estimator_class, base_params: dict, params: dict, fit_part, validation):
    """Return a new TrialRun (a function, so Dask can run it as a task)."""
    return TrialRun(estimator_class, base_params, params, fit_part, validation)


def advance_trial(run: TrialRun, cycles: int, deadline: float | None) -> TrialRun:
    """Advance `run` to `cycles` cycles and return it (a Dask task; the outcome is run.outcome)."""
    run.advance(cycles, deadline)
    return run


def trial_outcome(run: TrialRun, cycles: int) -> dict:
    """Return run.outcome(cycles) (a Dask task)."""
    return run.outcome(cycles)


def fitted_trial(run: TrialRun, keep_seen: bool = True):
    """Return run.fitted() (a Dask task); without keep_seen, its lists of seen items are dropped."""
    model = run.fitted()
    if not keep_seen:
        model.drop_seen_items()
    return model


class LocalTrials:
    """run_rung of hamsi.search in this process: `workers` trials side by side, one numba thread each.

    When fewer trials than workers are left in a rung, they share the free threads from their
    next cycle on (a rung's last trial gets them all).

    A trial's kernels release the GIL, so `workers` trials at a time, each on one thread, beat
    one trial at a time on all of them (the fork-join of every short parallel kernel goes). The
    thread count changes no bits (every reduction is per shard, in shard order). Runs are kept
    by candidate, so a promoted trial continues.
    """

    def __init__(self, estimator_class, base_params: dict, fit_part, validation, workers: int):
        self.estimator_class, self.fit_part, self.validation = (
            estimator_class,
            fit_part,
            validation,
        )
        self.base_params = dict(base_params, threads=1)
        self.workers = max(1, int(workers))
        self.runs: dict = {}
        self._unfinished = 0  # trials of the rung not yet ended (queued or running)
        self._lock = threading.Lock()

    def _threads(self) -> int:
        """Return the numba threads of a trial's next cycle: the workers shared by the rung's unfinished trials."""
        with self._lock:
            return max(1, self.workers // max(1, self._unfinished))

    def _advance(self, trial) -> dict:
        try:
            run = self.runs.get(trial.candidate)
            if run is None and trial.candidate and search.past(trial.deadline):
                return not_started()  # candidate 0 always starts: the fallback of a cut search
            if run is None:
                run = self.runs[trial.candidate] = TrialRun(
                    self.estimator_class,
                    self.base_params,
                    trial.params,
                    self.fit_part,
                    self.validation,
                )
            return run.advance(trial.cycles, trial.deadline, threads=self._threads)
        finally:
            with self._lock:
                self._unfinished -= 1

    def __call__(self, trials, report) -> list[dict]:
        """Return the outcomes of `trials` in their order, calling report(trial, outcome) as each ends.

        A trial runs on one numba thread while the rung has at least `workers` unfinished trials;
        the last ones share the workers the others freed (a finalist running on alone gets them all).
        """
        self._unfinished = len(trials)
        if self.workers == 1 or len(trials) == 1:
            outcomes = []
            for trial in trials:
                outcomes.append(self._advance(trial))
                report(trial, outcomes[-1])
            return outcomes
        # the warnings filters are one list for all threads: silence the trials' warnings
        # (their overfitting is their score) around the pool, not only inside each thread
        with (
            warnings.catch_warnings(),
            ThreadPoolExecutor(
                min(len(trials), self.workers), thread_name_prefix="hamsi-trial"
            ) as pool,
        ):
            warnings.simplefilter("ignore")
            futures = {pool.submit(self._advance, trial): trial for trial in trials}
            for future in as_completed(futures):
                report(futures[future], future.result())
            return [future.result() for future in futures]

    def discard(self, candidates) -> None:
        """Drop the runs of candidates the search cut: they are not run again."""
        for candidate in candidates:
            self.runs.pop(candidate, None)

    def fitted(self, candidate: int):
        """Return the estimator fitted by candidate's trial (its best-validation iterate)."""
        return self.runs[candidate].fitted()
