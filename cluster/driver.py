"""cluster.minimize_hamsi / fit_distributed: the HAMSI loop on Dask workers, one long task per worker per chunk.

The client places every shard's data on its host once (cluster.layout), then per chunk of cycles
submits one pinned task per worker (cluster.exchange.run_chunk), which runs `hamsi.loop` with a
MailboxExchange: the workers exchange gradients and reductions peer to peer (no client, no
scheduler inside a chunk), and the client receives only the per-cycle records. Between chunks it
keeps buddy copies of the state (a lost worker costs a rerun of one chunk) and writes checkpoints.
"""

from __future__ import annotations

import partition as partitions
from cluster.connect import connect, worker_addresses
from cluster.dataset import current_keywords, is_distributed_source, load_worker_ratings
from cluster.options import DaskOptions, grouped
from cluster.recovery import cluster_lost, reporting_cluster_losses
from cluster.run import DistributedRun
from cluster.snapshot import discarded_on_failure
from hamsi import stepper as steps
from hamsi.optimizer import stepper_and_stop_rules
from hamsi.options import EngineOptions
from hamsi.parameters import renamed_keyword
from hamsi.problems import MatrixFactorization

METHODS = steps.METHODS
__all__ = ["cluster_lost", "fit_distributed", "minimize_hamsi", "reporting_cluster_losses"]


def minimize_hamsi(
    problem,
    partition,
    options: EngineOptions | None = None,
    dask: DaskOptions | None = None,
    *,
    x0=None,
    validation=None,
    callback=None,
    heldout=None,
    **keywords,
):
    """Return the OptimizeResult of HAMSI (thesis Alg. 3; method="mbgd": mini-batch GD) on Dask workers.

    `options` (hamsi.options.EngineOptions: the method, steps, L-BFGS memory, seed and stop rules)
    mean what they mean in hamsi.optimizer.minimize_hamsi, and the run takes the same decisions
    from the same numbers: MatrixFactorization is sharded by user rows (bitwise the in-process
    iterates for STRATA/-B), any other PartiallySeparableProblem (SparseLeastSquares) runs with x
    replicated on every worker (bitwise too). `dask` (cluster.options.DaskOptions) says where the
    run goes and how it survives lost workers. Either group's fields may also be given as flat
    keywords (cluster.options.grouped); `validation`: held-out ratings (the trace's validation
    RMSE, patience). V's place: shared_memory (None: whenever possible) keeps V in shared memory
    when all workers run on one host and the cover is STRATA/-B (cluster/shared.py). Otherwise
    owned_v=True (STRATA/-B) hands each item shard V_j from worker to worker along the strata,
    one worker stepping it per inner iteration (cluster.work.OwnedFactorWork); owned_v=False, or
    a cover whose V_j have several homes (HOGWILD, COLOR), keeps V replicated: every worker
    receives every gV row and steps all of V; None: owned when it sends fewer bytes
    (cluster.work.item_rows_per_iteration). result.worker_bytes_sent: bytes each worker sent its
    peers. heldout, max_epochs and chunk_epochs are deprecated names of validation, max_cycles
    and chunk_cycles (FutureWarning).
    """
    validation = renamed_keyword("minimize_hamsi", "heldout", heldout, "validation", validation)
    options, dask = grouped(options, dask, keywords)
    memory = options.memory if options.method == "hamsi" else 1
    with (
        connect(
            client=dask.client,
            scheduler=dask.scheduler,
            n_workers=dask.n_workers,
            threads_per_worker=dask.threads_per_worker,
            quiet=dask.quiet,
            security=dask.security,
        ) as dask_client,
        reporting_cluster_losses(dask_client),
    ):
        workers = worker_addresses(dask_client, minimum=dask.n_workers or 1)
        run = _distributed_run(problem, partition, dask_client, workers, dask, validation, memory)
        stepper, stop = _stepper_and_stop(problem, run.layout_k, options, memory, validation)
        run.fingerprint_extra = {
            "method": options.method,
            "schedule": options.schedule,
            "random_state": options.random_state,
        }
        # a failed or interrupted fit leaves no snapshots on the workers (cluster.snapshot)
        with discarded_on_failure(dask_client, run.recovery.snapshot_token):
            return _optimized(run, stepper, stop, x0, options.random_state, dask, callback)


def _distributed_run(
    problem, partition, dask_client, workers, dask: DaskOptions, validation, memory
):
    """Return the DistributedRun of `problem` on `partition` over `workers`, as `dask` places it."""
    return DistributedRun(
        problem,
        partition,
        dask_client,
        workers,
        heldout=validation,
        backup=dask.backup,
        peer_timeout=dask.peer_timeout,
        quiet=dask.quiet,
        memory=memory,
        shared_memory=dask.shared_memory,
        owned_v=dask.owned_v,
    )


