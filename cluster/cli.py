"""The Dask engine of the `hamsi` CLI (hamsi.registry.ENGINES["dask"]), what its commands call.

`hamsi factorize` builds its estimator here (estimator_for), asks whether the data are read on
the workers (is_distributed_source), holds out and scores a test split there (test_split,
test_rmse) and closes the local cluster it opened (close_local_clusters);
`hamsi recommend --all` ranks every user on the workers (write_top_n).
"""

from __future__ import annotations

import contextlib
import logging
import os

import dask

# Importing distributed sets its loggers' levels from its configuration: estimator_for lowers
# them after this import.
import distributed  # noqa: F401

from cluster import checkpoint, scoring
from cluster.connect import connect
from cluster.dataset import is_distributed_source
from cluster.errors import ClusterError
from cluster.estimator import DaskMatrixFactorizer, close_local_clusters
from cluster.scoring import test_rmse
from cluster.seen_join import recommend_all_seen
from cluster.sources import TestSplit

__all__ = [
    "close_local_clusters",
    "estimator_for",
    "holding_client",
    "is_distributed_source",
    "test_rmse",
    "test_split",
    "use_tls_flags",
    "write_top_n",
]

# Without --checkpoint-every, a checkpoint directory is written every this many cycles.
DEFAULT_CHECKPOINT_EVERY = 10


def estimator_for(args, params: dict):
    """Return a DaskMatrixFactorizer from the factorize options (params: the in-process ones)."""
    if args.resume is not None:  # refused before the ratings are read (fit checks again)
        checkpoint.check(args.resume)
    use_tls_flags(args)
    # The command reports every failure in one line (a lost scheduler or worker: cluster.driver.cluster_lost);
    # the client's reconnection and batched-comm logs would add tracebacks of Dask internals before
    # it.
    for name in ("distributed", "distributed.client"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    every = args.checkpoint_every
    if args.checkpoint and every is None:
        every = DEFAULT_CHECKPOINT_EVERY
    return DaskMatrixFactorizer(
        **params,
        scheduler=args.scheduler,
        n_workers=args.workers or None,
        threads_per_worker=args.threads_per_worker,
        checkpoint=args.checkpoint,
        checkpoint_every=every,
        resume=args.resume,
        shared_memory=args.shared_memory,
        owned_v=args.owned_v,
    )


def use_tls_flags(args) -> None:
    """Put --tls-ca-file/--tls-cert/--tls-key into Dask's configuration (for this command's process).

    Every client, scheduler and worker this process starts or connects to then uses them (Dask's
    Security() reads distributed.comm.tls.*); a local cluster started here runs on tls:// too.
    """
    flags = {
        "--tls-ca-file": args.tls_ca_file,
        "--tls-cert": args.tls_cert,
        "--tls-key": args.tls_key,
    }
    if not any(flags.values()):
        return
    if not (args.tls_ca_file and args.tls_cert):
        raise ClusterError(
            "TLS needs --tls-ca-file and --tls-cert (and --tls-key unless the key is in the cert)"
        )
    for flag, path in flags.items():
        if path and not os.path.isfile(path):
            raise ClusterError(f"{flag} {path}: no such file")
    key = args.tls_key or args.tls_cert
    dask.config.set(
        {
            "distributed.comm.tls.ca-file": args.tls_ca_file,
            "distributed.comm.require-encryption": True,
            **{
                f"distributed.comm.tls.{role}.{part}": value
                for role in ("client", "scheduler", "worker")
                for part, value in (("cert", args.tls_cert), ("key", key))
            },
        }
    )


@contextlib.contextmanager
def holding_client(model):
    """Keep the model's client open from its fit until the scoring after it (the test split on the workers).

    A fit given a scheduler address opens its own client and closes it at the end, and with it
    the futures of the test pairs: here one client is opened for the fit and the scoring.
    """
    if model.client is not None or model.scheduler is None:
        yield model
        return
    with connect(scheduler=model.scheduler, quiet=True) as client:
        model.set_params(client=client)
        try:
            yield model
        finally:
            model.set_params(client=None)


def test_split(source, fraction: float, seed) -> TestSplit:
    """Return `source` with `fraction` of its pairs held out by the test hash (--test-fraction on the workers)."""
    return TestSplit(source, float(fraction), seed)


test_split.__test__ = False  # type: ignore[attr-defined]  # not for pytest to collect


def write_top_n(
    model, *, n: int, exclude_seen: bool, out: str, scheduler, n_workers, seen=None
) -> None:
    """Rank every user's top `n` items on Dask workers (cluster.scoring) and write them to `out`.

    Runs on the cluster at `scheduler`, or on a local one of `n_workers` workers. seen: the ratings
    (files read by the workers) whose items are left out, joined there (cluster.seen_join), in
    place of the model's own lists.
    """
    # the shuffle of the join logs each run at WARNING level: not the command's to show
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    with connect(scheduler=scheduler, n_workers=n_workers, quiet=True) as client:
        with client.as_current():
            if seen is not None:
                top = recommend_all_seen(model, seen, n=n)
            else:
                top = scoring.recommend_all(model, n=n, exclude_seen=exclude_seen)
            scoring.write_parquet(top, out)
