"""Strong scaling of the Dask engine here, a cost model checked against it, and its ml-20m-like extrapolation.

One run prints:
1. the goal: 1 -> 2 workers on ml-1m-like, rank 50, STRATA-B with B = 2 on both (the same cover,
   so the same steps: checked bitwise), --repeats runs alternating, best and median, load average;
2. the points: W = 1, 2, 4, 8 worker processes, STRATA-B with B = W, V in shared memory and on the
   message path, replicated and owned: ms per inner iteration (after cycle 1; best of
   --point-repeats), the lead worker's compute / exchange / wait, the bytes all workers' links
   wrote per inner iteration (result.worker_bytes_sent), the CPU share the HAMSI task's thread
   got (this machine is shared),
   and the iterates compared bitwise with the in-process engine on the same cover. Points with
   more workers than cores measure time slicing, not scaling: their bytes and rounds are checked,
   their times are marked;
3. the blocks: every block's gradient timed alone, the wait on the slowest block of each subset,
   and a least-squares fit of block time = a ratings + b rows + c items;
4. the model (benchmarks/scaling_model.py): constants measured here by micro benchmarks (the
   round's CPU by benchmarks/round_costs.py on the engine's own round code), medians of
   --constant-repeats interleaved repeats, never fitted to the points, its prediction beside
   every point with the relative error, for an idle machine and at the CPU share the run got;
5. the extrapolation: ml-20m-like on 1..64 hosts (one worker each) over a stated network, seconds
   per cycle and speed-up (of the median constants, and paired: the median of each repeat's
   own), for today's replicated V and for owned V; the spread over the repeats; the anchors.

    python benchmarks/bench_scaling.py [--epochs 20] [--repeats 3] [--point-repeats 2]
                                       [--workers 1 2 4 8] [--skip-goal | --goal-only] [--skip-points]
                                       [--block-data long-tail-like ml-20m-like] [--constant-repeats 11]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import round_costs
from scaling_model import Constants, Network, predict_point, project_hosts
from scipy.optimize import nnls

import partition
from cluster.connect import connect, worker_addresses
from cluster.driver import fit_distributed
from cluster.placement import split_by_row_shard
from hamsi import kernels
from hamsi.data.synth import make_ratings
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization
from partition.strata import balanced_bounds, balanced_bounds_of_counts, stratify

GOAL = 1.7
MEMORY = 5
HOSTS = (1, 2, 4, 8, 16, 32, 64)
NETWORK = Network(bits_per_second=25e9, rtt=50e-6)
ANCHORS = (
    (
        "DSGD (Gemulla, Nijkamp, Haas, Sismanis, KDD 2011, 'Large-scale matrix factorization with distributed "
        "stochastic gradient descent')",
        "Netflix strong scaling: no figure read here (the stored pages give the "
        "abstract only); not quoted",
    ),
    (
        "NOMAD (Yun, Yu, Hsieh, Vishwanathan, Dhillon, VLDB 2014, 'NOMAD: Non-locking, stOchastic Multi-machine "
        "algorithm for Asynchronous and Decentralized matrix completion')",
        "Netflix / Yahoo! Music scaling over "
        "machines: no figure read here (abstract only); not quoted",
    ),
    (
        "Spark MLlib ALS (Das, Upadhyaya, Meng, Talwalkar, CIKM 2017, 'Collaborative Filtering as a Case-Study for "
        "Model Parallelism on Bulk Synchronous Systems'; Databricks blog 2014-07-23 'Scalable Collaborative "
        "Filtering with Spark MLlib')",
        "no ML-20M/Netflix strong-scaling number read here; not quoted",
    ),
)


def ms_per_inner(trace) -> float:
    """Return milliseconds per inner iteration between the end of cycle 1 and the last cycle."""
    time_s, inner = trace.column("time_s"), trace.column("inner")
    return 1e3 * (time_s[-1] - time_s[1]) / (inner[-1] - inner[1])


def lead_split(result) -> dict:
    """Return the lead worker's compute / exchange / wait in ms per inner iteration (whole run)."""
    phases = result.worker_phases[result.workers[0]]
    compute = sum(v for k, v in phases.items() if k not in ("exchange", "wait"))
    return {
        "compute": 1e3 * compute / result.nit,
        "exchange": 1e3 * phases["exchange"] / result.nit,
        "wait": 1e3 * phases["wait"] / result.nit,
    }


def median_cpu(fn, repeat: int = 3) -> float:
    """Return the median CPU time of `repeat` calls of fn (after one untimed call).

    The micro benchmarks run one thread, so its CPU time is their cost without the time slices
    other processes of this shared machine take (their share of cache and memory bandwidth stays).
    """
    fn()
    times = []
    for _ in range(repeat):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return float(np.median(times))


# ---------------------------------------------------------------------------------------- CPU probes
def thread_cpu(dask_worker=None) -> dict:
    """On a worker: {thread id: CPU seconds so far} of its threads (the HAMSI task runs in one of them)."""
    import threading

    out = {}
    for thread in threading.enumerate():
        try:
            out[thread.ident] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, AttributeError):  # a thread that ended meanwhile
            pass
    return out


def busiest_thread(before: dict, after: dict) -> float:
    """Return the largest CPU seconds one thread used between two `thread_cpu` readings."""
    return max((t - before.get(ident, 0.0) for ident, t in after.items()), default=0.0)


