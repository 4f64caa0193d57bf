"""What `hamsi factorize` calls for the Dask engine: an estimator built from its options."""

from __future__ import annotations

# Without --checkpoint-every, a checkpoint directory is written every this many cycles.
DEFAULT_CHECKPOINT_EVERY = 10


def estimator_for(args, params: dict):
    """Return a DaskMatrixFactorizer from the factorize options (params: the in-process ones)."""
    from cluster.estimator import DaskMatrixFactorizer

    every = args.checkpoint_every
    if args.checkpoint and every is None:
        every = DEFAULT_CHECKPOINT_EVERY
    return DaskMatrixFactorizer(**params, scheduler=args.scheduler, n_workers=args.workers or None,
                                threads_per_worker=args.threads_per_worker, checkpoint=args.checkpoint,
                                checkpoint_every=every, resume=args.resume)
