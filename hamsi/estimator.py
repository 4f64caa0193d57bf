"""`MatrixFactorizer`: a scikit-learn-style recommender around the in-process HAMSI / mb-GD engine.

Raw ids in, raw ids out (scikit-surprise and implicit are the anchors): `fit` takes a pandas
DataFrame, an array or `Ratings`; `predict(users, items)` and `recommend(user)` speak the ids of
the data; unknown ids get a documented fallback; predictions stay in the training rating range;
a fitted model saves to and loads from one versioned .npz (hamsi.model_io).
"""

from __future__ import annotations

import logging
import numbers
import sys
import time
import warnings
from dataclasses import replace

import numpy as np
from sklearn.base import BaseEstimator, clone

from hamsi import defaults, model_io, search
from hamsi.engine import InProcessEngine, in_process
from hamsi.errors import Advice, AdvisedWarning, DivergenceError, InputError, flag_name
from hamsi.options import METHODS, EngineOptions
from hamsi.parameters import Boolean, Choice, Integer, Real, check_parameters
from hamsi.problems.matrix_factorization import REG_WEIGHTINGS
from hamsi.recommender import (
    FactorArrays,
    IdIndex,
    as_pairs,
    as_ratings,
    best_items,
    pair_scores,
)
from hamsi.trace import Trace
from hamsi.training import InMemoryRatings, TrainingFacts

LOGGER = logging.getLogger("hamsi")
ALGORITHMS = METHODS  # the estimator's `algorithm` is the engine's `method`
AUTO = "auto"
# Arrays of a fitted model: saved-file key -> attribute (None-valued ones are not written).
MODEL_ARRAYS = {
    "user_ids": "user_ids_",
    "item_ids": "item_ids_",
    "user_factors": "user_factors_",
    "item_factors": "item_factors_",
    "user_bias": "user_bias_",
    "item_bias": "item_bias_",
    "seen_indptr": "_seen_indptr",
    "seen_items": "_seen_items",
    "item_known": "_item_known",
}
MODEL_SCALARS = (
    "rank_",
    "reg_weighting_",
    "reg_",
    "reg_damping_",
    "eta_",
    "eta_gd_",
    "init_scale_",
    "global_mean_",
    "rating_min_",
    "rating_max_",
    "n_iter_",
    "best_epoch_",
    "overfitting_",
    "rating_unit_",
)


# The span of 1-5 stars, the scale every default (reg, the search's grid, the steps) was measured on.
STAR_SPAN = 4.0


def rating_unit(values) -> float:
    """Return the unit the ratings are fitted in: 1, or span / STAR_SPAN for a span far from 1-5 stars.

    The factor part of the objective is scale-equivariant with a reg proportional to the scale, its
    bias part is not, and the count-weighted regs are absolute: a -10..+10 scale fitted as it is
    shrinks the biases 5x too hard. Ratings whose span (max - min) is more than 1.5x away from
    STAR_SPAN (1-10, -10..+10, 0-100, 0-1) are divided by span / STAR_SPAN for the fit and the
    model is scaled back; 1-5 and 0.5-5 stars are fitted as they are.
    """
    span = float(np.max(values) - np.min(values)) if len(values) else 0.0
    if span <= 0.0 or STAR_SPAN / 1.5 <= span <= STAR_SPAN * 1.5:
        return 1.0
    return span / STAR_SPAN


def in_units(callback, unit: float):
    """Return a function of a trace row (a TraceRow, or its dict for `callback`) in rating units."""

    def scaled(row):
        values = row._asdict() if hasattr(row, "_asdict") else dict(row)
        values.update(
            train_rmse=values["train_rmse"] * unit,
            test_rmse=values["test_rmse"] * unit,
            objective=values["objective"] * unit * unit,
        )
        return type(row)(**values) if hasattr(row, "_asdict") else values

    if callback is None:
        return scaled
    return lambda row: callback(scaled(row))


