"""Chunk-start snapshots on a worker's local disk: what a chunk is rerun from after a worker is lost.

A chunk task steps its states in place (cluster.exchange.run_chunk), so the state it started from
is kept on disk, not in memory: the host writes its own shard and replicated states before the
first step (`write_own`), and after the chunk each shard's new state is written on its buddy too
(`store_backup`). After a loss the chunk reruns from the hosts' files, and a dead host's shards
from their buddies' (`load_state`). Files hold plain arrays (np.savez, read with
allow_pickle=False); the decisions of a CommonState (stepper, stop rules, clocks) stay with the
driver, which has them from the chunk's summaries.
"""

from __future__ import annotations

import os
import shutil

import numpy as np

from cluster.shard import CommonState, ShardState

ARRAYS = ("S", "Y", "x_start", "g_start")
SAVED = "saved_"


def directory(token: str) -> str:
    """Return (and create) this worker's snapshot directory of the run `token`."""
    from distributed import get_worker

    path = os.path.join(get_worker().local_directory, f"hamsi-snapshots-{token}")
    os.makedirs(path, exist_ok=True)
    return path


def path_of(token: str, kind: str, key: int) -> str:
    """Return the file of `kind` ("own" shard, "backup" shard or "common") number `key` on this worker."""
    return os.path.join(directory(token), f"{kind}-{key}.npz")


def write_state(path: str, state) -> None:
    """Write the arrays of a ShardState or CommonState to `path` (atomically: a temporary, then rename)."""
    arrays = {name: getattr(state, name) for name in ARRAYS}
    arrays.update({SAVED + k: v for k, v in state.saved.items()})
    if isinstance(state, ShardState):
        arrays.update(shard=np.int64(state.shard), U=state.U)
    else:
        arrays["x_rep"] = state.x_rep
    partial = path + ".partial.npz"
    np.savez(partial, **arrays)
    os.replace(partial, path)


def read_state(path: str, decisions: dict | None = None):
    """Return the ShardState written to `path`, or the CommonState with `decisions` set."""
    with np.load(path, allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in stored.files}
    saved = {name[len(SAVED):]: arrays.pop(name) for name in list(arrays) if name.startswith(SAVED)}
    vectors = [arrays[name] for name in ARRAYS]
    if "U" in arrays:
        return ShardState(int(arrays["shard"]), arrays["U"], *vectors, saved)
    common = CommonState(arrays["x_rep"], *vectors, None, None, saved)
    for name, value in (decisions or {}).items():
        setattr(common, name, value)
    return common


def write_own(token: str, states: list, common) -> None:
    """Write a chunk task's input (its shard states and CommonState) before it steps them in place."""
    for state in states:
        write_state(path_of(token, "own", state.shard), state)
    write_state(path_of(token, "common", 0), common)


def store_backup(state, token: str) -> str:
    """Write another worker's shard state here (its buddy); return the path (the state is then dropped)."""
    path = path_of(token, "backup", state.shard)
    write_state(path, state)
    return path


def load_state(token: str, kind: str, key: int, decisions: dict | None = None):
    """Return the state this worker wrote as `kind` number `key` (the task that reruns a chunk reads it)."""
    return read_state(path_of(token, kind, key), decisions)


def remove(token: str, dask_worker=None) -> None:
    """Remove this worker's snapshot directory of the run `token` (client.run, at the run's end)."""
    shutil.rmtree(os.path.join(dask_worker.local_directory, f"hamsi-snapshots-{token}"), ignore_errors=True)
