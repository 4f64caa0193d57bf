"""The long-running task: one per worker per chunk of cycles, exchanging with its peers each inner iteration.

thesis Alg. 3 as run by worker w hosting row shards P_w (inner iteration = one all-to-all exchange):
  1. gradient of subset k on each hosted shard (line 10): gU_p complete, gV partial (touched rows);
  2. local reductions of U_p: W^T g partials, and at a cycle's last position the pair products
     s'y, y'y, S'y, Y'y and s'g, y'g (line 14);
  3. send {per shard: gV rows, partials} to every peer, receive theirs (peer-to-peer, mailbox.py);
  4. assemble gV in shard order, reduce the pair products U_0..U_{B-1}, V_0..V_{B-1} (V partials are
     computed by every worker on its replica), update the memory (lines 15-19), reduce W^T g,
     c = N W^T g (hamsi.lbfgs), and step U_p and the V replica (line 13).
The train/test errors of a finished cycle ride on the next cycle's first exchange; the chunk ends
with one small exchange carrying the last cycle's errors, so state at a chunk boundary is clean.
"""

from __future__ import annotations

import time

import numpy as np

from hamsi import kernels
from cluster.mailbox import local_mailbox
from cluster.shard import ReplicaWork, ShardWork, add_touched


def run_chunk(plan, datas: list, states: list, common) -> dict:
    """Return {"states", "common", "records", "reason", ...} after running plan's cycles on this worker.

    datas/states: the ShardData and ShardState of the shards this worker hosts (shard order);
    common: the replicated CommonState. Inputs are copied, never mutated: they are the snapshot
    the driver reruns the chunk from if a worker dies.
    """
    from distributed import get_worker

    me = get_worker().address
    box = local_mailbox()
    peers = [a for a in plan.workers if a != me]
    cfg = plan.config
    memory_size = cfg.memory
    hamsi = cfg.method == "hamsi"
    common = common.copy()
    datas = sorted(datas, key=lambda d: d.shard)
    states = {s.shard: s.copy() for s in states}
    works = [ShardWork(d, states[d.shard], cfg.n_items, memory_size) for d in datas]
    replica = ReplicaWork(common, cfg.v_bounds, memory_size)
    lbfgs = common.memory
    V = common.V
    K = cfg.n_subsets
    stop = plan.stop
    phases = dict(gradient=0.0, update=0.0, hessian=0.0, exchange=0.0)
    records, reason, message = [], None, ""
    inner = common.inner_done
    step_id = 0

    def exchange(payload):
        nonlocal step_id
        start = time.perf_counter()
        step_id += 1
        posted = box.post(plan.run_id, step_id, peers, payload) if peers else None
        received = box.collect(plan.run_id, step_id, peers, plan.timeout)  # while ours is written
        if posted is not None:
            box.wait_posted(posted, peers, plan.timeout)
        phases["exchange"] += time.perf_counter() - start
        by_worker = dict(zip(peers, received))
        by_worker[me] = payload
        return [by_worker[a] for a in plan.workers]

    def elapsed():
        return stop.time_used + sum(phases.values())

    def evaluation():
        return [(w.data.shard,) + w.evaluation(V, cfg) for w in works]

    def close_record(epoch, messages, inner):
        """Reduce the piggybacked errors of cycle `epoch` (shard order); return a stop reason or None."""
        parts = sorted((e for m in messages for e in m["record"]), key=lambda e: e[0])
        sse = 0.0
        for k in range(K):  # the engine's (subset, block) order
            for e in parts:
                sse += e[1][k]
        norm = sum(e[2] for e in parts) + replica.norm(cfg)
        test = sum(e[3] for e in parts)
        time_total = max(m["time"] for m in messages)
        train = float(np.sqrt(sse / cfg.n_ratings))
        heldout = float(np.sqrt(test / plan.n_test)) if plan.n_test else float("nan")
        objective = float(0.5 * cfg.scale * (sse + norm))
        records.append((epoch, inner, time_total, train, heldout, objective))
        return stop.check(epoch, inner, time_total, train, heldout, objective)

    if K == 1 and hamsi and common.extra.get("x_start") is not None:
        for w in works:
            w.x_start[:], w.g_start[:] = w.state.x_start, w.state.g_start
        replica.x_start[:], replica.g_start[:] = common.extra["x_start"], common.extra["g_start"]
    pending_record = None  # the cycle whose errors ride on the next exchange
    out_of_time = cut_short = False
    for epoch, order in plan.cycles:
        last = len(order) - 1
        for position, k in enumerate(order):
            inner += 1
            t0 = time.perf_counter()
            rows = [w.gradient(int(k), V, cfg) for w in works]
            t1 = time.perf_counter()
            phases["gradient"] += t1 - t0
            pair_now = hamsi and ((position == last and K > 1) or (K == 1 and inner > 1))
            quasi_newton_possible = hamsi and (lbfgs.full or (pair_now and lbfgs.n_accepted + 1 >= memory_size))
            homes = []
            for w in works:
                if pair_now:
                    w.pair_partials()
                if quasi_newton_possible:
                    w.wtg_partials()
                homes.append(w.home_partials(int(k), replica, quasi_newton_possible, pair_now))
            t2 = time.perf_counter()
            phases["hessian" if pair_now else "update"] += t2 - t1
            payload = {
                "shards": [(w.data.shard, w.data.touched[int(k)], r,
                            w.wtg if quasi_newton_possible else None,
                            w.pair if pair_now else None,
                            w.new_pair_g if pair_now else None, h) for w, r, h in zip(works, rows, homes)],
                "record": pending_record,
                "time": elapsed(),
                "out_of_time": out_of_time,
            }
            messages = exchange(payload)
            t3 = time.perf_counter()
            if pending_record is not None:
                pending_record = None
                verdict = close_record(epoch - 1, messages, inner - 1)
                if verdict is not None:
                    reason, message = verdict
                    inner -= 1  # this iteration's gradient is discarded: the run ended with the last cycle
                    break
            if any(m["out_of_time"] for m in messages):
                inner -= 1  # the clock ran out mid-cycle: record the partial cycle, like the engine
                cut_short = True
                break
            by_shard = sorted((e for m in messages for e in m["shards"]), key=lambda e: e[0])
            gV = replica.gV
            gV[:] = 0.0
            for entry in by_shard:
                add_touched(gV, entry[1], entry[2])
            t4 = time.perf_counter()
            accepted_slot = None
            from_homes = {e[6][0]: e[6] for e in by_shard if e[6] is not None}
            if pair_now:
                v_pairs = replica.pair_partials(skip=from_homes)
                partials = np.vstack([e[4] for e in by_shard]
                                     + [from_homes[j][2] if j in from_homes else v_pairs[j]
                                        for j in range(len(v_pairs))])
                products = np.zeros(2 * memory_size + 2)
                kernels.sum_partials_in_order(partials, products)
                slot = lbfgs.next_slot
                if lbfgs.consider_pair(products):
                    accepted_slot = slot
                    for w in works:
                        w.store_pair(slot)
                    replica.store_pair(slot)
            if position == 0 and hamsi:
                for w in works:
                    w.remember_start()
                replica.remember_start()
            t5 = time.perf_counter()
            phases["hessian"] += t5 - t4
            phases["update"] += t4 - t3
            if hamsi and lbfgs.full:
                def with_new_pair(wtg, new_pair_g):
                    wtg = wtg.copy()
                    if accepted_slot is not None:  # the engine reduces W^T g after storing the pair
                        wtg[accepted_slot] = new_pair_g[0]
                        wtg[memory_size + accepted_slot] = new_pair_g[1]
                    return wtg

                u_partials = [with_new_pair(e[3], e[5]) for e in by_shard]
                v_local = replica.wtg_partials(skip=from_homes)
                v_partials = [with_new_pair(from_homes[j][1], from_homes[j][3]) if j in from_homes else v_local[j]
                              for j in range(len(v_local))]
                partials = np.vstack(u_partials + v_partials)
                wtg_total = np.zeros(2 * memory_size)
                kernels.sum_partials_in_order(partials, wtg_total)
                coef = lbfgs.coefficients(wtg_total)
                inv_beta = cfg.inv_beta(inner, True)
                sigma = lbfgs.sigma
            else:
                coef, sigma = None, 0.0
                inv_beta = cfg.inv_beta(inner, False)
            for w in works:
                w.step(coef, sigma, inv_beta)
            replica.step(coef, sigma, inv_beta)
            phases["update"] += time.perf_counter() - t5
            # the engine checks its clock after every inner iteration; the votes ride on the next exchange
            out_of_time = stop.max_time is not None and elapsed() >= stop.max_time
        if reason is not None:
            break
        pending_record = evaluation()
        if cut_short:
            break
    if pending_record is not None:
        # the closing exchange: the last cycle's errors, no gradient
        messages = exchange({"shards": [], "record": pending_record, "time": elapsed(),
                             "out_of_time": out_of_time})
        verdict = close_record(epoch, messages, inner)
        if verdict is not None:
            reason, message = verdict
    if K == 1 and hamsi:  # a one-subset cycle pairs consecutive iterates, across chunks too
        for w in works:
            w.state.x_start, w.state.g_start = w.x_start.copy(), w.g_start.copy()
        common.extra["x_start"], common.extra["g_start"] = replica.x_start.copy(), replica.g_start.copy()
    stop.time_used = elapsed()
    common.inner_done = inner
    common.cycles_done = records[-1][0] if records else common.cycles_done
    box.forget(plan.run_id)
    return {"states": [states[d.shard] for d in datas], "common": common, "records": records,
            "reason": reason, "message": message, "phases": phases, "stop": stop, "worker": me}


