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
"""

from __future__ import annotations

import numpy as np

from cluster.messages import EvaluationPart, GradientPart, ItemShard, ShardPartials
from cluster.shard import add_rows, rows_of, zero_rows
from hamsi import kernels

_UNUSED = np.zeros(0)


def shard_partials(
    shard: int, request, x, x_start, g, g_start, S, Y, s_new, y_new
) -> ShardPartials:
    """Return the partials `request` asks for on one shard (s_new, y_new: where the pair is formed)."""
    M = S.shape[0]
    out = ShardPartials(shard)
    if request.pair:
        out.pair, out.new_pair_g = np.empty(2 * M + 2), np.empty(2)
    if request.gram:
        out.gram = np.empty(2 * M + 1)
    if request.wtg:
        out.wtg = np.empty(2 * M)
    if request.norms:
        out.norms = np.empty(2)
    if not (request.pair or request.gram or request.wtg or request.norms):
        return out
    kernels.shard_iteration_partials(
        x,
        x_start,
        g,
        g_start,
        S,
        Y,
        s_new,
        y_new,
        request.pair,
        request.gram,
        request.wtg,
        request.norms,
        *(
            _UNUSED if a is None else a
            for a in (out.pair, out.new_pair_g, out.gram, out.wtg, out.norms)
        ),
    )
    return out


class _Vectors:
    """x, g, memory rows, starts and saved copies of one stretch of x that this worker updates.

    g, s_new, y_new: given (views into shared memory) or allocated here.
    """

    def __init__(self, x, S, Y, x_start, g_start, saved, g=None, s_new=None, y_new=None):
        self.x, self.S, self.Y, self.x_start, self.g_start, self.saved = (
            x,
            S,
            Y,
            x_start,
            g_start,
            saved,
        )
        self.g = np.zeros_like(x) if g is None else g
        self.s_new = np.zeros((1, x.size)) if s_new is None else s_new
        self.y_new = np.zeros((1, x.size)) if y_new is None else y_new

    def store_pair(self, slot: int) -> None:
        self.S[slot], self.Y[slot] = self.s_new[0], self.y_new[0]

    def remember_start(self) -> None:
        self.x_start[:], self.g_start[:] = self.x, self.g

    def step(self, coef, sigma: float, inv_beta: float) -> None:
        if coef is None:
            kernels.shard_gradient_step(self.x, self.g, inv_beta)
        else:
            kernels.shard_lbfgs_step(self.x, self.g, self.S, self.Y, coef, sigma, inv_beta)

    def save(self, name: str) -> None:
        self.saved[name] = self.x.copy()

    def restore(self, name: str) -> None:
        self.x[:] = self.saved[name]

    def partials(self, shard: int, request, lo: int, hi: int, g=None) -> ShardPartials:
        """Return shard `shard`'s partials over x[lo:hi] (g: another buffer holding its gradient)."""
        g = self.g[lo:hi] if g is None else g
        return shard_partials(
            shard,
            request,
            self.x[lo:hi],
            self.x_start[lo:hi],
            g,
            self.g_start[lo:hi],
            self.S[:, lo:hi],
            self.Y[:, lo:hi],
            self.s_new[:, lo:hi],
            self.y_new[:, lo:hi],
        )


class _Common:
    """The parts of a work that only forward to its vectors."""

    def vectors(self):
        raise NotImplementedError

    def store_pair(self, slot):
        for v in self.vectors():
            v.store_pair(slot)

    def remember_start(self):
        for v in self.vectors():
            v.remember_start()

    def step(self, coef, sigma, inv_beta):
        for v in self.vectors():
            v.step(coef, sigma, inv_beta)

    def save(self, name):
        for v in self.vectors():
            v.save(name)

    def restore(self, name):
        for v in self.vectors():
            v.restore(name)


