"""DaskMatrixFactorizer: hamsi.MatrixFactorizer fitted on a Dask cluster (composition, not a flag).

hamsi cannot import cluster (arrows point cluster -> hamsi -> partition), so the Dask variant is a
subclass living here. It replaces only where the engine runs (`_minimize`); input conversion,
defaults, early stopping, predictions, recommend and save/load are MatrixFactorizer's.
"""

from __future__ import annotations

from hamsi.defaults import VALIDATION_FRACTION
from hamsi.estimator import AUTO, MatrixFactorizer, supported_options


class DaskMatrixFactorizer(MatrixFactorizer):
    """MatrixFactorizer whose fit runs cluster.fit_distributed (one row shard per block on the workers).

    Extra parameters: client (a distributed.Client, left open), scheduler ("tcp://host:port"),
    workers (LocalCluster size when neither is given; default: cores), threads_per_worker,
    chunk_epochs (cycles per client round trip), checkpoint / checkpoint_every / resume.
    blocks defaults to the number of workers; with the same partition and random_state the fit
    gives the in-process estimator's factors (bitwise for strata and strata-b).

    The client is shared, not copied: sklearn's clone (GridSearchCV, cross_val_score) hands the
    same Client object to every copy, so all fits run on the cluster it is connected to. It is
    not saved by save().
    """

    _shared_params = ("client",)

    def __init__(self, rank=10, algorithm="hamsi", partitioner="strata-b", blocks=None, subsets=None,
                 schedule="det", reg=AUTO, reg_weighting="uniform", biases=True, eta=AUTO, gamma=0.51,
                 memory=5, init_scale=AUTO, max_time=None, max_epochs=100, tol=0.0, patience=None,
                 validation_fraction=VALIDATION_FRACTION, safeguard=True, threads=None, random_state=None,
                 on_divergence="raise", user_col="user", item_col="item", rating_col="rating", client=None,
                 scheduler=None, workers=None, threads_per_worker=1, chunk_epochs=10, checkpoint=None,
                 checkpoint_every=None, resume=None):
        base = {name: value for name, value in locals().items() if name in MatrixFactorizer._get_param_names()}
        super().__init__(**base)
        self.client = client
        self.scheduler = scheduler
        self.workers = workers
        self.threads_per_worker = threads_per_worker
        self.chunk_epochs = chunk_epochs
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.resume = resume

    def _minimize(self, train, validation, callback):
        """Return (problem, OptimizeResult) of the Dask engine on `train` (MatrixFactorizer._solve)."""
        from cluster import driver
        from cluster.connect import connect, worker_addresses

        with connect(client=self.client, scheduler=self.scheduler, n_workers=self.workers,
                     threads_per_worker=self.threads_per_worker) as client:
            n_workers = len(worker_addresses(client, minimum=self.workers or 1))
            self.partition_ = self._partition(train, n_workers)
            where = dict(client=client, chunk_epochs=self.chunk_epochs, checkpoint=self.checkpoint,
                         checkpoint_every=self.checkpoint_every, resume=self.resume, method=self.algorithm)
            return self._solve(driver.minimize_hamsi, train, validation, callback, **where)
