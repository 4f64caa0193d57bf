"""Chunk-start snapshots on a worker's local disk: what a chunk is rerun from after a worker is lost.

A chunk task steps its states in place (cluster.exchange.run_chunk), so the state it started from
is kept on disk, not in memory: the host writes its own shard and replicated states before the
first step (`write_own`, files named by the chunk's first cycle), and after the chunk each shard's
new state is written on its buddy too, one array at a time (`store_piece`, then `commit_backup`),
so the buddy never holds a whole second state. After a loss the chunk reruns from the hosts'
states as they were at its start (`chunk_start`: their files, or the states themselves when the
failed task never started, so never stepped them), and a dead host's shards from their buddies'
files (`load_backup`). A state is a directory of .npy files (plain arrays, read with
allow_pickle=False), replaced whole by a rename; the decisions of a CommonState (stepper, stop
rules, clocks) stay with the driver, which has them from the chunk's summaries.

Nothing stays behind: a run's files go at its end (`remove`), after a failure or an interrupt
(`discarded_on_failure`), and, when its driver died before either, at the start of any later
run (`new_run`): a token starts with the id of the run's Dask client, and the files of a client
no longer connected to the scheduler are removed from every worker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import uuid

import numpy as np

from cluster.shard import CommonState, ShardState

PREFIX = "hamsi-snapshots-"
DISCARD_WAIT = 5.0  # seconds to wait for the workers to remove files (a stopped one never answers)
VECTORS = ("S", "Y", "x_start", "g_start")
PIECES = ("U",) + VECTORS + ("saved",)  # what a buddy receives of a shard state, one task each
SAVED = "saved_"


def directory(token: str, worker=None) -> str:
    """Return this worker's snapshot directory of the run `token`."""
    if worker is None:
        # why lazy: distributed loads only when a snapshot is taken on a worker
        from distributed import get_worker

        worker = get_worker()
    return os.path.join(worker.local_directory, PREFIX + token)


def path_of(token: str, kind: str, key: int, chunk: int | None = None) -> str:
    """Return the directory of state `kind` ("own" shard, "backup" shard or "common") number `key`.

    chunk: the first cycle of the chunk whose start an own or common state is.
    """
    return os.path.join(
        directory(token), f"{kind}-{key}" if chunk is None else f"{kind}-{key}-chunk-{chunk}"
    )


def _write_arrays(path: str, arrays: dict) -> None:
    os.makedirs(path, exist_ok=True)
    for name, array in arrays.items():
        np.save(os.path.join(path, f"{name}.npy"), array)


def _arrays_of(name: str, value) -> dict:
    """Return the files of one piece: {name: array}, or the saved iterates as {saved_<name>: array}."""
    if name == "saved":
        return {SAVED + k: v for k, v in value.items()}
    return {name: value}


def _replace(partial: str, path: str) -> None:
    """Put the finished directory `partial` in the place of `path` (the old state goes)."""
    shutil.rmtree(path, ignore_errors=True)
    os.replace(partial, path)


def write_state(path: str, state) -> None:
    """Write the arrays of a ShardState or CommonState as the directory `path`."""
    partial = path + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    main = ("U", state.U) if isinstance(state, ShardState) else ("x_rep", state.x_rep)
    for name, value in (
        [main] + [(name, getattr(state, name)) for name in VECTORS] + [("saved", state.saved)]
    ):
        _write_arrays(partial, _arrays_of(name, value))
    _replace(partial, path)


def read_state(path: str, shard: int | None = None, decisions: dict | None = None):
    """Return the ShardState `shard` written at `path`, or (shard None) the CommonState with `decisions` set."""
    arrays = {}
    for file in sorted(os.listdir(path)):
        arrays[file[: -len(".npy")]] = np.load(os.path.join(path, file), allow_pickle=False)
    saved = {
        name[len(SAVED) :]: arrays.pop(name) for name in list(arrays) if name.startswith(SAVED)
    }
    vectors = [arrays[name] for name in VECTORS]
    if shard is not None:
        return ShardState(shard, arrays["U"], *vectors, saved)
    common = CommonState(arrays["x_rep"], *vectors, None, None, saved)
    for name, value in (decisions or {}).items():
        setattr(common, name, value)
    return common


