"""cluster.minimize_hamsi / fit_distributed: the HAMSI loop on Dask workers, one long task per worker per chunk.

The client places every shard's data on its host once (cluster.layout), then per chunk of cycles
submits one pinned task per worker (cluster.exchange.run_chunk), which runs `hamsi.loop` with a
MailboxExchange: the workers exchange gradients and reductions peer to peer (no client, no
scheduler inside a chunk), and the client receives only the per-cycle records. Between chunks it
keeps buddy copies of the state (a lost worker costs a rerun of one chunk) and writes checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import sys
import time
import uuid

import numpy as np

from cluster import checkpoint as ckpt
from cluster.connect import connect, worker_addresses, worker_info, worker_memory_limits
from cluster.errors import ChunkFailed, ChunkFailures, ClusterError, PeerLost
from cluster.exchange import run_chunk
from cluster.layout import layout_for
from cluster.mailbox import abort_run, install
from cluster.placement import assign_shards
from cluster.plan import ChunkPlan
from cluster.snapshot import discarded_on_failure, new_run
from cluster.warm import warm_up
from cluster.work import item_rows_per_iteration
from hamsi import stepper as steps
from hamsi.errors import InputError
from hamsi.loop import ROW_NAMES
from hamsi.optimizer import GAMMA, GD_ETA, HAMSI_ETA, finish_result
from hamsi.problems import MatrixFactorization
from hamsi.stop_rules import StopRules
from hamsi.trace import PhaseTimes, Trace

METHODS = steps.METHODS
# How long a chunk may go without hearing from a peer before the task gives up (a dead peer is
# normally noticed at once: its connection is refused).
PEER_TIMEOUT = 60.0
MAX_RECOVERIES = 5
RESUME_HINT = (
    "resume from the last checkpoint with `hamsi factorize ... --resume DIR` (API: resume=DIR; "
    "checkpoints are written with --checkpoint DIR)"
)
# Dask pauses a worker at 80% of its memory limit; leave room for the task's temporaries.
MEMORY_SHARE = 0.6
# How often the client checks that the workers of a running chunk are still alive.
WATCH_INTERVAL = 0.5
# After a chunk failed: how long the other tasks have to notice the abort before their workers
# count as hung (capped by peer_timeout), and how long the client waits for the abort to be sent.
HUNG_GRACE = 5.0
# Workers that die together (a host, a rack) leave the scheduler's list within moments of each
# other: a recovery waits until the list has not changed for SETTLE_SECONDS (at most SETTLE_LIMIT),
# so it does not place shards on a worker that is dead but not yet dropped.
SETTLE_SECONDS = 1.0
SETTLE_LIMIT = 10.0
ABORT_WAIT = 5.0


@contextlib.contextmanager
def reporting_cluster_losses(client):
    """Turn whatever Dask raises once the scheduler or a worker is gone into one ClusterError (cluster_lost)."""
    before = set(worker_info(client))
    try:
        yield
    except (Exception, asyncio.CancelledError) as exc:
        raise cluster_lost(client, exc, before) or exc  # noqa: B904 (exc is the context already)


def cluster_lost(client, error, workers_before: set) -> ClusterError | None:
    """Return one clear ClusterError when `error` came from losing the scheduler or a worker, else None.

    Dask reports a dead scheduler, or a worker that died while it received data (killed at its
    memory limit during placement: a KeyError), through many exceptions with multi-line texts;
    the client's status and the scheduler's list of workers say which case it is. Errors the
    run reports itself (InputError, ClusterError) and failures with every worker alive pass.
    """
    if isinstance(error, InputError):
        return None
    text = str(error).strip().splitlines()
    why = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    if client.status != "running" or not _scheduler_answers(client):
        return ClusterError(
            f"lost the connection to the Dask scheduler at {client.scheduler.address} ({why}); "
            f"{RESUME_HINT}"
        )
    gone = sorted(workers_before - set(worker_info(client)))
    if not gone:
        return None
    return ClusterError(
        f"worker {', '.join(gone)} died during the run ({why}); if it was killed at its memory "
        f"limit, use more workers or a larger limit; {RESUME_HINT}"
    )


def _scheduler_answers(client, timeout: float = 3.0) -> bool:
    """True when the scheduler answers an identity request within `timeout` s."""
    try:
        client.sync(client.scheduler.identity, callback_timeout=timeout)
        return True
    except Exception:
        return False


def _pick(result: dict, key, index=None):
    """Return result[key] (or result[key][index]): split a chunk's output into per-shard futures."""
    value = result[key]
    return value if index is None else value[index]


