"""Compiled hot loops of HAMSI and mb-GD: pure numba functions on float64 arrays.

Both drivers call these: the in-process engine (`hamsi.optimizer`) and the Dask driver
(`cluster`), which runs the same kernels on shards held by worker processes. No kernel uses
fastmath, so the floating-point operations happen in the order written here and a shard gives
the same bits whether it is a view into one big buffer or its own array. Every kernel releases
the GIL (nogil=True), so a Dask worker's event loop moves peer messages while its task computes.

Layouts
-------
Parameters: x = [U (m x w), V (n x w)] in one contiguous float64 buffer, row-major, with
w = rank, or w = rank + 1 when biases are on (column `rank` of U holds the user bias, of V the
item bias). A prediction is  U[a, :rank] . V[b, :rank] (+ U[a, rank] + V[b, rank]) + offset.

Matrix-factorization objective (thesis eq. 3.1, scaled as the reference implementation):
    F(x) = sum_i f_i(x),
    f_i  = (1 / 2|I|) * [ (v_i - pred_i)^2 + reg * (|U_a|^2 / n_a + |V_b|^2 / n_b) ]
for rating i = (a, b, v_i), where n_a, n_b count the training ratings of user a and item b.
Summed over i this is (1 / 2|I|) [ SSE + reg (|U|^2 + |V|^2) ] over users and items with
ratings, and it stays partially separable: the regularization gradient is added *per rating*,
inside the block that holds the rating (`row_reg[a] = reg / n_a`, `col_reg[b] = reg / n_b`).

Parameter shards: U is cut into row intervals U_0..U_{B-1}, V into V_0..V_{B-1}; in x they
tile the buffer in that order, so the shards are described by one monotone offset array
`bounds` (2B + 1 entries, bounds[0] = 0, bounds[-1] = len(x)). Every reduction over x is the
sum of per-shard partials (each from the sequential `shard_*` kernel), added in shard order by
`sum_partials_in_order`. L-BFGS memory: S and Y are (M, len(x)) arrays, one pair per row, in
ring order (row `slot` is overwritten by the newest pair; `hamsi.lbfgs.LBFGSMemory` keeps the
chronology).
"""

from __future__ import annotations

import subprocess
import sys
import types

import numba
import numpy as np
from numba import prange

from partition.jit import cached_njit

# ---------------------------------------------------------------- matrix factorization


@cached_njit(nogil=True)
def predict_one(U, V, a, b, rank, offset):
    """Return U[a,:rank].V[b,:rank] (+ biases) + offset, with a fixed 4-way summation order.

    Four interleaved partial sums (combined as (s0 + s1) + (s2 + s3)) hide the add latency
    without fastmath; every caller uses this one function, so the order is the same everywhere.
    """
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    head = rank - rank % 4
    for l in range(0, head, 4):
        s0 += U[a, l] * V[b, l]
        s1 += U[a, l + 1] * V[b, l + 1]
        s2 += U[a, l + 2] * V[b, l + 2]
        s3 += U[a, l + 3] * V[b, l + 3]
    for l in range(head, rank):
        s0 += U[a, l] * V[b, l]
    value = (s0 + s1) + (s2 + s3)
    if U.shape[1] > rank:
        value += U[a, rank] + V[b, rank]
    return value + offset


