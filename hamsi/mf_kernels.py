"""Matrix-factorization kernels: predictions, the subset gradient, squared errors and the penalty.

The objective, its per-rating regularization and the layout of U and V in x are described in
the `hamsi.kernels` module docstring (thesis eq. 3.1, scaled as the reference implementation).
Summation orders are fixed here, so both engines get the same bits.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from partition.jit import cached_njit


@cached_njit(nogil=True)
def predict_one(U, V, a, b, rank, offset):
    """Return U[a,:rank].V[b,:rank] (+ biases) + offset, with a fixed 4-way summation order.

    Four interleaved partial sums (combined as (s0 + s1) + (s2 + s3)) hide the add latency
    without fastmath. The two hot kernels (mf_block_gradient, mf_clipped_squared_error) write
    these lines out in their loops, in this order (tests/test_engine.py checks the bits): a call
    to this function from them is not inlined by numba and took 2-2.5x their time per rating
    at rank 10 (docs/benchmarks.md).
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

    A block's ratings come grouped by user, so U[a] and gU[a] are held in two local rows while
    the user stays the same and gU[a] is written back when it changes: the same additions in the
    same order (the same bits), without a load and a store of gU[a] per rating
    (docs/benchmarks.md, "One-host margins").
    """
    width = U.shape[1]
    use_reg = row_reg.shape[0] > 0
    head = rank - rank % 4
    u_row = np.empty(width)  # U[a] and gU[a] of the current user a
    g_row = np.empty(width)
    current = -1
    for i in range(rows.shape[0]):
        a = rows[i]
        b = cols[i]
        if a != current:
            if current >= 0:
                for l in range(width):
                    gU[current, l] = g_row[l]
            for l in range(width):
                u_row[l] = U[a, l]
                g_row[l] = gU[a, l]
            current = a
        s0 = 0.0  # predict_one's sum, written out (see its docstring)
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for l in range(0, head, 4):
            s0 += u_row[l] * V[b, l]
            s1 += u_row[l + 1] * V[b, l + 1]
            s2 += u_row[l + 2] * V[b, l + 2]
            s3 += u_row[l + 3] * V[b, l + 3]
        for l in range(head, rank):
            s0 += u_row[l] * V[b, l]
        prediction = (s0 + s1) + (s2 + s3)
        if width > rank:
            prediction += u_row[rank] + V[b, rank]
        minus_e = scale * ((prediction + offset) - vals[i])
        if use_reg:
            ra = scale * row_reg[a]
            rb = scale * col_reg[b]
            for l in range(rank):
                ua = u_row[l]
                vb = V[b, l]
                g_row[l] += minus_e * vb + ra * ua
                gV[b, l] += minus_e * ua + rb * vb
            if width > rank:
                g_row[rank] += minus_e + ra * u_row[rank]
                gV[b, rank] += minus_e + rb * V[b, rank]
        else:
            for l in range(rank):
                ua = u_row[l]
                g_row[l] += minus_e * V[b, l]
                gV[b, l] += minus_e * ua
            if width > rank:
                g_row[rank] += minus_e
                gV[b, rank] += minus_e
    if current >= 0:
        for l in range(width):
            gU[current, l] = g_row[l]


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
    head = rank - rank % 4
    biased = U.shape[1] > rank
    for i in range(rows.shape[0]):
        a = rows[i]
        b = cols[i]
        s0 = 0.0  # predict_one's sum, written out (see its docstring)
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for l in range(0, head, 4):
            s0 += U[a, l] * V[b, l]
            s1 += U[a, l + 1] * V[b, l + 1]
            s2 += U[a, l + 2] * V[b, l + 2]
            s3 += U[a, l + 3] * V[b, l + 3]
        for l in range(head, rank):
            s0 += U[a, l] * V[b, l]
        p = (s0 + s1) + (s2 + s3)
        if biased:
            p += U[a, rank] + V[b, rank]
        p += offset
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
