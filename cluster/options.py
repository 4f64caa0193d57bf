"""DaskOptions: where and how a run goes on the cluster, beside hamsi.options.EngineOptions (what runs).

cluster.minimize_hamsi takes the two groups as objects, or their fields as flat keywords (as
scipy.optimize.minimize takes `options`): `grouped` sorts flat keywords into the groups and
refuses one it does not know, or one given twice.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

from hamsi.options import EngineOptions

# deprecated flat keywords -> their names now (hamsi.parameters.renamed_keyword's warning)
RENAMED = {"max_epochs": "max_cycles", "chunk_epochs": "chunk_cycles"}


@dataclass(frozen=True)
class DaskOptions:
    """Where the run goes and how it keeps going (cluster.driver.minimize_hamsi).

    client, else scheduler ("tcp://host:port"), else a LocalCluster of n_workers processes with
    threads_per_worker threads (closed on return); security: a distributed.security.Security for
    TLS (cluster.connect). chunk_cycles: cycles per client round trip. checkpoint /
    checkpoint_every / resume: the full state written atomically, resumed bit-exactly. backup:
    each shard's chunk-start state on a second worker's disk (cluster.snapshot). peer_timeout:
    seconds before a silent peer is lost (None: dask.config hamsi.peer-timeout). on_chunk(info):
    called after every chunk submission. quiet: no cluster line on stderr. shared_memory / owned_v:
    where V lives (None: chosen, cluster.driver.minimize_hamsi).
    """

    client: object = None
    scheduler: str | None = None
    n_workers: int | None = None
    threads_per_worker: int = 1
    security: object = None
    chunk_cycles: int = 10
    checkpoint: str | None = None
    checkpoint_every: int | None = None
    resume: str | None = None
    backup: bool = True
    peer_timeout: float | None = None
    on_chunk: object = None
    quiet: bool = False
    shared_memory: bool | None = None
    owned_v: bool | None = None


def _fields(cls) -> set:
    return {field.name for field in dataclasses.fields(cls)}


def grouped(
    options: EngineOptions | None, dask: DaskOptions | None, keywords: dict
) -> tuple[EngineOptions, DaskOptions]:
    """Return (EngineOptions, DaskOptions): the given objects with the flat `keywords` sorted into them.

    TypeError for a keyword neither group has, or one that a given object already sets;
    `threads` (the in-process engine's) is taken and ignored: a worker runs one task thread.
    """
    flat = dict(keywords)
    flat.pop("threads", None)
    for old, new in RENAMED.items():
        if old in flat:
            warnings.warn(
                f"minimize_hamsi({old}=...) is deprecated and will be removed in a future "
                f"release; use {new}= (same meaning)",
                FutureWarning,
                stacklevel=3,
            )
            flat.setdefault(new, flat.pop(old))
    engine_keys, dask_keys = _fields(EngineOptions), _fields(DaskOptions)
    unknown = sorted(set(flat) - engine_keys - dask_keys)
    if unknown:
        raise TypeError(f"minimize_hamsi() got unexpected keyword argument(s) {', '.join(unknown)}")
    groups = []
    for given, cls, keys in ((options, EngineOptions, engine_keys), (dask, DaskOptions, dask_keys)):
        mine = {key: value for key, value in flat.items() if key in keys}
        if given is None:
            groups.append(cls(**mine))
            continue
        if mine:
            raise TypeError(
                f"minimize_hamsi() got {', '.join(sorted(mine))} both in the {cls.__name__} and as "
                "keywords"
            )
        groups.append(given)
    return groups[0], groups[1]
