"""DaskMatrixFactorizer: hamsi.MatrixFactorizer fitted on a Dask cluster (composition, not a flag).

hamsi cannot import cluster (arrows point cluster -> hamsi -> partition), so the Dask variant is a
subclass living here; it adds where to run and checkpointing, and keeps every other parameter.
"""

from __future__ import annotations

from hamsi.errors import InputError
from hamsi.estimator import MatrixFactorizer
from hamsi.optimizer import GD_ETA, HAMSI_ETA


class DaskMatrixFactorizer(MatrixFactorizer):
    """MatrixFactorizer whose fit runs cluster.fit_distributed (one row shard per block on the workers).

    Extra parameters: client (a distributed.Client, left open), scheduler ("tcp://host:port"),
    workers (LocalCluster size when neither is given; default: cores), threads_per_worker,
    chunk_epochs (cycles per client round trip), checkpoint / checkpoint_every / resume.
    blocks defaults to the number of workers; with the same partition and random_state the fit
    gives the in-process estimator's factors (bitwise for strata and strata-b).
    """

    def __init__(self, rank=10, algorithm="hamsi", partitioner="strata-b", blocks=None, subsets=None,
                 schedule="det", reg=0.0, biases=False, eta=None, gamma=0.51, memory=5, max_time=None,
                 max_epochs=100, tol=0.0, patience=None, threads=None, random_state=None,
                 on_divergence="raise", client=None, scheduler=None, workers=None, threads_per_worker=1,
                 chunk_epochs=10, checkpoint=None, checkpoint_every=None, resume=None):
        super().__init__(rank=rank, algorithm=algorithm, partitioner=partitioner, blocks=blocks,
                         subsets=subsets, schedule=schedule, reg=reg, biases=biases, eta=eta, gamma=gamma,
                         memory=memory, max_time=max_time, max_epochs=max_epochs, tol=tol,
                         patience=patience, threads=threads, random_state=random_state,
                         on_divergence=on_divergence)
        self.client = client
        self.scheduler = scheduler
        self.workers = workers
        self.threads_per_worker = threads_per_worker
        self.chunk_epochs = chunk_epochs
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.resume = resume

    def fit(self, ratings, validation=None, callback=None):
        """Fit the factors on the Dask cluster and return self (same attributes as MatrixFactorizer)."""
        import partition

        from cluster.connect import connect, worker_addresses
        from cluster.driver import fit_distributed
        from hamsi.problems import MatrixFactorization

        self._check_params(ratings)
        if validation is not None and tuple(validation.shape) != tuple(ratings.shape):
            raise InputError(f"validation shape {validation.shape} differs from the ratings shape {ratings.shape}")
        seed = self.random_state
        with connect(client=self.client, scheduler=self.scheduler, n_workers=self.workers,
                     threads_per_worker=self.threads_per_worker) as client:
            n_workers = len(worker_addresses(client, minimum=self.workers or 1))
            blocks = min(self.blocks or n_workers, min(ratings.shape))
            try:
                self.partition_ = partition.make(self.partitioner, ratings, blocks=blocks, subsets=self.subsets,
                                                 seed=0 if seed is None else seed)
            except partition.PartitionError as exc:
                raise InputError(str(exc)) from exc
            eta = self.eta or (HAMSI_ETA if self.algorithm == "hamsi" else GD_ETA)
            result = fit_distributed(
                ratings, rank=self.rank, method=self.algorithm, partition=self.partition_,
                schedule=self.schedule, eta=eta, gamma=self.gamma, memory=self.memory, reg=self.reg,
                biases=self.biases, random_state=seed, max_epochs=self.max_epochs, max_time=self.max_time,
                tol=self.tol, patience=self.patience, heldout=validation, client=client,
                chunk_epochs=self.chunk_epochs, checkpoint=self.checkpoint,
                checkpoint_every=self.checkpoint_every, resume=self.resume, callback=callback)
        problem = MatrixFactorization(ratings, self.rank, reg=self.reg, biases=self.biases)
        return self._set_fitted(problem, result)
