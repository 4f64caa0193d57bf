"""DaskMatrixFactorizer: hamsi.MatrixFactorizer fitted on a Dask cluster (composition, not a flag).

hamsi cannot import cluster (arrows point cluster -> hamsi -> partition), so the Dask variant is a
subclass living here. It replaces only where the engine runs (`_minimize`); input conversion,
defaults, early stopping, predictions, recommend and save/load are MatrixFactorizer's.
"""

from __future__ import annotations

import atexit
import contextlib
import warnings

import numpy as np

from hamsi.defaults import VALIDATION_FRACTION
from hamsi.errors import Advice, AdvisedWarning, InputError, flag_name
from hamsi.estimator import AUTO, MatrixFactorizer
from hamsi.recommender import DEFAULT_COLUMNS

# One LocalCluster per process and size, opened by the first fit without client or scheduler and
# reused by every later one (starting one costs 10-20 s); closed by close_local_clusters() or at exit.
_LOCAL_CLUSTERS: dict = {}


def local_client(n_workers, threads_per_worker):
    """Return the Client of this process's LocalCluster of that size, starting it on first use."""
    from cluster.connect import connect

    key = (n_workers, int(threads_per_worker))
    if key not in _LOCAL_CLUSTERS:
        stack = contextlib.ExitStack()
        client = stack.enter_context(
            connect(n_workers=n_workers, threads_per_worker=threads_per_worker)
        )
        _LOCAL_CLUSTERS[key] = (client, stack)
    return _LOCAL_CLUSTERS[key][0]


def close_local_clusters() -> None:
    """Close the LocalClusters that DaskMatrixFactorizer fits opened in this process (also run at exit)."""
    while _LOCAL_CLUSTERS:
        _, (_, stack) = _LOCAL_CLUSTERS.popitem()
        stack.close()


atexit.register(close_local_clusters)


