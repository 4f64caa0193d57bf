"""What a fitted MatrixFactorizer does: predict, recommend, score, save and load (`FittedModel`).

Raw ids in, raw ids out (scikit-surprise and implicit are the anchors): `predict(users, items)`
and `recommend(user)` speak the ids of the data; unknown ids get a documented fallback;
predictions stay in the training rating range; a fitted model saves to and loads from one
versioned .npz (hamsi.model_io).
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.exceptions import NotFittedError

from hamsi import model_io
from hamsi.errors import Advice, AdvisedWarning, DivergenceError, InputError
from hamsi.parameters import with_new_names
from hamsi.rating_scale import in_units
from hamsi.recommender import FactorArrays, IdIndex, as_pairs, best_items, pair_scores
from hamsi.trace import Trace, TraceRow
from hamsi.training import TrainingFacts

# what seen_items says when a model fitted on worker data has no workers (saved and loaded)
NO_WORKERS_SEEN = (
    "this model was fitted on ratings that stayed on the Dask workers and was loaded without them, "
    "so it holds no list of the items each user rated; give the ratings it was fitted on "
    "(hamsi recommend --all --seen DATA; cluster.seen_join.recommend_all_seen), rank all items "
    "(exclude_seen=False; --include-seen), or recommend from the fitted DaskMatrixFactorizer in "
    "the session that fitted it"
)

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
    "best_cycle_",
    "overfitting_",
    "rating_unit_",
)


def _plain(name: str, value):
    """Return value as a JSON-ready Python scalar (numpy scalars unwrapped); InputError otherwise."""
    value = value.item() if isinstance(value, np.generic) else value
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise InputError(f"cannot save {name}={value!r}: only numbers, strings and None are saved")
    return value


class FittedModel:
    """MatrixFactorizer's fitted side: the attributes an engine result sets, and what they serve."""

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
        self.best_cycle_ = result.get("best_cycle")
        self.overfitting_ = result.get("overfitting")
        self._set_trace(result.trace)
        if result.reason == "diverged":
            if self.on_divergence == "raise":
                raise DivergenceError(result.message)
            warnings.warn(result.message, RuntimeWarning, stacklevel=4)
        elif self.overfitting_:
            kept = self.patience is not None
            message = (
                f"validation RMSE rose after cycle {self.best_cycle_} while the training RMSE kept "
                f"falling: the model overfits"
                + (f" (the factors of cycle {self.best_cycle_} are kept)" if kept else "")
            )
            advice = Advice(
                api=("" if kept else "patience=N would keep the best cycle's factors; ")
                + "a larger reg or a smaller rank may help",
                cli=("" if kept else "--patience N would keep the best cycle's factors; ")
                + "a larger --reg or a smaller --rank may help",
            )
            warnings.warn(AdvisedWarning(message, advice), stacklevel=4)
        return self

    @property
    def best_epoch_(self):
        """Deprecated name of best_cycle_."""
        warnings.warn(
            "best_epoch_ is deprecated; use best_cycle_ (same value)", FutureWarning, stacklevel=2
        )
        return self.best_cycle_

    def _set_training_facts(self, facts: TrainingFacts):
        """Set the rating range, the raw ids and the items every user rated (recommend leaves them out)."""
        self.rating_min_, self.rating_max_ = facts.rating_min, facts.rating_max
        self.user_ids_, self.item_ids_ = facts.user_ids, facts.item_ids
        self._seen_indptr, self._seen_items = facts.seen_indptr, facts.seen_items
        self._item_known = facts.item_known
        self._kept = facts.kept

    def _training_facts(self) -> TrainingFacts:
        """Return the TrainingFacts this model keeps (what _set_training_facts set)."""
        return TrainingFacts(
            rating_min=self.rating_min_,
            rating_max=self.rating_max_,
            mean=self.global_mean_,
            user_ids=self.user_ids_,
            item_ids=self.item_ids_,
            seen_indptr=self._seen_indptr,
            seen_items=self._seen_items,
            item_known=self._item_known,
            kept=getattr(self, "_kept", None),
        )

    def drop_seen_items(self) -> None:
        """Forget the items each user rated (O(ratings)), keeping which items have ratings."""
        if self._seen_items is not None:
            self._item_known = np.bincount(self._seen_items, minlength=self.item_ids_.size) > 0
            self._seen_items = None

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
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(X) first")

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
        """Return the item positions model row `row` rated in training.

        A model fitted on ratings kept on the Dask workers fetches them from the row shard that
        holds them (cluster.kept); saved and loaded, it has no workers, and InputError says what
        to do instead.
        """
        if self._seen_items is not None:
            return self._seen_items[self._seen_indptr[row] : self._seen_indptr[row + 1]]
        kept = getattr(self, "_kept", None)
        if kept is None:
            raise InputError(NO_WORKERS_SEEN)
        return kept.seen_items(row)

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
        params = with_new_names(params, cls._parameter_constraints)
        accepted = cls._get_param_names()
        model = cls(**{name: value for name, value in params.items() if name in accepted})
        try:  # what fit would refuse is refused here, naming the file
            model.validate_params(name=lambda parameter: f"params entry {parameter!r}")
        except InputError as exc:
            raise InputError(f"{path}: malformed model: {exc}") from None
        fitted.setdefault("best_cycle_", fitted.get("best_epoch_"))  # its name before the rename
        for name in MODEL_SCALARS:
            setattr(model, name, fitted.get(name))
        model.search_results_ = None  # the search's table is not saved
        model._kept = None  # nor the futures on the workers of a model fitted there
        for key, attribute in MODEL_ARRAYS.items():
            setattr(model, attribute, arrays.get(key))
        model._set_trace(
            Trace(
                [
                    TraceRow(int(row[0]), int(row[1]), *map(float, row[2:]))
                    for row in arrays["trace"]
                ]
            )
        )
        return model

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
