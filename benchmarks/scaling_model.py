"""The cost model of one HAMSI inner iteration on Dask workers, used by bench_scaling.py.

Every constant is measured by a micro benchmark on this machine (`measure_constants`), none is
fitted to the scaling points it is then checked against. For W workers, STRATA-B with B = K = W,
rank k, row width w (k, or k + 1 with biases), m users, n items, memory M, the lead worker spends
per inner iteration (lockstep: a round ends when the slowest worker's message arrived):

    gradient   mean over subsets k of max_p t_block(p, (p + k) mod W)     (the slowest block sets the pace)
    U shard    (m / W) w (c_partials + c_step)                         (c_partials: W'g and norms, and
                                                                        once a cycle the pair's products)
    V          shared memory: (n / W) w (c_partials + c_step)           (V_j stepped by one worker)
               replicated:    (n / W) w c_partials + n w (c_step + c_assemble)  (message path, V replicated)
               owned:         (n / W) w (c_partials + c_step) + r_W n w c_assemble  (message path, V owned:
                                                                        r_W = owned_rows(W) rows received)
    round      latency + c_round + (W - 1) c_message + bytes_out c_byte  (c_round: a round's own CPU
                                                                (selector, encoding once); c_message: CPU
                                                                per peer (a frame written, one read and
                                                                decoded); latency: a round's wake-up)
    evaluation once per cycle of K + 1 inner iterations (1 when K = 1): (nnz / W) c_eval and one more round
with t_block the block's gradient timed alone (engine order), c_* per parameter, per rating, per
message and per byte. bytes_out per worker per inner iteration: replicated (W - 1) (n / W) w 8
(its block's gV rows to every peer) + partials; owned r_W n w 8 + partials (the engine's count,
cluster.work.item_rows_per_iteration); shared memory: partials only. When W processes
share C < W cores the compute is time-sliced: the model multiplies by W / C, and such a point checks
bytes and rounds, not scaling. When W <= C processes share one socket their gradients slow each
other (shared L3 and memory bandwidth): c_corun, the gradient of two processes at once / alone.

Hosts (`project_hosts`): one worker per host, so no co-run factor; a round to W - 1 peers costs
RTT / 2 + c_round + (W - 1) c_message + bytes_out (c_byte + 8 / link bits per second): c_round,
c_message and c_byte are the CPU of cluster.link_round.record_round (c_byte: exchange_round) measured in one process
over TCP loopback (benchmarks/round_costs.py), the wake-up replaced by the RTT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.work import item_rows_per_iteration


@dataclass
class Constants:
    """Measured costs (seconds) on this machine; blocks[W] is the (W, W) table of block gradients."""

    blocks: dict
    sizes: np.ndarray  # vector lengths at which the per-parameter costs were timed
    partials: np.ndarray  # per parameter: the shard partials W'g and norms (every inner iteration)
    pair: (
        np.ndarray
    )  # per parameter: the partials of a pair iteration (+ pair rows, pair and Gram products)
    step: np.ndarray  # per parameter: the L-BFGS step
    assemble: np.ndarray  # per parameter of V: zero gV and add the peers' rows (message path)
    eval_rating: float  # per rating: the cycle's train SSE
    message: float  # CPU per peer of a round (its frame written, the peer's read and decoded)
    round_fixed: float  # CPU of a round whatever its peers (messages encoded once, the selector)
    latency: float  # wake-up latency of a round on this host (wall minus CPU of a tiny round)
    byte: float  # CPU per byte sent and received (the kernel's copies), loopback
    frame: tuple  # bytes of a frame of two shards' partials: (ordinary, pair iteration)
    corun: float  # gradient of C processes at once / alone
    cores: int

    def per_param(self, name: str, size: float) -> float:
        """Return the per-parameter cost `name` for a vector of `size` (log-linear between timed sizes)."""
        return float(np.interp(np.log(max(size, 1.0)), np.log(self.sizes), getattr(self, name)))

    def vector(self, size: float, n_subsets: int) -> float:
        """Return the mean seconds per inner iteration of the partials and the step on `size` parameters.

        A cycle's last inner iteration forms the curvature pair (stepper.pair_now): with K subsets,
        one iteration in K + 1 asks for the pair partials (every one when K = 1).
        """
        pair_share = 1.0 / inner_per_cycle(n_subsets)
        partials = (1 - pair_share) * self.per_param(
            "partials", size
        ) + pair_share * self.per_param("pair", size)
        return size * (partials + self.per_param("step", size))


def inner_per_cycle(n_subsets: int) -> int:
    """Return the inner iterations of a HAMSI cycle: K + 1 (one subset repeated), 1 when K = 1 (hamsi.stepper)."""
    return 1 if n_subsets == 1 else n_subsets + 1


def gradient_seconds(blocks: np.ndarray) -> tuple[float, float]:
    """Return (mean over subsets of the slowest block, mean over subsets of block (0, k)): pace and lead."""
    W = blocks.shape[0]
    pace = np.mean([max(blocks[p, (p + k) % W] for p in range(W)) for k in range(W)])
    lead = np.mean([blocks[0, k % W] for k in range(W)])
    return float(pace), float(lead)


def partials_frame(c: Constants, n_subsets: int) -> float:
    """Return the mean bytes of a frame of partials (a pair iteration once per cycle)."""
    pair_share = 1.0 / inner_per_cycle(n_subsets)
    return (1 - pair_share) * c.frame[0] + pair_share * c.frame[1]


def owned_rows(W: int, pair_share: float = 1.0) -> float:
    """Return the V rows (units of n w) one worker sends per inner iteration with V owned (B = K = W).

    cluster.work.item_rows_per_iteration, the engine's own count, per worker; pair_share: the share
    of cycles that stored a curvature pair (its rows are sent only then).
    """
    return item_rows_per_iteration(W, W, owned=True, pair_share=pair_share) / W if W > 1 else 0.0


def bytes_out(
    c: Constants, W: int, n: int, width: int, path: str, pair_share: float = 1.0
) -> float:
    """Return the bytes one worker's frames carry per inner iteration (to all its W - 1 peers).

    path: "shared" (partials only), "replicated" (its block of gV rows to every peer) or "owned".
    """
    if W == 1:
        return 0.0
    rows = {"shared": 0.0, "replicated": (W - 1) / W, "owned": owned_rows(W, pair_share)}[path]
    return (W - 1) * partials_frame(c, W) + rows * n * width * 8


def predict_point(
    c: Constants, W: int, shape, nnz: int, width: int, path: str, pair_share: float = 1.0
) -> dict:
    """Return the modelled ms per inner iteration on this machine, by part, and the bytes per iteration.

    path "shared" or "owned": each worker steps the V shards it holds (owned: and writes the rows it
    receives); "replicated": every worker steps all of V and assembles gV from the peers' rows.
    pair_share: the share of the run's cycles that stored a curvature pair.
    """
    m, n = shape
    pace, lead = gradient_seconds(c.blocks[W])
    corun = c.corun if W >= 2 else 1.0
    per_cycle = inner_per_cycle(W)
    full = n * width
    u_work = c.vector((m / W) * width, W)
    v_work = c.vector((n / W) * width, W)
    if path == "replicated" and W > 1:
        v_work += full * (c.per_param("step", full) + c.per_param("assemble", full))
    elif path == "owned" and W > 1:  # the rows received are written into this worker's copy of V
        v_work += owned_rows(W, pair_share) * full * c.per_param("assemble", full)
    out = bytes_out(c, W, n, width, path, pair_share)
    # a cycle's extra rounds: the evaluation's, and the barrier (shared) or the sync of V (owned) before it
    rounds = 1 + (1 if path == "replicated" else 2) / per_cycle
    exchange = (
        0.0 if W == 1 else rounds * (c.latency + c.round_fixed + (W - 1) * c.message) + out * c.byte
    )
    evaluation = (nnz / W) * c.eval_rating / per_cycle
    compute = pace * corun + u_work + v_work + evaluation
    slicing = max(1.0, W / c.cores)
    total = slicing * (compute + exchange)
    return {
        "W": W,
        "path": path,
        "gradient": slicing * pace * corun,
        "wait": slicing * (pace - lead) * corun,
        "update": slicing * (u_work + v_work),
        "evaluation": slicing * evaluation,
        "exchange": slicing * exchange,
        "inner": total,
        "unshared": compute + exchange,
        "bytes": W * out,
        "meaningless": W > c.cores,
    }


@dataclass
class Network:
    """A cluster network: link speed (bits per second) and round-trip time (seconds)."""

    bits_per_second: float = 25e9
    rtt: float = 50e-6


def project_hosts(
    c: Constants,
    rating_seconds: dict,
    imbalance: dict,
    hosts: int,
    shape,
    nnz: int,
    rank: int,
    net: Network,
    owned: bool,
) -> dict:
    """Return modelled seconds per cycle (and per pass over the ratings) on `hosts` hosts, one worker each.

    rating_seconds[H]: (gradient, evaluation) per rating, measured on a block of this data at H hosts;
    imbalance[H]: mean over subsets of (largest block / mean block) in ratings (STRATA-B at H).
    Replicated V: every worker steps all of V. Owned V (cluster.work.OwnedFactorWork): V_j's x and
    g go to its next home in the round, each worker steps the n/H rows it holds, and V's x and new
    pair rows go to every peer once per cycle: owned_rows(H) n k 8 bytes per host and inner
    iteration, as the engine counts them (the per-cycle sync spread over the cycle's iterations).
    """
    m, n = shape
    H = hosts
    width = rank
    per_byte = c.byte + 8.0 / net.bits_per_second
    gradient = nnz / H**2 * rating_seconds[H][0] * imbalance[H]
    u_work = c.vector((m / H) * width, H)
    full = n * width
    partials = (H - 1) * partials_frame(c, H)
    latency = net.rtt / 2 + c.round_fixed + (H - 1) * c.message if H > 1 else 0.0
    if (
        owned
    ):  # V_j's rows to its next home every inner iteration, V synced once a cycle (owned_rows)
        v_work = c.vector((n / H) * width, H) + owned_rows(H) * full * c.per_param("assemble", full)
        out = partials + owned_rows(H) * full * 8
        end_of_cycle = (
            latency if H > 1 else 0.0
        )  # the sync's own round; its bytes are in owned_rows
    else:
        v_work = c.vector((n / H) * width, H)
        if H > 1:  # every worker steps all of V and assembles gV from the peers' rows
            v_work += full * (c.per_param("step", full) + c.per_param("assemble", full))
        out = partials + (H - 1) * (n / H) * width * 8
        end_of_cycle = 0.0
    round_seconds = latency + out * per_byte if H > 1 else 0.0
    inner = gradient + u_work + v_work + round_seconds
    per_cycle = inner_per_cycle(H)
    evaluation = (nnz / H) * rating_seconds[H][1] + latency
    cycle = per_cycle * inner + evaluation + end_of_cycle
    return {
        "hosts": H,
        "inner": inner,
        "gradient": gradient,
        "V": v_work,
        "round": round_seconds,
        "cycle": cycle,
        "evaluation": evaluation,
        "pass": cycle * H / per_cycle,
        "bytes_inner": H * out,
        "owned": owned,
    }