def _stepper_and_stop(problem, layout_k: int, options: EngineOptions, memory: int, validation):
    """Return (stepper, stop rules) of `options`: hamsi.optimizer's, so both engines decide alike."""
    return stepper_and_stop_rules(
        problem,
        layout_k,
        method=options.method,
        schedule=options.schedule,
        memory=memory,
        eta=options.step_eta,
        gamma=options.gamma,
        eta_gd=options.eta_gd,
        safeguard=options.safeguard,
        random_state=options.random_state,
        max_cycles=options.max_cycles,
        max_time=options.max_time,
        tol=options.tol,
        target=options.target,
        patience=options.patience,
        has_validation=validation is not None,
    )


def _optimized(run: DistributedRun, stepper, stop, x0, random_state, dask: DaskOptions, callback):
    """Return the OptimizeResult of `run` from x0 (or the seeded start), chunked and saved as `dask` says."""
    return run.optimize(
        stepper,
        stop,
        x0=x0,
        random_state=random_state,
        chunk_cycles=dask.chunk_cycles,
        checkpoint=dask.checkpoint,
        checkpoint_every=dask.checkpoint_every,
        resume=dask.resume,
        callback=callback,
        on_chunk=dask.on_chunk,
    )


def fit_distributed(
    ratings,
    *,
    rank: int = 10,
    method: str = "hamsi",
    partitioner: str = "strata-b",
    blocks: int | None = None,
    subsets: int | None = None,
    partition=None,
    reg: float = 0.0,
    biases: bool = False,
    client=None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    random_state=None,
    quiet: bool = False,
    safeguard: bool = True,
    security=None,
    columns=None,
    validation_fraction: float = 0.0,
    scheme=None,
    heldout_fraction=None,
    **options,
):
    """Return the OptimizeResult of matrix factorization by HAMSI (or mb-GD) on Dask: the MF convenience.

    Builds MatrixFactorization(ratings, rank, reg, biases) and the cover (`partition`, else
    partition.make(partitioner, ratings, blocks=B, subsets=K, seed=random_state or 0) with B = the
    number of workers), then runs `minimize_hamsi` (same keywords in **options; security as there).

    `ratings` may also live on the cluster: a Dask DataFrame, or a path, directory or glob of
    Parquet / CSV files (`columns` picks the user, item and rating columns). They are then read,
    indexed and routed to their row shards by tasks on the workers (cluster.dataset; STRATA/-B,
    or COLOR/-B / HOGWILD built there: cluster.coloring), never collected; `validation_fraction`
    holds out that share of the pairs by a seeded hash (the trace's validation RMSE; with
    patience, early stopping). The result then carries user_ids and item_ids (row a of U is user
    user_ids[a]). scheme and heldout_fraction are deprecated names of partitioner and
    validation_fraction (FutureWarning).
    """
    partitioner, validation_fraction = current_keywords(
        "fit_distributed", scheme, partitioner, heldout_fraction, validation_fraction
    )
    if partition is not None and is_distributed_source(ratings):  # before any cluster starts
        raise ValueError(
            "ratings on the workers take partitioner= (strata, strata-b, color, color-b or "
            "hogwild), not a partition"
        )
    model = dict(rank=rank, reg=reg, biases=biases)
    run = dict(method=method, random_state=random_state, quiet=quiet, safeguard=safeguard) | options
    with connect(
        client=client,
        scheduler=scheduler,
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        quiet=quiet,
        security=security,
    ) as dask_client:
        workers = worker_addresses(dask_client, minimum=n_workers or 1)
        cover = dict(partitioner=partitioner, n_blocks=blocks or len(workers), n_subsets=subsets)
        if is_distributed_source(ratings):
            read = dict(columns=columns, validation_fraction=validation_fraction, workers=workers)
            return _fit_worker_ratings(dask_client, ratings, cover | read, model, run)
        return _fit_in_memory(dask_client, ratings, partition, cover, model, run)


def _fit_worker_ratings(dask_client, ratings, read: dict, model: dict, run: dict):
    """Return the OptimizeResult of a fit on ratings read by the workers (cluster.dataset), with their ids.

    read: load_worker_ratings' keywords but the seed (run's random_state); model: rank, reg and
    biases; run: minimize_hamsi's keywords.
    """
    data = load_worker_ratings(dask_client, ratings, seed=run["random_state"], **read)
    result = minimize_hamsi(
        data.problem(**model),
        data.cover,
        client=dask_client,
        validation=data if data.n_test else None,
        **run,
    )
    result.user_ids, result.item_ids = data.user_ids, data.item_ids
    return result


def _fit_in_memory(dask_client, ratings, partition, cover: dict, model: dict, run: dict):
    """Return the OptimizeResult of a fit on in-memory ratings, on `partition` or one made by `cover`.

    cover: the partitioner, blocks and subsets of partition.make; model: rank, reg and biases;
    run: minimize_hamsi's keywords.
    """
    if partition is None:
        # the estimator's convention: partition seed 0 when random_state is None
        seed = run["random_state"]
        partition = partitions.make(
            cover["partitioner"],
            ratings,
            blocks=cover["n_blocks"],
            subsets=cover["n_subsets"],
            seed=0 if seed is None else seed,
        )
    problem = MatrixFactorization(ratings, **model)
    return minimize_hamsi(problem, partition, client=dask_client, **run)
