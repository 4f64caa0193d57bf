"""Per-shard vector algebra of the L-BFGS step: partial dot products, pair storage and the step.

Every reduction over x is the sum of per-shard partials, added in shard order by
`sum_partials_in_order` (layouts: `hamsi.kernels` module docstring). A Dask worker calls these
kernels on its shards; the in-process engine calls them through `hamsi.sharded_kernels`.
"""

from __future__ import annotations

import numpy as np

from hamsi.memory5_kernels import (
    MEMORY,
    lbfgs_step_m5,
    pair_iteration_m5,
    store_pair_and_step_m5,
    wtg_norms_m5,
)
from partition.jit import cached_njit


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
def shard_copy_pair(s_new, y_new, S, Y, slot):
    """Copy row 0 of s_new, y_new into memory row `slot` of S, Y (Alg. 3, l. 17) in one pass.

    In memory_rows' layout an entry's S and Y values share cache lines, so a row stored alone
    moves as many lines as the whole memory: both rows in one pass halve that.
    """
    for i in range(S.shape[1]):
        S[slot, i] = s_new[0, i]
        Y[slot, i] = y_new[0, i]


@cached_njit(nogil=True)
def shard_lbfgs_step(x, g, S, Y, coef, sigma, inv_beta):
    """Apply x -= inv_beta * (sigma g + W (N W^T g)) on the shard (thesis Alg. 3, line 13).

    coef (2M) is N W^T g with W's scaling folded in (from LBFGSMemory.coefficients): the step
    direction is sigma g[i] + sum_j coef[j] S[j, i] + sum_j coef[M + j] Y[j, i]. With M = 5,
    `hamsi.memory5_kernels.lbfgs_step_m5` (same bits).
    """
    if S.shape[0] == MEMORY:
        lbfgs_step_m5(x, g, S, Y, coef, sigma, inv_beta)
    else:
        _any_memory_step(x, g, S, Y, coef, sigma, inv_beta)


@cached_njit(nogil=True)
def _any_memory_step(x, g, S, Y, coef, sigma, inv_beta):
    """shard_lbfgs_step for any M (a loop over the memory rows)."""
    M = S.shape[0]
    for i in range(x.shape[0]):
        d = sigma * g[i]
        for j in range(M):
            d += coef[j] * S[j, i]
        for j in range(M):
            d += coef[M + j] * Y[j, i]
        x[i] -= inv_beta * d


@cached_njit(nogil=True)
def shard_store_pair_and_step(x, g, S, Y, s_new, y_new, slot, coef, sigma, inv_beta):
    """Write row 0 of s_new, y_new into memory row `slot` (Alg. 3, l. 17), then shard_lbfgs_step.

    One pass where store and step took two: the step reads every memory row at each entry
    anyway, and storing a row alone (a stride of 2M doubles) moves as many cache lines. Each
    entry's direction is formed after its new pair is written, so the bits are those of the two.
    With M = 5, `hamsi.memory5_kernels.store_pair_and_step_m5` (same bits).
    """
    if S.shape[0] == MEMORY:
        store_pair_and_step_m5(x, g, S, Y, s_new, y_new, slot, coef, sigma, inv_beta)
    else:
        _any_memory_store_and_step(x, g, S, Y, s_new, y_new, slot, coef, sigma, inv_beta)


@cached_njit(nogil=True)
def _any_memory_store_and_step(x, g, S, Y, s_new, y_new, slot, coef, sigma, inv_beta):
    """shard_store_pair_and_step for any M (a loop over the memory rows)."""
    M = S.shape[0]
    for i in range(x.shape[0]):
        S[slot, i] = s_new[0, i]
        Y[slot, i] = y_new[0, i]
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


@cached_njit(nogil=True, inline="always")
def _copy_vector(src, dst):
    """Write dst[j] = src[j] for every j of src.

    A plain loop, not slice assignment: its broadcasting checks cost numba 1.6 s of compilation.
    """
    for j in range(src.shape[0]):
        dst[j] = src[j]


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
    With M = 5, an iteration without a pair and a pair iteration wanting W^T g run
    `hamsi.memory5_kernels` (same bits).
    """
    five = S.shape[0] == MEMORY
    if five and want_wtg and not (want_pair or want_gram):
        wtg_norms_m5(x, g, S, Y, wtg, norms, want_norms)
    elif five and want_pair and want_wtg:  # gram and norms are formed either way
        pair_iteration_m5(
            x,
            x_start,
            g,
            g_start,
            S,
            Y,
            s_new,
            y_new,
            pair,
            new_pair_g,
            gram if want_gram else np.empty(2 * MEMORY + 1),
            wtg,
            norms if want_norms else np.empty(2),
        )
    else:
        _fused_partials(
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
        )


@cached_njit(nogil=True)
def _fused_partials(
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
    """shard_iteration_partials for any memory size: its sums in small arrays."""
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
    if want_pair:
        _copy_vector(acc_pair, pair)
        new_pair_g[0] = sg
        new_pair_g[1] = yg
    if want_gram:
        _copy_vector(acc_gram, gram)
    if want_wtg:
        _copy_vector(acc_wtg, wtg)
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
