"""fit_distributed: HAMSI / mb-GD on a Dask cluster, one long task per worker per chunk of cycles.

The client places every row shard's ratings on its host once, then per chunk submits one pinned
task per worker (cluster.runner.run_chunk) and receives only the per-cycle records. Inside a chunk
the workers exchange gradients and reductions peer to peer (no client, no scheduler), so an inner
iteration costs one message round among workers instead of a scheduler round trip.

This replaces the client-driven loop of DESIGN.md (one graph per inner iteration): at ~14-27 ms
per scheduler round trip that loop alone is slower than the reference's whole 6.7 ms iteration.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
import uuid

import numpy as np

from hamsi.lbfgs import LBFGSMemory
from hamsi.optimizer import GAMMA, GD_ETA, HAMSI_ETA, engine_rngs
from hamsi.problems import MatrixFactorization
from hamsi.schedules import hamsi_cycle, mbgd_epoch
from hamsi.trace import PhaseTimes, Trace, make_result
from cluster import checkpoint as ckpt
from cluster.connect import connect, worker_addresses, worker_info, worker_memory_limits
from cluster.errors import ClusterError, PeerLost
from cluster.mailbox import abort_run, install
from cluster.placement import assign_shards, assign_v_homes, split_by_row_shard
from cluster.plan import ChunkPlan, RunConfig, StopRules
from cluster.runner import run_chunk, warm_up
from cluster.shard import CommonState, ShardState

METHODS = ("hamsi", "mbgd")
# How long a chunk may go without hearing from a peer before the task gives up (a dead peer is
# normally noticed at once: its connection is refused).
PEER_TIMEOUT = 60.0
MAX_RECOVERIES = 5
# Dask pauses a worker at 80% of its memory limit; leave room for the task's temporaries.
MEMORY_SHARE = 0.6
# How often the client checks that the workers of a running chunk are still alive.
WATCH_INTERVAL = 0.5


def _pick(result: dict, key, index=None):
    """Return result[key] (or result[key][index]): split a chunk's output into per-shard futures."""
    value = result[key]
    return value if index is None else value[index]


def _identity(value):
    """Return value unchanged (a pinned copy on a buddy worker: the chunk-boundary snapshot)."""
    return value


def schedule_cycles(method: str, schedule: str, n_subsets: int, first: int, last: int, random_state):
    """Return [(t, order)] for cycles first..last, replaying the engine's schedule rng from cycle 1."""
    _, rng = engine_rngs(random_state)
    out = []
    for t in range(1, last + 1):
        if method == "hamsi":
            order = np.zeros(1, dtype=np.int64) if n_subsets == 1 else hamsi_cycle(schedule, n_subsets, t, rng)
        else:
            order = mbgd_epoch(schedule, n_subsets, t, rng)
        if t >= first:
            out.append((t, np.asarray(order, dtype=np.int64)))
    return out