class FactorWork(_Common):
    """Matrix factorization: hosted row shards U_p (shards p) and the V replica (shards B + j)."""

    shared = False
    owned = False

    def __init__(self, cfg, datas, states, common):
        self._host(cfg, datas, states)
        self.gV_parts = [np.zeros((cfg.n_items, cfg.width)) for _ in self.datas]
        self.V = common.x_rep
        self.replica = _Vectors(
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
            _Vectors(s.U.reshape(-1), s.S, s.Y, s.x_start, s.g_start, s.saved)
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


def home_block_partials(work, d, u, request, partials: list) -> int:
    """Form the gradient of row shard d's block in subset request.subset and append its partials.

    The block is the only one touching its item shard V_j (STRATA/-B: d is V_j's home), so gU_p and
    gV_j are complete here; appends U_p's partials, then V_j's (shard B + j); returns j. `work` is a
    SharedFactorWork or OwnedFactorWork (its V, gV, v_shards and cfg).
    """
    cfg, k = work.cfg, request.subset
    j = d.v_home[k]
    v = work.v_shards[j]
    u.g[:] = 0.0
    v.g[:] = 0.0
    U = u.x.reshape(-1, cfg.width)
    kernels.one_block_gradient(
        d.rows[k],
        d.cols[k],
        d.vals[k],
        U,
        work.V,
        u.g.reshape(U.shape),
        work.gV,
        cfg.rank,
        cfg.scale,
        cfg.offset,
        d.row_reg,
        cfg.col_reg,
    )
    partials.append(u.partials(d.shard, request, 0, u.x.size))
    partials.append(v.partials(cfg.n_shards + j, request, 0, v.x.size))
    return j


class SharedFactorWork(FactorWork):
    """FactorWork with V in shared memory on one host (cluster.shared; STRATA/-B: every V_j has a home).

    Before the round the home of V_j writes V_j's gradient into the shared gV and forms its
    partials; after it, V_j is stored, remembered and stepped by its home in the next subset of
    the cycle (request.next_subset), or by its current home at the cycle's end. Only partials
    travel. The saved copies of V are local (every worker reads the same V); restore is written
    by the lead and followed by a barrier (MailboxExchange.restore).
    """

    shared = True

    def __init__(self, cfg, datas, states, common, replica, lead: bool):
        self._host(
            cfg, datas, states
        )  # V is the shared replica: no local copy, no gV parts to assemble
        self.replica_memory, self.lead, self.saved_v = replica, lead, common.saved
        self.V = replica.x.reshape(cfg.n_items, cfg.width)
        self.gV = replica.g.reshape(cfg.n_items, cfg.width)
        bounds = [int(b) for b in cfg.v_bounds]
        self.v_shards = [
            _Vectors(
                replica.x[lo:hi],
                replica.S[:, lo:hi],
                replica.Y[:, lo:hi],
                replica.x_start[lo:hi],
                replica.g_start[lo:hi],
                None,
                g=replica.g[lo:hi],
                s_new=replica.s_new[:, lo:hi],
                y_new=replica.y_new[:, lo:hi],
            )
            for lo, hi in zip(bounds[:-1], bounds[1:])
        ]
        self.turn: list = []

    def vectors(self):
        return self.hosted + [self.v_shards[j] for j in self.turn]

    def compute(self, request):
        """Return (no gradient rows, partials of the hosted U shards and of the V shards they are home of)."""
        k = request.subset
        partials = []
        for d, u in zip(self.datas, self.hosted):
            home_block_partials(self, d, u, request, partials)
        after = request.next_subset if request.next_subset >= 0 else k
        self.turn = sorted(d.v_home[after] for d in self.datas)
        return [], partials

    def complete(self, request, parts, partials):
        """Return every shard's partials in shard order (all were formed before the round)."""
        return sorted(partials, key=lambda p: p.shard)

    def save(self, name):
        for u in self.hosted:
            u.save(name)
        self.saved_v[name] = self.replica_memory.x.copy()

    def restore(self, name):
        for u in self.hosted:
            u.restore(name)
        if self.lead:
            self.replica_memory.x[:] = self.saved_v[name]


def item_rows_per_iteration(
    workers: int, subsets: int, owned: bool, pair_share: float = 1.0
) -> float:
    """Return the V rows (units of items x width) all workers send per inner iteration, by the model.

    Replicated V (FactorWork): each worker's gV rows to every peer, (W - 1). Owned V: per cycle of
    K + 1 iterations, V_j's x and g to its next home (g only in the first iteration: 2K - 1) and
    at the cycle's end the stepped V_j to every peer (W - 1) with its two new pair rows when the
    cycle stored a pair (2 (W - 1) pair_share; pair_share: the share of cycles that stored one).
    The shard partials (2M + 2 numbers per shard) are left out.
    """
    if not owned:
        return float(workers - 1)
    return (2 * subsets - 1 + (1 + 2 * pair_share) * (workers - 1)) / (subsets + 1)


class OwnedFactorWork(FactorWork):
    """FactorWork whose item shards are each held by one worker at a time (message path, STRATA/-B).

    SharedFactorWork's schedule on this worker's own copy of V. V_j's home in subset k forms gV_j
    and V_j's partials before the round, and the round's message to V_j's home in the cycle's next
    subset (request.next_subset) carries V_j's x and g (an ItemShard; g only in a cycle's first
    iteration, when every worker holds all of V): that worker stores, remembers and steps it; at
    the cycle's end the current home steps it. x_start, g_start of V_j stay with its home in the
    cycle's first subset, which is also the home in the last one, where the pair is formed
    (first == last). At the cycle's end (`sync_items`, before the evaluation)
    every worker sends the V shards it stepped last, and the new pair rows when a pair was stored,
    to every peer: between cycles V, S and Y are replicated again, so the evaluation, save/restore,
    snapshots and the chunk's result are FactorWork's. The cycle-start copies of V are valid only
    on those homes; they are rewritten in every cycle's first iteration before they are read.
    holders[k][j]: the worker hosting V_j's home in subset k (cluster.placement.assign_v_homes).
    """

    owned = True

    def __init__(self, cfg, datas, states, common, me: str, holders: list):
        self._host(cfg, datas, states)  # gV is formed per home: no gV parts to assemble
        self.me, self.holders = me, holders
        self.V = common.x_rep
        self.replica = _Vectors(
            common.x_rep.reshape(-1),
            common.S,
            common.Y,
            common.x_start,
            common.g_start,
            common.saved,
        )
        self.gV = self.replica.g.reshape(cfg.n_items, cfg.width)
        r, bounds = self.replica, [int(b) for b in cfg.v_bounds]
        self.v_shards = [
            _Vectors(
                r.x[lo:hi],
                r.S[:, lo:hi],
                r.Y[:, lo:hi],
                r.x_start[lo:hi],
                r.g_start[lo:hi],
                None,
                g=r.g[lo:hi],
                s_new=r.s_new[:, lo:hi],
                y_new=r.y_new[:, lo:hi],
            )
            for lo, hi in zip(bounds[:-1], bounds[1:])
        ]
        self.current: list = []  # V shards whose gradient this worker formed in this iteration
        self.turn: list = []  # V shards this worker steps after this iteration's round
        self.held: list = []  # V shards whose newest x only this worker has (stepped here last)
        self.paired: list = []  # V shards whose new pair rows were stored here in this cycle
        self.slot = -1
        self.replicated = True  # every worker holds all of V: at the chunk's start and after a sync

    def compute(self, request):
        """Return ({peer: the ItemShards it steps next}, partials of the hosted U shards and of their V shards)."""
        k = request.subset
        after = request.next_subset if request.next_subset >= 0 else k
        outgoing, partials, self.current = {}, [], []
        for d, u in zip(self.datas, self.hosted):
            j = home_block_partials(self, d, u, request, partials)
            v = self.v_shards[j]
            self.current.append(j)
            holder = self.holders[after][j]
            if holder != self.me:  # x and g are read-only until the round has sent them
                # right after a sync the next holder has this V_j already: only its gradient travels
                outgoing.setdefault(holder, []).append(
                    ItemShard(j, x=None if self.replicated else v.x, g=v.g)
                )
        self.turn = [j for j, holder in enumerate(self.holders[after]) if holder == self.me]
        return outgoing, partials

    def complete(self, request, parts, partials):
        """Take the V shards handed to this worker; return every shard's partials in shard order."""
        for item in parts:
            v = self.v_shards[item.shard]
            v.g[:] = item.g
            if item.x is not None:
                v.x[:] = item.x
        self.held, self.replicated = self.turn, False
        return sorted(partials, key=lambda p: p.shard)

    def store_pair(self, slot):
        for v in self.hosted + [self.v_shards[j] for j in self.turn]:
            v.store_pair(slot)
        self.paired, self.slot = list(self.turn), slot

    def remember_start(self):
        for v in self.hosted + [self.v_shards[j] for j in self.current]:
            v.remember_start()

    def step(self, coef, sigma, inv_beta):
        for v in self.hosted + [self.v_shards[j] for j in self.turn]:
            v.step(coef, sigma, inv_beta)

    def sync_items(self) -> list:
        """Return the ItemShards for every peer at a cycle's end: V shards stepped here last, with new pair rows."""
        items = []
        for j in self.held:
            v = self.v_shards[j]
            item = ItemShard(j, x=v.x)
            if j in self.paired:
                item.s_new, item.y_new = v.S[self.slot], v.Y[self.slot]
            items.append(item)
        return items

    def receive_sync(self, items: list) -> None:
        """Write the peers' V shards (and pair rows) into this worker's copy: V, S, Y are replicated again."""
        for item in items:
            v = self.v_shards[item.shard]
            v.x[:] = item.x
            if item.s_new is not None:
                v.S[self.slot], v.Y[self.slot] = item.s_new, item.y_new
        self.held, self.paired, self.replicated = [], [], True


class ReplicatedWork(_Common):
    """Any PartiallySeparableProblem: x replicated, a subset's blocks shared out round robin."""

    shared = False
    owned = False

    def __init__(self, cfg, problem, heldout, common, rank: int, n_workers: int):
        self.cfg, self.problem, self.heldout = cfg, problem, heldout
        self.rank, self.n_workers = rank, n_workers
        self.bounds = np.asarray(cfg.bounds, dtype=np.int64)
        self.all = _Vectors(
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
