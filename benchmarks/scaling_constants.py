"""The scaling model's constants measured here: block gradient tables, vector kernels, link rounds.

Micro benchmarks behind benchmarks/bench_scaling.py's model (benchmarks/scaling_model.py): each
times the engine's own code in this process or on a worker, CPU seconds of the thread, medians
of interleaved repeats. Never fitted to the scaling points they predict.
"""

from __future__ import annotations

import os
import time

import numpy as np
import round_costs
from scaling_model import Constants

import partition
from cluster.connect import connect, worker_addresses
from cluster.placement import split_by_row_shard
from hamsi import kernels
from hamsi.data.synth import make_ratings
from hamsi.problems import MatrixFactorization
from partition.strata import balanced_bounds, balanced_bounds_of_counts, stratify

MEMORY = 5
HOSTS = (1, 2, 4, 8, 16, 32, 64)


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
    from cluster.link_frames import encode_record
    from cluster.messages import ShardPartials, partials_record, record_layout

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
            len(encode_record(partials_record(record_layout(shards), 1, False, 0.0, shards)))
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