def fit_distributed(ratings, *, rank: int = 10, method: str = "hamsi", scheme: str = "strata-b",
                    blocks: int | None = None, subsets: int | None = None, partition=None,
                    schedule: str = "det", eta: float | None = None, gamma: float = GAMMA,
                    eta_gd: float = GD_ETA, memory: int = 5, reg: float = 0.0, biases: bool = False,
                    random_state=None, max_epochs: int | None = 100, max_time: float | None = None,
                    tol: float = 0.0, target: float | None = None, patience: int | None = None,
                    heldout=None, client=None, scheduler: str | None = None, n_workers: int | None = None,
                    threads_per_worker: int = 1, chunk_epochs: int = 10, checkpoint: str | None = None,
                    checkpoint_every: int | None = None, resume: str | None = None,
                    backup: bool = True, peer_timeout: float = PEER_TIMEOUT, callback=None,
                    on_chunk=None, quiet: bool = False):
    """Return the OptimizeResult of HAMSI (thesis Alg. 3) or mb-GD run on Dask workers.

    Same problem, start, schedules, stopping rules and result/trace as hamsi.optimizer
    (minimize_hamsi / minimize_mbgd) with the same partition and random_state; with STRATA/-B the
    iterates are bitwise the in-process ones. The cover is `partition`, else
    partition.make(scheme, ratings, blocks=B, subsets=K, seed=random_state or 0) with B = the
    number of workers. Cluster: `client`, else `scheduler` address, else a LocalCluster of n_workers processes
    (closed on return). The client sees the run once per chunk of `chunk_epochs` cycles.
    checkpoint/checkpoint_every write the full state atomically every N cycles; resume continues
    from such a directory bit-exactly. backup copies each shard's chunk-start state to a second
    worker, so a worker's death costs a rerun of one chunk on the survivors.
    on_chunk(info) is called after every chunk submission (tests use it to kill a worker).
    Unless quiet, the dashboard link of a new cluster and any recovery are reported on stderr.
    """
    import partition as partitions

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    if eta is None:
        eta = HAMSI_ETA if method == "hamsi" else GD_ETA
    with connect(client=client, scheduler=scheduler, n_workers=n_workers,
                 threads_per_worker=threads_per_worker, quiet=quiet) as dask_client:
        workers = worker_addresses(dask_client, minimum=n_workers or 1)
        if partition is None:
            n_blocks = blocks or len(workers)
            # the estimator's convention: partition seed 0 when random_state is None
            partition = partitions.make(scheme, ratings, blocks=n_blocks, subsets=subsets,
                                        seed=0 if random_state is None else random_state)
        problem = MatrixFactorization(ratings, rank, reg=reg, biases=biases)
        run = _DistributedRun(problem, partition, dask_client, workers, method=method, schedule=schedule,
                              eta=eta, gamma=gamma, eta_gd=eta_gd, memory=memory,
                              random_state=random_state, heldout=heldout, backup=backup,
                              peer_timeout=peer_timeout, quiet=quiet)
        stop = StopRules(max_epochs=max_epochs, max_time=max_time, tol=tol, target=target,
                         patience=patience, eta=eta, has_heldout=heldout is not None)
        return run.optimize(stop, chunk_epochs=chunk_epochs, checkpoint=checkpoint,
                            checkpoint_every=checkpoint_every, resume=resume, callback=callback,
                            on_chunk=on_chunk)


