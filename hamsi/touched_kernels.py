"""Inner-iteration kernels restricted to the rows a subset's gradient touches (hamsi.touched).

Off those rows g = 0 exactly, so W^T g and g.g lose only zero terms: every sum gets its other
terms in the same index order as `hamsi.memory5_kernels.wtg_norms_m5` and
`hamsi.shard_kernels._fused_partials`, and the same bits (an accumulator that starts at +0.0
never becomes -0.0, and a + 0.0 == a). x.x runs over the whole shard, as before. Zeroing g and
the gradient step x -= g / beta_t on those rows only leave every other entry as it was, too.
The one exception: an infinite entry of S or Y off the touched rows would make a NaN there
(inf * 0); the safeguard's fallback answers a non-finite objective either way.

rows: the touched rows of all shards, ascending; shard p's are rows[cuts[p]:cuts[p + 1]], each
row r the entries r * width .. r * width + width - 1 of x.
"""

from __future__ import annotations

from numba import prange

from hamsi.memory5_kernels import MEMORY
from hamsi.sharded_kernels import interleaved
from partition.jit import cached_njit

__all__ = [
    "MEMORY",
    "sharded_touched_gradient_step",
    "sharded_touched_partials",
    "sharded_touched_zero",
    "touched_shard_partials",
]


@cached_njit(nogil=True)
def touched_shard_partials(x, g, S, Y, rows, width, lo, hi, want_wtg, want_norms, wtg, norms):
    """Write [S_j.g, Y_j.g] (M = 5) over the touched `rows` into wtg, and [g.g, x.x] into norms.

    The sums of wtg_norms_m5 on the shard x[lo:hi] with g's zero entries skipped; x.x over every
    entry of the shard. want_wtg False: only the norms (any memory size).
    """
    a0 = a1 = a2 = a3 = a4 = 0.0
    b0 = b1 = b2 = b3 = b4 = 0.0
    gg = xx = 0.0
    for r in rows:
        start = r * width
        for i in range(start, start + width):
            gi = g[i]
            if want_wtg:
                a0 += S[0, i] * gi
                b0 += Y[0, i] * gi
                a1 += S[1, i] * gi
                b1 += Y[1, i] * gi
                a2 += S[2, i] * gi
                b2 += Y[2, i] * gi
                a3 += S[3, i] * gi
                b3 += Y[3, i] * gi
                a4 += S[4, i] * gi
                b4 += Y[4, i] * gi
            gg += gi * gi
    if want_wtg:
        wtg[0] = a0
        wtg[1] = a1
        wtg[2] = a2
        wtg[3] = a3
        wtg[4] = a4
        wtg[5] = b0
        wtg[6] = b1
        wtg[7] = b2
        wtg[8] = b3
        wtg[9] = b4
    if want_norms:
        for i in range(lo, hi):
            xx += x[i] * x[i]
        norms[0] = gg
        norms[1] = xx


@cached_njit(parallel=True, nogil=True)
def sharded_touched_partials(
    x, g, S, Y, bounds, rows, cuts, width, want_wtg, want_norms, wtg, norms
):
    """Write every shard's touched_shard_partials into row p of wtg and norms (shards in parallel)."""
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        touched_shard_partials(
            x,
            g,
            S,
            Y,
            rows[cuts[p] : cuts[p + 1]],
            width,
            bounds[p],
            bounds[p + 1],
            want_wtg,
            want_norms,
            wtg[p],
            norms[p],
        )


@cached_njit(parallel=True, nogil=True)
def sharded_touched_zero(g, bounds, rows, cuts, width):
    """Set g to zero on the given rows, shard by shard in parallel (g is zero elsewhere already)."""
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        for r in rows[cuts[p] : cuts[p + 1]]:
            for i in range(r * width, r * width + width):
                g[i] = 0.0


@cached_njit(parallel=True, nogil=True)
def sharded_touched_gradient_step(x, g, inv_beta, bounds, rows, cuts, width):
    """Apply x -= inv_beta * g on the given rows (g is zero on every other row), shards in parallel."""
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        for r in rows[cuts[p] : cuts[p + 1]]:
            for i in range(r * width, r * width + width):
                x[i] -= inv_beta * g[i]
