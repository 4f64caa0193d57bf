"""`MatrixFactorizer`: the scikit-learn-style estimator around the in-process HAMSI / mb-GD engine."""

from __future__ import annotations

import numbers
import os
import warnings

import numpy as np
from sklearn.base import BaseEstimator

from hamsi.errors import DivergenceError, InputError
from hamsi.optimizer import GD_ETA, HAMSI_ETA, minimize_hamsi, minimize_mbgd
from hamsi.problems import MatrixFactorization

ALGORITHMS = ("hamsi", "mbgd")


def available_cores() -> int:
    """Return the number of cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class MatrixFactorizer(BaseEstimator):
    """Low-rank matrix completion Y ~ U V^T fitted by HAMSI (thesis Alg. 3) or mini-batch GD.

    Parameters
    ----------
    rank : int
        Number of latent factors k.
    algorithm : {"hamsi", "mbgd"}
    partitioner : str
        A `partition` scheme: "strata-b" (default), "strata", "color", "color-b", "hogwild".
    blocks, subsets : int or None
        Blocks per subset B (default: the number of cores, at most min(users, items)) and
        subsets K (default: B for strata schemes, the partitioner's default otherwise).
    schedule : {"det", "stoc"}
        Subset order per cycle (thesis sec. 3.4).
    reg : float
        L2 weight: the objective is (SSE + reg (|U|^2 + |V|^2)) / 2|I|.
    biases : bool
        Learn user and item biases around the training mean.
    eta, gamma : float
        Step schedule 1 / (eta t)^gamma; eta defaults to 0.06 (hamsi) or 0.001 (mbgd).
    memory : int
        L-BFGS memory M.
    max_time, max_epochs, tol, patience :
        Stop after max_time seconds of optimization, max_epochs cycles, a relative objective
        change <= tol (0 disables), or `patience` cycles without validation improvement.
    threads : int or None
        Threads for the blocks of a subset (default: the number of cores).
    random_state : int or None
        Seeds the N(0, 1) start, the partitioner and the `stoc` schedule.
    on_divergence : {"raise", "warn"}
        On NaN/inf, raise hamsi.errors.DivergenceError (default) or warn and keep the result.

    Attributes
    ----------
    user_factors_ (m, rank), item_factors_ (n, rank), user_bias_, item_bias_, global_mean_
    (with biases), trace_ (hamsi.trace.Trace), result_ (scipy OptimizeResult), partition_.
    """

    def __init__(self, rank=10, algorithm="hamsi", partitioner="strata-b", blocks=None, subsets=None,
                 schedule="det", reg=0.0, biases=False, eta=None, gamma=0.51, memory=5, max_time=None,
                 max_epochs=100, tol=0.0, patience=None, threads=None, random_state=None,
                 on_divergence="raise"):
        self.rank = rank
        self.algorithm = algorithm
        self.partitioner = partitioner
        self.blocks = blocks
        self.subsets = subsets
        self.schedule = schedule
        self.reg = reg
        self.biases = biases
        self.eta = eta
        self.gamma = gamma
        self.memory = memory
        self.max_time = max_time
        self.max_epochs = max_epochs
        self.tol = tol
        self.patience = patience
        self.threads = threads
        self.random_state = random_state
        self.on_divergence = on_divergence

    def _check_params(self, ratings):
        def positive_int(name, value, allow_none=False):
            if value is None and allow_none:
                return
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise InputError(f"{name} must be a positive integer; got {value!r}")

        def non_negative(name, value, allow_none=False):
            if value is None and allow_none:
                return
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:
                raise InputError(f"{name} must be a number >= 0; got {value!r}")

        positive_int("rank", self.rank)
        positive_int("memory", self.memory)
        positive_int("blocks", self.blocks, allow_none=True)
        positive_int("subsets", self.subsets, allow_none=True)
        positive_int("threads", self.threads, allow_none=True)
        positive_int("max_epochs", self.max_epochs, allow_none=True)
        positive_int("patience", self.patience, allow_none=True)
        non_negative("reg", self.reg)
        non_negative("tol", self.tol)
        non_negative("max_time", self.max_time, allow_none=True)
        non_negative("gamma", self.gamma)
        if self.eta is not None:
            non_negative("eta", self.eta)
            if self.eta == 0:
                raise InputError("eta must be > 0")
        if self.algorithm not in ALGORITHMS:
            raise InputError(f"unknown algorithm {self.algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
        if self.schedule not in ("det", "stoc"):
            raise InputError(f"unknown schedule {self.schedule!r}; choose det or stoc")
        if self.on_divergence not in ("raise", "warn"):
            raise InputError(f"on_divergence must be 'raise' or 'warn'; got {self.on_divergence!r}")
        import partition

        if str(self.partitioner).lower() not in partition.SCHEMES:
            raise InputError(f"unknown partitioner {self.partitioner!r}; choose one of "
                             f"{', '.join(partition.SCHEMES)}")
        for name in ("rows", "cols", "values", "shape"):
            if not hasattr(ratings, name):
                raise InputError(f"ratings must be a hamsi.Ratings (missing .{name}); got {type(ratings).__name__}")
        if ratings.rows.shape[0] == 0:
            raise InputError("cannot fit on empty ratings (0 entries)")
        if not np.all(np.isfinite(ratings.values)):
            raise InputError("ratings contain NaN or infinite values")

    def fit(self, ratings, validation=None, callback=None):
        """Fit the factors to `ratings` (hamsi.Ratings) and return self.

        `validation` (Ratings, same shape) fills the trace's test_rmse column and drives `patience`;
        callback(row: dict) is called after each cycle with the new trace row.
        """
        import partition

        self._check_params(ratings)
        if validation is not None and tuple(validation.shape) != tuple(ratings.shape):
            raise InputError(f"validation shape {validation.shape} differs from the ratings shape {ratings.shape}")
        cores = available_cores()
        blocks = min(self.blocks or cores, min(ratings.shape))
        seed = self.random_state
        try:
            self.partition_ = partition.make(self.partitioner, ratings, blocks=blocks, subsets=self.subsets,
                                             seed=0 if seed is None else seed)
        except partition.PartitionError as exc:
            raise InputError(str(exc)) from exc
        problem = MatrixFactorization(ratings, self.rank, reg=self.reg, biases=self.biases)
        options = dict(schedule=self.schedule, gamma=self.gamma, random_state=seed,
                       max_epochs=self.max_epochs, max_time=self.max_time, tol=self.tol,
                       patience=self.patience, heldout=validation, threads=self.threads or cores,
                       callback=callback)
        if self.algorithm == "hamsi":
            result = minimize_hamsi(problem, self.partition_, eta=self.eta or HAMSI_ETA, memory=self.memory,
                                    **options)
        else:
            result = minimize_mbgd(problem, self.partition_, eta=self.eta or GD_ETA, **options)
        return self._set_fitted(problem, result)

    def _set_fitted(self, problem, result):
        """Set the fitted attributes from an optimizer result; raise or warn if it diverged; return self."""
        self._problem = problem
        self.result_ = result
        self.trace_ = result.trace
        U, V = problem.factors(result.x)
        self.user_factors_ = U[:, :self.rank].copy()
        self.item_factors_ = V[:, :self.rank].copy()
        if self.biases:
            self.user_bias_ = U[:, self.rank].copy()
            self.item_bias_ = V[:, self.rank].copy()
            self.global_mean_ = problem.offset
        self.n_iter_ = result.nit
        if result.reason == "diverged":
            if self.on_divergence == "raise":
                raise DivergenceError(result.message)
            warnings.warn(result.message, RuntimeWarning, stacklevel=3)
        return self

    def _check_fitted(self):
        if not hasattr(self, "result_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("this MatrixFactorizer is not fitted yet; call fit(ratings) first")

    def predict(self, users, items) -> np.ndarray:
        """Return the predicted ratings for dense user and item indices (arrays of equal length)."""
        self._check_fitted()
        users = np.asarray(users, dtype=np.int64)
        items = np.asarray(items, dtype=np.int64)
        if users.shape != items.shape:
            raise InputError(f"users and items must have the same shape; got {users.shape} and {items.shape}")
        m, n = self.user_factors_.shape[0], self.item_factors_.shape[0]
        if users.size and (users.min() < 0 or users.max() >= m or items.min() < 0 or items.max() >= n):
            raise InputError(f"indices must be dense: users in [0, {m}), items in [0, {n})")
        return self._problem.predict(self.result_.x, users, items)

    def rmse(self, ratings) -> float:
        """Return the root mean squared error of the predictions on `ratings`."""
        errors = self.predict(ratings.rows, ratings.cols) - np.asarray(ratings.values, dtype=np.float64)
        return float(np.sqrt(np.mean(errors ** 2)))

    def score(self, ratings) -> float:
        """Return the negative RMSE on `ratings` (greater is better, as scikit-learn scorers expect)."""
        return -self.rmse(ratings)