def write_own(token: str, chunk: int, states: list, common) -> None:
    """Write a chunk task's input (its shard states and CommonState) before it steps them in place.

    chunk: the chunk's first cycle; the files of other chunks go.
    """
    folder = directory(token)
    os.makedirs(folder, exist_ok=True)
    mine = {
        os.path.basename(path_of(token, kind, key, chunk))
        for kind, key in [("own", s.shard) for s in states] + [("common", 0)]
    }
    for name in os.listdir(folder):
        if name.startswith(("own-", "common-")) and name not in mine:
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
    for state in states:
        write_state(path_of(token, "own", state.shard, chunk), state)
    write_state(path_of(token, "common", 0, chunk), common)


def chunk_start(state, token: str, chunk: int, decisions: dict | None = None, copy: bool = False):
    """Return `state` (a ShardState, or the CommonState with `decisions`) as it was when chunk `chunk` started.

    The chunk's task writes the files before it steps anything: with no file it never started,
    and `state` is untouched (returned as is, or a copy for another worker to fetch, since this
    worker's next chunk steps the original in place).
    """
    shard = getattr(state, "shard", None)
    path = path_of(
        token, "common" if shard is None else "own", 0 if shard is None else shard, chunk
    )
    if os.path.isdir(path):
        return read_state(path, shard, decisions)
    return state.copy() if copy else state


def piece_of(state: ShardState, name: str):
    """Return one piece of a shard state (the array itself, no copy: it runs on the host)."""
    return getattr(state, name)


def store_piece(piece, token: str, shard: int, name: str) -> None:
    """Write one piece of another worker's shard state here (its buddy), beside the backup in place."""
    if name == PIECES[0]:  # the first piece of a new backup: nothing of an unfinished one stays
        shutil.rmtree(path_of(token, "backup", shard) + ".partial", ignore_errors=True)
    _write_arrays(path_of(token, "backup", shard) + ".partial", _arrays_of(name, piece))


def commit_backup(token: str, shard: int) -> None:
    """Make the pieces written by store_piece the backup of `shard` (replacing the previous chunk's)."""
    path = path_of(token, "backup", shard)
    _replace(path + ".partial", path)


def load_backup(token: str, shard: int) -> ShardState:
    """Return the backup of `shard` this worker holds for its dead host (the task that reruns a chunk reads it)."""
    return read_state(path_of(token, "backup", shard), shard)


def remove(token: str, dask_worker=None) -> None:
    """Remove this worker's snapshot directory of the run `token` (client.run, at the run's end)."""
    shutil.rmtree(directory(token, dask_worker), ignore_errors=True)


def remove_stale(live_clients: list, dask_worker=None) -> None:
    """Remove this worker's snapshot directories of runs whose client is not in `live_clients` (client.run)."""
    folder = dask_worker.local_directory
    for name in os.listdir(folder):
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX) :].rsplit("-", 1)[0]  # the client id the token starts with
        if owner not in live_clients:
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


def _on_workers(client, function, *args) -> None:
    """client.run(function, *args) on every worker, waiting at most DISCARD_WAIT s; errors ignored."""

    def run():
        with contextlib.suppress(Exception):  # a worker or the scheduler going away too
            client.run(function, *args, on_error="ignore")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DISCARD_WAIT)


def new_run(client) -> str:
    """Return the token of a new run's files (module docstring), after removing those of gone clients."""
    with contextlib.suppress(Exception):  # a scheduler that refuses run_on_scheduler keeps them
        # a lambda travels by value: the scheduler need not have hamsi installed
        live = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.clients))
        _on_workers(client, remove_stale, live)
    return f"{client.id}-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def discarded_on_failure(client, token: str):
    """Remove the run's files from every worker when the block raises (a failure, Ctrl-C), then re-raise."""
    try:
        yield
    except BaseException:
        _on_workers(client, remove, token)
        raise
