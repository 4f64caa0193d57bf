"""How MatrixFactorizer turns its `auto` hyper-parameters into values (`AutoValues`).

By the search (hamsi.search: successive halving on a validation split cut from the training
ratings, its trials run by the engine, on a SearchSample: in this process, or on the Dask
workers for ratings kept there, cluster.search_sample), or, with search=False, the values the
search starts from. Under max_time the search, the refit and the fallback to a
search trial's model are bounded here.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from dataclasses import dataclass

from hamsi import search
from hamsi.errors import Advice, AdvisedWarning
from hamsi.parameters import with_new_names

LOGGER = logging.getLogger("hamsi")
AUTO = "auto"
# A compile this long before the search is said on its first line (loading cached kernels is far shorter)
COMPILE_NOTE_SECONDS = 1.0


@dataclass(frozen=True)
class SearchSample:
    """The ratings the search reads: its fit and validation parts, and the numbers it prints.

    fit_part and validation are hamsi.Ratings, or futures of them on the Dask workers; spread is
    the standard deviation of the ratings they were cut from (the unit of the uniform reg);
    train_nnz counts all training ratings (the refit's); note is said after the sizes.
    """

    fit_part: object
    validation: object
    fit_nnz: int
    validation_nnz: int
    spread: float
    train_nnz: int
    note: str = ""
    fraction: float = 1.0  # share of the users the parts were cut from (a sample on the workers)


def in_memory_sample(train, seed) -> SearchSample:
    """Return the SearchSample of in-process `train`: all of it, split by search.validation_split."""
    fit_part, validation = search.validation_split(train, seed=seed)
    return SearchSample(
        fit_part, validation, fit_part.nnz, validation.nnz, search.spread_of(train), train.nnz
    )


class AutoValues:
    """MatrixFactorizer's choice of its `auto` values: search, or take the unsearched ones."""

    def _fixed(self) -> dict:
        """Return rank, reg_weighting, reg and reg_damping as given, the weighting implied by the others.

        A reg's scale belongs to its weighting (7.9 uniform is 0.1 count-weighted on MovieLens), so
        a number given for reg with reg_weighting "auto" is read as the default uniform penalty's,
        never searched across both; a reg_damping > 0 exists only for the count-weighted one.
        """
        fixed = {name: getattr(self, name) for name in search.SEARCHED}
        if fixed["reg_weighting"] == AUTO:
            if fixed["reg_damping"] not in (AUTO, 0, 0.0):
                fixed["reg_weighting"] = "count"
            elif fixed["reg"] != AUTO:
                fixed["reg_weighting"] = "uniform"
        if fixed["reg_weighting"] == "uniform" and fixed["reg_damping"] == AUTO:
            fixed["reg_damping"] = 0.0
        return fixed

    def _searched(self) -> tuple:
        """Return the names of the hyper-parameters left to the search (value "auto")."""
        return tuple(name for name, value in self._fixed().items() if value == AUTO)

    def _searching(self) -> bool:
        """True when the fit searches: search=True and some hyper-parameter left `auto`."""
        return bool(self.search and self._searched())

    def _choose(self, sample, engine, started: float):
        """Set _chosen (rank, reg_weighting, reg, reg_damping, cycles) and search_results_; return None.

        Searches the `auto` values on `sample` (a SearchSample: the search's fit and validation
        parts, cut from the training ratings only), or, with sample None, takes the explicit and
        unsearched values. Returns a fitted trial model instead when max_time leaves no time for
        the refit (or for a whole first rung), after saying so in one warning.
        """
        self._fallback, self._compile_seconds = None, 0.0
        if sample is None:
            self._choose_unsearched()
            return None
        trials_class = self._in_process_class()
        grid = search.candidate_grid(self._fixed(), sample.spread)
        compiling = time.perf_counter()
        engine.warm_up_trials(self._trial_params(), self._largest_trial(sample, grid))
        self._compile_seconds = time.perf_counter() - compiling
        runner = engine.trial_runner(
            trials_class, self._trial_params(), sample.fit_part, sample.validation
        )
        limit = self._param("max_cycles")
        max_cycles = 100 if limit is None else max(1, int(limit))
        deadline = None
        if self.max_time is not None:
            deadline = (
                time.time() - self._spent(started) + search.SEARCH_TIME_SHARE * float(self.max_time)
            )
        rungs = search.rung_cycles(search.MIN_CYCLES, max_cycles, search.HALVING_FACTOR, len(grid))
        self._say(
            f"search: {len(grid)} candidates on {sample.fit_nnz:,} ratings, validation "
            f"{sample.validation_nnz:,}{sample.note}; rungs of "
            f"{', '.join(str(c) for _, c in rungs)} cycles{self._compiled_note()}"
        )
        found = search.choose_by_validation(
            grid,
            runner,
            max_cycles=max_cycles,
            deadline=deadline,
            report=lambda trial, outcome: self._say(
                search.trial_line(trial, outcome, rungs[trial.rung][0])
            ),
        )
        self.search_results_ = found.results
        self._fallback, self._fallback_candidate = runner, found.candidate
        trained_on = f"fitted on {sample.fit_nnz:,} ratings (the search's fit part)"
        if not found.searched:
            self._warn_budget(
                f"max_time = {self.max_time:g} s ended the search before any candidate finished "
                f"its first {rungs[0][1]} cycles: the model is the {search.describe(found.params)} "
                f"trial's best cycle, {trained_on}, without a refit"
            )
            return runner.fitted(found.candidate)
        self._chosen = dict(found.params, cycles=found.cycles)
        self._say(
            f"search: chose {search.describe(found.params)} (validation RMSE "
            f"{found.validation_rmse:.4f} at cycle {found.cycles}) in "
            f"{time.perf_counter() - started:.1f} s; refit on {sample.train_nnz:,} ratings"
        )
        if self._no_time_to_refit(found, sample, started):
            self._warn_budget(
                f"max_time = {self.max_time:g} s leaves too little time to refit "
                f"{search.describe(found.params)} on all ratings: the model is its search trial's "
                f"best cycle, {trained_on}"
            )
            return runner.fitted(found.candidate)
        return None

    def _largest_trial(self, sample, grid) -> int:
        """Return the parameters of the grid's largest trial on `sample` (0 when its shape is on the workers)."""
        shape = getattr(sample.fit_part, "shape", None)
        if shape is None:
            return 0
        width = max(int(params["rank"]) for params in grid) + (1 if self.biases else 0)
        return (int(shape[0]) + int(shape[1])) * width

    def _no_time_to_refit(self, found, sample, started: float) -> bool:
        """True when max_time is left too short for the refit, at the winner trial's speed per cycle."""
        if self.max_time is None or found.cycles == 0:
            return False
        row = found.results["chosen"].index(True)
        per_cycle = found.results["seconds"][row] / max(1, found.results["cycles_run"][row])
        needed = per_cycle * found.cycles * sample.train_nnz / max(1, sample.fit_nnz)
        return self._spent(started) + needed > float(self.max_time)

    def _refit_cut(self, result) -> bool:
        """True when max_time stopped the refit before the chosen cycles and a searched model exists."""
        cut = result.reason == "time_limit" and result.n_cycles < (self._chosen["cycles"] or 0)
        if cut and self._fallback is not None:
            self._warn_budget(
                f"max_time = {self.max_time:g} s stopped the refit at cycle {result.n_cycles} of "
                f"{self._chosen['cycles']}: the model is the search trial's best cycle, fitted on "
                "the search's fit part of the ratings"
            )
            return True
        return False

    def _warn_budget(self, message: str) -> None:
        warnings.warn(
            AdvisedWarning(
                message,
                Advice(
                    api="a larger max_time, or explicit rank and reg (no search)",
                    cli="a larger --max-time, or --rank and --reg (no search)",
                ),
            ),
            stacklevel=5,
        )

    def _adopt(self, trial, facts):
        """Take the fitted attributes of a search trial's model; return self.

        `facts`: the TrainingFacts of all training ratings (the trial saw its fit part), or None
        to keep the trial's own (a sample of users on the workers: its ids are the sample's).
        """
        results = self.search_results_
        for name, value in vars(trial).items():
            if name.endswith("_") and not name.startswith("__"):
                setattr(self, name, value)
        self.search_results_ = results
        self._set_training_facts(trial._training_facts() if facts is None else facts)
        self._set_trace(trial.trace_)
        return self

    def _refit(self, engine, data, validation, callback, started: float, facts_of):
        """Fit the chosen values on all of `data` (what max_time left) and return self.

        When max_time cuts the refit short of the chosen cycles, the search trial's model is kept
        instead (_refit_cut), with the facts facts_of() returns (see _adopt).
        """
        problem, result = self._solve(engine, data, validation, callback, self._remaining(started))
        if self._refit_cut(result):
            return self._adopt(self._fallback.fitted(self._fallback_candidate), facts_of())
        if self.search_results_ is not None and result.reason == "epoch_limit":
            result.message = self._refit_message(result.n_cycles)
        return self._set_fitted(data, problem, result)

    def _say(self, line: str) -> None:
        """Report search progress: to the `hamsi` logger, and to stderr when verbose."""
        LOGGER.info(line)
        if self.verbose:
            print(line, file=sys.stderr, flush=True)

    def _choose_unsearched(self) -> None:
        """Set _chosen without a search: explicit values as given, `auto` ones from search.UNSEARCHED."""
        fixed = {
            name: search.UNSEARCHED.get(name, value) if value == AUTO else value
            for name, value in self._fixed().items()
        }
        self._chosen = dict(
            fixed,
            reg=None if fixed["reg"] == AUTO else fixed["reg"],
            cycles=self._param("max_cycles"),
        )
        self.search_results_ = None

    def _trial_params(self) -> dict:
        """Return the parameters every trial shares: this model's, without the search and the clock."""
        params = {
            name: value
            for name, value in self.get_params(deep=False).items()
            if name in self._in_process_class()._get_param_names()
        }
        params.update(max_time=None, on_divergence="warn", verbose=0)
        return with_new_names(params, self._parameter_constraints)

    def _remaining(self, started: float):
        """Return the refit's max_time: what the search left of max_time (None without one)."""
        if self.max_time is None:
            return None
        # the engine's max_time counts optimization only; a fifth is left for the evaluations
        return max(0.8 * (float(self.max_time) - self._spent(started)), 1e-3)

    def _compiled_note(self) -> str:
        """Return what the search line says of a long compile before it (a new install's first search)."""
        if self._compile_seconds < COMPILE_NOTE_SECONDS:
            return ""
        return (
            f"; its kernels took {self._compile_seconds:.1f} s to compile (not counted in max_time)"
        )

    def _spent(self, started: float) -> float:
        """Return the seconds of max_time spent since `started`: all but compiling the trials' kernels.

        A new install's first search compiles them (numba; on Dask in every worker; figures in
        docs/accuracy.md): work the second fit does not redo, like the optimizer's
        own warm-up (hamsi.optimizer), so it does not eat the budget.
        """
        return time.perf_counter() - started - self._compile_seconds

    @staticmethod
    def _refit_message(cycles: int) -> str:
        """Return the refit's stop message: the cycles validation chose, not a limit the user set."""
        if cycles == 0:
            return (
                "no cycle of the chosen candidate beat the validation RMSE of its start, so the "
                "model is that start (the biases fit, small factors): 0 cycles"
            )
        return f"ran the {cycles} cycles the search chose on validation"