def _plain(name: str, value):
    """Return value as a JSON-ready Python scalar (numpy scalars unwrapped); InputError otherwise."""
    value = value.item() if isinstance(value, np.generic) else value
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise InputError(f"cannot save {name}={value!r}: only numbers, strings and None are saved")
    return value


class MatrixFactorizer(BaseEstimator):
    """Low-rank model r(u, i) ~ mu + bu_u + bv_i + U_u . V_i fitted by HAMSI (thesis Alg. 3) or mb-GD.

    Parameters
    ----------
    rank : int or "auto"
        Number of latent factors k. "auto" (default) is chosen by validation (see below).
    algorithm : {"hamsi", "mbgd"}
    partitioner : str
        A `partition` scheme: "strata-b" (default), "strata", "color", "color-b", "hogwild".
    blocks, subsets : int or None
        Blocks per subset B (default: the number of cores, at most min(users, items)) and
        subsets K (default: B for strata schemes, the partitioner's default otherwise).
    schedule : {"det", "stoc"}
        Subset order per cycle (thesis sec. 3.4).
    reg : float or "auto"
        L2 weight; "auto" (default) is chosen by validation.
    reg_weighting : {"uniform", "count", "auto"}
        "uniform": the thesis objective (SSE + reg (|U|^2 + |V|^2)) / 2|I|; "count" (ALS-WR):
        every rating carries reg (|U_a|^2 + |V_b|^2); "auto" (default): chosen by validation, or
        "uniform" when reg is a number (a reg's scale belongs to its weighting) and reg_damping 0.
    reg_damping : float or "auto"
        With reg_weighting="count", the penalty is reg (n_a + reg_damping) |U_a|^2 for a user
        with n_a ratings (same for items): every row counts as if it had reg_damping more
        ratings, so rarely rated ones are shrunk like under the uniform penalty. 0 is ALS-WR;
        must be 0 with "uniform". "auto" (default): chosen by validation with the weighting (a
        number > 0 with reg_weighting "auto" means "count").

        When any of rank, reg, reg_weighting, reg_damping is "auto", fit cuts a seeded per-user validation
        split from the training ratings, runs successive halving over the auto ones (hamsi.search;
        an explicit value is never searched), then refits the winner on all the training ratings
        for the number of cycles validation chose (at most max_epochs). With max_time the search
        stops launching rungs after 70 % of it. search_results_ lists every trial.
        With search=False, "auto" takes the values the search starts from (rank 10, uniform) and
        reg from the data (hamsi.defaults), without a search: a fit of one run instead of many.
    biases : bool
        Learn user and item biases around the training mean (default on).
    eta, gamma : float or "auto", float
        Step 1 / (eta t)^gamma: a LARGER eta gives SMALLER steps. "auto" (or None) takes
        hamsi.defaults' value at fit time (attribute eta_); the gradient steps before L-BFGS
        starts are always fitted to the data and reg (attribute eta_gd_).
    init_scale : float or "auto"
        "auto": the start of hamsi.defaults (small factors, biases at their penalized
        least-squares fit); a number s: N(0, s^2) factors and zero biases (1 is the reference's).
    memory : int
        L-BFGS memory M.
    max_time, max_epochs, tol :
        Stop after max_time seconds of optimization, max_epochs cycles, or a relative objective
        change <= tol (0 disables).
    patience : int or None
        Early stopping: stop after `patience` cycles without a better validation RMSE. The
        validation set is `fit(validation=...)`, else a `validation_fraction` of X held out.
    validation_fraction : float
        Share of the ratings held out for early stopping when no validation set is given.
    safeguard : bool
        The engine's safeguarded steps (default on); False runs the thesis algorithm as written.
    threads : int or None
        Threads for the blocks of a subset (default: the number of cores).
    random_state : int or None
        Seeds the N(0, 1) start, the partitioner, the `stoc` schedule and the validation split.
    on_divergence : {"raise", "warn"}
        On NaN/inf, raise hamsi.errors.DivergenceError (default) or warn and keep the result.
    user_col, item_col, rating_col : str
        Column names read from a DataFrame X (with the defaults, MovieLens names such as
        userId / movieId are recognised too).
    search : bool
        Choose the "auto" hyper-parameters by validation (default True; see reg_weighting).
    verbose : int
        0 (default): quiet; 1: one line on stderr per search trial as it ends, and the choice.
        The lines always go to the "hamsi" logger (INFO).

    Attributes
    ----------
    user_ids_, item_ids_ : raw ids; row a of user_factors_ (m, rank) is user user_ids_[a].
    user_factors_, item_factors_, user_bias_, item_bias_ (None without biases), global_mean_,
    rating_min_, rating_max_ (the clipping range), rank_, reg_weighting_, reg_, reg_damping_, eta_, eta_gd_,
    init_scale_ (the values used), search_results_ (dict of lists, one entry per trial, like
    GridSearchCV.cv_results_; None when nothing was searched), n_iter_,
    best_epoch_, overfitting_ (from the engine; None when it does not report them), n_unknown_
    (pairs of the last predict call that fell back), trace_, result_ and partition_ (after fit).
    """

    _shared_params: tuple = ()  # parameters clone hands over as the same object (see __sklearn_clone__)
    # what each parameter accepts, checked in this order by validate_params (hamsi.parameters)
    _parameter_constraints: dict = {
        "rank": Integer(auto=True),
        "memory": Integer(),
        "blocks": Integer(none=True),
        "subsets": Integer(none=True),
        "threads": Integer(none=True),
        "max_epochs": Integer(none=True),
        "patience": Integer(none=True),
        "reg": Real(auto=True),
        "reg_damping": Real(auto=True),
        "eta": Real(none=True, auto=True, positive=True),
        "init_scale": Real(auto=True, positive=True),
        "tol": Real(),
        "max_time": Real(none=True),
        "gamma": Real(),
        "validation_fraction": Real(below=1.0),
        "biases": Boolean(),
        "safeguard": Boolean(),
        "search": Boolean(),
        "verbose": Integer(minimum=0),
        "algorithm": Choice(ALGORITHMS),
        "reg_weighting": Choice(REG_WEIGHTINGS + (AUTO,)),
        "schedule": Choice(("det", "stoc")),
        "on_divergence": Choice(("raise", "warn")),
    }

    def __init__(
        self,
        rank=AUTO,
        algorithm="hamsi",
        partitioner="strata-b",
        blocks=None,
        subsets=None,
        schedule="det",
        reg=AUTO,
        reg_weighting=AUTO,
        reg_damping=AUTO,
        biases=True,
        eta=AUTO,
        gamma=0.51,
        memory=5,
        init_scale=AUTO,
        max_time=None,
        max_epochs=100,
        tol=0.0,
        patience=None,
        validation_fraction=defaults.VALIDATION_FRACTION,
        safeguard=True,
        threads=None,
        random_state=None,
        on_divergence="raise",
        user_col="user",
        item_col="item",
        rating_col="rating",
        search=True,
        verbose=0,
    ):
        self.rank = rank
        self.algorithm = algorithm
        self.partitioner = partitioner
        self.blocks = blocks
        self.subsets = subsets
        self.schedule = schedule
        self.reg = reg
        self.reg_weighting = reg_weighting
        self.reg_damping = reg_damping
        self.biases = biases
        self.eta = eta
        self.gamma = gamma
        self.memory = memory
        self.init_scale = init_scale
        self.max_time = max_time
        self.max_epochs = max_epochs
        self.tol = tol
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.safeguard = safeguard
        self.threads = threads
        self.random_state = random_state
        self.on_divergence = on_divergence
        self.user_col = user_col
        self.item_col = item_col
        self.rating_col = rating_col
        self.search = search
        self.verbose = verbose

    def __sklearn_clone__(self):
        """Return an unfitted copy; parameters in _shared_params (a Dask client) stay the same object."""
        params = self.get_params(deep=False)
        return type(self)(
            **{
                name: value if name in self._shared_params else clone(value, safe=False)
                for name, value in params.items()
            }
        )

    # ------------------------------------------------------------------ validation
    def validate_params(self, name=lambda parameter: parameter) -> None:
        """Raise InputError on a bad hyper-parameter; name(parameter) is how messages call it (CLI: flag).

        Each parameter against its declared constraint (_parameter_constraints), then the checks
        that involve two of them.
        """
        import partition

        constraints = dict(
            self._parameter_constraints,
            partitioner=Choice(tuple(partition.SCHEMES), lower=True),
        )
        check_parameters(self, constraints, name)
        if self.gamma > 1.0:  # beyond 1, (eta t)^gamma overflows to a zero step within a few cycles
            raise InputError(
                f"{name('gamma')} must lie in [0, 1] (thesis eq. 3.8 takes gamma in (0.5, 1]); "
                f"got {self.gamma:g}"
            )
        if self.reg_weighting == "uniform" and self.reg_damping not in (AUTO, 0, 0.0):
            raise InputError(
                f"{name('reg_damping')}={self.reg_damping!r} applies to the count-weighted penalty; "
                f"got {name('reg_weighting')}='uniform' (pass 'count', or reg_damping 0)"
            )

    def _columns(self) -> tuple:
        return (self.user_col, self.item_col, self.rating_col)

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y=None, *, validation=None, callback=None):
        """Fit the model to the ratings in X and return self.

        X: a pandas DataFrame (user_col, item_col, rating_col), an (n, 3) array of (user, item,
        rating), an (n, 2) array of (user, item) with the ratings in y, or hamsi.Ratings. Ids are
        kept as given (integers or strings). `validation` (same forms) fills the trace's test_rmse
        column and drives `patience`; its pairs with ids absent from X are left out.
        callback(row: dict) is called after each cycle with the new trace row.
        """
        self.validate_params()
        started = time.perf_counter()
        with self._engine() as engine:
            if engine.keeps(X):
                return self._fit_kept(engine, X, validation, callback)
            train, validation = self._training_ratings(X, y, validation)
            unit = rating_unit(train.values)
            if unit == 1.0:
                return self._fit_in_memory(engine, train, validation, callback, started)
            low, high = float(train.values.min()), float(train.values.max())
            train, validation = (
                None if part is None else replace(part, values=part.values / unit)
                for part in (train, validation)
            )
            scaled = None if callback is None else in_units(callback, unit)
            self._fit_in_memory(engine, train, validation, scaled, started)
            return self._to_rating_units(unit, low, high)

    def _fit_in_memory(self, engine, train, validation, callback, started: float):
        """Search (or take) the hyper-parameters, refit on all of `train`; return self."""
        self.rating_unit_ = 1.0
        trial = self._choose(train, engine, started)
        if trial is not None:  # no time to refit: the search's model, said by _choose
            return self._adopt(trial, train)
        self.partition_ = self._partition(train, engine.default_blocks())
        data = InMemoryRatings(train)
        if self._chosen["cycles"] == 0:  # the start (biases fit): no engine run needed
            engine = InProcessEngine(self.threads)
        problem, result = self._solve(engine, data, validation, callback, self._remaining(started))
        if self._refit_cut(result):
            return self._adopt(self._fallback.fitted(self._fallback_candidate), train)
        if self.search_results_ is not None and result.reason == "epoch_limit":
            result.message = self._refit_message(result.n_cycles)
        return self._set_fitted(data, problem, result)

    def _to_rating_units(self, unit: float, low: float, high: float):
        """Turn a model fitted to ratings / unit into one of the ratings: factors x sqrt(unit), biases x unit."""
        root = float(np.sqrt(unit))
        self.user_factors_, self.item_factors_ = (
            self.user_factors_ * root,
            self.item_factors_ * root,
        )
        if self.user_bias_ is not None:
            self.user_bias_, self.item_bias_ = self.user_bias_ * unit, self.item_bias_ * unit
        self.global_mean_ = self.global_mean_ * unit
        self.rating_min_, self.rating_max_, self.rating_unit_ = low, high, unit
        if self.search_results_ is not None:
            self.search_results_["validation_rmse"] = [
                value * unit for value in self.search_results_["validation_rmse"]
            ]
        self._set_trace(Trace([in_units(None, unit)(row) for row in self.trace_.rows]))
        return self

    @staticmethod
    def _refit_message(cycles: int) -> str:
        """Return the refit's stop message: the cycles validation chose, not a limit the user set."""
        if cycles == 0:
            return (
                "no cycle of the chosen candidate beat the validation RMSE of its start, so the "
                "model is that start (the biases fit, small factors): 0 cycles"
            )
        return f"ran the {cycles} cycles the search chose on validation"

    def _engine(self):
        """Return a context manager yielding the Engine the fit runs on (hamsi.engine)."""
        return in_process(self.threads)

    def _training_ratings(self, X, y, validation):
        """Return (training Ratings, validation Ratings or None) of fit's arguments, checked."""
        train = as_ratings(X, y, self._columns(), what="X")
        if train.nnz == 0:
            raise InputError("cannot fit on empty ratings (0 entries)")
        if not np.all(np.isfinite(train.values)):
            raise InputError("ratings contain NaN or infinite values")
        if validation is not None:
            return train, self._aligned(
                as_ratings(validation, None, self._columns(), what="validation"), train
            )
        if self.patience is None:
            return train, None
        if not self.validation_fraction:
            raise InputError(
                "patience needs validation ratings: pass validation= or validation_fraction > 0"
            )
        # a hash of the pairs, as the Dask data path splits its partitions (cluster.dataset)
        return train.split_by_hash(self.validation_fraction, seed=self.random_state)

    def _fit_kept(self, engine, source, validation, callback):
        """Fit on ratings the engine keeps where it runs (the Dask workers) and return self.

        The search needs every trial's ratings in one process, so it does not run here: `auto`
        takes the values the search starts from (hamsi.search.UNSEARCHED), reg from the data.
        """
        if validation is not None:
            raise InputError(
                "validation= is not taken with ratings on the workers; the validation split is "
                "validation_fraction of the pairs, by a seeded hash (set patience)"
            )
        if self.patience is not None and not self.validation_fraction:
            raise InputError("patience needs validation ratings: validation_fraction > 0")
        data = engine.load(
            source,
            columns=self._columns(),
            scheme=str(self.partitioner).lower(),
            blocks=self.blocks,
            heldout_fraction=self.validation_fraction if self.patience is not None else 0.0,
            seed=self.random_state,
        )
        self.partition_ = data.cover
        self.rating_unit_ = 1.0  # the workers' ratings are fitted as they are (rating_unit)
        if self.search and self._searched():
            searched = self._searched()
            warnings.warn(
                AdvisedWarning(
                    "the hyper-parameter search does not run on ratings kept on the workers (a "
                    "trial needs its ratings in one process): the 'auto' values take the "
                    "unsearched defaults",
                    Advice(
                        api=f"pass search=False to say so, or explicit {', '.join(searched)}",
                        cli=f"give {', '.join(map(flag_name, searched))} to choose them",
                    ),
                ),
                stacklevel=3,
            )
        self._choose_unsearched()
        validation = data if data.n_test else None
        problem, result = self._solve(engine, data, validation, callback, self.max_time)
        return self._set_fitted(data, problem, result)

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
        runner = engine.trial_runner(MatrixFactorizer, self._trial_params(), fit_part, validation)
        grid = search.candidate_grid(self._fixed(), search.spread_of(train))
        max_cycles = 100 if self.max_epochs is None else max(1, int(self.max_epochs))
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
            fixed, reg=None if fixed["reg"] == AUTO else fixed["reg"], cycles=self.max_epochs
        )
        self.search_results_ = None

    def _trial_params(self) -> dict:
        """Return the parameters every trial shares: this model's, without the search and the clock."""
        params = {
            name: value
            for name, value in self.get_params(deep=False).items()
            if name in MatrixFactorizer._get_param_names()
        }
        params.update(max_time=None, on_divergence="warn", verbose=0)
        return params

    def _remaining(self, started: float):
        """Return the refit's max_time: what the search left of max_time (None without one)."""
        if self.max_time is None:
            return None
        # the engine's max_time counts optimization only; a fifth is left for the evaluations
        spent = time.perf_counter() - started
        return max(0.8 * (float(self.max_time) - spent), 1e-3)

    @staticmethod
    def _aligned(validation, train):
        """Return `validation` in the row/column numbering of `train`, without pairs unknown to it."""
        if validation.user_ids is train.user_ids and validation.item_ids is train.item_ids:
            return validation
        users, items, values = as_pairs(validation)
        rows, cols = IdIndex(train.user_ids).lookup(users), IdIndex(train.item_ids).lookup(items)
        known = (rows >= 0) & (cols >= 0)
        return type(train)(
            rows[known],
            cols[known],
            values[known],
            train.shape,
            train.user_ids,
            train.item_ids,
            validation.source,
        )

    def _partition(self, train, default_blocks: int):
        """Return the cover of `train` (partition.make) with B = blocks or default_blocks."""
        import partition

        blocks = min(self.blocks or default_blocks, min(train.shape))
        seed = 0 if self.random_state is None else self.random_state
        try:
            return partition.make(
                self.partitioner, train, blocks=blocks, subsets=self.subsets, seed=seed
            )
        except partition.PartitionError as exc:
            raise InputError(str(exc)) from exc

    def _solve(self, engine, data, validation, callback, max_time):
        """Return (problem, result) of engine.solve on `data` over partition_, the auto values resolved."""
        problem, options = self._problem_and_options(data, max_time)
        result = engine.solve(
            problem, self.partition_, options, heldout=validation, callback=callback
        )
        return problem, result

    def start_run(self, data, validation):
        """Return (problem, hamsi.optimizer.InProcessRun) of this model on `data` (a search trial).

        Every searched value is explicit here; the run has not run a cycle yet (its `advance`
        runs them, hamsi.trials).
        """
        from hamsi.engine import InProcessEngine

        self.validate_params()
        self._choose_unsearched()
        engine = InProcessEngine(self.threads)
        self.partition_ = self._partition(data.ratings, engine.default_blocks())
        problem, options = self._problem_and_options(data, None)
        return problem, engine.start(problem, self.partition_, options, heldout=validation)

    def finish_run(self, data, problem, result):
        """Set the fitted attributes from a run started by start_run and return self."""
        return self._set_fitted(data, problem, result)

    def _problem_and_options(self, data, max_time):
        """Return (problem, EngineOptions) of `data`: the one place that turns the parameters into both."""
        picked = self._chosen
        chosen = defaults.choose_hyperparameters(
            data.statistics,
            picked["rank"],
            subsets=self.partition_.n_subsets,
            reg=picked["reg"],
            reg_weighting=picked["reg_weighting"],
            reg_damping=picked["reg_damping"],
        )
        auto_eta = chosen["eta"] if self.algorithm == "hamsi" else chosen["eta_gd"]
        chosen.update(
            biases=self.biases,
            gamma=self.gamma,
            memory=self.memory,
            eta=float(auto_eta if self.eta in (AUTO, None) else self.eta),
        )
        if self.init_scale != AUTO:  # a chosen start is the reference's kind: N(0, s^2), biases 0
            chosen.update(init_scale=float(self.init_scale), init_biases=False)
        self.rank_, self.reg_weighting_ = int(picked["rank"]), picked["reg_weighting"]
        self.reg_damping_ = float(chosen["reg_damping"])
        self.reg_, self.eta_, self.eta_gd_, self.init_scale_ = (
            float(chosen[key]) for key in ("reg", "eta", "eta_gd", "init_scale")
        )
        problem = data.problem(self.rank_, **defaults.problem_options(chosen))
        options = EngineOptions(
            method=self.algorithm,
            schedule=self.schedule,
            random_state=self.random_state,
            max_epochs=picked["cycles"],
            max_time=max_time,
            tol=self.tol,
            patience=self.patience,
            safeguard=self.safeguard,
            **defaults.optimizer_options(chosen),
        )
        return problem, options

    def _set_fitted(self, data, problem, result):
        """Set the fitted attributes from an optimizer result; raise or warn if it diverged; return self."""
        self.result_ = result
        U, V = problem.factors(result.x)
        rank = self.rank_
        self.user_factors_ = U[:, :rank].copy()
        self.item_factors_ = V[:, :rank].copy()
        self.user_bias_ = U[:, rank].copy() if self.biases else None
        self.item_bias_ = V[:, rank].copy() if self.biases else None
        facts = data.facts()
        self.global_mean_ = problem.offset if self.biases else facts.mean
        self._set_training_facts(facts)
        self.n_iter_ = result.nit
        self.best_epoch_ = result.get("best_epoch")
        self.overfitting_ = result.get("overfitting")
        self._set_trace(result.trace)
        if result.reason == "diverged":
            if self.on_divergence == "raise":
                raise DivergenceError(result.message)
            warnings.warn(result.message, RuntimeWarning, stacklevel=4)
        elif self.overfitting_:
            kept = self.patience is not None
            message = (
                f"validation RMSE rose after cycle {self.best_epoch_} while the training RMSE kept "
                f"falling: the model overfits"
                + (f" (the factors of cycle {self.best_epoch_} are kept)" if kept else "")
            )
            advice = Advice(
                api=("" if kept else "patience=N would keep the best cycle's factors; ")
                + "a larger reg or a smaller rank may help",
                cli=("" if kept else "--patience N would keep the best cycle's factors; ")
                + "a larger --reg or a smaller --rank may help",
            )
            warnings.warn(AdvisedWarning(message, advice), stacklevel=4)
        return self

    def _set_training_facts(self, facts: TrainingFacts):
        """Set the rating range, the raw ids and the items every user rated (recommend leaves them out)."""
        self.rating_min_, self.rating_max_ = facts.rating_min, facts.rating_max
        self.user_ids_, self.item_ids_ = facts.user_ids, facts.item_ids
        self._seen_indptr, self._seen_items = facts.seen_indptr, facts.seen_items
        self._item_known = facts.item_known

    def _set_trace(self, trace):
        """Set trace_ and the lookup structures that predict and recommend use."""
        self.trace_ = trace
        self._user_index, self._item_index = IdIndex(self.user_ids_), IdIndex(self.item_ids_)
        biases = self.user_bias_ is not None
        self._arrays = FactorArrays(
            self.user_factors_,
            self.item_factors_,
            self.user_bias_,
            self.item_bias_,
            offset=self.global_mean_ if biases else 0.0,
            global_mean=self.global_mean_,
            user_known=np.diff(self._seen_indptr) > 0,
            item_known=(
                np.bincount(self._seen_items, minlength=self.item_ids_.size) > 0
                if self._seen_items is not None
                else self._item_known
            ),
        )

    def _check_fitted(self):
        if not hasattr(self, "user_factors_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(X) first")

    # ------------------------------------------------------------------ predictions
    def predict(self, users, items=None, *, clip: bool = True) -> np.ndarray:
        """Return predicted ratings for raw (user, item) ids, clipped to [rating_min_, rating_max_].

        predict(users, items) with equal-length arrays (or scalars) of raw ids, or predict(X) with
        X as in fit (ratings, if present, are ignored). A pair whose user or item was not in the
        training data gets global_mean_ plus the known side's bias; n_unknown_ counts such pairs.
        """
        self._check_fitted()
        if items is None:
            users, items, _ = as_pairs(users, None, self._columns())
        users, items = np.atleast_1d(np.asarray(users)), np.atleast_1d(np.asarray(items))
        if users.shape != items.shape or users.ndim != 1:
            raise InputError(
                f"users and items must be 1-D and of the same length; got shapes {users.shape} "
                f"and {items.shape}"
            )
        scores, unknown = pair_scores(
            self._arrays, self._user_index.lookup(users), self._item_index.lookup(items)
        )
        self.n_unknown_ = int(np.count_nonzero(unknown))
        return np.clip(scores, self.rating_min_, self.rating_max_) if clip else scores

    def recommend(
        self, user, n: int = 10, exclude_seen: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return (raw item ids, predicted ratings) of the n best items for `user`, best first.

        Items are ranked by the unclipped score; the ratings returned are predict()'s (clipped).
        exclude_seen leaves out the items the user rated in training; items without training
        ratings are never recommended. An unknown user gets the items with the largest
        global mean + item bias (the fallback of predict).
        """
        self._check_fitted()
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise InputError(f"n must be a positive integer; got {n!r}")
        row = int(self._user_index.lookup([user])[0])
        seen = self.seen_items(row) if exclude_seen and row >= 0 else None
        best, scores = best_items(self._arrays, row, int(n), seen)
        return self.item_ids_[best], np.clip(scores, self.rating_min_, self.rating_max_)

    def seen_items(self, row: int) -> np.ndarray:
        """Return the item positions model row `row` rated in training (InputError if the model keeps none)."""
        if self._seen_items is None:
            raise InputError(
                "this model was fitted on ratings that stayed on the workers and holds no list of the "
                "items each user rated; rank all items (exclude_seen=False; hamsi recommend "
                "--include-seen)"
            )
        return self._seen_items[self._seen_indptr[row] : self._seen_indptr[row + 1]]

    def rmse(self, X, y=None) -> float:
        """Return the root mean squared error of the (clipped) predictions on the ratings in X (or y)."""
        users, items, values = as_pairs(X, y, self._columns())
        if values is None:
            raise InputError("X holds no ratings: pass y or a rating column")
        errors = self.predict(users, items) - values
        return float(np.sqrt(np.mean(errors**2)))

    def score(self, X, y=None) -> float:
        """Return the negative RMSE on the ratings in X (greater is better, as scikit-learn expects)."""
        return -self.rmse(X, y)

    # ------------------------------------------------------------------ persistence
    def save(self, path) -> None:
        """Write the fitted model (ids, factors, parameters, trace) to `path` (hamsi.model_io format)."""
        self._check_fitted()
        params = {
            name: _plain(name, value)
            for name, value in self.get_params(deep=False).items()
            if name not in self._shared_params
        }
        fitted = {name: _plain(name, getattr(self, name)) for name in MODEL_SCALARS}
        arrays = {
            key: getattr(self, attribute)
            for key, attribute in MODEL_ARRAYS.items()
            if getattr(self, attribute) is not None
        }
        arrays["trace"] = np.array(self.trace_.rows, dtype=np.float64).reshape(-1, 6)
        model_io.write_model(path, params, fitted, arrays)

    @classmethod
    def load(cls, path):
        """Return the model saved at `path` by save() (or `hamsi factorize --out`)."""
        params, fitted, arrays = model_io.read_model(path)
        accepted = cls._get_param_names()
        model = cls(**{name: value for name, value in params.items() if name in accepted})
        try:  # what fit would refuse is refused here, naming the file
            model.validate_params(name=lambda parameter: f"params entry {parameter!r}")
        except InputError as exc:
            raise InputError(f"{path}: malformed model: {exc}") from None
        for name in MODEL_SCALARS:
            setattr(model, name, fitted.get(name))
        model.search_results_ = None  # the search's table is not saved
        for key, attribute in MODEL_ARRAYS.items():
            setattr(model, attribute, arrays.get(key))
        model._set_trace(
            Trace([(int(row[0]), int(row[1]), *map(float, row[2:])) for row in arrays["trace"]])
        )
        return model
