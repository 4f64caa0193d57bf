"""How MatrixFactorizer turns its `auto` hyper-parameters into values (`AutoValues`).

By the search (hamsi.search: successive halving on a validation split cut from the training
ratings, its trials run by the engine), or, with search=False or ratings kept on the workers,
the values the search starts from. Under max_time the search, the refit and the fallback to a
search trial's model are bounded here.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings

from hamsi import search
from hamsi.errors import Advice, AdvisedWarning
from hamsi.parameters import with_new_names
from hamsi.training import InMemoryRatings

LOGGER = logging.getLogger("hamsi")
AUTO = "auto"


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

    def _choose(self, train, engine, started: float):
        """Set _chosen (rank, reg_weighting, reg, reg_damping, cycles) and search_results_; return None.

        Searches the `auto` values (hamsi.search, reading only `train`: a validation split is
        cut from it), or takes the explicit and unsearched values. Returns a fitted trial model
        instead when max_time leaves no time for the refit (or for a whole first rung), after
        saying so in one warning.
        """
        self._fallback = None
        if not (self.search and self._searched()):
            self._choose_unsearched()
            return None
        fit_part, validation = search.validation_split(train, seed=self.random_state)
        trials_class = self._in_process_class()
        runner = engine.trial_runner(trials_class, self._trial_params(), fit_part, validation)
        grid = search.candidate_grid(self._fixed(), search.spread_of(train))
        limit = self._param("max_cycles")
        max_cycles = 100 if limit is None else max(1, int(limit))
        deadline = None
        if self.max_time is not None:
            spent = time.perf_counter() - started
            deadline = time.time() - spent + search.SEARCH_TIME_SHARE * float(self.max_time)
        rungs = search.rung_cycles(search.MIN_CYCLES, max_cycles, search.HALVING_FACTOR, len(grid))
        self._say(
            f"search: {len(grid)} candidates on {fit_part.nnz:,} ratings, validation "
            f"{validation.nnz:,}; rungs of {', '.join(str(c) for _, c in rungs)} cycles"
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
        if not found.searched:
            self._warn_budget(
                f"max_time = {self.max_time:g} s ended the search before any candidate finished "
                f"its first {rungs[0][1]} cycles: the model is the {search.describe(found.params)} "
                "trial's best cycle, fitted on 90 % of the ratings, without a refit"
            )
            return runner.fitted(found.candidate)
        self._chosen = dict(found.params, cycles=found.cycles)
        self._say(
            f"search: chose {search.describe(found.params)} (validation RMSE "
            f"{found.validation_rmse:.4f} at cycle {found.cycles}) in "
            f"{time.perf_counter() - started:.1f} s; refit on {train.nnz:,} ratings"
        )
        if self._no_time_to_refit(found, train, fit_part, started):
            self._warn_budget(
                f"max_time = {self.max_time:g} s leaves too little time to refit "
                f"{search.describe(found.params)} on all ratings: the model is its search trial's "
                f"best cycle, fitted on 90 % of the ratings"
            )
            return runner.fitted(found.candidate)
        return None

    def _no_time_to_refit(self, found, train, fit_part, started: float) -> bool:
        """True when max_time is left too short for the refit, at the winner trial's speed per cycle."""
        if self.max_time is None or found.cycles == 0:
            return False
        row = found.results["chosen"].index(True)
        per_cycle = found.results["seconds"][row] / max(1, found.results["cycles_run"][row])
        needed = per_cycle * found.cycles * train.nnz / max(1, fit_part.nnz)
        return time.perf_counter() - started + needed > float(self.max_time)

    def _refit_cut(self, result) -> bool:
        """True when max_time stopped the refit before the chosen cycles and a searched model exists."""
        cut = result.reason == "time_limit" and result.n_cycles < (self._chosen["cycles"] or 0)
        if cut and self._fallback is not None:
            self._warn_budget(
                f"max_time = {self.max_time:g} s stopped the refit at cycle {result.n_cycles} of "
                f"{self._chosen['cycles']}: the model is the search trial's best cycle, fitted on "
                "90 % of the ratings"
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

    def _adopt(self, trial, train):
        """Take the fitted attributes of a search trial's model (fitted on part of `train`); return self."""
        results = self.search_results_
        for name, value in vars(trial).items():
            if name.endswith("_") and not name.startswith("__"):
                setattr(self, name, value)
        self.search_results_ = results
        self._set_training_facts(InMemoryRatings(train).facts())
        self._set_trace(trial.trace_)
        return self

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
        spent = time.perf_counter() - started
        return max(0.8 * (float(self.max_time) - spent), 1e-3)

    @staticmethod
    def _refit_message(cycles: int) -> str:
        """Return the refit's stop message: the cycles validation chose, not a limit the user set."""
        if cycles == 0:
            return (
                "no cycle of the chosen candidate beat the validation RMSE of its start, so the "
                "model is that start (the biases fit, small factors): 0 cycles"
            )
        return f"ran the {cycles} cycles the search chose on validation"