# ---------------------------------------------------------------------------------------- runs
PATHS = {
    "shared": dict(shared_memory=True, owned_v=False),
    "replicated": dict(shared_memory=False, owned_v=False),
    "owned": dict(shared_memory=False, owned_v=True),
}


def path_used(result) -> str:
    """Return where V lived in a run: "shared", "owned" or "replicated" (also for one worker)."""
    return "shared" if result.shared_memory else "owned" if result.owned_v else "replicated"


def run_point(client, ratings, part, args, path=None) -> dict:
    """Return one Dask run's ms per inner iteration, lead split, bytes per inner iteration and x.

    path: a key of PATHS, or None for the engine's default choice. Bytes: what the workers' links
    wrote (result.worker_bytes_sent, counted in cluster.links as the frames are written).
    """
    before = client.run(thread_cpu)
    result = fit_distributed(
        ratings,
        rank=args.rank,
        partition=part,
        random_state=1,
        max_cycles=args.epochs,
        client=client,
        chunk_cycles=args.epochs,
        **PATHS.get(path, {}),
    )
    cpu = {w: busiest_thread(before[w], after) for w, after in client.run(thread_cpu).items()}
    sent = sum(result.worker_bytes_sent.values())
    cycles = len(result.trace.column("inner")) - 1  # the trace's first row is the start
    return {
        "ms": ms_per_inner(result.trace),
        "split": lead_split(result),
        "bytes": sent / result.nit,
        "pair_share": result.pairs_accepted / cycles,
        "x": result.x,
        "path": path_used(result),
        "nit": result.nit,
        "load": os.getloadavg()[0],
        "cpu_share": min(cpu.values()) / result.time,
    }


def goal_runs(ratings, args) -> dict:
    """Return ms per inner iteration of 1 and 2 workers on the same B = 2 cover, alternating runs."""
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    times, shares, same = {1: [], 2: []}, {1: [], 2: []}, True
    with (
        connect(n_workers=1, threads_per_worker=1, quiet=True) as one,
        connect(n_workers=2, threads_per_worker=1, quiet=True) as two,
    ):
        for _ in range(args.repeats):
            runs = {w: run_point(c, ratings, part, args) for w, c in ((1, one), (2, two))}
            same = same and bool(np.array_equal(runs[1]["x"], runs[2]["x"]))
            for w in (1, 2):
                times[w].append(runs[w]["ms"])
                shares[w].append(runs[w]["cpu_share"])
            split = runs[2]["split"]
    return {"times": times, "same": same, "split": split, "cpu_share": shares}


def point_runs(ratings, args) -> list:
    """Return the measured points: per W and V path, best ms, lead split, bytes, iterates vs in process."""
    rows = []
    for W in args.workers:
        part = partition.make("strata-b", ratings, blocks=W, seed=1)
        local = minimize_hamsi(
            MatrixFactorization(ratings, args.rank),
            part,
            random_state=1,
            max_cycles=args.epochs,
            threads=1,
        )
        with connect(n_workers=W, threads_per_worker=1, quiet=True) as client:
            for path in ("replicated",) if W == 1 else ("replicated", "owned", "shared"):
                runs = [
                    run_point(client, ratings, part, args, path) for _ in range(args.point_repeats)
                ]
                best = min(runs, key=lambda r: r["ms"])
                rows.append(
                    {
                        "W": W,
                        "path": best["path"],
                        "ms": best["ms"],
                        "pair_share": best["pair_share"],
                        "median": float(np.median([r["ms"] for r in runs])),
                        "split": best["split"],
                        "bytes": best["bytes"],
                        "load": best["load"],
                        "cpu_share": best["cpu_share"],
                        "same": all(np.array_equal(r["x"], local.x) for r in runs),
                    }
                )
    return rows


# ---------------------------------------------------------------------------------------- constants
def shard_datas(ratings, n_blocks: int, rank: int, part=None):
    """Return (ShardData per row shard of `part`, default STRATA-B with B = n_blocks; the partition)."""
    part = partition.make("strata-b", ratings, blocks=n_blocks, seed=1) if part is None else part
    problem = MatrixFactorization(ratings, rank)
    problem.arrange(part)
    return split_by_row_shard(problem, part.row_bounds), part


def block_table(ratings, n_blocks: int, rank: int, passes: int = 7, part=None) -> dict:
    """Return every block's gradient seconds (alone, engine order) and its ratings, rows and items touched.

    CPU time of this thread (see `median_cpu`); each pass times every block once and a block
    keeps its median pass, so a burst of another process's work spoils one pass, not one block.
    """
    datas, part = shard_datas(ratings, n_blocks, rank, part)
    rng = np.random.default_rng(0)
    V = 0.1 * rng.standard_normal((part.shape[1], rank))
    gV, empty = np.zeros_like(V), np.zeros(0)
    shape = (n_blocks, n_blocks)
    seconds, counts, rows, items = (
        np.zeros((passes, *shape)),
        np.zeros(shape),
        np.zeros(shape),
        np.zeros(shape),
    )
    factors = [0.1 * rng.standard_normal((d.row_hi - d.row_lo, rank)) for d in datas]
    for pass_ in range(passes):
        for d, U in zip(datas, factors):
            gU = np.zeros_like(U)
            for k in range(n_blocks):
                q = (d.shard + k) % n_blocks
                r, c, v = d.rows[k], d.cols[k], d.vals[k]
                start = time.thread_time()
                kernels.mf_block_gradient(
                    r, c, v, U, V, gU, gV, rank, 1.0 / ratings.nnz, 0.0, empty, empty
                )
                seconds[pass_, d.shard, q] = time.thread_time() - start
                counts[d.shard, q], rows[d.shard, q], items[d.shard, q] = (
                    v.size,
                    np.unique(r).size,
                    np.unique(c).size,
                )
    return {"seconds": np.median(seconds, axis=0), "ratings": counts, "rows": rows, "items": items}