class DaskMatrixFactorizer(MatrixFactorizer):
    """MatrixFactorizer whose fit runs cluster.fit_distributed (one row shard per block on the workers).

    Extra parameters: client (a distributed.Client, left open), scheduler ("tcp://host:port"),
    n_workers (LocalCluster size when neither is given; default: cores; `workers` is its
    deprecated alias), threads_per_worker,
    chunk_epochs (cycles per client round trip), checkpoint / checkpoint_every / resume,
    shared_memory and owned_v (where V lives: cluster.driver.minimize_hamsi; None chooses).
    blocks defaults to the number of workers; with the same partition and random_state the fit
    gives the in-process estimator's factors (bitwise for strata and strata-b).

    X may also live on the cluster: a Dask DataFrame, or a path, directory or glob of Parquet / CSV
    files. It is then read, indexed, split (validation: a seeded hash of the pairs, the rule the
    in-memory fit uses) and routed to its row shards on the workers and never collected
    (cluster.dataset; partitioner strata or strata-b); the same ratings in a pandas DataFrame give
    the same factors. Such a model keeps no list of the items each user rated (that is O(ratings)):
    recommend with exclude_seen=False. Score on the workers with `cluster.scoring`.

    The client is shared, not copied: sklearn's clone (GridSearchCV, cross_val_score) hands the
    same Client object to every copy, so all fits run on the cluster it is connected to. It is
    not saved by save().

    Without client or scheduler, the first fit starts a LocalCluster on loopback and every later
    fit in the process with the same n_workers and threads_per_worker reuses it; it closes at
    interpreter exit, or earlier with cluster.estimator.close_local_clusters().

    The hyper-parameter search (hamsi.search) runs its trials as Dask tasks, one per worker, each
    an in-process fit there (cluster.search); the refit of the winner runs on the cluster.
    """

    _shared_params = ("client",)

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
        validation_fraction=VALIDATION_FRACTION,
        safeguard=True,
        threads=None,
        random_state=None,
        on_divergence="raise",
        user_col="user",
        item_col="item",
        rating_col="rating",
        search=True,
        client=None,
        scheduler=None,
        n_workers=None,
        threads_per_worker=1,
        chunk_epochs=10,
        checkpoint=None,
        checkpoint_every=None,
        resume=None,
        shared_memory=None,
        owned_v=None,
        workers=None,
    ):
        base = {
            name: value
            for name, value in locals().items()
            if name in MatrixFactorizer._get_param_names()
        }
        super().__init__(**base)
        self.client = client
        self.scheduler = scheduler
        self.n_workers = n_workers
        self.workers = workers
        self.threads_per_worker = threads_per_worker
        self.chunk_epochs = chunk_epochs
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.resume = resume
        self.shared_memory = shared_memory
        self.owned_v = owned_v

    def _worker_count(self):
        """Return n_workers, or the deprecated `workers` with a FutureWarning."""
        if self.workers is not None:
            warnings.warn(
                "DaskMatrixFactorizer(workers=...) is deprecated and will be removed in the next "
                "release; use n_workers=",
                FutureWarning,
                stacklevel=4,
            )
            if self.n_workers is None:
                return self.workers
        return self.n_workers

    @contextlib.contextmanager
    def _client(self):
        """Yield the client to fit with: the given one, the scheduler's, or this process's LocalCluster."""
        from cluster.connect import connect

        if self.client is None and self.scheduler is None:
            yield local_client(self._worker_count(), self.threads_per_worker)
            return
        with connect(client=self.client, scheduler=self.scheduler) as client:
            yield client

    def _warm_up_trials(self) -> None:
        """Nothing here: the trials run, and compile, on the workers (cluster.search)."""

    def _run_trials(self, trials, fit_part, validation):
        """Return the outcomes of one rung's trials, run as Dask tasks (cluster.search)."""
        from cluster.search import DaskTrialRunner

        if self._trial_runner is None:
            self._trial_runner = DaskTrialRunner(
                self._active_client,
                self._trial_params(),
                fit_part,
                validation,
                self.threads_per_worker,
            )
        return self._trial_runner(trials)

    def fit(self, X, y=None, *, validation=None, callback=None):
        """Fit on the cluster and return self (MatrixFactorizer.fit; the search's trials run as Dask tasks).

        X on the cluster (a Dask DataFrame, a Parquet/CSV path or glob) stays there (cluster.dataset).
        """
        from cluster import checkpoint
        from cluster.dataset import is_distributed_source

        if self.resume is not None:  # a bad checkpoint is refused before a cluster starts
            checkpoint.check(self.resume)
        with self._client() as client:
            self._active_client, self._trial_runner = client, None
            try:
                if is_distributed_source(X):
                    return self._fit_on_workers(X, validation, callback)
                return super().fit(X, y, validation=validation, callback=callback)
            finally:
                self._active_client = self._trial_runner = None

    def _minimize(self, train, validation, callback, max_time):
        """Return (problem, OptimizeResult) of the Dask engine on `train` (MatrixFactorizer._solve)."""
        from cluster import driver
        from cluster.connect import worker_addresses

        client = self._active_client
        n_workers = len(worker_addresses(client, minimum=self._worker_count() or 1))
        self.partition_ = self._partition(train, n_workers)
        return self._solve(
            driver.minimize_hamsi, train, validation, callback, max_time, **self._engine_options()
        )

    def _engine_options(self) -> dict:
        """Return the Dask engine's own keywords for cluster.driver.minimize_hamsi (both fit paths)."""
        return dict(
            client=self._active_client,
            chunk_epochs=self.chunk_epochs,
            checkpoint=self.checkpoint,
            checkpoint_every=self.checkpoint_every,
            resume=self.resume,
            method=self.algorithm,
            shared_memory=self.shared_memory,
            owned_v=self.owned_v,
        )

    def _fit_on_workers(self, source, validation, callback):
        """Fit on ratings that stay on the workers (cluster.dataset) and return self.

        The search needs every trial's ratings in one process, so it does not run here: `auto`
        takes the values the search starts from (hamsi.search.UNSEARCHED), reg from the data.
        """
        from cluster import driver
        from cluster.connect import worker_addresses
        from cluster.dataset import WorkerRatings

        self.validate_params()
        if validation is not None:
            raise InputError(
                "validation= is not taken with ratings on the workers; the validation split is "
                "validation_fraction of the pairs, by a seeded hash (set patience)"
            )
        if self.patience is not None and not self.validation_fraction:
            raise InputError("patience needs validation ratings: validation_fraction > 0")
        client = self._active_client
        columns = None if self._columns() == DEFAULT_COLUMNS else self._columns()
        fraction = self.validation_fraction if self.patience is not None else 0.0
        workers = worker_addresses(client, minimum=self._worker_count() or 1)
        train = WorkerRatings(
            client,
            source,
            columns=columns,
            scheme=str(self.partitioner).lower(),
            n_blocks=self.blocks or len(workers),
            heldout_fraction=fraction,
            seed=self.random_state,
            workers=workers,
        )
        self.partition_ = train.cover
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
        problem, result = self._solve(
            driver.minimize_hamsi,
            train,
            train if train.n_test else None,
            callback,
            self.max_time,
            **self._engine_options(),
        )
        return self._set_fitted(train, problem, result)

    def _problem(self, train, options: dict):
        """Return the ShardedFactorization of ratings on the workers, else MatrixFactorization."""
        from cluster.dataset import WorkerRatings

        if isinstance(train, WorkerRatings):
            return train.problem(self.rank_, **options)
        return super()._problem(train, options)

    def _set_training_facts(self, train):
        """As MatrixFactorizer, from the counts the workers reduced when the ratings stayed there."""
        from cluster.dataset import WorkerRatings

        if not isinstance(train, WorkerRatings):
            self._item_known = None
            return super()._set_training_facts(train)
        self.rating_min_, self.rating_max_ = float(train.rating_min), float(train.rating_max)
        self.user_ids_, self.item_ids_ = np.asarray(train.user_ids), np.asarray(train.item_ids)
        self._seen_indptr = np.concatenate([[0], np.cumsum(train.row_counts)]).astype(np.int64)
        self._seen_items = None
        self._item_known = train.col_counts > 0