def minimize_hamsi(
    problem,
    partition,
    *,
    client=None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    method: str = "hamsi",
    schedule: str = "det",
    eta: float | None = None,
    gamma: float = GAMMA,
    eta_gd: float = GD_ETA,
    memory: int = 5,
    x0=None,
    random_state=None,
    max_epochs: int | None = 100,
    max_time: float | None = None,
    tol: float = 0.0,
    target: float | None = None,
    patience: int | None = None,
    heldout=None,
    threads: int | None = None,
    callback=None,
    safeguard: bool = True,
    chunk_epochs: int = 10,
    checkpoint: str | None = None,
    checkpoint_every: int | None = None,
    resume: str | None = None,
    backup: bool = True,
    peer_timeout: float = PEER_TIMEOUT,
    on_chunk=None,
    quiet: bool = False,
    shared_memory: bool | None = None,
    owned_v: bool | None = None,
    security=None,
):
    """Return the OptimizeResult of HAMSI (thesis Alg. 3; method="mbgd": mini-batch GD) on Dask workers.

    The keywords of hamsi.optimizer.minimize_hamsi mean the same here (safeguard, patience with
    heldout, ...; `threads` is ignored: a worker runs one task thread), and the run takes the same
    decisions from the same numbers: MatrixFactorization is sharded by user rows (bitwise the
    in-process iterates for STRATA/-B), any other PartiallySeparableProblem (SparseLeastSquares)
    runs with x replicated on every worker (bitwise too). Cluster: `client`, else `scheduler`,
    else a LocalCluster of n_workers processes (closed on return). The client sees the run once per
    `chunk_epochs` cycles. checkpoint/checkpoint_every write the full state atomically; resume
    continues from such a directory bit-exactly. backup keeps each shard's chunk-start state on a
    second worker's disk (cluster.snapshot), so a worker's death costs a rerun of one chunk on the
    survivors. on_chunk(info) is called after every chunk submission (tests use it to kill a
    worker). shared_memory (None: whenever possible) keeps V in shared memory when all workers run
    on one host and the cover is STRATA/-B (cluster/shared.py). Otherwise owned_v=True (STRATA/-B) hands each item shard V_j
    from worker to worker along the strata, one worker stepping it per inner iteration
    (cluster.work.OwnedFactorWork); owned_v=False, or a cover whose V_j have several homes
    (HOGWILD, COLOR), keeps V replicated: every worker receives every gV row and steps all of V;
    None: owned when it sends fewer bytes (cluster.work.item_rows_per_iteration: from 5 workers
    with B = workers). result.worker_bytes_sent: bytes each worker sent its peers. security: a
    distributed.security.Security for a tls:// scheduler or a TLS LocalCluster (cluster.connect).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    if eta is None:
        eta = HAMSI_ETA if method == "hamsi" else GD_ETA
    memory = memory if method == "hamsi" else 1
    with (
        connect(
            client=client,
            scheduler=scheduler,
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            quiet=quiet,
            security=security,
        ) as dask_client,
        reporting_cluster_losses(dask_client),
    ):
        workers = worker_addresses(dask_client, minimum=n_workers or 1)
        run = _DistributedRun(
            problem,
            partition,
            dask_client,
            workers,
            heldout=heldout,
            backup=backup,
            peer_timeout=peer_timeout,
            quiet=quiet,
            memory=memory,
            shared_memory=shared_memory,
            owned_v=owned_v,
        )
        stepper = steps.Stepper(
            method=method,
            n_subsets=run.layout_k,
            n_params=problem.n_params,
            schedule=schedule,
            memory=memory,
            eta=eta,
            gamma=gamma,
            eta_gd=eta_gd,
            safeguard=safeguard,
            random_state=random_state,
        )
        stop = StopRules(
            max_epochs=max_epochs,
            max_time=max_time,
            tol=tol,
            target=target,
            patience=patience,
            has_heldout=heldout is not None,
            eta=eta,
            safeguard=stepper.safeguard,
            metric=problem.metric,
        )
        run.fingerprint_extra = {
            "method": method,
            "schedule": schedule,
            "random_state": random_state,
        }
        with discarded_on_failure(dask_client, run.snapshot_token):
            return run.optimize(
                stepper,
                stop,
                x0=x0,
                random_state=random_state,
                chunk_epochs=chunk_epochs,
                checkpoint=checkpoint,
                checkpoint_every=checkpoint_every,
                resume=resume,
                callback=callback,
                on_chunk=on_chunk,
            )


def fit_distributed(
    ratings,
    *,
    rank: int = 10,
    method: str = "hamsi",
    scheme: str = "strata-b",
    blocks: int | None = None,
    subsets: int | None = None,
    partition=None,
    reg: float = 0.0,
    biases: bool = False,
    client=None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    random_state=None,
    quiet: bool = False,
    safeguard: bool = True,
    security=None,
    columns=None,
    heldout_fraction: float = 0.0,
    **options,
):
    """Return the OptimizeResult of matrix factorization by HAMSI (or mb-GD) on Dask: the MF convenience.

    Builds MatrixFactorization(ratings, rank, reg, biases) and the cover (`partition`, else
    partition.make(scheme, ratings, blocks=B, subsets=K, seed=random_state or 0) with B = the
    number of workers), then runs `minimize_hamsi` (same keywords in **options; security as there).

    `ratings` may also live on the cluster: a Dask DataFrame, or a path, directory or glob of
    Parquet / CSV files (`columns` picks the user, item and rating columns). They are then read,
    indexed and routed to their row shards by tasks on the workers (cluster.dataset; STRATA or
    STRATA-B), never collected; `heldout_fraction` holds out that share of the pairs by a seeded
    hash (the trace's test RMSE). The result then carries user_ids and item_ids (row a of U is
    user user_ids[a]).
    """
    import partition as partitions
    from cluster.dataset import WorkerRatings, is_distributed_source

    with connect(
        client=client,
        scheduler=scheduler,
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        quiet=quiet,
        security=security,
    ) as dask_client:
        workers = worker_addresses(dask_client, minimum=n_workers or 1)
        if is_distributed_source(ratings):
            if partition is not None:
                raise ValueError(
                    "ratings on the workers take scheme= (strata or strata-b), not a partition"
                )
            data = WorkerRatings(
                dask_client,
                ratings,
                columns=columns,
                scheme=scheme,
                n_blocks=blocks or len(workers),
                heldout_fraction=heldout_fraction,
                seed=random_state,
                workers=workers,
            )
            result = minimize_hamsi(
                data.problem(rank, reg=reg, biases=biases),
                data.cover,
                client=dask_client,
                method=method,
                random_state=random_state,
                quiet=quiet,
                safeguard=safeguard,
                heldout=data if data.n_test else None,
                **options,
            )
            result.user_ids, result.item_ids = data.user_ids, data.item_ids
            return result
        if partition is None:
            # the estimator's convention: partition seed 0 when random_state is None
            partition = partitions.make(
                scheme,
                ratings,
                blocks=blocks or len(workers),
                subsets=subsets,
                seed=0 if random_state is None else random_state,
            )
        problem = MatrixFactorization(ratings, rank, reg=reg, biases=biases)
        return minimize_hamsi(
            problem,
            partition,
            client=dask_client,
            method=method,
            random_state=random_state,
            quiet=quiet,
            safeguard=safeguard,
            **options,
        )


class _DistributedRun:
    """Placement, chunk submission, recovery and result assembly of one distributed run."""

    def __init__(
        self,
        problem,
        partition,
        client,
        workers,
        *,
        heldout,
        backup,
        peer_timeout,
        quiet,
        memory,
        shared_memory=None,
        owned_v=None,
    ):
        self.problem, self.partition, self.client = problem, partition, client
        self.shared_memory, self.owned_v = shared_memory, owned_v
        self.shared_used = False  # any chunk ran with V in shared memory
        self.owned_used = False  # any chunk ran with V owned on the message path
        self._share_checked = {}  # workers -> may they share V
        self.heldout, self.backup, self.peer_timeout, self.quiet = (
            heldout,
            backup,
            peer_timeout,
            quiet,
        )
        self.layout_k = problem.arrange(partition).n_subsets
        self.bounds = problem.shard_bounds(partition)
        self.layout = layout_for(problem, partition, self.bounds, heldout)
        self.memory_size = int(memory)
        self.workers = list(workers)
        self.recoveries = []
        self.failures = ChunkFailures(MAX_RECOVERIES)  # when a failed chunk is rerun
        self.unresponsive: set = (
            set()
        )  # workers that stopped answering: never used again by this run
        self.fingerprint_extra = {}
        # names the run's chunk-start files; those of gone runs are removed (cluster.snapshot)
        self.snapshot_token = new_run(client)
        self.backups, self.decisions = (
            {},
            {},
        )  # {shard: its buddy}, {worker: its decisions after the last chunk}
        self.chunk_first = (
            None  # the first cycle of the chunk running (names its chunk-start files)
        )
        install(client)
        # numba loads its cached kernels on first call; do it before the clock starts
        client.run(warm_up, getattr(problem, "width", 2), int(memory))

    # ------------------------------------------------------------------ placement
    def _needed_bytes(self, shards) -> int:
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

    def _check_memory(self):
        """Raise ClusterError when a worker's share, on top of what it already uses, will not fit its limit."""
        limits = worker_memory_limits(self.client)
        for addr in self.used:
            limit, baseline = limits.get(addr, (0, 0))
            need = self._needed_bytes([p for p, a in self.owner.items() if a == addr])
            if limit and baseline + need > MEMORY_SHARE * limit:
                raise ClusterError(
                    f"worker {addr} would hold ~{need / 2**20:.0f} MiB of shards and state on top of the "
                    f"{baseline / 2**20:.0f} MiB it uses already, more than {MEMORY_SHARE:.0%} of its "
                    f"{limit / 2**20:.0f} MiB memory limit; use more workers or larger --memory-limit / a bigger machine"
                )

    def _place(self, workers):
        """Scatter every shard's data to its host (once; again only for shards that moved)."""
        if self.layout.n_shards:
            self.owner = assign_shards(self.layout.n_shards, workers, self.layout.sizes())
            self.used = sorted(set(self.owner.values()), key=workers.index)
        else:
            self.owner, self.used = {}, list(workers)
        self._check_memory()
        old = getattr(self, "data_futures", {})
        hosts = dict(self.owner) if self.layout.n_shards else {a: a for a in self.used}
        futures = {}
        for key, host in hosts.items():
            held = old.get(key)
            if held is not None and self._data_host.get(key) == host:
                futures[key] = held
            else:
                futures[key] = self.layout.place(self.client, key, host)
        self.data_futures, self._data_host = futures, hosts

    def _initial_states(
        self, full: dict, stepper, stop, time_used: float, cycles_done: int, started: bool
    ):
        """Scatter shard states and one CommonState per worker from full vectors (start or resume).

        full None: the layout builds the start on the workers (cluster.dataset: the ratings never
        reach the client); the decisions are then added to each worker's CommonState there.
        """
        decisions = dict(
            stepper=stepper,
            stop=stop,
            time_used=time_used,
            cycles_done=cycles_done,
            started=started,
        )
        if full is None:
            self.state_futures, commons = self.layout.start_futures(
                self.client, self.owner, self.used, self.memory_size, self.random_state
            )
            self.common_futures = {
                a: self.client.submit(
                    _with_decisions, commons[a], decisions, workers=[a], pure=False
                )
                for a in self.used
            }
            self.backups = {}
            return
        states, common = self.layout.split(full, self.memory_size)
        common = _with_decisions(common, decisions)
        self.state_futures = {
            p: self.client.scatter(s, workers=[self.owner[p]], hash=False)
            for p, s in states.items()
        }
        self.common_futures = {
            a: self.client.scatter(common, workers=[a], hash=False) for a in self.used
        }
        self.backups = {}

    def _can_share(self) -> bool:
        """True when the chunk's V may live in shared memory: allowed, STRATA/-B, one host, one user, room."""
        if self.shared_memory is False or not self.layout.homes_complete or len(self.used) < 2:
            return False
        key = tuple(self.used)
        if key not in self._share_checked:
            from distributed.comm.addressing import get_address_host

            from cluster.shared import host_check, nbytes

            size = nbytes(self.layout.config.n_items * self.layout.config.width, self.memory_size)
            users = set(self.client.run(host_check, size, workers=list(self.used)).values())
            hosts = {get_address_host(a) for a in self.used}
            self._share_checked[key] = len(hosts) == 1 and len(users) == 1 and None not in users
        return self._share_checked[key]

    def _v_holders(self):
        """Return holders[k][j], the worker of V_j's home in subset k, when V is owned on the message path; else None.

        Needs every V_j to have one home in every subset (STRATA/-B) and two or more workers;
        owned_v None: only when the owned V sends fewer bytes than the replicated one.
        """
        if self.owned_v is False or not self.layout.homes_complete or len(self.used) < 2:
            return None
        if self.owned_v is None and (
            item_rows_per_iteration(len(self.used), self.layout_k, owned=True)
            >= item_rows_per_iteration(len(self.used), self.layout_k, owned=False)
        ):
            return None
        n_v = len(self.layout.config.v_bounds) - 1
        holders = [[""] * n_v for _ in range(self.layout_k)]
        for p, homes in enumerate(self.layout.v_homes()):
            for k, j in enumerate(homes):
                if j >= 0:
                    holders[k][j] = self.owner[p]
        return holders

    # ------------------------------------------------------------------ one chunk
    def _submit_chunk(self, plan):
        """Submit one pinned run_chunk per worker; return {address: future}."""
        futures = {}
        for addr in self.used:
            mine = plan.shards_of(addr)
            datas = (
                [self.data_futures[p] for p in mine]
                if self.layout.n_shards
                else [self.data_futures[addr]]
            )
            futures[addr] = self.client.submit(
                run_chunk,
                plan,
                datas,
                [self.state_futures[p] for p in mine],
                self.common_futures[addr],
                workers=[addr],
                allow_other_workers=False,
                pure=False,
                retries=0,
                key=f"hamsi-chunk-{plan.run_id}-{self.used.index(addr)}",
            )
        return futures

    def _alive(self) -> set:
        """Return the workers the scheduler knows, without those this run found unresponsive."""
        return set(worker_info(self.client)) - self.unresponsive

    def _watch(self, futures: dict, plan):
        """Return when every chunk task finished; raise PeerLost when a task failed or a worker died or hung.

        A hung worker (stopped, swapping) still looks alive to the scheduler: its peers' rounds time
        out after peer_timeout and fail; when no worker died, a worker whose task then neither
        finishes nor fails within HUNG_GRACE of the abort is declared lost for the rest of the run.
        """
        import threading

        changed = threading.Event()
        for f in futures.values():
            f.add_done_callback(lambda _: changed.set())
        while True:
            failed = [f for f in futures.values() if f.status in ("error", "cancelled")]
            alive = self._alive()
            lost = [a for a in self.used if a not in alive]
            if failed or lost:
                self._abort(futures, plan, [a for a in self.used if a in alive], cancel=False)
                # only when no worker died: a stopped worker still looks alive, and its peers' timeouts
                # are the failures; after a death the survivors are merely slow to report their abort
                hung = (
                    self._unresponsive(futures, lost, min(self.peer_timeout, HUNG_GRACE))
                    if failed and not lost
                    else []
                )
                for f in futures.values():
                    f.cancel()
                self.unresponsive.update(hung)
                lost += hung
                errors = [f.exception() for f in failed if f.status == "error"]
                real = [
                    e for e in errors if not isinstance(e, PeerLost)
                ]  # StartTimeout is a ClusterError
                if (
                    real and not lost
                ):  # a failure of the computation itself: rerunning would repeat it
                    raise real[0]
                why = f"{type(errors[0]).__name__}: {errors[0]}" if errors else "worker lost"
                shown = ", ".join(lost[:3]) + (
                    f" and {len(lost) - 3} more" if len(lost) > 3 else ""
                )
                if hung:
                    shown += f" ({len(hung)} not answering: hung or stopped)"
                raise ChunkFailed(
                    f"chunk {plan.run_id} failed ({why}); lost workers: {shown or 'none'}",
                    lost,
                    why,
                )
            if all(f.status == "finished" for f in futures.values()):
                return
            changed.wait(WATCH_INTERVAL)
            changed.clear()

    def _unresponsive(self, futures: dict, lost: list, grace: float) -> list:
        """Return the workers (not already lost) whose chunk task is still running `grace` s after the abort."""
        deadline = time.monotonic() + grace
        while True:
            running = [a for a, f in futures.items() if f.status == "pending" and a not in lost]
            if not running or time.monotonic() >= deadline:
                return running
            time.sleep(0.05)

    def _abort(self, futures: dict, plan, survivors, cancel: bool = True):
        """Wake the survivors' waiting tasks, cancel the chunk and drop its mail (after a failure or Ctrl-C).

        The wake-up waits at most ABORT_WAIT: a stopped worker never answers it.
        """
        import threading

        def wake():
            try:
                self.client.run(abort_run, plan.run_id, workers=survivors, on_error="ignore")
            except Exception:  # a survivor may be dying too; the recovery re-checks who is alive
                pass

        waker = threading.Thread(target=wake, daemon=True)
        waker.start()
        waker.join(ABORT_WAIT)
        if cancel:
            for f in futures.values():
                f.cancel()

    def _collect(self, futures: dict):
        """Split chunk outputs into per-shard state, common and summary futures; return summaries."""
        client = self.client
        states, commons, summaries = {}, {}, {}
        for addr, fut in futures.items():
            for i, p in enumerate(sorted(p for p, a in self.owner.items() if a == addr)):
                states[p] = client.submit(_pick, fut, "states", i, workers=[addr], pure=False)
            commons[addr] = client.submit(_pick, fut, "common", workers=[addr], pure=False)
            summaries[addr] = client.submit(_summary, fut, workers=[addr], pure=False)
        gathered = dict(zip(self.used, client.gather([summaries[a] for a in self.used])))
        self.state_futures, self.common_futures = states, commons
        self.backups = self._write_backups(states) if self.backup and len(self.used) > 1 else {}
        self.decisions = {
            a: dict(
                stepper=s["stepper"],
                stop=s["stop"],
                time_used=s["time_used"],
                cycles_done=s["cycles_done"],
                started=True,
            )
            for a, s in gathered.items()
        }
        self._origin = None
        return gathered

    def _write_backups(self, states: dict) -> dict:
        """Write every shard's new state on its buddy's disk (the next worker in order); return {shard: buddy}.

        Array by array (cluster.snapshot.PIECES), each buddy receiving one at a time: a piece is a
        key of its own on the host (the array itself, no copy), released once written, so neither
        worker keeps a second copy in memory.
        """
        from distributed import wait

        from cluster.snapshot import PIECES, commit_backup, piece_of, store_piece

        client, token = self.client, self.snapshot_token
        buddy = dict(zip(self.used, self.used[1:] + self.used[:1]))
        hosts = {p: buddy[self.owner[p]] for p in sorted(states)}
        queues = [
            [(p, name) for p in hosts if hosts[p] == b for name in PIECES]
            for b in dict.fromkeys(hosts.values())
        ]
        for wave in itertools.zip_longest(*queues):
            written = [
                client.submit(
                    store_piece,
                    client.submit(piece_of, states[p], name, workers=[self.owner[p]], pure=False),
                    token,
                    p,
                    name,
                    workers=[hosts[p]],
                    allow_other_workers=False,
                    pure=False,
                )
                for p, name in filter(None, wave)
            ]
            with client.as_current():
                wait(written)
            client.gather(written)
        client.gather(
            [
                client.submit(
                    commit_backup,
                    token,
                    p,
                    workers=[hosts[p]],
                    allow_other_workers=False,
                    pure=False,
                )
                for p in hosts
            ]
        )
        return hosts

    # ------------------------------------------------------------------ recovery
    def _settled_alive(self) -> set:
        """Return _alive() once it has stayed the same for SETTLE_SECONDS (at most SETTLE_LIMIT s)."""
        alive, since = self._alive(), time.monotonic()
        deadline = since + SETTLE_LIMIT
        while time.monotonic() - since < SETTLE_SECONDS and time.monotonic() < deadline:
            time.sleep(0.05)
            now = self._alive()
            if now != alive:
                alive, since = now, time.monotonic()
        return alive

    def _recover(self, error):
        """Re-place the shards of dead workers on the survivors, their states as at the chunk's start."""
        alive = self._settled_alive()
        survivors = [a for a in self.workers if a in alive]
        if not survivors:
            raise ClusterError(f"no workers left after: {error}; {RESUME_HINT}") from error
        self.recoveries.append({"error": str(error), "survivors": len(survivors)})
        if self._origin is not None:  # failed in the first chunk: the client still has the start
            self.workers = survivors
            self._place(survivors)
            self._initial_states(*self._origin)
            return
        from cluster.snapshot import chunk_start, load_backup

        # the failed chunk stepped the survivors' states in place: each is taken back to the
        # chunk's start (its file), a dead host's shards come from their buddies' files
        client, token, chunk = self.client, self.snapshot_token, self.chunk_first
        states, lost = {}, []
        for p, fut in self.state_futures.items():
            if self.owner[p] in alive:
                states[p] = client.submit(
                    chunk_start, fut, token, chunk, workers=[self.owner[p]], pure=False
                )
            elif p in self.backups and self.backups[p] in alive:
                states[p] = client.submit(
                    load_backup, token, p, workers=[self.backups[p]], pure=False
                )
            else:
                lost.append(p)
        holder = next((a for a in self.used if a in alive), None)
        if lost or holder is None:
            dead = sorted(
                {self.owner[p] for p in lost} | {self.backups[p] for p in lost if p in self.backups}
            )
            what = (
                f"shards {', '.join(map(str, sorted(lost)))} were lost with their hosts and backups "
                f"({', '.join(dead)})"
                if lost
                else "every copy of the replicated state was lost"
            )
            raise ClusterError(f"{what}; {RESUME_HINT}") from error
        commons = self.common_futures
        self.workers = survivors
        self._place(survivors)
        self.state_futures = states
        # one CommonState per worker (each steps its own in place): a worker new to the chunk gets a
        # copy of the holder's; the decisions are those of the last chunk's summaries
        decided = self.decisions.get(holder) or next(iter(self.decisions.values()))
        self.common_futures = {}
        for a in self.used:
            source = a if a in commons else holder
            self.common_futures[a] = client.submit(
                chunk_start,
                commons[source],
                token,
                chunk,
                self.decisions.get(source, decided),
                source != a,
                workers=[source],
                pure=False,
            )

    # ------------------------------------------------------------------ the run
    def _start(self, stepper, stop, x0, random_state, resume, trace):
        """Return (full vectors, stepper, stop, time used, cycles done, started) of a new or resumed run."""
        if resume is not None:
            arrays, meta = ckpt.load(resume, self.fingerprint())
            for row in meta["trace"]:
                trace.append(*row)
            full = {k: v for k, v in arrays.items() if not k.startswith("saved_")}
            full["saved"] = {
                k[len("saved_") :]: v for k, v in arrays.items() if k.startswith("saved_")
            }
            saved_stop = meta["stop"]  # its state carries over; the limits are this call's
            for name in (
                "best_heldout",
                "best_epoch",
                "new_best",
                "without_gain",
                "previous_objective",
            ):
                setattr(stop, name, getattr(saved_stop, name))
            return full, meta["stepper"], stop, meta["time_used"], meta["cycles_done"], True
        self.random_state = random_state
        if x0 is None and getattr(self.layout, "builds_start", False):
            return None, stepper, stop, 0.0, 0, False
        n, M = self.problem.n_params, self.memory_size
        x = (
            self.problem.initial_point(steps.engine_rngs(random_state)[0])
            if x0 is None
            else np.array(x0, dtype=np.float64, copy=True)
        )
        full = {
            "x": x,
            "S": np.zeros((M, n)),
            "Y": np.zeros((M, n)),
            "x_start": np.zeros(n),
            "g_start": np.zeros(n),
            "saved": {},
        }
        return full, stepper, stop, 0.0, 0, False

    def _run_chunk(self, epochs, chunk_index, on_chunk):
        """Run one chunk to completion (rerunning it on the survivors after a loss); return the summaries."""
        while True:
            shared = self._can_share()
            plan = ChunkPlan(
                run_id=uuid.uuid4().hex[:12],
                workers=list(self.used),
                owner=dict(self.owner),
                epochs=epochs,
                config=self.layout.config,
                timeout=self.peer_timeout,
                shared=shared,
                v_holders=None if shared else self._v_holders(),
                secret=secrets.token_bytes(32),
                snapshot=self.snapshot_token if len(self.used) > 1 else "",
            )
            self.shared_used = self.shared_used or plan.shared
            self.owned_used = self.owned_used or plan.v_holders is not None
            self.chunk_first = epochs.start  # names the chunk-start files (cluster.snapshot)
            futures = self._submit_chunk(plan)
            if on_chunk is not None:
                on_chunk(
                    {
                        "chunk": chunk_index,
                        "first_cycle": epochs.start,
                        "workers": list(self.used),
                        "client": self.client,
                        "futures": futures,
                    }
                )
            try:
                self._watch(futures, plan)
                return self._collect(futures)
            except PeerLost as error:
                self.failures.before_rerun(error, epochs.start, RESUME_HINT)
                if not self.quiet:
                    print(
                        f"hamsi: {error}; rerunning the chunk on the survivors",
                        file=sys.stderr,
                        flush=True,
                    )
                self._recover(error)
            except BaseException:  # KeyboardInterrupt: stop the workers' tasks, then let it through
                # released, not cancelled: cancelling a chunk whose results' tasks the interrupt
                # just released trips the scheduler (an AssertionError traceback before the line)
                self._abort(futures, plan, self.used, cancel=False)
                raise

    def optimize(
        self,
        stepper,
        stop,
        *,
        x0,
        random_state,
        chunk_epochs,
        checkpoint,
        checkpoint_every,
        resume,
        callback,
        on_chunk,
    ):
        """Run chunks until a stop rule fires; return the OptimizeResult (see finish_result)."""
        trace, phases, worker_phases, worker_bytes = Trace(), PhaseTimes(), {}, {}
        full, stepper, stop, time_used, cycles_done, started = self._start(
            stepper, stop, x0, random_state, resume, trace
        )
        self._place(self.workers)
        self._origin = (
            full,
            stepper,
            stop,
            time_used,
            cycles_done,
            started,
        )  # the first chunk's snapshot
        self._initial_states(*self._origin)
        reason, message, lead = None, "", None
        if stop.max_epochs is not None and cycles_done >= stop.max_epochs:
            reason, message = "epoch_limit", f"reached max_epochs = {stop.max_epochs}"
        wall_start = time.perf_counter()
        for chunk_index in itertools.count():
            if reason is not None:
                break
            last = cycles_done + max(1, int(chunk_epochs))
            if stop.max_epochs is not None:
                last = min(last, stop.max_epochs)
            if checkpoint and checkpoint_every:
                last = min(last, (cycles_done // checkpoint_every + 1) * checkpoint_every)
            summaries = self._run_chunk(range(cycles_done + 1, last + 1), chunk_index, on_chunk)
            lead = summaries[self.used[0]]
            for row in lead["records"]:
                trace.append(*row)
                if callback is not None:
                    callback(dict(zip(ROW_NAMES, row)))
            self._add_phases(phases, worker_phases, summaries)
            for addr, summary in summaries.items():
                worker_bytes[addr] = worker_bytes.get(addr, 0) + summary["bytes_sent"]
            stepper, stop, reason, message = (
                lead["stepper"],
                lead["stop"],
                lead["reason"],
                lead["message"],
            )
            cycles_done = lead["cycles_done"]
            time_used = max(s["time_used"] for s in summaries.values())
            if (
                checkpoint
                and checkpoint_every
                and (cycles_done % checkpoint_every == 0 or reason is not None)
            ):
                self._save(checkpoint, trace, stepper, stop, time_used, cycles_done)
        x = self.layout.join(*self._gather(with_memory=False))["x"]
        wall = time.perf_counter() - wall_start
        self.release()
        result = finish_result(
            x,
            reason,
            message,
            trace,
            phases,
            stepper,
            stop,
            cycles_done,
            shard_bounds=self.bounds,
            exchange_time=phases.exchange + phases.wait,
            worker_phases=worker_phases,
            wall_time=wall,
            workers=list(self.used),
            shard_owner=dict(self.owner),
            recoveries=list(self.recoveries),
            shared_memory=self.shared_used,
            owned_v=self.owned_used,
            worker_bytes_sent=worker_bytes,
        )
        result.time = max(time_used, phases.total)
        return result

    @staticmethod
    def _add_phases(phases, worker_phases, summaries):
        """Add the lead's phases to the run's and every worker's to its own (load balance diagnostics)."""
        lead = next(iter(summaries.values()))
        for key, value in lead["phases"].items():
            setattr(phases, key, getattr(phases, key) + value)
        for addr, summary in summaries.items():
            mine = worker_phases.setdefault(addr, dict.fromkeys(summary["phases"], 0.0))
            for key, value in summary["phases"].items():
                mine[key] += value

    def _save(self, directory, trace, stepper, stop, time_used, cycles_done):
        full = self.layout.join(*self._gather(with_memory=True))
        arrays = {k: v for k, v in full.items() if k != "saved"}
        arrays.update({f"saved_{k}": v for k, v in full["saved"].items()})
        ckpt.save(
            directory,
            arrays=arrays,
            meta={
                "trace": list(trace.rows),
                "stepper": stepper,
                "stop": stop,
                "time_used": time_used,
                "cycles_done": cycles_done,
            },
            fingerprint=self.fingerprint(),
        )

    def fingerprint(self) -> dict:
        """Return what a checkpoint must match to be resumed: data, cover and constants."""
        p = self.problem
        out = {
            "problem": type(p).__name__,
            "n_params": int(p.n_params),
            "n_functions": int(p.n_functions),
            "scheme": getattr(self.partition, "scheme", None),
            "n_shards": int(self.bounds.size - 1),
            "n_subsets": int(self.layout_k),
            "memory": self.memory_size,
            **self.fingerprint_extra,
        }
        if isinstance(p, MatrixFactorization):
            out["ratings_checksum"] = float(
                np.sum(p.vals * (1.0 + p.rows % 7) * (1.0 + p.cols % 11))
            )
        return out

    def _gather(self, with_memory: bool):
        """Return (shard states in shard order, the lead's CommonState), whole or factors only.

        Only at checkpoints and at the end; without with_memory just x travels (small tasks on the
        hosts pick it out of their states), not the 2M memory rows.
        """
        client, lead = self.client, self.used[0]
        pick = _state_whole if with_memory else _state_vector
        futures = [
            client.submit(pick, self.state_futures[p], workers=[self.owner[p]], pure=False)
            for p in range(self.layout.n_shards)
        ]
        futures.append(client.submit(pick, self.common_futures[lead], workers=[lead], pure=False))
        parts = client.gather(futures)
        return parts[:-1], parts[-1]

    def release(self):
        """Drop every future of the run (the workers free the shards) and the chunk-start files."""
        from cluster.snapshot import remove

        self.state_futures = self.common_futures = self.backups = self.data_futures = {}
        # the workers of the last chunk, which just answered (a stopped one would never reply)
        self.client.run(remove, self.snapshot_token, workers=list(self.used), on_error="ignore")


def _with_decisions(common, decisions: dict):
    """Return the CommonState with the run's decisions (stepper, stop rules, clocks) set."""
    for name, value in decisions.items():
        setattr(common, name, value)
    return common


def _state_whole(state):
    """Return the state unchanged (a checkpoint needs everything)."""
    return state


def _state_vector(state):
    """Return the state's vector only (U of a shard, x_rep of the replicated part): what the result needs."""
    from types import SimpleNamespace

    if hasattr(state, "U"):
        return SimpleNamespace(U=state.U)
    return SimpleNamespace(x_rep=state.x_rep)


def _summary(result: dict) -> dict:
    """Return the small part of a chunk result: records, phases, decisions, reason, counters."""
    common = result["common"]
    return {
        "records": result["records"],
        "phases": result["phases"],
        "stepper": common.stepper,
        "stop": common.stop,
        "reason": result["reason"],
        "message": result["message"],
        "cycles_done": common.cycles_done,
        "time_used": common.time_used,
        "worker": result["worker"],
        "bytes_sent": result["bytes_sent"],
    }
