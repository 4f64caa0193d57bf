"""DaskMatrixFactorizer: hamsi.MatrixFactorizer fitted on a Dask cluster.

hamsi cannot import cluster (arrows point cluster -> hamsi -> partition), so the Dask variant is a
subclass living here. It adds only where the engine runs (its parameters and `_engine`, a
cluster.engine.DaskEngine); input conversion, defaults, the search, early stopping, predictions,
recommend and save/load are MatrixFactorizer's, over either place of the data (hamsi.training).
"""

from __future__ import annotations

import atexit
import contextlib
import warnings

from cluster import checkpoint
from hamsi.defaults import VALIDATION_FRACTION
from hamsi.estimator import AUTO, MatrixFactorizer
from hamsi.parameters import DEPRECATED, Integer, Renamed

# One LocalCluster per process and size, opened by the first fit without client or scheduler and
# reused by every later one (starting one costs 10-20 s); closed by close_local_clusters() or at exit.
_LOCAL_CLUSTERS: dict = {}


def local_client(n_workers, threads_per_worker):
    """Return the Client of this process's LocalCluster of that size, starting it on first use."""
    # why lazy: dask's distributed loads only when a cluster is started, not to construct or clone the estimator
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
    deprecated alias), threads_per_worker, chunk_cycles (cycles per client round trip;
    chunk_epochs is its deprecated name), checkpoint / checkpoint_every / resume,
    shared_memory and owned_v (where V lives: cluster.driver.minimize_hamsi; None chooses).
    blocks defaults to the number of workers; with the same partition and random_state the fit
    gives the in-process estimator's factors (bitwise for strata and strata-b).

    X may also live on the cluster: a Dask DataFrame, or a path, directory or glob of Parquet / CSV
    files. It is then read, indexed, split (validation: a seeded hash of the pairs, the rule the
    in-memory fit uses) and routed to its row shards on the workers and never collected
    (cluster.dataset; partitioner strata, strata-b, or color / color-b / hogwild with K = 20
    subsets built on the workers: cluster.coloring); with strata / strata-b the same ratings in a
    pandas DataFrame give the same factors. Such a model keeps the items each user rated on the
    workers (cluster.kept: recommend leaves them out there) while its client is open; saved and
    loaded it has none (cluster.seen_join joins them from the ratings). Score on the workers with
    `cluster.scoring` (a cluster.sources.TestSplit source: `test_rmse`).

    The client is shared, not copied: sklearn's clone (GridSearchCV, cross_val_score) hands the
    same Client object to every copy, so all fits run on the cluster it is connected to. It is
    not saved by save().

    Without client or scheduler, the first fit starts a LocalCluster on loopback and every later
    fit in the process with the same n_workers and threads_per_worker reuses it; it closes at
    interpreter exit, or earlier with cluster.estimator.close_local_clusters().

    The hyper-parameter search (hamsi.search) runs its trials as Dask tasks, one per worker, each
    an in-process fit there (cluster.search); the refit of the winner runs on the cluster. With
    ratings kept on the workers, the trials read parts the workers cut from them
    (cluster.search_sample) and the client still takes no rating.
    """

    _shared_params = ("client",)

    _parameter_constraints: dict = {
        **MatrixFactorizer._parameter_constraints,
        "n_workers": Integer(none=True),
        "threads_per_worker": Integer(),
        "chunk_cycles": Integer(),
        "chunk_epochs": Renamed("chunk_cycles", Integer()),
        "checkpoint_every": Integer(none=True),
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
        validation_fraction=VALIDATION_FRACTION,
        safeguard=True,
        threads=None,
        random_state=None,
        on_divergence="raise",
        user_col="user",
        item_col="item",
        rating_col="rating",
        search=True,
        verbose=0,
        client=None,
        scheduler=None,
        n_workers=None,
        threads_per_worker=1,
        chunk_cycles=10,
        checkpoint=None,
        checkpoint_every=None,
        resume=None,
        shared_memory=None,
        owned_v=None,
        workers=None,
        max_epochs=DEPRECATED,
        chunk_epochs=DEPRECATED,
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
        self.chunk_cycles = chunk_cycles
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

    def _engine(self):
        """Return a context manager yielding the DaskEngine: the given client, the scheduler's, or this process's LocalCluster."""
        # why lazy: dask's distributed loads only when a cluster is started, not to construct or clone the estimator
        from cluster.engine import dask_engine

        if self.resume is not None:  # a bad checkpoint is refused before a cluster starts
            checkpoint.check(self.resume)
        return dask_engine(
            client=self.client,
            scheduler=self.scheduler,
            local_client=lambda: local_client(self._worker_count(), self.threads_per_worker),
            **self._engine_options(),
        )

    def _engine_options(self) -> dict:
        """Return the DaskEngine's keywords from this estimator's parameters (cluster.engine)."""
        return dict(
            n_workers=self._worker_count(),
            threads_per_worker=self.threads_per_worker,
            chunk_cycles=self._param("chunk_cycles"),
            checkpoint=self.checkpoint,
            checkpoint_every=self.checkpoint_every,
            resume=self.resume,
            shared_memory=self.shared_memory,
            owned_v=self.owned_v,
        )