class _DistributedRun:
    """Placement, chunk submission, recovery and result assembly of one distributed run."""

    def __init__(self, problem, partition, client, workers, *, method, schedule, eta, gamma, eta_gd,
                 memory, random_state, heldout, backup, peer_timeout, quiet):
        self.problem, self.partition, self.client = problem, partition, client
        self.method, self.schedule, self.random_state = method, schedule, random_state
        self.heldout, self.backup, self.peer_timeout, self.quiet = heldout, backup, peer_timeout, quiet
        self.layout = problem.arrange(partition)
        self.bounds = problem.shard_bounds(partition)
        m, n = problem.shape
        width = problem.width
        n_shards = (self.bounds.size - 1) // 2
        self.n_shards = n_shards
        self.row_bounds = self.bounds[:n_shards + 1] // width
        v_bounds = np.concatenate([[0], self.bounds[n_shards + 1:] - m * width]).astype(np.int64)
        col_norm_weight = problem.reg * (np.bincount(problem.cols, minlength=n) > 0)
        self.config = RunConfig(method=method, rank=problem.rank, width=width, n_items=n,
                                n_ratings=problem.n_functions, scale=problem.scale, offset=problem.offset,
                                reg=problem.reg, col_reg=problem.col_reg, col_norm_weight=col_norm_weight,
                                memory=int(memory), eta=float(eta), gamma=float(gamma),
                                eta_gd=float(eta_gd), n_subsets=self.layout.n_subsets,
                                v_bounds=v_bounds, n_shards=n_shards)
        self.datas = split_by_row_shard(problem, self.row_bounds, heldout)
        assign_v_homes(self.datas, v_bounds // width)
        self.n_test = 0 if heldout is None else int(heldout.nnz)
        self.workers = list(workers)
        self.recoveries = []
        install(client)
        # numba loads its cached kernels on first call; do it before the clock starts
        client.run(warm_up, problem.width, int(memory))

    # ------------------------------------------------------------------ placement
    def _needed_bytes(self, shards) -> int:
        """Return the bytes a worker hosting `shards` holds: ratings, U_p with S_p, Y_p and buffers, V replica."""
        w, M = self.problem.width, self.config.memory
        n = self.problem.shape[1]
        total = 0
        for p in shards:
            rows = int(self.row_bounds[p + 1] - self.row_bounds[p])
            total += self.datas[p].n_ratings * 16 + rows * w * 8 * (2 * M + 6) + n * w * 8
        # V, S_V, Y_V, gV, cycle-start copies and new pair; twice: the chunk's input snapshot and its copy
        return total + 2 * n * w * 8 * (2 * M + 6)

    def _check_memory(self):
        """Raise ClusterError when a worker's share will not fit in its memory limit."""
        limits = worker_memory_limits(self.client)
        for addr in self.used:
            limit = limits.get(addr, 0)
            need = self._needed_bytes([p for p, a in self.owner.items() if a == addr])
            if limit and need > MEMORY_SHARE * limit:
                raise ClusterError(
                    f"worker {addr} would hold ~{need / 2**20:.0f} MiB of shards and state, more than "
                    f"{MEMORY_SHARE:.0%} of its {limit / 2**20:.0f} MiB memory limit; use more workers or "
                    f"larger --memory-limit / a bigger machine")

    def _place(self, workers):
        """Scatter every shard's ratings to its host (once; again only for shards that moved)."""
        sizes = [d.n_ratings for d in self.datas]
        self.owner = assign_shards(self.n_shards, workers, sizes)
        self.used = sorted(set(self.owner.values()), key=workers.index)
        self._check_memory()
        old = getattr(self, "data_futures", {})
        futures = {}
        for p, data in enumerate(self.datas):
            held = old.get(p)
            if held is not None and self._data_host.get(p) == self.owner[p]:
                futures[p] = held
            else:
                futures[p] = self.client.scatter(data, workers=[self.owner[p]], hash=False)
        self.data_futures = futures
        self._data_host = dict(self.owner)

    def _initial_states(self, x, S, Y, memory, cycles_done, inner_done, extra=None):
        """Scatter shard states and one CommonState per worker from full arrays (start or resume)."""
        m, n = self.problem.shape
        w = self.problem.width
        U, V = x[:m * w].reshape(m, w), x[m * w:].reshape(n, w)
        states = {}
        for p in range(self.n_shards):
            lo, hi = int(self.row_bounds[p]), int(self.row_bounds[p + 1])
            state = ShardState(p, U[lo:hi].copy(), np.ascontiguousarray(S[:, lo * w:hi * w]),
                               np.ascontiguousarray(Y[:, lo * w:hi * w]))
            if extra and "x_start" in extra:
                state.x_start = extra["x_start"][lo * w:hi * w].copy()
                state.g_start = extra["g_start"][lo * w:hi * w].copy()
            states[p] = self.client.scatter(state, workers=[self.owner[p]], hash=False)
        common_extra = {}
        if extra and "x_start" in extra:
            common_extra = {"x_start": extra["x_start"][m * w:].copy(), "g_start": extra["g_start"][m * w:].copy()}
        common = CommonState(V.copy(), np.ascontiguousarray(S[:, m * w:]), np.ascontiguousarray(Y[:, m * w:]),
                             memory, cycles_done, inner_done, common_extra)
        commons = {a: self.client.scatter(common, workers=[a], hash=False) for a in self.used}
        self.state_futures, self.common_futures, self.backups = states, commons, {}

    # ------------------------------------------------------------------ one chunk
    def _submit_chunk(self, plan):
        """Submit one pinned run_chunk per worker; return {address: future}."""
        client = self.client
        futures = {}
        for addr in self.used:
            mine = plan.shards_of(addr)
            futures[addr] = client.submit(
                run_chunk, plan, [self.data_futures[p] for p in mine], [self.state_futures[p] for p in mine],
                self.common_futures[addr], workers=[addr], allow_other_workers=False, pure=False,
                retries=0, key=f"hamsi-chunk-{plan.run_id}-{self.used.index(addr)}")
        return futures

    def _watch(self, futures: dict, plan):
        """Return when every chunk task finished; raise PeerLost when a task failed or a worker died."""
        import threading

        changed = threading.Event()
        for f in futures.values():
            f.add_done_callback(lambda _: changed.set())
        while True:
            failed = [f for f in futures.values() if f.status in ("error", "cancelled")]
            alive = set(worker_info(self.client))
            lost = [a for a in self.used if a not in alive]
            if failed or lost:
                survivors = [a for a in self.used if a in alive]
                try:
                    self.client.run(abort_run, plan.run_id, workers=survivors)
                except Exception:  # a survivor may be dying too; the recovery re-checks who is alive
                    pass
                why = "worker lost"
                errors = [f.exception() for f in failed if f.status == "error"]
                for f in futures.values():
                    f.cancel()
                real = [e for e in errors if not isinstance(e, PeerLost)]
                if real and not lost:  # a failure of the computation itself: rerunning would repeat it
                    raise real[0]
                if errors:
                    why = f"{type(errors[0]).__name__}: {errors[0]}"
                shown = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
                raise PeerLost(f"chunk {plan.run_id} failed ({why}); lost workers: {shown or 'none'}")
            if all(f.status == "finished" for f in futures.values()):
                return
            changed.wait(WATCH_INTERVAL)
            changed.clear()

    def _collect(self, futures: dict):
        """Split chunk outputs into per-shard state, common and summary futures; return summaries."""
        client = self.client
        states, commons, summaries = {}, {}, {}
        for addr, fut in futures.items():
            mine = sorted(p for p, a in self.owner.items() if a == addr)
            for i, p in enumerate(mine):
                states[p] = client.submit(_pick, fut, "states", i, workers=[addr], pure=False)
            commons[addr] = client.submit(_pick, fut, "common", workers=[addr], pure=False)
            summaries[addr] = client.submit(_summary, fut, workers=[addr], pure=False)
        if self.backup and len(self.used) > 1:
            ring = self.used[1:] + self.used[:1]
            buddy = dict(zip(self.used, ring))
            backups = {p: client.submit(_identity, states[p], workers=[buddy[self.owner[p]]], pure=False)
                       for p in states}
        else:
            backups = {}
        gathered = client.gather([summaries[a] for a in self.used])
        if backups:
            from distributed import wait
            with client.as_current():
                wait(list(backups.values()))
        self.state_futures, self.common_futures, self.backups = states, commons, backups
        self._origin = None
        return dict(zip(self.used, gathered))

    # ------------------------------------------------------------------ recovery
    def _recover(self, error):
        """Re-place the shards of dead workers on the survivors from the last chunk snapshot."""
        alive = set(worker_info(self.client))
        survivors = [a for a in self.workers if a in alive]
        if not survivors:
            raise ClusterError(f"no workers left after: {error}") from error
        self.recoveries.append({"error": str(error), "survivors": len(survivors)})
        if self._origin is not None:  # failed in the first chunk: the client still has the start
            self.workers = survivors
            self._place(survivors)
            self._initial_states(*self._origin)
            return
        states = {}
        for p, fut in self.state_futures.items():
            if self.owner[p] in alive:
                states[p] = fut
            elif p in self.backups and self._backup_host(p) in alive:
                states[p] = self.backups[p]
            else:
                raise ClusterError(f"shard {p} lost with its host and its backup; restart from a checkpoint "
                                   f"(--checkpoint / resume=)") from error
        common = next((self.common_futures[a] for a in self.used if a in alive), None)
        if common is None:
            raise ClusterError("every copy of the replicated state was lost") from error
        self.workers = survivors
        self._place(survivors)
        self.state_futures = states
        self.common_futures = {a: common for a in self.used}

    def _backup_host(self, p):
        ring = self.used[1:] + self.used[:1]
        return dict(zip(self.used, ring))[self.owner[p]]

    # ------------------------------------------------------------------ the loop
    def optimize(self, stop: StopRules, *, chunk_epochs, checkpoint, checkpoint_every, resume, callback,
                 on_chunk):
        problem = self.problem
        M = self.config.memory
        trace = Trace()
        phases = dict(gradient=0.0, update=0.0, hessian=0.0, exchange=0.0)
        worker_phases = {}  # per worker: where the time went (load balance diagnostics)
        if resume is not None:
            state = ckpt.load(resume, self.fingerprint())
            x, S, Y, memory = state["x"], state["S"], state["Y"], state["memory"]
            cycles_done, inner_done = state["cycles_done"], state["inner_done"]
            for row in state["trace"]:
                trace.append(*row)
            saved_stop = state["stop"]
            stop.time_used = saved_stop.time_used
            stop.best_heldout, stop.without_gain = saved_stop.best_heldout, saved_stop.without_gain
            stop.previous_objective = saved_stop.previous_objective
            phases.update(state["phases"])
            extra = state.get("extra")
        else:
            init_rng, _ = engine_rngs(self.random_state)
            x = problem.initial_point(init_rng)
            S = np.zeros((M, problem.n_params))
            Y = np.zeros((M, problem.n_params))
            memory = LBFGSMemory(M)
            cycles_done = inner_done = 0
            extra = None
            train, objective = problem.evaluate(x)
            test = problem.heldout_error(x, self.heldout) if self.heldout is not None else math.nan
            trace.append(0, 0, 0.0, train, test, objective)
            stop.previous_objective = objective
            if callback is not None:
                callback(dict(zip(("epoch", "inner", "time_s", "train_rmse", "test_rmse", "objective"),
                                  trace.rows[-1])))
        self._place(self.workers)
        # kept until the first chunk completes: it is that chunk's snapshot if a worker dies
        self._origin = (x, S, Y, memory, cycles_done, inner_done, extra)
        self._initial_states(*self._origin)
        reason, message = None, ""
        if stop.max_epochs is not None and cycles_done >= stop.max_epochs:
            reason, message = "epoch_limit", f"reached max_epochs = {stop.max_epochs}"
        wall_start = time.perf_counter()
        chunk_number = itertools.count()
        while reason is None:
            first = cycles_done + 1
            last = first + max(1, int(chunk_epochs)) - 1
            if stop.max_epochs is not None:
                last = min(last, stop.max_epochs)
            if checkpoint and checkpoint_every:
                last = min(last, (cycles_done // checkpoint_every + 1) * checkpoint_every)
            cycles = schedule_cycles(self.method, self.schedule, self.config.n_subsets, first, last,
                                     self.random_state)
            chunk_index = next(chunk_number)
            while True:  # rerun the chunk from its snapshot until it completes
                plan = ChunkPlan(run_id=uuid.uuid4().hex[:12], workers=list(self.used), owner=dict(self.owner),
                                 cycles=cycles, config=self.config, stop=stop, timeout=self.peer_timeout,
                                 n_test=self.n_test)
                futures = self._submit_chunk(plan)
                if on_chunk is not None:
                    on_chunk({"chunk": chunk_index, "first_cycle": first, "workers": list(self.used),
                              "client": self.client, "futures": futures})
                try:
                    self._watch(futures, plan)
                    summaries = self._collect(futures)
                    break
                except PeerLost as error:
                    if len(self.recoveries) >= MAX_RECOVERIES:
                        raise ClusterError(f"giving up after {MAX_RECOVERIES} recoveries: {error}") from error
                    if not self.quiet:
                        print(f"hamsi: {error}; rerunning the chunk on the survivors", file=sys.stderr,
                              flush=True)
                    self._recover(error)
            lead = summaries[self.used[0]]
            for row in lead["records"]:
                trace.append(*row)
                if callback is not None:
                    callback(dict(zip(("epoch", "inner", "time_s", "train_rmse", "test_rmse", "objective"), row)))
            for key in phases:
                phases[key] += lead["phases"][key]
            for addr, summary in summaries.items():
                mine = worker_phases.setdefault(addr, dict.fromkeys(phases, 0.0))
                for key in mine:
                    mine[key] += summary["phases"][key]
            stop = lead["stop"]
            stop.time_used = max(s["stop"].time_used for s in summaries.values())
            reason, message = lead["reason"], lead["message"]
            if lead["records"]:
                cycles_done = lead["records"][-1][0]
            inner_done = lead["inner_done"]
            if reason is None and stop.max_epochs is not None and cycles_done >= stop.max_epochs:
                reason, message = "epoch_limit", f"reached max_epochs = {stop.max_epochs}"
            if checkpoint and checkpoint_every and (cycles_done % checkpoint_every == 0 or reason is not None):
                full = self.gather_state()
                ckpt.save(checkpoint, fingerprint=self.fingerprint(), trace=trace.rows, stop=stop,
                          phases=phases, **full)
        full = self.gather_state(with_memory=False)
        wall = time.perf_counter() - wall_start
        times = PhaseTimes(phases["gradient"], phases["update"], phases["hessian"])
        memory = full["memory"]
        self.release()
        result = make_result(full["x"], reason, message, trace, times, full["inner_done"], full["cycles_done"],
                           layout=self.layout, shard_bounds=self.bounds, sigma=memory.sigma,
                           pairs_accepted=memory.n_accepted, pairs_rejected=memory.n_rejected,
                           exchange_time=phases["exchange"], worker_phases=worker_phases, wall_time=wall,
                           workers=list(self.used),
                           shard_owner=dict(self.owner), recoveries=list(self.recoveries))
        # the optimization time of a distributed run includes waiting for peers (like trace time_s)
        result.time = times.total + phases["exchange"]
        return result

    def fingerprint(self) -> dict:
        """Return what a checkpoint must match to be resumed: data, cover and constants."""
        p = self.problem
        return {"shape": list(p.shape), "n_ratings": int(p.n_functions), "rank": int(p.rank),
                "width": int(p.width), "method": self.method, "schedule": self.schedule,
                "scheme": self.partition.scheme, "n_shards": int(self.n_shards),
                "n_subsets": int(self.config.n_subsets), "memory": int(self.config.memory),
                "random_state": self.random_state,
                "ratings_checksum": float(np.sum(p.vals * (1.0 + p.rows % 7) * (1.0 + p.cols % 11)))}

    def gather_state(self, with_memory: bool = True) -> dict:
        """Return the full x (and S, Y, the memory and counters), gathered from the workers.

        Only at checkpoints and at the end; without with_memory just the factors travel (small
        tasks on the hosts pick U_p and V out of their states), not the 2M memory rows.
        """
        client = self.client
        lead = self.used[0]
        if with_memory:
            shard_states = client.gather([self.state_futures[p] for p in range(self.n_shards)])
            common = client.gather(self.common_futures[lead])
        else:
            picks = [client.submit(_factor_part, self.state_futures[p], workers=[self.owner[p]], pure=False)
                     for p in range(self.n_shards)]
            picks.append(client.submit(_factor_part, self.common_futures[lead], workers=[lead], pure=False))
            parts = client.gather(picks)
            shard_states, common = parts[:-1], parts[-1]
        x = np.concatenate([s.U.reshape(-1) for s in shard_states] + [common.V.reshape(-1)])
        out = {"x": x, "memory": common.memory, "cycles_done": common.cycles_done,
               "inner_done": common.inner_done}
        if not with_memory:
            return out
        out["S"] = np.concatenate([s.S for s in shard_states] + [common.S], axis=1)
        out["Y"] = np.concatenate([s.Y for s in shard_states] + [common.Y], axis=1)
        out["extra"] = None
        if shard_states[0].x_start is not None:
            out["extra"] = {
                "x_start": np.concatenate([s.x_start for s in shard_states] + [common.extra["x_start"]]),
                "g_start": np.concatenate([s.g_start for s in shard_states] + [common.extra["g_start"]])}
        return out

    def release(self):
        """Drop every future of the run (the workers free the shards)."""
        self.state_futures = self.common_futures = self.backups = self.data_futures = {}


def _factor_part(state):
    """Return the state with its factor only (U_p, or V with the small memory): what the end result needs."""
    from types import SimpleNamespace

    if isinstance(state, ShardState):
        return SimpleNamespace(U=state.U)
    return SimpleNamespace(V=state.V, memory=state.memory, cycles_done=state.cycles_done,
                           inner_done=state.inner_done)


def _summary(result: dict) -> dict:
    """Return the small part of a chunk result: records, phases, stop state, reason, counters."""
    return {"records": result["records"], "phases": result["phases"], "stop": result["stop"],
            "reason": result["reason"], "message": result["message"],
            "inner_done": result["common"].inner_done, "worker": result["worker"]}
