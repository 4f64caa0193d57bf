"""Where an estimator's optimization runs: the Engine protocol and the in-process engine.

An engine solves one problem on one cover (`solve(problem, cover, options) -> OptimizeResult`)
and runs a rung of the search's trials; MatrixFactorizer talks to nothing else. The in-process
engine is here; the Dask engine is cluster.engine.DaskEngine (the arrows point cluster -> hamsi).
"""

from __future__ import annotations

import contextlib
import os
from typing import Protocol

from hamsi import kernels
from hamsi.options import GD_ETA, EngineOptions
from partition.strata import warm_up as warm_up_strata


def available_cores() -> int:
    """Return the cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class Engine(Protocol):
    """What MatrixFactorizer needs of the place its optimization runs."""

    def default_blocks(self) -> int:
        """Return the number of blocks B a cover gets when the user gave none."""

    def solve(
        self, problem, cover, options: EngineOptions, *, validation=None, callback=None, x0=None
    ):
        """Return the OptimizeResult of `options.method` on `problem` over `cover`."""

    def warm_up_trials(self, base_params: dict, n_params: int = 0) -> None:
        """Compile (or load from numba's cache) what the search's trials run, where they run.

        n_params: the largest trial's parameters (0: unknown), for the kernels of its size.
        """

    def trial_runner(self, estimator_class, base_params: dict, fit_part, validation):
        """Return run_rung(trials) -> outcomes for hamsi.search.choose_by_validation."""

    def keeps(self, source) -> bool:
        """True when `source` is read where the engine runs and stays there (then `load` reads it)."""

    def load(
        self, source, *, columns, partitioner, blocks, validation_fraction, seed, subsets=None
    ):
        """Return the TrainingData of a source this engine keeps (hamsi.training); subsets: K or None."""


class InProcessEngine:
    """The engine in this process: numba kernels on `threads` threads (None: the cores)."""

    def __init__(self, threads: int | None = None):
        self.threads = threads or available_cores()

    def default_blocks(self) -> int:
        return available_cores()

    def solve(
        self, problem, cover, options: EngineOptions, *, validation=None, callback=None, x0=None
    ):
        """Return the OptimizeResult of hamsi.optimizer's loop (mbgd: memory 1, no safeguard)."""
        run = self.start(problem, cover, options, validation=validation, callback=callback, x0=x0)
        return run.advance(options.max_cycles, options.max_time).finish()

    def start(
        self, problem, cover, options: EngineOptions, *, validation=None, callback=None, x0=None
    ):
        """Return the hamsi.optimizer.InProcessRun of `options`, started (trace row 0), no cycle run."""
        # why lazy: the optimizer loads numba's kernels and SciPy, only when a fit runs
        from hamsi.optimizer import InProcessRun

        keywords = dict(options.keywords(), eta=options.step_eta)
        if options.method == "mbgd":
            keywords.update(eta_gd=GD_ETA, memory=1, safeguard=False)
        return InProcessRun(
            problem,
            cover,
            x0=x0,
            validation=validation,
            callback=callback,
            threads=self.threads,
            **keywords,
        )

    def keeps(self, source) -> bool:
        """False: in process, every source is read into memory (hamsi.recommender.as_ratings)."""
        return False

    def load(self, source, **_):
        raise TypeError("the in-process engine keeps no data elsewhere: fit reads it into memory")

    def warm_up_trials(self, base_params: dict, n_params: int = 0) -> None:
        warm_trial_kernels(base_params)
        if self.threads > 1 and n_params >= kernels.PARALLEL_VECTOR_MIN:
            # a trial left alone in its rung runs on every thread (hamsi.trials.LocalTrials)
            from hamsi.optimizer import numba_threads  # why lazy: as in start

            with numba_threads(self.threads):
                kernels.warm_up(n_params)

    def trial_runner(self, estimator_class, base_params: dict, fit_part, validation):
        """Return run_rung: a rung's trials side by side in this process (hamsi.trials.LocalTrials)."""
        # why lazy: the trials load the optimizer (numba's kernels), only when a search runs
        from hamsi.trials import LocalTrials

        return LocalTrials(estimator_class, base_params, fit_part, validation, self.threads)


def warm_trial_kernels(base_params: dict) -> None:
    """Compile (or load) the kernels a search trial runs: the one-thread vector twins, the partitioner's."""
    strata = str(base_params.get("partitioner", "")).lower().startswith("strata")
    kernels.warm_up(0, also=warm_up_strata if strata else None)


@contextlib.contextmanager
def in_process(threads: int | None):
    """Yield the InProcessEngine (a context manager like cluster.engine.dask_engine)."""
    yield InProcessEngine(threads)
