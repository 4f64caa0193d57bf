"""DaskEngine: the Engine (hamsi.engine) that runs on a Dask cluster, and the context that opens it."""

from __future__ import annotations

import contextlib

from cluster.connect import connect, worker_addresses
from cluster.options import DaskOptions
from cluster.search import DaskTrialRunner
from hamsi.engine import warm_trial_kernels
from hamsi.recommender import DEFAULT_COLUMNS


class DaskEngine:
    """Solves on the workers of `client` (cluster.driver.minimize_hamsi); reads and keeps their data.

    n_workers: the workers a fit needs at least (None: 1); threads_per_worker: the numba threads of
    each search trial on a worker; run_options: the Dask run's own keywords (chunk_cycles,
    checkpoint, checkpoint_every, resume, shared_memory, owned_v).
    """

    def __init__(self, client, *, n_workers=None, threads_per_worker: int = 1, **run_options):
        self.client, self.n_workers = client, n_workers
        self.threads_per_worker = int(threads_per_worker)
        self.run_options = run_options

    def workers(self) -> list[str]:
        """Return the addresses of the cluster's workers (at least n_workers of them)."""
        return worker_addresses(self.client, minimum=self.n_workers or 1)

    def default_blocks(self) -> int:
        return len(self.workers())

    def solve(self, problem, cover, options, *, validation=None, callback=None, x0=None):
        """Return the OptimizeResult of cluster.driver.minimize_hamsi on this engine's workers."""
        # why lazy: the driver loads distributed and numba's kernels; building a DaskEngine needs neither
        from cluster import driver

        return driver.minimize_hamsi(
            problem,
            cover,
            options,
            DaskOptions(client=self.client, **self.run_options),
            validation=validation,
            callback=callback,
            x0=x0,
        )

    def warm_up_trials(self, base_params: dict, n_params: int = 0) -> None:
        """Compile the trials' kernels on every worker at once (each worker runs trials on one thread)."""
        self.client.run(warm_trial_kernels, base_params)

    def trial_runner(self, estimator_class, base_params: dict, fit_part, validation):
        """Return run_rung: a rung's trials as Dask tasks, each in process on a worker (cluster.search)."""
        return DaskTrialRunner(
            self.client, estimator_class, base_params, fit_part, validation, self.threads_per_worker
        )

    def search_sample(self, source, *, columns, n_ratings: int, seed):
        """Return the search's SearchSample of `source`, cut and kept on the workers (cluster.search_sample)."""
        # why lazy: cluster.search_sample loads pandas' readers, only for data read on the workers
        from cluster.search_sample import search_sample

        return search_sample(
            self.client,
            source,
            columns=None if tuple(columns) == DEFAULT_COLUMNS else tuple(columns),
            n_ratings=n_ratings,
            seed=seed,
        )

    def keeps(self, source) -> bool:
        """True when `source` is read by the workers and stays there (a Dask DataFrame, a path or glob)."""
        # why lazy: cluster.dataset loads pandas and numba's kernels, only for data read on the workers
        from cluster.dataset import is_distributed_source

        return is_distributed_source(source)

    def load(
        self, source, *, columns, partitioner, blocks, validation_fraction, seed, subsets=None
    ):
        """Return the WorkerRatings of `source`: read, indexed and routed by tasks on the workers."""
        # why lazy: cluster.dataset loads pandas and numba's kernels, only for data read on the workers
        from cluster.dataset import load_worker_ratings

        workers = self.workers()
        return load_worker_ratings(
            self.client,
            source,
            columns=None if tuple(columns) == DEFAULT_COLUMNS else tuple(columns),
            partitioner=partitioner,
            n_blocks=blocks or len(workers),
            n_subsets=subsets,
            validation_fraction=validation_fraction,
            seed=seed,
            workers=workers,
        )


@contextlib.contextmanager
def dask_engine(client=None, scheduler=None, local_client=None, **engine_options):
    """Yield a DaskEngine on `client`, else on `scheduler`'s cluster, else on local_client()."""
    if client is None and scheduler is None:
        yield DaskEngine(local_client(), **engine_options)
        return
    with connect(client=client, scheduler=scheduler) as opened:
        yield DaskEngine(opened, **engine_options)
