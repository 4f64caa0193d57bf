"""Strong scaling 1 -> 2 Dask workers on ml-1m-like, and a cost model projecting 8/16/64 workers on ml-20m-like.

Scaling: the same STRATA-B partition with B = 2 row shards runs on 1 worker (hosting both shards)
and on 2 workers; shards are the unit of every reduction, so both runs take identical steps and
only the time differs. Goal >= 1.7x; on a 2-core machine shared with the OS, the scheduler, the
client and (here) other users, the second core is not free, which the figure shows honestly.

Cost model (per inner iteration, W workers, B = K = W shards, STRATA-B, rank k, memory M):
    gradient   nnz / W^2 ratings x c_rating                  (one block per worker)
    U work     (m / W) k params x (c_wtg + c_step)           (W^T g partials and the step on U_p)
    V work     n k params x (c_wtg / W + c_step + c_copy)    (replicated V step and gV assembly; the
                                                             V_j partials are reduced by V_j's home)
    exchange   latency + (W - 1) (n / W) k 8 bytes / bandwidth   (gV block to every peer)
with c_* measured here per worker (one thread) and latency/bandwidth measured between two workers.
A pass over the data is K = W inner iterations (a HAMSI cycle adds one repeated subset).

    python benchmarks/bench_scaling.py [--epochs 6] [--skip-run]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import partition
from cluster.connect import connect, worker_addresses
from cluster.driver import fit_distributed
from hamsi import kernels
from hamsi.data.synth import PRESETS, make_ratings
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization

GOAL = 1.7
PROJECTED = (8, 16, 64)


def ms_per_inner(trace) -> float:
    time_s, inner = trace.column("time_s"), trace.column("inner")
    return 1e3 * (time_s[-1] - time_s[1]) / (inner[-1] - inner[1])


def kernel_rates(rank: int = 50, memory: int = 5, n_ratings: int = 500_000, n_params: int = 2_000_000) -> dict:
    """Return seconds per rating (gradient) and per parameter (W^T g partials, step, copy), one thread."""
    rng = np.random.default_rng(0)
    m, n = 6040, 3706
    U, V = rng.standard_normal((m, rank)), rng.standard_normal((n, rank))
    gU, gV = np.zeros_like(U), np.zeros_like(V)
    rows = np.sort(rng.integers(0, m, n_ratings)).astype(np.int32)
    cols = rng.integers(0, n, n_ratings).astype(np.int32)
    vals = rng.integers(1, 6, n_ratings).astype(np.float64)
    x, g = rng.standard_normal(n_params), rng.standard_normal(n_params)
    S, Y = rng.standard_normal((memory, n_params)), rng.standard_normal((memory, n_params))
    out, coef = np.zeros(2 * memory), rng.standard_normal(2 * memory)

    def best(fn, repeat=5):
        fn()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    empty = np.zeros(0)
    return {
        "rating": best(lambda: kernels.mf_block_gradient(rows, cols, vals, U, V, gU, gV, rank, 1e-6, 0.0,
                                                         empty, empty)) / n_ratings,
        "wtg": best(lambda: kernels.shard_wtg_partials(g, S, Y, out)) / n_params,
        "step": best(lambda: kernels.shard_lbfgs_step(x, g, S, Y, coef, 1.0, 1e-9)) / n_params,
        "copy": best(lambda: np.copyto(x, g)) / n_params,
    }


def _ping(peer: str, run: str, size: int, rounds: int) -> float:
    """Task: exchange `rounds` messages of `size` float64 with `peer`; return seconds per round."""
    from cluster.mailbox import local_mailbox

    box = local_mailbox()
    payload = np.zeros(size)
    box.send(run, -1, [peer], payload, 30.0)
    box.collect(run, -1, [peer], 30.0)
    start = time.perf_counter()
    for step in range(rounds):
        box.send(run, step, [peer], payload, 30.0)
        box.collect(run, step, [peer], 30.0)
    elapsed = (time.perf_counter() - start) / rounds
    box.forget(run)
    return elapsed


def message_costs(client, workers) -> dict:
    """Return one-way latency (s) and bandwidth (bytes/s) between two workers via the mailbox."""
    from cluster.mailbox import install

    install(client)
    a, b = workers[:2]
    result = {}
    for size, rounds in ((1, 400), (125_000, 40), (1_250_000, 10)):  # 8 B, 1 MB, 10 MB
        run = f"ping-{size}"
        fa = client.submit(_ping, b, run, size, rounds, workers=[a], pure=False)
        fb = client.submit(_ping, a, run, size, rounds, workers=[b], pure=False)
        result[size * 8] = max(fa.result(), fb.result())
    latency = result[8]
    bandwidth = (10_000_000 - 1_000_000) / max(result[10_000_000] - result[1_000_000], 1e-9)
    return {"latency": latency, "bandwidth": bandwidth, "raw": result}


def project(rates: dict, comm: dict, workers: int, shape, nnz: int, rank: int) -> dict:
    """Return the modelled seconds per inner iteration (by part) and per cycle for W workers."""
    m, n = shape
    grad = nnz / workers ** 2 * rates["rating"]
    u_work = m / workers * rank * (rates["wtg"] + rates["step"])
    v_work = n * rank * (rates["wtg"] / workers + rates["step"] + rates["copy"])
    bytes_out = (workers - 1) * (n / workers) * rank * 8
    exchange = comm["latency"] + bytes_out / comm["bandwidth"] if workers > 1 else 0.0
    inner = grad + u_work + v_work + exchange
    return {"W": workers, "gradient": grad, "U": u_work, "V": v_work, "exchange": exchange, "inner": inner,
            "pass": inner * workers, "bytes": bytes_out}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rank", type=int, default=50)
    parser.add_argument("--skip-run", action="store_true", help="only the cost model")
    args = parser.parse_args(argv)
    rates = kernel_rates(args.rank)
    with connect(n_workers=2, threads_per_worker=1, quiet=True) as client:
        workers = worker_addresses(client)
        comm = message_costs(client, workers)
        if not args.skip_run:
            ratings = make_ratings("ml-1m-like", seed=1)
            part = partition.make("strata-b", ratings, blocks=2, seed=1)
            runs = {}
            for n_workers in (1, 2):
                with connect(n_workers=n_workers, threads_per_worker=1, quiet=True) as sub:
                    runs[n_workers] = fit_distributed(ratings, rank=args.rank, partition=part, random_state=1,
                                                      max_epochs=args.epochs, client=sub,
                                                      chunk_epochs=args.epochs)
            one, two = ms_per_inner(runs[1].trace), ms_per_inner(runs[2].trace)
            # The machine's own ceiling: the in-process engine on the same partition, 1 vs 2 threads.
            engine = {t: ms_per_inner(minimize_hamsi(MatrixFactorization(ratings, args.rank), part, random_state=1,
                                                     max_epochs=args.epochs, threads=t).trace)
                      for t in (1, 2)}
            print(f"strong scaling, ml-1m-like rank {args.rank}, STRATA-B B=2 (same steps: "
                  f"{np.array_equal(runs[1].x, runs[2].x)}), {args.epochs} cycles")
            print(f"  1 worker : {one:8.2f} ms / inner iteration")
            print(f"  2 workers: {two:8.2f} ms / inner iteration   speedup {one / two:.2f}x (goal >= {GOAL}; "
                  f"{'met' if one / two >= GOAL else 'not met on this shared 2-core machine'})")
            for w, run in runs.items():
                phases = run.worker_phases[run.workers[0]]
                print(f"  {w} worker(s), lead worker's ms per inner iteration (V in shared memory: "
                      f"{run.shared_memory}): " + ", ".join(f"{k} {1e3 * v / run.nit:.2f}" for k, v in phases.items()))
            print(f"  in-process engine, same partition: 1 thread {engine[1]:.2f} ms, 2 threads {engine[2]:.2f} ms, "
                  f"speedup {engine[1] / engine[2]:.2f}x (what this machine gives two threads without Dask)")
    print("\nmeasured per worker (1 thread): "
          f"gradient {1e9 * rates['rating']:.1f} ns/rating, W^T g partials {1e9 * rates['wtg']:.2f} ns/param, "
          f"step {1e9 * rates['step']:.2f} ns/param, copy {1e9 * rates['copy']:.2f} ns/param")
    print(f"measured between 2 workers: one-way latency {1e3 * comm['latency']:.2f} ms, "
          f"bandwidth {comm['bandwidth'] / 1e6:.0f} MB/s (1 MB: {1e3 * comm['raw'][1_000_000]:.2f} ms, "
          f"10 MB: {1e3 * comm['raw'][10_000_000]:.2f} ms per exchange)")
    m, n, nnz = PRESETS["ml-20m-like"]
    print(f"\ncost model, ml-20m-like ({m} x {n}, {nnz} ratings, rank {args.rank}), ms per inner iteration:")
    print(f"{'W':>4s} {'gradient':>9s} {'U work':>8s} {'V work':>8s} {'exchange':>9s} {'MB out':>7s} "
          f"{'inner':>8s} {'pass s':>8s} {'speedup':>8s} {'comm share':>10s}")
    base = project(rates, comm, 1, (m, n), nnz, args.rank)
    for w in (1, 2) + PROJECTED:
        p = project(rates, comm, w, (m, n), nnz, args.rank)
        # speedup of one pass over all ratings relative to 1 worker
        print(f"{w:4d} {1e3 * p['gradient']:9.2f} {1e3 * p['U']:8.2f} {1e3 * p['V']:8.2f} {1e3 * p['exchange']:9.2f} "
              f"{p['bytes'] / 1e6:7.2f} {1e3 * p['inner']:8.2f} {p['pass']:8.2f} "
              f"{base['pass'] / p['pass']:8.2f} {(p['exchange'] + p['V']) / p['inner']:10.0%}")
    print("The model is the message path (V replicated: workers on several hosts); on one host V lives in\n"
          "shared memory and each V shard is stepped once (cluster/README.md).")
    print("comm share = (exchange + replicated V work) / inner iteration: the parts that do not shrink with W.\n"
          "Reading: the replicated V (every worker steps all n k item parameters) and the all-to-all gV\n"
          "blocks (~n k 8 bytes out per worker) are what make 2 workers cheap (one message round, no V\n"
          "traffic) and what stops scaling near 8 workers; beyond that V needs home workers (DESIGN.md).")


if __name__ == "__main__":
    main()
