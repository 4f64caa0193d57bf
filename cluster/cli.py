"""What `hamsi factorize` calls for the Dask engine: an estimator built from its options."""

from __future__ import annotations

import logging
import os

from cluster.errors import ClusterError

# Without --checkpoint-every, a checkpoint directory is written every this many cycles.
DEFAULT_CHECKPOINT_EVERY = 10


def estimator_for(args, params: dict):
    """Return a DaskMatrixFactorizer from the factorize options (params: the in-process ones)."""
    from cluster import checkpoint
    from cluster.estimator import DaskMatrixFactorizer

    if args.resume is not None:  # refused before the ratings are read (fit checks again)
        checkpoint.check(args.resume)
    use_tls_flags(args)
    # The command reports every failure in one line (a lost scheduler or worker: cluster.driver.cluster_lost);
    # the client's reconnection and batched-comm logs would add tracebacks of Dask internals before
    # it. (After the import: importing distributed sets its loggers' levels from its configuration.)
    import distributed  # noqa: F401

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
    import dask

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
