"""Where one distributed run's shards live: their data, their states and each worker's CommonState.

The client places every shard's data on its host once (cluster.layout) and again only for shards
that moved after a recovery; states and CommonStates are futures on the hosts, replaced chunk by
chunk. The choices that depend on where things are (V in shared memory, V owned on the message
path) are made here too, from the placement alone.
"""

from __future__ import annotations

from cluster.connect import worker_memory_limits
from cluster.errors import ClusterError
from cluster.placement import assign_shards
from cluster.settings import setting
from cluster.shared import host_check, nbytes
from cluster.work import item_rows_per_iteration


class Placement:
    """Shard -> worker (owner), the workers in use, and the futures of data, states and CommonStates."""

    def __init__(self, client, problem, layout, memory_size: int, *, shared_memory, owned_v):
        self.client, self.problem, self.layout = client, problem, layout
        self.memory_size = int(memory_size)
        self.shared_memory, self.owned_v = shared_memory, owned_v
        self.owner: dict[int, str] = {}
        self.used: list[str] = []
        self.data: dict = {}  # shard (or worker, for a replicated x) -> future of its data
        self.states: dict = {}  # shard -> future of its ShardState
        self.commons: dict = {}  # worker -> future of its CommonState
        self._data_host: dict = {}
        self._share_checked: dict = {}

    def shards_of(self, worker: str) -> list[int]:
        """Return the shards `worker` hosts, in shard order."""
        return sorted(p for p, a in self.owner.items() if a == worker)

    # ------------------------------------------------------------------ data
    def place(self, workers: list[str]) -> None:
        """Scatter every shard's data to its host (once; again only for shards that moved)."""
        if self.layout.n_shards:
            self.owner = assign_shards(self.layout.n_shards, workers, self.layout.sizes())
            self.used = sorted(set(self.owner.values()), key=workers.index)
        else:
            self.owner, self.used = {}, list(workers)
        self.check_memory()
        hosts = dict(self.owner) if self.layout.n_shards else {a: a for a in self.used}
        futures = {}
        for key, host in hosts.items():
            held = self.data.get(key)
            if held is not None and self._data_host.get(key) == host:
                futures[key] = held
            else:
                futures[key] = self.layout.place(self.client, key, host)
        self.data, self._data_host = futures, hosts

    def needed_bytes(self, shards) -> int:
        """Return the bytes a worker holds: its shards' data and state (with the chunk's buffers), the replica.

        Plus the transients: a scattered shard is received as frames and then deserialized, so the
        largest shard's data is briefly there twice, and at a chunk's end a buddy receives a
        shard's state before writing it to disk (chunks run in place: cluster.snapshot).
        """
        M = self.memory_size
        if not self.layout.n_shards:
            return self.problem.n_params * 8 * (2 * M + 8)
        w, n = self.problem.width, self.problem.shape[1]
        total, largest = 0, 0
        for p in shards:
            rows = int(self.layout.row_bounds[p + 1] - self.layout.row_bounds[p])
            data = self.layout.sizes()[p] * 16
            total += data + rows * w * 8 * (2 * M + 8) + n * w * 8
            largest = max(largest, data, rows * w * 8 * (2 * M + 4))
        return total + largest + n * w * 8 * (2 * M + 8)

    def check_memory(self) -> None:
        """Raise ClusterError when a worker's share, on top of what it already uses, will not fit its limit."""
        share = setting("memory-share")
        limits = worker_memory_limits(self.client)
        for addr in self.used:
            limit, baseline = limits.get(addr, (0, 0))
            need = self.needed_bytes(self.shards_of(addr))
            if limit and baseline + need > share * limit:
                raise ClusterError(
                    f"worker {addr} would hold ~{need / 2**20:.0f} MiB of shards and state on top of the "
                    f"{baseline / 2**20:.0f} MiB it uses already, more than {share:.0%} of its "
                    f"{limit / 2**20:.0f} MiB memory limit; use more workers or larger --memory-limit / a bigger machine"
                )

    # ------------------------------------------------------------------ states
    def scatter_start(self, start, random_state) -> None:
        """Place shard states and one CommonState per worker from a RunState (a new start or a resume).

        start.full None: the layout builds the start on the workers (cluster.dataset: the ratings
        never reach the client); the decisions are then added to each worker's CommonState there.
        """
        decisions = start.decisions()
        if start.full is None:
            self.states, commons = self.layout.start_futures(
                self.client, self.owner, self.used, self.memory_size, random_state
            )
            self.commons = {
                a: self.client.submit(
                    with_decisions, commons[a], decisions, workers=[a], pure=False
                )
                for a in self.used
            }
            return
        states, common = self.layout.split(start.full, self.memory_size)
        common = with_decisions(common, decisions)
        self.states = {
            p: self.client.scatter(s, workers=[self.owner[p]], hash=False)
            for p, s in states.items()
        }
        self.commons = {a: self.client.scatter(common, workers=[a], hash=False) for a in self.used}

    # ------------------------------------------------------------------ where V lives
    def can_share(self) -> bool:
        """True when the chunk's V may live in shared memory: allowed, STRATA/-B, one host, one user, room."""
        if self.shared_memory is False or not self.layout.homes_complete or len(self.used) < 2:
            return False
        key = tuple(self.used)
        if key not in self._share_checked:
            # why lazy: distributed loads only where shards are placed on workers
            from distributed.comm.addressing import get_address_host

            size = nbytes(self.layout.config.n_items * self.layout.config.width, self.memory_size)
            users = set(self.client.run(host_check, size, workers=list(self.used)).values())
            hosts = {get_address_host(a) for a in self.used}
            self._share_checked[key] = len(hosts) == 1 and len(users) == 1 and None not in users
        return self._share_checked[key]

    def v_holders(self, n_subsets: int):
        """Return holders[k][j], the worker of V_j's home in subset k, when V is owned on the message path; else None.

        Needs every V_j to have one home in every subset (STRATA/-B) and two or more workers;
        owned_v None: only when the owned V sends fewer bytes than the replicated one.
        """
        if self.owned_v is False or not self.layout.homes_complete or len(self.used) < 2:
            return None
        if self.owned_v is None and (
            item_rows_per_iteration(len(self.used), n_subsets, owned=True)
            >= item_rows_per_iteration(len(self.used), n_subsets, owned=False)
        ):
            return None
        n_v = len(self.layout.config.v_bounds) - 1
        holders = [[""] * n_v for _ in range(n_subsets)]
        for p, homes in enumerate(self.layout.v_homes()):
            for k, j in enumerate(homes):
                if j >= 0:
                    holders[k][j] = self.owner[p]
        return holders

    def release(self) -> None:
        """Drop every future of the run: the workers free the shards' data and states."""
        self.states, self.commons, self.data = {}, {}, {}


def with_decisions(common, decisions: dict):
    """Return the CommonState with the run's decisions (stepper, stop rules, clocks) set."""
    for name, value in decisions.items():
        setattr(common, name, value)
    return common
