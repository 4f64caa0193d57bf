"""`MatrixFactorizer`: a scikit-learn-style recommender around the in-process HAMSI / mb-GD engine.

Raw ids in, raw ids out (scikit-surprise and implicit are the anchors): `fit` takes a pandas
DataFrame, an array or `Ratings`; `predict(users, items)` and `recommend(user)` speak the ids of
the data; unknown ids get a documented fallback; predictions stay in the training rating range;
a fitted model saves to and loads from one versioned .npz (hamsi.model_io).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace

from sklearn.base import BaseEstimator

import partition
from hamsi import defaults
from hamsi.auto_values import AUTO, LOGGER, AutoValues, in_memory_sample
from hamsi.engine import InProcessEngine, in_process
from hamsi.engine_fit import EngineFit
from hamsi.errors import InputError
from hamsi.fitted import MODEL_ARRAYS, MODEL_SCALARS, FittedModel
from hamsi.options import METHODS
from hamsi.parameters import (
    DEPRECATED,
    Boolean,
    Choice,
    Integer,
    Real,
    Renamed,
    check_parameters,
    renamed_value,
)
from hamsi.problems.matrix_factorization import REG_WEIGHTINGS
from hamsi.rating_scale import STAR_SPAN, in_units, rating_unit
from hamsi.training import InMemoryRatings

# names callers import from here: the module the estimator's parts were split from
__all__ = [
    "AUTO",
    "LOGGER",
    "MODEL_ARRAYS",
    "MODEL_SCALARS",
    "STAR_SPAN",
    "MatrixFactorizer",
    "in_units",
    "rating_unit",
]


def __getattr__(name: str):
    if name == "ALGORITHMS":  # one constant names the methods: hamsi.options.METHODS
        warnings.warn(
            "hamsi.estimator.ALGORITHMS is deprecated; use hamsi.options.METHODS",
            FutureWarning,
            stacklevel=2,
        )
        return METHODS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class MatrixFactorizer(AutoValues, EngineFit, FittedModel, BaseEstimator):
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

        When any of rank, reg, reg_weighting, reg_damping is "auto", fit chooses it by validation
        (hamsi.auto_values: successive halving on a split of the training ratings, then a refit;
        docs/accuracy.md); search_results_ lists every trial. With search=False, "auto" takes the
        values the search starts from, without a search.
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
    max_time, max_cycles, tol :
        Stop after max_time seconds of optimization, max_cycles cycles (visits of the subsets;
        max_epochs is a deprecated name), or a relative objective change <= tol (0 disables).
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
    best_cycle_, overfitting_ (from the engine; None when it does not report them), n_unknown_
    (pairs of the last predict call that fell back), trace_, result_ and partition_ (after fit).
    """

    # what each parameter accepts, checked in this order by validate_params (hamsi.parameters)
    _parameter_constraints: dict = {
        "rank": Integer(auto=True),
        "memory": Integer(),
        "blocks": Integer(none=True),
        "subsets": Integer(none=True),
        "threads": Integer(none=True),
        "max_cycles": Integer(none=True),
        "max_epochs": Renamed("max_cycles", Integer(none=True)),
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
        "algorithm": Choice(METHODS),
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
        max_cycles=100,
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
        max_epochs=DEPRECATED,
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
        self.max_cycles = max_cycles
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
        self.max_epochs = max_epochs

    _param = renamed_value  # a parameter's value, or the one given under its deprecated name

    def validate_params(self, name=lambda parameter: parameter) -> None:
        """Raise InputError on a bad hyper-parameter; name(parameter) is how messages call it (CLI: flag).

        Each parameter against its declared constraint (_parameter_constraints), then the checks
        that involve two of them.
        """
        constraints = dict(
            self._parameter_constraints,
            partitioner=Choice(tuple(partition.SCHEMES), lower=True),
        )
        check_parameters(self, constraints, name)  # a deprecated name given warns FutureWarning
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
        kept as given (integers or strings). `validation` (same forms) fills the trace's
        validation_rmse column and drives `patience`; its pairs with ids absent from X are left
        out. callback(row: dict) is called after each cycle with the new trace row (TRACE_COLUMNS).
        """
        self.validate_params()
        started = time.perf_counter()
        with self._engine() as engine:
            if engine.keeps(X):
                return self._fit_kept(engine, X, validation, callback, started)
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
        data = InMemoryRatings(train)
        sample = in_memory_sample(train, self.random_state) if self._searching() else None
        trial = self._choose(sample, engine, started)
        if trial is not None:  # no time to refit: the search's model, said by _choose
            return self._adopt(trial, data.facts())
        self.partition_ = self._partition(train, engine.default_blocks())
        if self._chosen["cycles"] == 0:  # the start (biases fit): no engine run needed
            engine = InProcessEngine(self.threads)
        return self._refit(engine, data, validation, callback, started, data.facts)

    @staticmethod
    def _in_process_class():
        """Return the estimator the search's trials are (in process, wherever they run)."""
        return MatrixFactorizer

    def _engine(self):
        """Return a context manager yielding the Engine the fit runs on (hamsi.engine)."""
        return in_process(self.threads)
