"""How MatrixFactorizer hands its data and parameters to an engine (`EngineFit`).

The training and validation ratings checked and aligned, the cover cut, the problem and the
EngineOptions built in one place for both engines; ratings kept on the Dask workers are fitted
through the engine's `load` and searched on its `search_sample`.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import clone

import partition
from hamsi import defaults
from hamsi.engine import InProcessEngine
from hamsi.errors import InputError
from hamsi.options import EngineOptions
from hamsi.recommender import IdIndex, as_pairs, as_ratings

AUTO = "auto"


class EngineFit:
    """MatrixFactorizer's side that talks to an engine: data, cover, problem, options."""

    _shared_params: tuple = ()  # parameters clone hands over as the same object (see __sklearn_clone__)

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

    def _fit_kept(self, engine, source, validation, callback, started: float):
        """Fit on ratings the engine keeps where it runs (the Dask workers) and return self.

        The search runs there too: its trials read a SearchSample the workers cut from the same
        source (engine.search_sample: every rating when they fit one worker, else a seeded sample
        of users), and the chosen values are refit on all the ratings, in their shards.
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
            partitioner=str(self.partitioner).lower(),
            blocks=self.blocks,
            validation_fraction=self.validation_fraction if self.patience is not None else 0.0,
            seed=self.random_state,
            subsets=self.subsets,
        )
        self.partition_ = data.cover
        self.rating_unit_ = 1.0  # the workers' ratings are fitted as they are (rating_unit)
        sample = None
        if self._searching():
            sample = engine.search_sample(
                source, columns=self._columns(), n_ratings=data.n_ratings, seed=self.random_state
            )
        # a trial fitted on a sample of users knows only those users: it keeps its own facts
        whole = sample is None or sample.fraction >= 1.0
        trial = self._choose(sample, engine, started)
        if trial is not None:  # no time to refit: the search's model, said by _choose
            return self._adopt(trial, data.facts() if whole else None)
        validation = data if data.n_test else None
        return self._refit(
            engine, data, validation, callback, started, lambda: data.facts() if whole else None
        )

    def _partition(self, train, default_blocks: int):
        """Return the cover of `train` (partition.make) with B = blocks or default_blocks."""
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
            problem, self.partition_, options, validation=validation, callback=callback
        )
        return problem, result

    def start_run(self, data, validation):
        """Return (problem, hamsi.optimizer.InProcessRun) of this model on `data` (a search trial).

        Every searched value is explicit here; the run has not run a cycle yet (its `advance`
        runs them, hamsi.trials).
        """

        self.validate_params()
        self._choose_unsearched()
        engine = InProcessEngine(self.threads)
        self.partition_ = self._partition(data.ratings, engine.default_blocks())
        problem, options = self._problem_and_options(data, None)
        return problem, engine.start(problem, self.partition_, options, validation=validation)

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
        if picked.get("cycles") == 0:  # no cycle beat the biases fit on validation: it is the model
            chosen.update(init_factors="random")
        if self.init_scale != AUTO:  # a chosen start is the reference's kind: N(0, s^2), biases 0
            chosen.update(
                init_scale=float(self.init_scale), init_biases=False, init_factors="random"
            )
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
            max_cycles=picked["cycles"],
            max_time=max_time,
            tol=self.tol,
            patience=self.patience,
            safeguard=self.safeguard,
            **defaults.optimizer_options(chosen),
        )
        return problem, options
