"""In-process sharded drivers: the per-shard kernels run over every shard of x in parallel.

Every shard writes only its own entries, so the result does not depend on the thread count.

numba's disk cache checks only a kernel's own source file, and these drivers carry the shard
kernels compiled into them: a change to `hamsi.shard_kernels` or `hamsi.memory5_kernels` comes
with a change to this file (as M = 5's partials did), or a tree that ran the drivers keeps
running the old shard code from its cache.
"""

from __future__ import annotations

from numba import prange

from hamsi.shard_kernels import (
    shard_copy_pair,
    shard_gradient_step,
    shard_iteration_partials,
    shard_lbfgs_step,
    shard_store_pair_and_step,
)
from partition.jit import cached_njit

# numba hands each thread a contiguous run of the prange, and x is U_0..U_{B-1} then V_0..V_{B-1}:
# on long-tail-like (672 users, 9,066 items) one thread got both U shards (34k entries), the other
# both V shards (462k), and two threads ran no faster than one. The drivers visit the shards
# interleaved (U_0, V_0, U_1, V_1, ...); every shard writes only its own rows, so the bits stay.


@cached_njit(nogil=True)
def interleaved(q, n):
    """Return the shard the q-th iteration of a sharded driver visits: 0, h, 1, h + 1, ... with h = ceil(n / 2)."""
    return q // 2 if q % 2 == 0 else (n + 1) // 2 + q // 2


@cached_njit(parallel=True, nogil=True)
def sharded_iteration_partials(
    x,
    x_start,
    g,
    g_start,
    S,
    Y,
    s_new,
    y_new,
    bounds,
    want_pair,
    want_wtg,
    want_gram,
    want_norms,
    pair,
    new_pair_g,
    gram,
    wtg,
    norms,
):
    """Write the per-shard partials one inner iteration asks for (rows of the outputs = shards).

    want_pair: form the candidate pair s_new = x - x_start, y_new = g - g_start (row 0 of s_new,
    y_new) and its products (shard_pair_partials) and s_new.g, y_new.g; want_wtg: W^T g with the
    memory before the pair update; want_gram / want_norms: the safeguard's products. Exactly the
    per-shard kernel a Dask worker calls (shard_iteration_partials), so both exchanges hand the
    stepper the same partials.
    """
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        lo = bounds[p]
        hi = bounds[p + 1]
        shard_iteration_partials(
            x[lo:hi],
            x_start[lo:hi],
            g[lo:hi],
            g_start[lo:hi],
            S[:, lo:hi],
            Y[:, lo:hi],
            s_new[:, lo:hi],
            y_new[:, lo:hi],
            want_pair,
            want_gram,
            want_wtg,
            want_norms,
            pair[p],
            new_pair_g[p],
            gram[p],
            wtg[p],
            norms[p],
        )


@cached_njit(parallel=True, nogil=True)
def sharded_copy_pair(s_new, y_new, S, Y, slot, bounds):
    """Store the accepted pair (shard_copy_pair) in memory row `slot`, shards in parallel."""
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        lo = bounds[p]
        hi = bounds[p + 1]
        shard_copy_pair(s_new[:, lo:hi], y_new[:, lo:hi], S[:, lo:hi], Y[:, lo:hi], slot)


@cached_njit(parallel=True, nogil=True)
def sharded_lbfgs_step(x, g, S, Y, coef, sigma, inv_beta, bounds):
    """Apply the L-BFGS step (shard_lbfgs_step) to every shard in parallel."""
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        lo = bounds[p]
        hi = bounds[p + 1]
        shard_lbfgs_step(x[lo:hi], g[lo:hi], S[:, lo:hi], Y[:, lo:hi], coef, sigma, inv_beta)


@cached_njit(parallel=True, nogil=True)
def sharded_store_pair_and_step(x, g, S, Y, s_new, y_new, slot, coef, sigma, inv_beta, bounds):
    """Store the new pair in row `slot` and apply the L-BFGS step (shard_store_pair_and_step), shards in parallel."""
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        lo = bounds[p]
        hi = bounds[p + 1]
        shard_store_pair_and_step(
            x[lo:hi],
            g[lo:hi],
            S[:, lo:hi],
            Y[:, lo:hi],
            s_new[:, lo:hi],
            y_new[:, lo:hi],
            slot,
            coef,
            sigma,
            inv_beta,
        )


@cached_njit(parallel=True, nogil=True)
def sharded_gradient_step(x, g, inv_beta, bounds):
    """Apply x -= inv_beta * g to every shard in parallel."""
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        lo = bounds[p]
        hi = bounds[p + 1]
        shard_gradient_step(x[lo:hi], g[lo:hi], inv_beta)


@cached_njit(parallel=True, nogil=True)
def sharded_copy(src, dst, bounds):
    """Copy src into dst shard by shard in parallel (remembering x and g at a cycle's start)."""
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        for i in range(bounds[p], bounds[p + 1]):
            dst[i] = src[i]


@cached_njit(parallel=True, nogil=True)
def sharded_fill_zero(v, bounds):
    """Set v to zero shard by shard in parallel (the gradient buffer before each inner iteration)."""
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        for i in range(bounds[p], bounds[p + 1]):
            v[i] = 0.0