@cached_njit(nogil=True)
def mf_block_gradient(rows, cols, vals, U, V, gU, gV, rank, scale, offset, row_reg, col_reg):
    """Add the gradient of one block's f_i (thesis Alg. 3, line 10) into gU and gV rows.

    rows, cols, vals: the block's ratings, contiguous, visited in order (the gradient of a row
    is accumulated in this order). For rating (a, b, v), with e = v - pred and scale = 1/|I|:
        gU[a, :rank] += scale * (-e * V[b, :rank] + row_reg[a] * U[a, :rank])
        gV[b, :rank] += scale * (-e * U[a, :rank] + col_reg[b] * V[b, :rank])
    and, with biases (w = rank + 1), gU[a, rank] += scale * (-e + row_reg[a] * U[a, rank]) (same
    for gV). Pass empty row_reg / col_reg for reg = 0 (the reference objective). Only rows a, b
    of this block are written, so blocks with disjoint rows/items may run concurrently.
    """
    width = U.shape[1]
    use_reg = row_reg.shape[0] > 0
    for i in range(rows.shape[0]):
        a = rows[i]
        b = cols[i]
        minus_e = scale * (predict_one(U, V, a, b, rank, offset) - vals[i])
        if use_reg:
            ra = scale * row_reg[a]
            rb = scale * col_reg[b]
            for l in range(rank):
                ua = U[a, l]
                vb = V[b, l]
                gU[a, l] += minus_e * vb + ra * ua
                gV[b, l] += minus_e * ua + rb * vb
            if width > rank:
                gU[a, rank] += minus_e + ra * U[a, rank]
                gV[b, rank] += minus_e + rb * V[b, rank]
        else:
            for l in range(rank):
                ua = U[a, l]
                gU[a, l] += minus_e * V[b, l]
                gV[b, l] += minus_e * ua
            if width > rank:
                gU[a, rank] += minus_e
                gV[b, rank] += minus_e


@cached_njit(parallel=True, nogil=True)
def mf_subset_gradient(
    rows, cols, vals, starts, ends, U, V, gU, gV, rank, scale, offset, row_reg, col_reg
):
    """Add the gradient of one subset, its blocks in parallel threads (thesis Alg. 3, lines 9-10).

    Block b is rows[starts[b]:ends[b]] (likewise cols, vals). The blocks must touch disjoint
    users and items (STRATA, COLOR): then each row of gU/gV is written by one thread only and the
    result does not depend on the number of threads.
    """
    for blk in prange(starts.shape[0]):
        lo = starts[blk]
        hi = ends[blk]
        mf_block_gradient(
            rows[lo:hi],
            cols[lo:hi],
            vals[lo:hi],
            U,
            V,
            gU,
            gV,
            rank,
            scale,
            offset,
            row_reg,
            col_reg,
        )


@cached_njit(nogil=True)
def mf_subset_gradient_sequential(
    rows, cols, vals, starts, ends, U, V, gU, gV, rank, scale, offset, row_reg, col_reg
):
    """Add the gradient of one subset, block after block in block order.

    For blocks that share parameters (HOGWILD): running them one after the other keeps the sum
    deterministic, where concurrent unsynchronized writes would not be.
    """
    for blk in range(starts.shape[0]):
        lo = starts[blk]
        hi = ends[blk]
        mf_block_gradient(
            rows[lo:hi],
            cols[lo:hi],
            vals[lo:hi],
            U,
            V,
            gU,
            gV,
            rank,
            scale,
            offset,
            row_reg,
            col_reg,
        )


@cached_njit(nogil=True)
def mf_squared_error(rows, cols, vals, U, V, rank, offset):
    """Return sum_i (v_i - pred_i)^2 over the given ratings, summed in index order (the training SSE)."""
    return mf_clipped_squared_error(rows, cols, vals, U, V, rank, offset, -np.inf, np.inf)


@cached_njit(nogil=True)
def mf_clipped_squared_error(rows, cols, vals, U, V, rank, offset, lo, hi):
    """Return sum_i (v_i - clip(pred_i, lo, hi))^2 in index order: the held-out SSE of served predictions.

    The predictions the model serves are clipped to the training rating range; (-inf, inf) leaves
    them as they are, bit for bit. Comparisons, not min/max, so a NaN prediction stays NaN.
    """
    total = 0.0
    for i in range(rows.shape[0]):
        p = predict_one(U, V, rows[i], cols[i], rank, offset)
        if p < lo:
            p = lo
        elif p > hi:
            p = hi
        e = vals[i] - p
        total += e * e
    return total


@cached_njit(parallel=True, nogil=True)
def mf_squared_error_chunked(rows, cols, vals, U, V, rank, offset, lo, hi, chunk_bounds):
    """Return sum_i (v_i - clip(pred_i, lo, hi))^2, parallel over fixed chunks, partials added in chunk order.

    chunk_bounds (C + 1 offsets) fixes the summation order independently of the thread count;
    lo, hi as `mf_clipped_squared_error` ((-inf, inf) for the training SSE).
    """
    n_chunks = chunk_bounds.shape[0] - 1
    partials = np.empty(n_chunks)
    for c in prange(n_chunks):
        a = chunk_bounds[c]
        b = chunk_bounds[c + 1]
        partials[c] = mf_clipped_squared_error(
            rows[a:b], cols[a:b], vals[a:b], U, V, rank, offset, lo, hi
        )
    total = 0.0
    for c in range(n_chunks):
        total += partials[c]
    return total


