"""The Dask engine's tuning values, kept in dask.config under the key `hamsi`.

Change them as any Dask setting: `dask.config.set({"hamsi.peer-timeout": 120})`, a YAML file in
~/.config/dask/, or the environment (`DASK_HAMSI__PEER_TIMEOUT=120`). They are read on the client
when a run starts; the workers receive what they need in the chunk plan.
"""

from __future__ import annotations

import dask.config

DEFAULTS = {
    "hamsi": {
        # how long a chunk may go without hearing from a peer before its task gives up (a dead peer
        # is normally noticed at once: its connection is refused)
        "peer-timeout": 60.0,
        # chunk reruns after lost workers before a run gives up and names --resume
        "max-recoveries": 5,
        # Dask pauses a worker at 80% of its memory limit: leave room for a task's temporaries
        "memory-share": 0.6,
        # how often the client checks that the workers of a running chunk are alive
        "watch-interval": 0.5,
        # after a failed chunk: how long the other tasks have to notice the abort before their
        # workers count as hung (capped by the peer timeout)
        "hung-grace": 5.0,
        # how long the client waits for the abort to reach the survivors (a stopped worker never answers)
        "abort-wait": 5.0,
        # workers that die together leave the scheduler's list within moments of each other: a
        # recovery waits until the list has not changed for settle-seconds (at most settle-limit)
        "settle-seconds": 1.0,
        "settle-limit": 10.0,
        # a Parquet/CSV file larger than this is cut into pieces of about this size, read by
        # separate tasks (cluster.file_pieces); a single file at most this large is read in process
        "read-block-bytes": 64 << 20,
    }
}
dask.config.update_defaults(DEFAULTS)


def setting(name: str):
    """Return the value of `hamsi.<name>` in dask.config (the defaults above unless overridden).

    The default is passed too: a `dask.config.set` entered before this module was imported drops
    the whole `hamsi` key on exit, defaults included.
    """
    return dask.config.get(f"hamsi.{name}", default=DEFAULTS["hamsi"][name])
