"""STRATA/-B work: each item shard V_j formed and stepped by one worker per inner iteration.

V lives in /dev/shm on one host (SharedFactorWork), or is handed from worker to worker along the
strata in the round's messages and replicated again at every cycle's end (OwnedFactorWork).
"""

from __future__ import annotations

from cluster.factor_work import FactorWork
from cluster.messages import ItemShard
from cluster.shard_vectors import ShardVectors
from hamsi import kernels


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
            ShardVectors(
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
        self._replicate(cfg, common)
        r, bounds = self.replica, [int(b) for b in cfg.v_bounds]
        self.v_shards = [
            ShardVectors(
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