def cost_balanced(ratings, n_blocks: int, touch_rows: float, touch_items: float):
    """Return STRATA with intervals balanced by cost: ratings + touch_rows per user + touch_items per item rated.

    The item 3 candidate (a block's time ~ a ratings + b rows + c items): each row or item that
    has ratings weighs b / a or c / a ratings more when the intervals are cut (balanced_bounds_of_counts
    on the weights in thousandths of a rating).
    """
    m, n = ratings.shape
    bounds = []
    for index, length, touch in ((ratings.rows, m, touch_rows), (ratings.cols, n, touch_items)):
        counts = np.bincount(index, minlength=length)
        bounds.append(
            balanced_bounds_of_counts(
                np.round(1000 * (counts + touch * (counts > 0))).astype(np.int64), n_blocks
            )
        )
    return stratify(
        np.asarray(ratings.rows),
        np.asarray(ratings.cols),
        ratings.shape,
        bounds[0],
        bounds[1],
        "strata-cost",
        1,
    )


def slowest_over_mean(table: dict) -> float:
    """Return the mean over subsets of the slowest block's time / the mean block's (1: no wait)."""
    t, W = table["seconds"], table["seconds"].shape[0]
    return float(
        np.mean(
            [
                max(t[p, (p + k) % W] for p in range(W))
                / np.mean([t[p, (p + k) % W] for p in range(W)])
                for k in range(W)
            ]
        )
    )


def print_cost_balanced(name: str, rank: int, fit: np.ndarray, workers) -> None:
    """Item 3: does cutting the intervals by fitted cost instead of ratings shorten the wait? (alternating runs)"""
    ratings = make_ratings(name, seed=1)
    touch_rows, touch_items = fit[1] / fit[0], fit[2] / fit[0]
    print(
        f"  {name}, intervals cut by cost (a row weighs {touch_rows:.2f} ratings, an item {touch_items:.2f}) vs "
        f"STRATA-B: slowest / mean block per subset, two alternating measurements each"
    )
    for W in workers:
        if W == 1:
            continue
        covers = {
            "strata-b": partition.make("strata-b", ratings, blocks=W, seed=1),
            "by cost": cost_balanced(ratings, W, touch_rows, touch_items),
        }
        seen = {label: [] for label in covers}
        for _ in range(2):
            for label, cover in covers.items():
                seen[label].append(slowest_over_mean(block_table(ratings, W, rank, part=cover)))
        print(
            f"    W = {W}: "
            + "; ".join(
                f"{label} {', '.join(f'{v:.3f}' for v in values)}" for label, values in seen.items()
            )
        )


def vector_costs(size: int, memory: int = MEMORY) -> tuple[float, float, float, float]:
    """Return seconds per parameter of (W'g and norms, a pair iteration's partials, the L-BFGS step, gV assembly)."""
    rng = np.random.default_rng(0)
    x, x_start, g, g_start = (rng.standard_normal(size) for _ in range(4))
    S, Y = kernels.as_memory_rows(
        rng.standard_normal((memory, size)), rng.standard_normal((memory, size))
    )
    s_new, y_new = np.zeros((1, size)), np.zeros((1, size))
    pair, new_pair_g, gram = np.empty(2 * memory + 2), np.empty(2), np.empty(2 * memory + 1)
    wtg, norms, coef = np.empty(2 * memory), np.empty(2), 1e-3 * rng.standard_normal(2 * memory)

    def partials(with_pair: bool):
        kernels.shard_iteration_partials(
            x,
            x_start,
            g,
            g_start,
            S,
            Y,
            s_new,
            y_new,
            with_pair,
            with_pair,
            True,
            True,
            pair,
            new_pair_g,
            gram,
            wtg,
            norms,
        )

    plain, paired = median_cpu(lambda: partials(False)), median_cpu(lambda: partials(True))
    step = median_cpu(lambda: kernels.shard_lbfgs_step(x, g, S, Y, coef, 1.0, 1e-9))
    rows = rng.standard_normal(size)

    def assemble():
        g[:] = 0.0
        g[:] += rows

    return plain / size, paired / size, step / size, median_cpu(assemble) / size


