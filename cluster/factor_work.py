"""Matrix-factorization work with V replicated: row shards U_p hosted, gV assembled from every worker.

The worker hosts row shards U_p (their gradient is complete on the host) and a replica of V (its
gradient is assembled from every worker's gV rows).
"""

from __future__ import annotations

import numpy as np

from cluster.messages import EvaluationPart, GradientPart
from cluster.shard import add_rows, rows_of, zero_rows
from cluster.shard_vectors import ShardVectors, VectorWork
from hamsi import kernels


class FactorWork(VectorWork):
    """Matrix factorization: hosted row shards U_p (shards p) and the V replica (shards B + j)."""

    shared = False
    owned = False

    def __init__(self, cfg, datas, states, common):
        self._host(cfg, datas, states)
        self.gV_parts = [np.zeros((cfg.n_items, cfg.width)) for _ in self.datas]
        self._replicate(cfg, common)

    def _replicate(self, cfg, common) -> None:
        """Keep this worker's replica of V (and its vectors): common.x_rep, stepped in place."""
        self.V = common.x_rep
        self.replica = ShardVectors(
            common.x_rep.reshape(-1),
            common.S,
            common.Y,
            common.x_start,
            common.g_start,
            common.saved,
        )
        self.gV = self.replica.g.reshape(cfg.n_items, cfg.width)

    def _host(self, cfg, datas, states) -> None:
        """Keep the run's constants and this worker's row shards (their data and vectors, shard order)."""
        self.cfg = cfg
        self.datas = sorted(datas, key=lambda d: d.shard)
        by_shard = {s.shard: s for s in states}
        self.hosted = [
            ShardVectors(s.U.reshape(-1), s.S, s.Y, s.x_start, s.g_start, s.saved)
            for s in (by_shard[d.shard] for d in self.datas)
        ]

    def vectors(self):
        return self.hosted + [self.replica]

    def compute(self, request):
        """Return (gV contributions, partials of the hosted U shards and of V shards they are home of)."""
        cfg, k = self.cfg, request.subset
        parts, partials = [], []
        for d, u, gV in zip(self.datas, self.hosted, self.gV_parts):
            u.g[:] = 0.0
            where = d.touched[k]
            zero_rows(gV, where)
            U = u.x.reshape(-1, cfg.width)
            kernels.one_block_gradient(
                d.rows[k],
                d.cols[k],
                d.vals[k],
                U,
                self.V,
                u.g.reshape(U.shape),
                gV,
                cfg.rank,
                cfg.scale,
                cfg.offset,
                d.row_reg,
                cfg.col_reg,
            )
            parts.append(GradientPart(d.shard, where, rows_of(gV, where)))
            partials.append(u.partials(d.shard, request, 0, u.x.size))
            j = d.v_home[k] if d.v_home else -1
            if j >= 0 and (request.pair or request.wtg or request.norms):
                lo, hi = int(cfg.v_bounds[j]), int(cfg.v_bounds[j + 1])
                g_home = gV.reshape(-1)[lo:hi]  # complete there: this shard alone touches V_j
                partials.append(self.replica.partials(cfg.n_shards + j, request, lo, hi, g=g_home))
        return parts, partials

    def complete(self, request, parts, partials):
        """Assemble gV (shard order) and return every shard's partials in shard order."""
        cfg = self.cfg
        self.gV[:] = 0.0
        for part in sorted(parts, key=lambda p: p.key):
            add_rows(self.gV, part.where, part.rows)
        have = {p.shard: p for p in partials}
        for j in range(len(cfg.v_bounds) - 1):
            lo, hi = int(cfg.v_bounds[j]), int(cfg.v_bounds[j + 1])
            shard = cfg.n_shards + j
            if shard in have:
                if request.pair:  # the home sent the products; the pair rows are still formed here
                    kernels.shard_store_pair(
                        self.replica.x[lo:hi],
                        self.replica.x_start[lo:hi],
                        self.replica.g[lo:hi],
                        self.replica.g_start[lo:hi],
                        self.replica.s_new[:, lo:hi],
                        self.replica.y_new[:, lo:hi],
                        0,
                    )
            else:
                have[shard] = self.replica.partials(shard, request, lo, hi)
        return [have[s] for s in sorted(have)]

    def evaluation(self) -> list:
        """Return this worker's EvaluationParts: per hosted shard, SSE per subset, U norm, test SSE."""
        cfg, out = self.cfg, []
        for d, u in zip(self.datas, self.hosted):
            U = u.x.reshape(-1, cfg.width)
            sse = [
                float(
                    kernels.one_block_squared_error(
                        d.rows[k], d.cols[k], d.vals[k], U, self.V, cfg.rank, cfg.offset
                    )
                )
                for k in range(len(d.vals))
            ]
            norm = float(kernels.weighted_row_norms(U, d.row_norm_weight)) if cfg.reg > 0.0 else 0.0
            test = (
                float(
                    kernels.one_block_squared_error(
                        d.test_rows,
                        d.test_cols,
                        d.test_vals,
                        U,
                        self.V,
                        cfg.rank,
                        cfg.offset,
                        *cfg.heldout_range,
                    )
                )
                if d.test_vals.size
                else 0.0
            )
            out.append(EvaluationPart(d.shard, sse, norm, test))
        return out

    def reduce_evaluation(self, parts: list) -> tuple[float, float, float]:
        """Return (train RMSE, objective, test RMSE), summed in the engine's (subset, block) order."""
        cfg = self.cfg
        parts = sorted(parts, key=lambda e: e.key)
        sse = 0.0
        for k in range(cfg.n_subsets):
            for e in parts:
                sse += e.sse[k]
        norm = 0.0
        if (
            cfg.reg > 0.0
        ):  # the engine's order: |U|^2 per row shard (parts are in shard order), then |V|^2
            norm = kernels.regularizer_in_order(
                np.array([e.norm for e in parts]), self.V, cfg.col_norm_weight
            )
        test = sum(e.test for e in parts)
        heldout = float(np.sqrt(test / cfg.n_test)) if cfg.n_test else float("nan")
        return float(np.sqrt(sse / cfg.n_ratings)), float(0.5 * cfg.scale * (sse + norm)), heldout
