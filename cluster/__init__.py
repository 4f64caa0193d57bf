"""HAMSI on Dask: start/connect a cluster, place shards on workers, run the engine's loop there.

    >>> from cluster import minimize_hamsi, fit_distributed
    >>> result = minimize_hamsi(problem, partition, n_workers=2, max_cycles=20)   # any problem
    >>> result = minimize_hamsi(problem, partition, EngineOptions(max_cycles=20), DaskOptions(n_workers=2))
    >>> result = fit_distributed(ratings, rank=50, partitioner="strata-b", n_workers=2, max_cycles=20)  # MF

The only package that imports dask/distributed (imports here stay lazy so `import cluster` is cheap).
"""

import importlib

from cluster.errors import ClusterError, PeerLost

_LAZY = {
    "fit_distributed": "cluster.driver",
    "minimize_hamsi": "cluster.driver",
    "DaskOptions": "cluster.options",
    "connect": "cluster.connect",
    "DaskMatrixFactorizer": "cluster.estimator",
    "estimator_for": "cluster.cli",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cluster' has no attribute {name!r}")


__all__ = [
    "ClusterError",
    "PeerLost",
    "minimize_hamsi",
    "DaskOptions",
    "fit_distributed",
    "connect",
    "DaskMatrixFactorizer",
    "estimator_for",
]
