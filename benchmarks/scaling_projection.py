"""The ml-20m-like extrapolation of benchmarks/bench_scaling.py: speed-ups over 1..64 hosts, their spread, the anchors.

The model (benchmarks/scaling_model.py) with the constants measured here
(benchmarks/scaling_constants.py), for replicated and owned V over a stated network.
"""

from __future__ import annotations

import numpy as np
from scaling_constants import (
    HOSTS,
)
from scaling_model import Constants, Network, project_hosts

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
        "  a round's CPU (cluster.link_round.record_round, TCP loopback, the owned-V inner iteration's frames; "
        "round_costs.py): "
        + ", ".join(f"{P} peers {1e6 * t:.0f} us" for P, t in links["round"].items())
        + f"; line: {1e6 * fixed:.0f} us + {1e6 * message:.1f} us per peer (largest residual {residual:.0%}); "
        f"{1e9 * c.byte:.3f} ns per byte sent and received (one V shard each way: "
        + ", ".join(f"{z // 1024} KiB {1e6 * t:.0f} us" for z, t in links["byte"].items())
        + ")"
    )


def speedups(
    c: Constants, per_rating: dict, ml20m: dict, rank: int, owned: bool, evaluation: bool = True
) -> dict:
    """Return {H: seconds per pass on 1 host / on H} of the model (project_hosts).

    evaluation=False leaves out the cycle's training-loss evaluation on every host count: the
    speed-up of the iterations alone.
    """
    shape, nnz, imbalance = ml20m["shape"], ml20m["nnz"], ml20m["imbalance"]
    passes = {}
    for H in HOSTS:
        p = project_hosts(c, per_rating, imbalance, H, shape, nnz, rank, NETWORK, owned)
        passes[H] = p["pass"] if evaluation else p["pass"] * (1 - p["evaluation"] / p["cycle"])
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
        "evaluation H=1, ns": [1e9 * r[1][1] for _, r in repeats],
    }
    for H in (16, 32, 64):
        rows[f"owned V {H} hosts"] = [speedups(c, r, ml20m, rank, True)[H] for c, r in repeats]
    for H in (32, 64):
        rows[f"no evaluation, {H}"] = [
            speedups(c, r, ml20m, rank, True, evaluation=False)[H] for c, r in repeats
        ]
    for name, values in rows.items():
        v = np.array(values)
        print(
            f"  {name:>18s}: median {np.median(v):8.2f}, min {v.min():8.2f}, max {v.max():8.2f} "
            f"(max / min {v.max() / v.min():.2f})"
        )
    print(
        "  no evaluation, H: owned V's speed-up without the cycle's training-loss evaluation (the one-host "
        "evaluation reads V at random, so it is the constant most moved by what shares this machine's cache)"
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