def warm_up(width: int = 3, memory: int = 2) -> bool:
    """Return True after calling every kernel once on tiny arrays (load numba's cache before timing)."""
    U = np.ones((2, width))
    g = np.zeros((2, width))
    rows = np.array([0, 1], dtype=np.int32)
    vals = np.array([1.0, 2.0])
    kernels.mf_block_gradient(rows, rows, vals, U, U, g, g.copy(), width, 1.0, 0.0, np.zeros(0), np.zeros(0))
    kernels.mf_squared_error(rows, rows, vals, U, U, width, 0.0)
    kernels.weighted_row_norms(U, np.ones(2))
    flat = U.reshape(-1)
    S = np.ones((memory, flat.size))
    one = np.ones((1, flat.size))
    kernels.shard_wtg_partials(flat, S, S, np.zeros(2 * memory))
    kernels.shard_wtg_partials(flat, one, one, np.zeros(2))
    kernels.shard_wtg_partials(flat, S[:, :2], S[:, :2], np.zeros(2 * memory))
    kernels.shard_pair_partials(flat, flat, flat, flat, S, S, np.zeros(2 * memory + 2))
    kernels.shard_store_pair(flat, flat, flat, flat, one, one, 0)
    kernels.shard_lbfgs_step(flat.copy(), flat, S, S, np.zeros(2 * memory), 1.0, 1.0)
    kernels.shard_gradient_step(flat.copy(), flat, 1.0)
    kernels.sum_partials_in_order(np.ones((2, 3)), np.zeros(3))
    from hamsi.lbfgs import LBFGSMemory  # imports scipy.linalg, which the first pair would pay for

    lbfgs = LBFGSMemory(1)
    lbfgs.consider_pair(np.array([1.0, 1.0, 0.0, 0.0]))
    lbfgs.coefficients(np.ones(2))
    return True