@cached_njit(nogil=True)
def weighted_row_norms(X, weights):
    """Return sum_r weights[r] * |X[r]|^2, in row order (the regularization part of F)."""
    total = 0.0
    for r in range(X.shape[0]):
        if weights[r] != 0.0:
            sq = 0.0
            for l in range(X.shape[1]):
                sq += X[r, l] * X[r, l]
            total += weights[r] * sq
    return total


@cached_njit(nogil=True)
def row_shard_norms(X, weights, row_bounds, out):
    """Write out[p] = weighted_row_norms of X's row shard p (rows row_bounds[p]:row_bounds[p + 1]).

    The per-shard partials of the |U|^2 term of F: a Dask worker forms those of its row shards.
    """
    for p in range(row_bounds.shape[0] - 1):
        lo = row_bounds[p]
        hi = row_bounds[p + 1]
        out[p] = weighted_row_norms(X[lo:hi], weights[lo:hi])


@cached_njit(nogil=True)
def regularizer_in_order(row_partials, V, col_weights):
    """Return sum_p row_partials[p] (shard order) + weighted_row_norms(V, col_weights): F's penalty.

    The one place both engines add the penalty up, so the objective (which the safeguard's
    fallback compares) has the same bits in one process and on Dask.
    """
    total = 0.0
    for p in range(row_partials.shape[0]):
        total += row_partials[p]
    return total + weighted_row_norms(V, col_weights)


# ---------------------------------------------------------------- per-shard vector algebra


