"""The cost model of one HAMSI inner iteration on Dask workers, used by bench_scaling.py.

Every constant is measured by a micro benchmark on this machine (`measure_constants`), none is
fitted to the scaling points it is then checked against. For W workers, STRATA-B with B = K = W,
rank k, row width w (k, or k + 1 with biases), m users, n items, memory M, the lead worker spends
per inner iteration (lockstep: a round ends when the slowest worker's message arrived):

    gradient   mean over subsets k of max_p t_block(p, (p + k) mod W)     (the slowest block sets the pace)
    U shard    (m / W) w (c_partials + c_step)                         (c_partials: W'g and norms, and
                                                                        once a cycle the pair's products)
    V          shared memory: (n / W) w (c_partials + c_step)           (V_j stepped by one worker)
               message path:  (n / W) w c_partials + n w (c_step + c_assemble)  (V replicated)
    round      latency + (W - 1) c_message + bytes_out c_byte  (c_message: CPU per message; latency:
                                                                a round's wake-up, wall minus CPU)
    evaluation once per cycle of K + 1 inner iterations (1 when K = 1): (nnz / W) c_eval and one more round
with t_block the block's gradient timed alone (engine order), c_* per parameter, per rating, per
message and per byte. bytes_out per worker per inner iteration: message path (W - 1) (n / W) w 8
(its block's gV rows to every peer) + partials; shared memory: partials only. When W processes
share C < W cores the compute is time-sliced: the model multiplies by W / C, and such a point checks
bytes and rounds, not scaling. When W <= C processes share one socket their gradients slow each
other (shared L3 and memory bandwidth): c_corun, the gradient of two processes at once / alone.

Hosts (`project_hosts`): one worker per host, so no co-run factor; a round to W - 1 peers costs
RTT / 2 + (W - 1) c_message + bytes_out (c_byte + 8 / link bits per second), c_message and c_byte as
measured on loopback (the Python and copy cost of a message), the wake-up replaced by the RTT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np



@dataclass
class Constants:
    """Measured costs (seconds) on this machine; blocks[W] is the (W, W) table of block gradients."""

    blocks: dict
    sizes: np.ndarray     # vector lengths at which the per-parameter costs were timed
    partials: np.ndarray  # per parameter: the shard partials W'g and norms (every inner iteration)
    pair: np.ndarray      # per parameter: the partials of a pair iteration (+ pair rows, pair and Gram products)
    step: np.ndarray      # per parameter: the L-BFGS step
    assemble: np.ndarray  # per parameter of V: zero gV and add the peers' rows (message path)
    eval_rating: float    # per rating: the cycle's train SSE
    message: float        # CPU per message (encode, send, receive, decode), loopback
    latency: float        # wake-up latency of a round on this host (wall minus CPU of a tiny round)
    byte: float           # per byte sent (and received), loopback
    frame: tuple          # bytes of a frame of two shards' partials: (ordinary, pair iteration)
    corun: float          # gradient of C processes at once / alone
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
        partials = (1 - pair_share) * self.per_param("partials", size) + pair_share * self.per_param("pair", size)
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


def bytes_out(c: Constants, W: int, n: int, width: int, shared: bool) -> float:
    """Return the bytes one worker's frames carry per inner iteration (to all its W - 1 peers)."""
    if W == 1:
        return 0.0
    return (W - 1) * (partials_frame(c, W) + (0 if shared else (n / W) * width * 8))


def predict_point(c: Constants, W: int, shape, nnz: int, width: int, shared: bool) -> dict:
    """Return the modelled ms per inner iteration on this machine, by part, and the bytes per iteration."""
    m, n = shape
    pace, lead = gradient_seconds(c.blocks[W])
    corun = c.corun if W >= 2 else 1.0
    per_cycle = inner_per_cycle(W)
    u_work = c.vector((m / W) * width, W)
    v_work = c.vector((n / W) * width, W)
    if not shared and W > 1:  # every worker steps all of V and assembles gV from the peers' rows
        full = n * width
        v_work += full * (c.per_param("step", full) + c.per_param("assemble", full))
    out = bytes_out(c, W, n, width, shared)
    rounds = 1 + (2 if shared else 1) / per_cycle  # the evaluation's round (+ its barrier with shared V)
    exchange = 0.0 if W == 1 else rounds * (c.latency + (W - 1) * c.message) + out * c.byte
    evaluation = (nnz / W) * c.eval_rating / per_cycle
    compute = pace * corun + u_work + v_work + evaluation
    slicing = max(1.0, W / c.cores)
    total = slicing * (compute + exchange)
    return {"W": W, "shared": shared, "gradient": slicing * pace * corun, "wait": slicing * (pace - lead) * corun,
            "update": slicing * (u_work + v_work), "evaluation": slicing * evaluation, "exchange": slicing * exchange,
            "inner": total, "unshared": compute + exchange, "bytes": W * out, "meaningless": W > c.cores}


@dataclass
class Network:
    """A cluster network: link speed (bits per second) and round-trip time (seconds)."""

    bits_per_second: float = 25e9
    rtt: float = 50e-6


def project_hosts(c: Constants, rating_seconds: dict, imbalance: dict, hosts: int, shape, nnz: int, rank: int,
                  net: Network, owned: bool) -> dict:
    """Return modelled seconds per cycle (and per pass over the ratings) on `hosts` hosts, one worker each.

    rating_seconds[H]: (gradient, evaluation) per rating, measured on a block of this data at H hosts;
    imbalance[H]: mean over subsets of (largest block / mean block) in ratings (STRATA-B at H).
    Replicated V: today's message path. Owned V (branch owned-v's design): V_j and its gradient go
    to V_j's next home in the round (2 (n/H) k 8 bytes, one peer), each worker steps n/H rows, and
    V's x and new pair rows go to every peer once per cycle (3 (n/H) k 8 bytes to each of H - 1).
    """
    m, n = shape
    H = hosts
    width = rank
    per_byte = c.byte + 8.0 / net.bits_per_second
    gradient = nnz / H ** 2 * rating_seconds[H][0] * imbalance[H]
    u_work = c.vector((m / H) * width, H)
    full = n * width
    partials = (H - 1) * partials_frame(c, H)
    latency = net.rtt / 2 + (H - 1) * c.message if H > 1 else 0.0
    if owned:
        v_work = c.vector((n / H) * width, H)
        out = partials + (2 * (n / H) * rank * 8 if H > 1 else 0.0)
        end_bytes = 3 * (n / H) * rank * 8 * (H - 1)
        end_of_cycle = (latency + end_bytes * per_byte + 3 * full * c.per_param("assemble", full) / 2) if H > 1 else 0.0
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
    return {"hosts": H, "inner": inner, "gradient": gradient, "V": v_work, "round": round_seconds,
            "cycle": cycle, "pass": cycle * H / per_cycle, "bytes_inner": H * out, "owned": owned}
