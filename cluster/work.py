"""What one worker computes in an inner iteration: gradients and per-shard partials of its shards.

Layouts behind one interface (used by cluster.exchange.MailboxExchange):
- `FactorWork` (matrix factorization): the worker hosts row shards U_p (their gradient is complete
  on the host) and a replica of V (its gradient is assembled from every worker's gV rows);
- `SharedFactorWork` / `OwnedFactorWork` (STRATA/-B): each item shard V_j is formed and stepped
  by one worker per inner iteration, V in /dev/shm on one host, or handed from worker to worker
  along the strata in the round's messages (replicated again at every cycle's end);
- `ReplicatedWork` (any PartiallySeparableProblem): x is replicated; each worker adds the gradient
  of its share of a subset's blocks, and the contributions are summed in block order.
Every partial comes from the per-shard kernels of hamsi.kernels on the engine's shards, so the
stepper receives the numbers a LocalExchange gives (bitwise for STRATA/-B and least squares).
The layouts live in cluster.factor_work and cluster.strata_work, their shared vectors in
cluster.shard_vectors; this module holds ReplicatedWork and re-exports the rest.
"""

from __future__ import annotations

import numpy as np

from cluster.factor_work import FactorWork
from cluster.messages import GradientPart
from cluster.shard_vectors import ShardVectors, VectorWork, shard_partials
from cluster.strata_work import (
    OwnedFactorWork,
    SharedFactorWork,
    home_block_partials,
    item_rows_per_iteration,
)

# The works cluster.plan builds, importable from here (each layout has a module of its own).
__all__ = [
    "FactorWork",
    "OwnedFactorWork",
    "ReplicatedWork",
    "SharedFactorWork",
    "home_block_partials",
    "item_rows_per_iteration",
    "shard_partials",
]


class ReplicatedWork(VectorWork):
    """Any PartiallySeparableProblem: x replicated, a subset's blocks shared out round robin."""

    shared = False
    owned = False

    def __init__(self, cfg, problem, heldout, common, rank: int, n_workers: int):
        self.cfg, self.problem, self.heldout = cfg, problem, heldout
        self.rank, self.n_workers = rank, n_workers
        self.bounds = np.asarray(cfg.bounds, dtype=np.int64)
        self.all = ShardVectors(
            common.x_rep, common.S, common.Y, common.x_start, common.g_start, common.saved
        )

    def vectors(self):
        return [self.all]

    def compute(self, request):
        """Return (this worker's block gradients, no partials: they need the assembled g)."""
        layout, k = self.problem.layout, request.subset
        parts = []
        for b in range(self.rank, len(layout.starts[k]), self.n_workers):
            contribution = np.zeros_like(self.all.x)
            self.problem.add_block_gradient(self.all.x, contribution, k, b)
            parts.append(GradientPart(b, (0, contribution.size), contribution))
        return parts, []

    def complete(self, request, parts, partials):
        """Sum the block gradients in block order (as the in-process gradient does) and form every partial."""
        g = self.all.g
        g[:] = 0.0
        for part in sorted(parts, key=lambda p: p.key):
            g += part.rows
        return [
            self.all.partials(p, request, int(self.bounds[p]), int(self.bounds[p + 1]))
            for p in range(self.bounds.size - 1)
        ]

    def evaluation(self) -> list:
        return []  # every worker evaluates the replicated x itself

    def reduce_evaluation(self, parts: list) -> tuple[float, float, float]:
        train, objective = self.problem.evaluate(self.all.x)
        heldout = (
            self.problem.heldout_error(self.all.x, self.heldout)
            if self.heldout is not None
            else float("nan")
        )
        return train, objective, heldout