def link_round(peer: str, run: str, size: int, rounds: int, secret: bytes) -> tuple[float, float]:
    """Task: `rounds` rounds of a Message of `size` bytes with `peer` over the direct links.

    Returns (wall seconds, this thread's CPU seconds) per round: the CPU is what a message costs
    the worker (encode, send, receive, decode); the rest of the wall time is the wake-up latency.
    """
    from cluster.links import FrameLimit
    from cluster.mailbox import local_mailbox
    from cluster.messages import GradientPart, Message

    box = local_mailbox()
    message = Message(
        0, "bench", gradient=[GradientPart(0, (0, max(size // 8, 1)), np.ones(max(size // 8, 1)))]
    )
    # the frame also carries the message's small index arrays (80 bytes for an 8-byte payload)
    box.start(run, [peer], 30.0, secret, FrameLimit(max_array_bytes=max(size, 4096) + 64))
    box.round(run, -1, [peer], message, 30.0)
    start, cpu = time.perf_counter(), time.thread_time()
    for step in range(rounds):
        box.round(run, step, [peer], message, 30.0)
    seconds, cpu = (time.perf_counter() - start) / rounds, (time.thread_time() - cpu) / rounds
    box.forget(run)
    return seconds, cpu


def time_block(rows, cols, vals, U, V, repeat: int) -> float:
    """Task: the median seconds of one block gradient (co-run check)."""
    from hamsi import kernels as k

    gU, gV, empty = np.zeros_like(U), np.zeros_like(V), np.zeros(0)
    times = []
    for _ in range(repeat):
        start = time.thread_time()
        k.mf_block_gradient(rows, cols, vals, U, V, gU, gV, U.shape[1], 1e-6, 0.0, empty, empty)
        times.append(time.thread_time() - start)
    return float(np.median(times[2:]))


def message_costs(client) -> dict:
    """Return a round's wake-up latency with one peer between two Dask workers: wall minus CPU of an 8-byte round.

    The median of three runs of 400 rounds (the machine is shared). The CPU a round costs is
    measured in one process instead (round_costs.py), where other processes' slices do not count.
    """
    import secrets

    from cluster.mailbox import install

    install(client)
    a, b = worker_addresses(client, minimum=2)[:2]
    runs = []
    for repeat in range(3):
        run, secret = f"bench-scaling-{repeat}-{os.getpid()}", secrets.token_bytes(32)
        futures = [
            client.submit(
                link_round,
                peer,
                run,
                8,
                400,
                secret,
                workers=[me],
                pure=False,
                allow_other_workers=False,
            )
            for me, peer in ((a, b), (b, a))
        ]
        wall, cpu = max(client.gather(futures))
        runs.append((wall - cpu, wall, cpu))
    latency, wall, cpu = sorted(runs)[1]
    return {"latency": max(latency, 0.0), "raw": {8: (wall, cpu)}}


def frame_sizes(memory: int = MEMORY) -> tuple[float, float]:
    """Return the bytes of one frame of two shards' partials: an ordinary inner iteration, a pair iteration."""
    from cluster.links import encode
    from cluster.messages import Message, ShardPartials

    def frame(pair: bool) -> float:
        shards = []
        for shard in (0, 1):
            p = ShardPartials(shard)
            p.wtg, p.norms = np.zeros(2 * memory), np.zeros(2)
            if pair:
                p.pair, p.new_pair_g, p.gram = (
                    np.zeros(2 * memory + 2),
                    np.zeros(2),
                    np.zeros(2 * memory + 1),
                )
            shards.append(p)
        return float(
            sum(
                len(b) if isinstance(b, bytes) else b.nbytes
                for b in encode(Message(1, "tcp://127.0.0.1:40000", shards=shards))
            )
        )

    return frame(False), frame(True)


def corun_factor(client, datas, part, rank: int) -> float:
    """Return (one block's gradient on two workers at once) / (alone): the cores' shared cache and bandwidth."""
    a, b = worker_addresses(client, minimum=2)[:2]
    rng = np.random.default_rng(0)
    d = datas[0]
    U = 0.1 * rng.standard_normal((d.row_hi - d.row_lo, rank))
    V = 0.1 * rng.standard_normal((part.shape[1], rank))
    args = (d.rows[0], d.cols[0], d.vals[0], U, V, 40)
    alone = client.submit(time_block, *args, workers=[a], pure=False).result()
    both = client.gather(
        [client.submit(time_block, *args, workers=[w], pure=False) for w in (a, b)]
    )
    return float(np.mean(both) / alone)


def measure_constants(ratings, args, ml20m: dict) -> tuple[Constants, dict, dict, dict]:
    """Return the model's constants, the block tables per W, the raw link timings and the spreads.

    The constants that set the extrapolation are sampled in turn, --constant-repeats times: each
    repeat times the vector kernels at every size, the evaluation, a round at every peer count,
    the per-byte rounds and one pass over ml-20m-like's blocks (`ml20m_pass`). The model takes
    each one's median, so a slow spell of this shared machine, which slows every constant of its
    repeat alike, is dropped whole. spreads: every repeat's own constants (`repeat_constants`).
    """
    tables = {W: block_table(ratings, W, args.rank) for W in args.workers}
    sizes = np.array([15_000, 40_000, 100_000, 200_000, 300_000, 700_000, 1_400_000])
    datas, part = shard_datas(ratings, 1, args.rank)
    d = datas[0]
    rng = np.random.default_rng(0)
    U, V = (
        0.1 * rng.standard_normal((part.shape[0], args.rank)),
        0.1 * rng.standard_normal((part.shape[1], args.rank)),
    )
    repeats = []
    for _ in range(args.constant_repeats):
        repeats.append(
            {
                "vector": np.array([vector_costs(int(s)) for s in sizes]),
                "eval": median_cpu(
                    lambda: kernels.mf_squared_error(
                        d.rows[0], d.cols[0], d.vals[0], U, V, args.rank, 0.0
                    )
                )
                / d.vals[0].size,
                "round": {P: round_costs.round_sample(P) for P in round_costs.PEERS},
                "byte": {z: round_costs.byte_sample(z) for z in round_costs.BYTE_SIZES},
                "ml20m": ml20m_pass(ml20m["blocks"], args.rank),
            }
        )
    datas2, part2 = shard_datas(ratings, 2, args.rank)
    with connect(n_workers=2, threads_per_worker=1, quiet=True) as client:
        links = message_costs(client)
        corun = corun_factor(client, datas2, part2, args.rank)
    common = dict(
        blocks={W: t["seconds"] for W, t in tables.items()},
        sizes=sizes,
        latency=links["latency"],
        frame=frame_sizes(),
        corun=corun,
        cores=os.cpu_count() or 1,
    )
    median = medians(repeats)
    constants, per_rating = repeat_constants(median, common)
    links.update(round=median["round"], byte=median["byte"])
    links["fit"] = round_costs.fit_round(median["round"])
    spreads = [repeat_constants(r, common) for r in repeats]
    return constants, tables, links, {"per_rating": per_rating, "repeats": spreads}


def medians(repeats: list) -> dict:
    """Return the median of every sampled constant over the repeats (measure_constants)."""
    return {
        "vector": np.median([r["vector"] for r in repeats], axis=0),
        "eval": float(np.median([r["eval"] for r in repeats])),
        "round": {P: float(np.median([r["round"][P] for r in repeats])) for P in round_costs.PEERS},
        "byte": {
            z: float(np.median([r["byte"][z] for r in repeats])) for z in round_costs.BYTE_SIZES
        },
        "ml20m": {H: tuple(np.median([r["ml20m"][H] for r in repeats], axis=0)) for H in HOSTS},
    }


def repeat_constants(sample: dict, common: dict) -> tuple[Constants, dict]:
    """Return the Constants and ml-20m-like per-rating costs of one repeat's samples (or of their medians)."""
    fixed, message, _ = round_costs.fit_round(sample["round"])
    constants = Constants(
        partials=sample["vector"][:, 0],
        pair=sample["vector"][:, 1],
        step=sample["vector"][:, 2],
        assemble=sample["vector"][:, 3],
        eval_rating=sample["eval"],
        message=message,
        round_fixed=fixed,
        byte=round_costs.per_byte(sample["byte"]),
        **common,
    )
    return constants, sample["ml20m"]


def ml20m_blocks(rank: int) -> dict:
    """Return ml-20m-like's block (0, 0) at every H (for `ml20m_pass`), the imbalance per H, its shape and nnz.

    Imbalance: mean over subsets of the largest block's ratings / the mean block's (STRATA-B at H).
    Block (0, 0) is kept to at most its first 4M ratings in engine order (rows ascending).
    """
    ratings = make_ratings("ml-20m-like", seed=1)
    rows, cols = np.asarray(ratings.rows), np.asarray(ratings.cols)
    m, n = ratings.shape
    imbalance, blocks = {}, {}
    rng = np.random.default_rng(0)
    for H in HOSTS:
        rb, cb = balanced_bounds(rows, m, H), balanced_bounds(cols, n, H)
        p_of, q_of = (
            np.searchsorted(rb, rows, side="right") - 1,
            np.searchsorted(cb, cols, side="right") - 1,
        )
        counts = np.bincount(p_of * H + q_of, minlength=H * H).reshape(H, H)
        imbalance[H] = float(
            np.mean([max(counts[p, (p + k) % H] for p in range(H)) for k in range(H)])
            / (ratings.nnz / H**2)
        )
        take = np.flatnonzero((p_of == 0) & (q_of == 0))[:4_000_000]
        U, V = (
            0.1 * rng.standard_normal((int(rb[1]), rank)),
            0.1 * rng.standard_normal((int(cb[1]), rank)),
        )
        blocks[H] = (
            rows[take].astype(np.int32),
            cols[take].astype(np.int32),
            np.asarray(ratings.values, dtype=np.float64)[take],
            U,
            V,
        )
    return {"blocks": blocks, "imbalance": imbalance, "shape": (m, n), "nnz": ratings.nnz}


def ml20m_pass(blocks: dict, rank: int) -> dict:
    """Return per H: (gradient, evaluation) CPU seconds per rating on block (0, 0), one timing each."""
    out = {}
    empty = np.zeros(0)
    for H, (r, c, v, U, V) in blocks.items():
        gU, gV = np.zeros_like(U), np.zeros_like(V)
        start = time.thread_time()
        kernels.mf_block_gradient(r, c, v, U, V, gU, gV, rank, 1e-8, 0.0, empty, empty)
        middle = time.thread_time()
        kernels.mf_squared_error(r, c, v, U, V, rank, 0.0)
        end = time.thread_time()
        out[H] = ((middle - start) / v.size, (end - middle) / v.size)
    return out


# ---------------------------------------------------------------------------------------- reports
def print_goal(goal: dict, args) -> None:
    one, two = np.array(goal["times"][1]), np.array(goal["times"][2])
    best, median = one.min() / two.min(), np.median(one) / np.median(two)
    s = goal["split"]
    print(
        f"\n1 -> 2 workers, ml-1m-like rank {args.rank}, STRATA-B B = 2 on both (same iterates: {goal['same']}), "
        f"{args.epochs} cycles, {args.repeats} alternating runs; load average now {os.getloadavg()}"
    )
    print(
        f"  1 worker : best {one.min():7.2f} ms / inner iteration, median {np.median(one):7.2f}  (all: "
        f"{', '.join(f'{t:.1f}' for t in one)})"
    )
    print(
        f"  2 workers: best {two.min():7.2f} ms / inner iteration, median {np.median(two):7.2f}  (all: "
        f"{', '.join(f'{t:.1f}' for t in two)})"
    )
    print(
        f"  speed-up: best {best:.2f}x, median {median:.2f}x (goal >= {GOAL}: "
        f"{'met' if min(best, median) >= GOAL else 'NOT met'}); 2 workers' lead, last run: compute "
        f"{s['compute']:.2f} / exchange {s['exchange']:.2f} / wait {s['wait']:.2f} ms"
    )
    print(
        "  CPU the HAMSI task's thread got / the optimization time (~1: a core all along; less: other processes "
        "held the cores): 1 worker "
        + ", ".join(f"{v:.2f}" for v in goal["cpu_share"][1])
        + "; 2 workers (the less "
        "served) " + ", ".join(f"{v:.2f}" for v in goal["cpu_share"][2])
    )


def print_blocks(name: str, tables: dict) -> np.ndarray | None:
    """Item 3: the wait on the slowest block, and what a block's time follows (least squares)."""
    print(
        f"\nblocks of {name} (item 3): every block's gradient timed alone; the slowest block of a subset sets "
        f"the pace"
    )
    print(
        f"{'W':>3s} {'max/mean ratings':>17s} {'max/mean time':>14s} {'wait share':>11s} "
        f"{'ns/rating min..max':>19s}"
    )
    design, target = [], []
    for W, t in tables.items():
        if W == 1:
            continue
        sub = [[(p, (p + k) % W) for p in range(W)] for k in range(W)]
        by_count = np.mean(
            [max(t["ratings"][b] for b in s) / np.mean([t["ratings"][b] for b in s]) for s in sub]
        )
        by_time = np.mean(
            [max(t["seconds"][b] for b in s) / np.mean([t["seconds"][b] for b in s]) for s in sub]
        )
        per = 1e9 * t["seconds"] / np.maximum(t["ratings"], 1)
        print(
            f"{W:3d} {by_count:17.3f} {by_time:14.3f} {1 - 1 / by_time:11.1%} {per.min():9.1f}..{per.max():<9.1f}"
        )
        design += [np.column_stack([t["ratings"].ravel(), t["rows"].ravel(), t["items"].ravel()])]
        target += [t["seconds"].ravel()]
    if design:
        X, y = np.vstack(design), np.concatenate(target)
        coef, _ = nnls(X, y)  # non-negative: a row or an item touched cannot make a block cheaper
        residual = np.abs(X @ coef - y) / y
        only = np.linalg.lstsq(X[:, :1], y, rcond=None)[0]
        residual_only = np.abs(X[:, :1] @ only - y) / y
        print(
            f"  non-negative least squares over {y.size} blocks: time = {1e9 * coef[0]:.1f} ns x ratings + "
            f"{1e9 * coef[1]:.1f} ns x rows "
            f"+ {1e9 * coef[2]:.1f} ns x items; median |error| {np.median(residual):.1%} "
            f"(ratings alone, {1e9 * only[0]:.1f} ns each: {np.median(residual_only):.1%})"
        )
        print(
            "  wait share = 1 - mean/max: the share of the slowest block's time the others spend waiting"
        )
        return coef
    return None


def print_points(rows: list, constants: Constants, ratings, args) -> None:
    print(
        f"\nmeasured points, ml-1m-like rank {args.rank}, STRATA-B B = W, {args.epochs} cycles, best (median) of "
        f"{args.point_repeats}; model: constants measured by micro benchmarks (not fitted); this machine has "
        f"{constants.cores} cores; load average now {os.getloadavg()}"
    )
    print(
        f"{'W':>3s} {'V path':>10s} {'ms/inner':>16s} {'model':>7s} {'error':>7s} {'at CPU':>7s} {'error':>7s} "
        f"{'lead compute/exch/wait ms':>27s} "
        f"{'model grad/wait/upd/eval/exch':>31s} {'KB/inner':>9s} {'model KB':>9s} {'=in-proc':>8s} {'time':>11s} "
        f"{'load':>5s} {'CPU':>5s}"
    )
    for r in rows:
        p = predict_point(
            constants, r["W"], ratings.shape, ratings.nnz, args.rank, r["path"], r["pair_share"]
        )
        s = r["split"]
        error = p["inner"] * 1e3 / r["ms"] - 1
        at_cpu = (
            1e3 * p["unshared"] / r["cpu_share"]
        )  # the model's work, done at the CPU share this run got
        model_parts = "/".join(
            f"{1e3 * p[k]:.1f}" for k in ("gradient", "wait", "update", "evaluation", "exchange")
        )
        print(
            f"{r['W']:3d} {r['path']:>10s} {r['ms']:7.2f} ({r['median']:6.2f}) "
            f"{1e3 * p['inner']:7.2f} {error:+7.1%} {at_cpu:7.2f} {at_cpu / r['ms'] - 1:+7.1%} "
            f"{s['compute']:9.2f} /{s['exchange']:6.2f} /{s['wait']:6.2f}    "
            f"{model_parts:>31s} {r['bytes'] / 1e3:9.1f} {p['bytes'] / 1e3:9.1f} {str(r['same']):>8s} "
            f"{'meaningless' if p['meaningless'] else 'valid':>11s} {r['load']:5.1f} {r['cpu_share']:5.2f}"
        )
    per_peer = 8 * ratings.shape[1] * args.rank / 1e3
    print(
        f"  bytes per inner iteration (all workers): replicated (W - 1) n w 8 = (W - 1) x {per_peer:.1f} KB (every"
        f" worker's block of gV rows to every peer) + partials; owned (2K - 1 + (1 + 2a) (W - 1)) / (K + 1) x "
        f"{per_peer:.1f} KB (cluster.work.item_rows_per_iteration; a: the share of cycles that stored a pair) + "
        f"partials; shared memory: partials only"
    )
    print(
        "  model: an idle machine (x W / cores when W > cores); at CPU: the model's work (not sliced) divided by"
        " the CPU share the run's least served HAMSI thread got (column CPU), i.e. the model on the core time"
        " the run really had"
    )
    print(
        "  load: the 1-minute load average after the best run (this machine is shared; the model is of an idle one);"
        " CPU: the CPU seconds the least served worker's HAMSI thread got / the optimization time (~1: a core all"
        " along)"
    )
    print(
        "  'meaningless': more worker processes than cores, the time is the OS's time slicing (model: x W / cores);"
        " the bytes and the iterates still hold"
    )


def print_constants(c: Constants, links: dict, repeats: int) -> None:
    print(
        f"\nconstants, measured here (one thread's CPU time; medians of {repeats} interleaved repeats), ns per "
        f"parameter:"
    )
    print(f"{'params':>9s} {'partials':>9s} {'pair it.':>9s} {'step':>7s} {'assemble':>9s}")
    for size, a, e, b, d in zip(c.sizes, c.partials, c.pair, c.step, c.assemble):
        print(f"{int(size):9d} {1e9 * a:9.2f} {1e9 * e:9.2f} {1e9 * b:7.2f} {1e9 * d:9.2f}")
    wall, cpu = links["raw"][8]
    print(
        f"  evaluation {1e9 * c.eval_rating:.1f} ns/rating; two processes' gradient at once / alone {c.corun:.2f}; "
        f"a round's wake-up between two Dask workers {1e6 * c.latency:.0f} us (8-byte round, wall {1e6 * wall:.0f} / "
        f"CPU {1e6 * cpu:.0f} us); a frame of two shards' partials {c.frame[0]:.0f} B, {c.frame[1]:.0f} B with the "
        f"pair's"
    )
    fixed, message, residual = links["fit"]
    print(
        "  a round's CPU (cluster.link_round.exchange_round, TCP loopback, the owned-V inner iteration's messages; "
        "round_costs.py): "
        + ", ".join(f"{P} peers {1e6 * t:.0f} us" for P, t in links["round"].items())
        + f"; line: {1e6 * fixed:.0f} us + {1e6 * message:.1f} us per peer (largest residual {residual:.0%}); "
        f"{1e9 * c.byte:.3f} ns per byte sent and received (one V shard each way: "
        + ", ".join(f"{z // 1024} KiB {1e6 * t:.0f} us" for z, t in links["byte"].items())
        + ")"
    )


def speedups(c: Constants, per_rating: dict, ml20m: dict, rank: int, owned: bool) -> dict:
    """Return {H: seconds per pass on 1 host / on H} of the model (project_hosts)."""
    shape, nnz, imbalance = ml20m["shape"], ml20m["nnz"], ml20m["imbalance"]
    passes = {
        H: project_hosts(c, per_rating, imbalance, H, shape, nnz, rank, NETWORK, owned)["pass"]
        for H in HOSTS
    }
    return {H: passes[1] / passes[H] for H in HOSTS}


def print_spread(repeats: list, ml20m: dict, rank: int) -> None:
    """Every repeat's own constants and the owned-V speed-ups they give: how far one sample moves the output."""
    print(
        f"\nspread over the {len(repeats)} repeats (each repeat's own constants; the table above uses their medians):"
    )
    rows = {
        "round, us": [1e6 * c.round_fixed for c, _ in repeats],
        "per peer, us": [1e6 * c.message for c, _ in repeats],
        "per byte, ns": [1e9 * c.byte for c, _ in repeats],
        "step at 216k, ns": [1e9 * c.per_param("step", 216_000) for c, _ in repeats],
        "gradient H=1, ns": [1e9 * r[1][0] for _, r in repeats],
        "gradient H=32, ns": [1e9 * r[32][0] for _, r in repeats],
    }
    for H in (16, 32, 64):
        rows[f"owned V {H} hosts"] = [speedups(c, r, ml20m, rank, True)[H] for c, r in repeats]
    for name, values in rows.items():
        v = np.array(values)
        print(
            f"  {name:>18s}: median {np.median(v):8.2f}, min {v.min():8.2f}, max {v.max():8.2f} "
            f"(max / min {v.max() / v.min():.2f})"
        )


def paired_speedups(repeats: list, ml20m: dict, rank: int, owned: bool) -> dict:
    """Return {H: the median over repeats of the speed-up each repeat's own constants give}.

    Paired: a repeat's one-host and H-host costs were timed within seconds of each other, so a
    spell of contention that slows both cancels in their ratio, which the medians of the
    constants, taken apart, do not see.
    """
    each = [speedups(c, r, ml20m, rank, owned) for c, r in repeats]
    return {H: float(np.median([e[H] for e in each])) for H in HOSTS}


def print_projection(c: Constants, per_rating: dict, ml20m: dict, rank: int, repeats: list) -> None:
    (m, n), nnz, imbalance = ml20m["shape"], ml20m["nnz"], ml20m["imbalance"]
    shape = (m, n)
    print(
        f"\nextrapolation: ml-20m-like ({m} x {n}, {nnz} ratings), rank {rank}, one worker per host, "
        f"{NETWORK.bits_per_second / 1e9:g} Gbit/s, {1e6 * NETWORK.rtt:g} us RTT; a cycle is H + 1 inner "
        f"iterations (1 on one host), a pass over the ratings H; speed-up = seconds per pass on 1 host / on H hosts"
    )
    print(
        f"{'H':>3s} {'ns/rating':>9s} {'imbal':>6s} | {'replicated V: s/cycle':>21s} {'s/pass':>7s} {'speed-up':>8s} "
        f"{'paired':>7s} {'MB/inner':>9s} | {'owned V: s/cycle':>16s} {'s/pass':>7s} {'speed-up':>8s} "
        f"{'paired':>7s} {'MB/inner':>9s} "
        f"{'ms/inner: grad / V / round':>27s}"
    )
    base = {
        o: project_hosts(c, per_rating, imbalance, 1, shape, nnz, rank, NETWORK, o)["pass"]
        for o in (False, True)
    }
    paired = {o: paired_speedups(repeats, ml20m, rank, o) for o in (False, True)}
    for H in HOSTS:
        rep, own = (
            project_hosts(c, per_rating, imbalance, H, shape, nnz, rank, NETWORK, o)
            for o in (False, True)
        )
        parts = " / ".join(f"{1e3 * own[k]:.2f}" for k in ("gradient", "V", "round"))
        print(
            f"{H:3d} {1e9 * per_rating[H][0]:9.1f} {imbalance[H]:6.2f} | {rep['cycle']:21.3f} {rep['pass']:7.3f} "
            f"{base[False] / rep['pass']:7.2f}x {paired[False][H]:6.2f}x {rep['bytes_inner'] / 1e6:9.1f} | "
            f"{own['cycle']:16.3f} {own['pass']:7.3f} {base[False] / own['pass']:7.2f}x {paired[True][H]:6.2f}x "
            f"{own['bytes_inner'] / 1e6:9.1f} "
            f"{1e3 * own['inner']:6.2f}: {parts:>18s}"
        )
    print(
        "  speed-ups are over the 1-host pass of the same engine; bytes per inner iteration are the cluster's;"
        " ms/inner: owned V's inner iteration and its gradient, V steps and round (the rest: U_p's step and partials);"
        " paired: the median of the speed-ups each repeat's own constants give (paired_speedups)"
    )


def print_anchors() -> None:
    print(
        "\nanchors (published strong scaling; searched in the stored pages, numbers only where read):"
    )
    for name, what in ANCHORS:
        print(f"  - {name}: {what}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--epochs", type=int, default=8, help="cycles per run (the goal is stated at 20)"
    )
    parser.add_argument("--rank", type=int, default=50)
    parser.add_argument(
        "--repeats", type=int, default=3, help="alternating runs of the 1 -> 2 goal"
    )
    parser.add_argument("--point-repeats", type=int, default=2, help="runs per measured point")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument(
        "--block-data",
        nargs="*",
        default=["long-tail-like", "ml-20m-like"],
        help="more presets whose blocks are timed (item 3)",
    )
    parser.add_argument("--skip-goal", action="store_true")
    parser.add_argument("--goal-only", action="store_true", help="only the 1 -> 2 workers goal")
    parser.add_argument("--skip-points", action="store_true", help="no Dask runs at 1..8 workers")
    parser.add_argument(
        "--constant-repeats",
        type=int,
        default=11,
        help="interleaved samples of the model's constants (their medians are used)",
    )
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}; {os.cpu_count()} cores")
    ratings = make_ratings("ml-1m-like", seed=1)
    if not args.skip_goal:
        print_goal(goal_runs(ratings, args), args)
    if args.goal_only:
        return
    ml20m = ml20m_blocks(args.rank)
    constants, tables, links, spread = measure_constants(ratings, args, ml20m)
    print_blocks("ml-1m-like", tables)
    for name in args.block_data:
        fit = print_blocks(
            name,
            {
                W: block_table(make_ratings(name, seed=1), W, args.rank)
                for W in args.workers
                if W > 1
            },
        )
        if fit is not None and fit[0] > 0 and (fit[1] > 0 or fit[2] > 0):
            print_cost_balanced(name, args.rank, fit, args.workers)
    print_constants(constants, links, args.constant_repeats)
    if not args.skip_points:
        print_points(point_runs(ratings, args), constants, ratings, args)
    print_projection(constants, spread["per_rating"], ml20m, args.rank, spread["repeats"])
    print_spread(spread["repeats"], ml20m, args.rank)
    print_anchors()
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