def memory_rows(
    memory: int, n: int, buffer: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Return (S, Y), each memory x n, as views of one n x 2M array (an entry's 2M values side by side).

    buffer: 2M n float64 values to lay them in (e.g. a shared mapping); default a new zeroed array.

    The L-BFGS memory's layout in both engines. The vector kernels read S[j, i] and Y[j, i] for
    every j at each entry i: one contiguous stream instead of 2M rows. With 2M separate rows the
    step took 10-13 ns per parameter instead of 3.4 on this machine's VM for some row spacings
    (docs/benchmarks.md); side by side it takes 2.6-4.1 ns at every size, with the same bits.
    """
    block = np.zeros((n, 2 * memory)) if buffer is None else buffer.reshape(n, 2 * memory)
    return block[:, :memory].T, block[:, memory:].T


def as_memory_rows(S: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return S, Y in memory_rows' layout: themselves when they are already, else copies."""
    memory = S.shape[0]
    wanted = (S.itemsize, 2 * memory * S.itemsize)
    if S.strides == wanted and Y.strides == wanted and S.shape == Y.shape:
        return S, Y
    S_new, Y_new = memory_rows(memory, S.shape[1])
    S_new[:], Y_new[:] = S, Y
    return S_new, Y_new


@cached_njit(nogil=True)
def shard_wtg_partials(g, S, Y, out):
    """Write the shard's part of W^T g into out (2M): out[j] = S[j].g, out[M + j] = Y[j].g.

    Unscaled: LBFGSMemory.coefficients applies sigma (W = [S, sigma Y]). One accumulator per
    memory row, rows summed over the shard's entries in index order.
    """
    M = S.shape[0]
    for j in range(2 * M):
        out[j] = 0.0
    for i in range(g.shape[0]):
        gi = g[i]
        for j in range(M):
            out[j] += S[j, i] * gi
            out[M + j] += Y[j, i] * gi


@cached_njit(nogil=True)
def shard_pair_partials(x, x_start, g, g_start, S, Y, out):
    """Write the shard's curvature-pair products into out (2M + 2) (thesis Alg. 3, line 14).

    With s = x - x_start and y = g - g_start on this shard:
    out[0] = s.y, out[1] = y.y, out[2 + j] = S[j].y, out[2 + M + j] = Y[j].y (old memory rows;
    LBFGSMemory substitutes the slot being overwritten).
    """
    M = S.shape[0]
    for j in range(2 * M + 2):
        out[j] = 0.0
    for i in range(x.shape[0]):
        s = x[i] - x_start[i]
        y = g[i] - g_start[i]
        out[0] += s * y
        out[1] += y * y
        for j in range(M):
            out[2 + j] += S[j, i] * y
            out[2 + M + j] += Y[j, i] * y


@cached_njit(nogil=True)
def shard_gram_partials(x, x_start, S, Y, out):
    """Write the shard's products of s = x - x_start with itself and the memory rows into out (2M + 1).

    out[0] = s.s, out[1 + j] = S[j].s, out[1 + M + j] = Y[j].s (old rows): with the pair products
    they give the new row of the Gram matrix of [S; Y] that the safeguard's step cap needs.
    """
    M = S.shape[0]
    for j in range(2 * M + 1):
        out[j] = 0.0
    for i in range(x.shape[0]):
        s = x[i] - x_start[i]
        out[0] += s * s
        for j in range(M):
            out[1 + j] += S[j, i] * s
            out[1 + M + j] += Y[j, i] * s


@cached_njit(nogil=True)
def shard_norm_partials(x, g, out):
    """Write out[0] = g.g and out[1] = x.x over the shard (the safeguard's step cap)."""
    gg = 0.0
    xx = 0.0
    for i in range(x.shape[0]):
        gg += g[i] * g[i]
        xx += x[i] * x[i]
    out[0] = gg
    out[1] = xx


@cached_njit(nogil=True)
def shard_store_pair(x, x_start, g, g_start, S, Y, slot):
    """Overwrite memory row `slot` with s = x - x_start, y = g - g_start (ring buffer, Alg. 3 l. 17)."""
    for i in range(x.shape[0]):
        S[slot, i] = x[i] - x_start[i]
        Y[slot, i] = g[i] - g_start[i]


@cached_njit(nogil=True)
def shard_lbfgs_step(x, g, S, Y, coef, sigma, inv_beta):
    """Apply x -= inv_beta * (sigma g + W (N W^T g)) on the shard (thesis Alg. 3, line 13).

    coef (2M) is N W^T g with W's scaling folded in (from LBFGSMemory.coefficients): the step
    direction is sigma g[i] + sum_j coef[j] S[j, i] + sum_j coef[M + j] Y[j, i].
    """
    M = S.shape[0]
    for i in range(x.shape[0]):
        d = sigma * g[i]
        for j in range(M):
            d += coef[j] * S[j, i]
        for j in range(M):
            d += coef[M + j] * Y[j, i]
        x[i] -= inv_beta * d


@cached_njit(nogil=True)
def shard_gradient_step(x, g, inv_beta):
    """Apply x -= inv_beta * g on the shard (mb-GD, and HAMSI before the memory is full)."""
    for i in range(x.shape[0]):
        x[i] -= inv_beta * g[i]


@cached_njit(nogil=True)
def shard_iteration_partials(
    x,
    x_start,
    g,
    g_start,
    S,
    Y,
    s_new,
    y_new,
    want_pair,
    want_gram,
    want_wtg,
    want_norms,
    pair,
    new_pair_g,
    gram,
    wtg,
    norms,
):
    """Write an inner iteration's requested partials on one shard in ONE pass over x, g and the memory.

    Bit for bit the separate kernels (each accumulator adds the same terms in the same index
    order): want_pair = shard_store_pair into row 0 of s_new, y_new + shard_pair_partials +
    shard_wtg_partials(g, s_new, y_new); want_gram = shard_gram_partials; want_wtg =
    shard_wtg_partials(g, S, Y); want_norms = shard_norm_partials. The memory rows S, Y dominate
    the traffic (2M doubles per entry), so a pair iteration reads them once instead of three times.
    """
    M = S.shape[0]
    # the sums build in arrays of this call, copied out at the end: the output rows of the shards
    # share cache lines, and threads adding into them in every step slowed the parallel kernel
    # below the one-thread one (false sharing: 7.6 against 5.2 ns per entry on 2 threads)
    acc_pair = np.zeros(2 * M + 2)
    acc_gram = np.zeros(2 * M + 1)
    acc_wtg = np.zeros(2 * M)
    sg = 0.0
    yg = 0.0
    gg = 0.0
    xx = 0.0
    for i in range(x.shape[0]):
        gi = g[i]
        s = x[i] - x_start[i]
        if want_pair:
            y = gi - g_start[i]
            s_new[0, i] = s
            y_new[0, i] = y
            acc_pair[0] += s * y
            acc_pair[1] += y * y
            sg += s * gi
            yg += y * gi
            for j in range(M):
                acc_pair[2 + j] += S[j, i] * y
                acc_pair[2 + M + j] += Y[j, i] * y
        if want_gram:
            acc_gram[0] += s * s
            for j in range(M):
                acc_gram[1 + j] += S[j, i] * s
                acc_gram[1 + M + j] += Y[j, i] * s
        if want_wtg:
            for j in range(M):
                acc_wtg[j] += S[j, i] * gi
                acc_wtg[M + j] += Y[j, i] * gi
        if want_norms:
            gg += gi * gi
            xx += x[i] * x[i]
    # plain loops, not slice assignment: its broadcasting checks cost numba 1.6 s of compilation
    if want_pair:
        for j in range(2 * M + 2):
            pair[j] = acc_pair[j]
        new_pair_g[0] = sg
        new_pair_g[1] = yg
    if want_gram:
        for j in range(2 * M + 1):
            gram[j] = acc_gram[j]
    if want_wtg:
        for j in range(2 * M):
            wtg[j] = acc_wtg[j]
    if want_norms:
        norms[0] = gg
        norms[1] = xx


@cached_njit(nogil=True)
def sum_partials_in_order(partials, out):
    """Write out = partials[0] + partials[1] + ... (rows added one after the other, shard order).

    The one reduction both drivers use, so per-shard partials give the same bits in both.
    """
    for j in range(partials.shape[1]):
        out[j] = 0.0
    for p in range(partials.shape[0]):
        for j in range(partials.shape[1]):
            out[j] += partials[p, j]


# ---------------------------------------------------------------- in-process sharded drivers
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
def sharded_copy_row(src, dst, slot, bounds):
    """Copy src (one row) into row `slot` of dst shard by shard in parallel (storing an accepted pair)."""
    n_shards = bounds.shape[0] - 1
    for q in prange(n_shards):
        p = interleaved(q, n_shards)
        for i in range(bounds[p], bounds[p + 1]):
            dst[slot, i] = src[0, i]


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


_FIRST = np.zeros(1, dtype=np.int64)


def one_block_gradient(rows, cols, vals, U, V, gU, gV, rank, scale, offset, row_reg, col_reg):
    """mf_block_gradient through mf_subset_gradient as its one block: the same bits, faster on one thread.

    numba compiles a prange body with noalias arguments, which the plain kernel cannot have: on
    one thread 35 against 55 ns per rating at rank 10, about the same at rank 50. For callers that
    run one block per call on one numba thread (the Dask workers, cluster.work).
    """
    mf_subset_gradient(
        rows,
        cols,
        vals,
        _FIRST,
        np.array([rows.shape[0]], dtype=np.int64),
        U,
        V,
        gU,
        gV,
        rank,
        scale,
        offset,
        row_reg,
        col_reg,
    )


def one_block_squared_error(rows, cols, vals, U, V, rank, offset, lo=-np.inf, hi=np.inf) -> float:
    """mf_clipped_squared_error through mf_squared_error_chunked as one chunk: the same bits (0.0 + s = s).

    On one thread 13 against 29 ns per rating at rank 10, 26 against 33 at rank 50 (see
    one_block_gradient for why).
    """
    return mf_squared_error_chunked(
        rows, cols, vals, U, V, rank, offset, lo, hi, np.array([0, rows.shape[0]], dtype=np.int64)
    )


def _one_thread_twin(kernel):
    """Return `kernel` compiled without parallel=True (prange runs as range), under its own name.

    Every parallel kernel loops over independent shards or blocks, so the twin gives the same
    bits; it compiles in a fraction of the time (no parfor lowering) and skips numba's fork-join.
    """
    f = kernel.py_func
    twin = types.FunctionType(
        f.__code__, f.__globals__, f"{f.__name__}_one_thread", f.__defaults__, f.__closure__
    )
    twin.__qualname__ = (
        twin.__name__
    )  # numba's cache files are named after it: no clash with `kernel`'s
    twin.__doc__ = f.__doc__
    return cached_njit(nogil=True)(twin)


# The vector kernels of the engine (every one a loop over shards); the gradient and the SSE are
# not among them: compiled with parallel=True they run about 1.5-2x faster even on one thread
# (numba compiles a prange body with noalias arguments), so they are always the parallel ones.
VECTOR_KERNELS = (
    "sharded_iteration_partials",
    "sharded_copy_row",
    "sharded_copy",
    "sharded_fill_zero",
    "sharded_gradient_step",
    "sharded_lbfgs_step",
)
# Below this many parameters the vector kernels' fork-join costs more than it saves: their
# one-thread twins run, and a small fit never compiles the parallel ones. On 2 threads (ns per
# parameter, parallel / twin; benchmarks/bench_threads.py's machine): the step 3.96 / 3.31 at 20k,
# 2.71 / 3.34 at 50k, 3.14 / 9.07 at 500k; W'g 4.75 / 4.83, 3.39 / 4.70, 2.83 / 5.41. It was 2^20
# while the parallel W'g shared cache lines between its threads (shard_iteration_partials). The
# parallel set costs a new install 2.3 s more compilation, so it starts at 2^18 parameters, where
# it saves more than that within a fit or two (long-tail-like, rank 50, 0.5M: 100 cycles 3.1 ->
# 2.2 s); ml-100k-like at rank 50 (134k) stays below.
PARALLEL_VECTOR_MIN = 1 << 18
_PARALLEL = types.SimpleNamespace(**{name: globals()[name] for name in VECTOR_KERNELS})
_ONE_THREAD = types.SimpleNamespace(
    **{name: _one_thread_twin(globals()[name]) for name in VECTOR_KERNELS}
)


def vector_kernels(n_params: int):
    """Return the engine's vector kernels for a vector of n_params: parallel ones, or their one-thread twins.

    The twins run when numba runs one thread here (its thread count is per calling thread:
    hamsi.optimizer.numba_threads) or the vector is shorter than PARALLEL_VECTOR_MIN. Same bits
    either way; a new install's first fit compiles about half as much.
    """
    return (
        _PARALLEL
        if numba.get_num_threads() > 1 and n_params >= PARALLEL_VECTOR_MIN
        else _ONE_THREAD
    )


_WARM: list = []
# The share of a cold warm-up compiled by a second process (`_start_compile_helper`), and how long
# this one waits for it before compiling that share itself.
HELPER_TIMEOUT_S = 120.0


def warm_up(n_params: int = 0, disjoint: bool = True, also=None) -> None:
    """Compile (or load from numba's cache) the kernels a run on n_params uses, on tiny arrays of the real dtypes.

    The drivers call this before their clock starts, so timings exclude JIT work. The sequential
    subset gradient (blocks that share rows: HOGWILD) only when not `disjoint`: a new install's
    first fit compiles what it runs. When the kernels are not in numba's cache yet, a
    second process compiles half of them into it meanwhile (`_start_compile_helper`), and this one
    runs `also()` (another package's warm-up: the partitioner's) with its own half.
    """
    k = vector_kernels(n_params)
    if not disjoint and "sequential" not in _WARM:
        rows, vals = np.zeros(2, dtype=np.int32), np.ones(2)
        U, gU = np.zeros((2, 2)), np.zeros((2, 2))
        mf_subset_gradient_sequential(
            rows,
            rows,
            vals,
            np.zeros(1, dtype=np.int64),
            np.full(1, 2, dtype=np.int64),
            U,
            U.copy(),
            gU,
            gU.copy(),
            2,
            0.5,
            0.0,
            np.ones(2),
            np.ones(2),
        )
        _WARM.append("sequential")
    if k in _WARM:
        if also is not None:
            also()
        return
    helper = _start_compile_helper(k)
    _warm_errors_and_vectors(k)
    if also is not None:
        also()
    if helper is not None:
        try:
            helper.wait(timeout=HELPER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()
    _warm_gradient_and_step(
        k
    )  # loaded from the cache the helper wrote, or compiled here if it failed
    _WARM.append(k)


def _warm_gradient_and_step(k) -> None:
    """Compile the subset gradient (with the block kernel it calls), the L-BFGS step and its small algebra."""
    from hamsi import lbfgs

    rows, vals = np.zeros(2, dtype=np.int32), np.ones(2)
    x, g = np.zeros(8), np.zeros(8)
    U, V = x[:4].reshape(2, 2), x[4:].reshape(2, 2)
    gU, gV = g[:4].reshape(2, 2), g[4:].reshape(2, 2)
    mf_subset_gradient(
        rows,
        rows,
        vals,
        np.zeros(1, dtype=np.int64),
        np.full(1, 2, dtype=np.int64),
        U,
        V,
        gU,
        gV,
        2,
        0.5,
        0.0,
        np.ones(2),
        np.ones(2),
    )
    S, Y = memory_rows(1, 8)
    k.sharded_lbfgs_step(x, g, S, Y, np.zeros(2), 1.0, 1.0, np.array([0, 4, 8], dtype=np.int64))
    lbfgs.warm_up()


def _warm_errors_and_vectors(k) -> None:
    """Compile the squared error, the penalty's norms and the other vector kernels of `k`."""
    rows, vals = np.zeros(2, dtype=np.int32), np.ones(2)
    x, g = np.zeros(8), np.zeros(8)
    U, V = x[:4].reshape(2, 2), x[4:].reshape(2, 2)
    mf_squared_error_chunked(
        rows, rows, vals, U, V, 2, 0.0, -np.inf, np.inf, np.array([0, 2], dtype=np.int64)
    )
    norms = np.zeros(1)
    row_shard_norms(U, np.ones(2), np.array([0, 2], dtype=np.int64), norms)
    regularizer_in_order(norms, U, np.ones(2))
    bounds = np.array([0, 4, 8], dtype=np.int64)
    S, Y = memory_rows(1, 8)
    new = np.zeros((1, 8))
    k.sharded_iteration_partials(
        x,
        x,
        g,
        g,
        S,
        Y,
        new,
        new.copy(),
        bounds,
        True,
        True,
        True,
        True,
        np.zeros((2, 4)),
        np.zeros((2, 2)),
        np.zeros((2, 3)),
        np.zeros((2, 2)),
        np.zeros((2, 2)),
    )
    k.sharded_copy_row(new, S, 0, bounds)
    k.sharded_gradient_step(x, g, 1.0, bounds)
    k.sharded_copy(x, g, bounds)
    k.sharded_fill_zero(g, bounds)


def _start_compile_helper(k):
    """Return a process compiling `_warm_gradient_and_step(k)` into numba's cache, or None when it is there.

    A new install compiles seconds of kernels before its first fit (a goal of the project: the first fit
    should take <= 5 s). numba compiles one function at a time in a process, but its cache is
    shared by processes on a host (each kernel compiled and saved by one process at a time:
    partition.jit), so a second process compiles half of them meanwhile and this one then loads
    them (waiting for a kernel the helper is still compiling). Started only when the probe
    kernel (compiled first) missed the cache; any failure of the helper leaves the work to this
    process, so it costs time, never correctness. Not in a process another one started (a Dask
    worker): its siblings compile at the same time, and a helper each only crowds the cores
    (`hamsi demo`'s two workers: 17.2 s with helpers, 16.2 s without).
    """
    import multiprocessing

    sum_partials_in_order(np.ones((2, 3)), np.zeros(3))
    if (
        not sum_partials_in_order.stats.cache_misses
        or not sys.executable
        or multiprocessing.parent_process() is not None
    ):
        return None
    name = "parallel" if k is _PARALLEL else "one-thread"
    code = "import sys; from hamsi import kernels; kernels._warm_gradient_and_step(kernels.KERNEL_SETS[sys.argv[1]])"
    try:
        return subprocess.Popen(
            [sys.executable, "-c", code, name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None


KERNEL_SETS = {"parallel": _PARALLEL, "one-thread": _ONE_THREAD}
