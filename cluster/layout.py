"""How a problem's vectors are laid out on workers: hosted row shards + a V replica, or x replicated.

`FactorLayout` (MatrixFactorization): row shard U_p and its ratings live on one worker, V is
replicated; `ReplicatedLayout` (any PartiallySeparableProblem): the problem and x are on every
worker. Both cut full vectors (x, S, Y, starts, saved iterates) into worker states and put them
back together, so start, checkpoints and resume go through one code path in the driver.
"""

from __future__ import annotations

import numpy as np

from cluster.placement import assign_v_homes, split_by_row_shard
from cluster.plan import FactorConfig, ReplicatedConfig
from cluster.shard import CommonState, ShardState
from hamsi.problems import MatrixFactorization

VECTORS = ("x_start", "g_start")


def layout_for(problem, partition, bounds, heldout):
    """Return the layout of `problem` on workers (FactorLayout for matrix factorization).

    A problem whose ratings already live on the workers (cluster.dataset) brings its own layout.
    """
    if hasattr(problem, "worker_layout"):
        return problem.worker_layout(bounds)
    if isinstance(problem, MatrixFactorization):
        return FactorLayout(problem, bounds, heldout)
    return ReplicatedLayout(problem, bounds, heldout)


class FactorLayout:
    """Row shards U_0..U_{B-1} on their hosts (the engine's shards), V replicated."""

    def __init__(self, problem, bounds, heldout):
        m, n = problem.shape
        width = problem.width
        self.problem, self.width, self.m = problem, width, m
        self.n_shards = (bounds.size - 1) // 2
        self.row_bounds = bounds[: self.n_shards + 1] // width
        v_bounds = np.concatenate([[0], bounds[self.n_shards + 1 :] - m * width]).astype(np.int64)
        self.datas = split_by_row_shard(problem, self.row_bounds, heldout)
        assign_v_homes(self.datas, v_bounds // width)
        n_v = v_bounds.size - 1
        # every V_j has exactly one home in every subset (STRATA/-B): V can live in shared memory
        self.homes_complete = bool(self.datas) and all(
            sorted(d.v_home[k] for d in self.datas) == list(range(n_v))
            for k in range(problem.layout.n_subsets)
        )
        self.config = FactorConfig(
            rank=problem.rank,
            width=width,
            n_items=n,
            n_ratings=problem.n_functions,
            n_test=0 if heldout is None else int(heldout.nnz),
            scale=problem.scale,
            offset=problem.offset,
            reg=problem.reg,
            col_reg=problem.col_reg,
            col_norm_weight=problem.col_norm_weight,
            n_subsets=problem.layout.n_subsets,
            v_bounds=v_bounds,
            n_shards=self.n_shards,
            heldout_range=problem.heldout_range,
        )

    def sizes(self) -> list:
        """Ratings per shard (placement balances them)."""
        return [d.n_ratings for d in self.datas]

    def v_homes(self) -> list:
        """Return homes[p][k]: the item shard row shard p is home of in subset k, -1 for none (placement.v_homes)."""
        if (
            self.datas is None
        ):  # the data lives on the workers (cluster.dataset): its summaries name the homes
            return [list(h) for h in self.ratings.homes]
        return [list(d.v_home) for d in self.datas]

    def place(self, client, shard: int, host: str):
        """Return a future of shard `shard`'s data on `host` (scattered from the client: in-memory data)."""
        return client.scatter(self.datas[shard], workers=[host], hash=False)

    def split(self, full: dict, memory_size: int):
        """Return ({shard: ShardState}, CommonState without decisions) from full vectors."""
        w, split = self.width, self.m * self.width
        states = {}
        for p in range(self.n_shards):
            lo, hi = int(self.row_bounds[p]) * w, int(self.row_bounds[p + 1]) * w
            states[p] = ShardState(
                p,
                full["x"][lo:hi].reshape(-1, w).copy(),
                full["S"][:, lo:hi].copy(),
                full["Y"][:, lo:hi].copy(),
                full["x_start"][lo:hi].copy(),
                full["g_start"][lo:hi].copy(),
                {k: v[lo:hi].copy() for k, v in full["saved"].items()},
            )
        common = CommonState(
            full["x"][split:].reshape(-1, w).copy(),
            full["S"][:, split:].copy(),
            full["Y"][:, split:].copy(),
            full["x_start"][split:].copy(),
            full["g_start"][split:].copy(),
            None,
            None,
            {k: v[split:].copy() for k, v in full["saved"].items()},
        )
        return states, common

    def join(self, states: list, common) -> dict:
        """Return the full vectors from the shard states (shard order) and one CommonState."""
        out = {"x": np.concatenate([s.U.reshape(-1) for s in states] + [common.x_rep.reshape(-1)])}
        if getattr(states[0], "S", None) is None:
            return out
        out["S"] = np.concatenate([s.S for s in states] + [common.S], axis=1)
        out["Y"] = np.concatenate([s.Y for s in states] + [common.Y], axis=1)
        for name in VECTORS:
            out[name] = np.concatenate([getattr(s, name) for s in states] + [getattr(common, name)])
        out["saved"] = {
            k: np.concatenate([s.saved[k] for s in states] + [common.saved[k]])
            for k in common.saved
        }
        return out


class ReplicatedLayout:
    """x replicated on every worker; the (arranged) problem and held-out data placed on each."""

    n_shards = 0
    homes_complete = False

    def __init__(self, problem, bounds, heldout):
        self.problem = problem
        self.datas = [(problem, heldout)]
        self.config = ReplicatedConfig(bounds=np.asarray(bounds, dtype=np.int64))

    def sizes(self) -> list:
        return []

    def place(self, client, key, host: str):
        """Return a future of the (problem, heldout) pair on `host`."""
        return client.scatter(self.datas[0], workers=[host], hash=False)

    def split(self, full: dict, memory_size: int):
        common = CommonState(
            full["x"].copy(),
            full["S"].copy(),
            full["Y"].copy(),
            full["x_start"].copy(),
            full["g_start"].copy(),
            None,
            None,
            {k: v.copy() for k, v in full["saved"].items()},
        )
        return {}, common

    def join(self, states: list, common) -> dict:
        out = {"x": common.x_rep.reshape(-1).copy()}
        if getattr(common, "S", None) is None:
            return out
        out.update(
            S=common.S,
            Y=common.Y,
            x_start=common.x_start,
            g_start=common.g_start,
            saved=dict(common.saved),
        )
        return out
