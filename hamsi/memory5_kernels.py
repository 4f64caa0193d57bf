"""The inner iterations' partials on one shard for a memory of M = 5 pairs (the default).

`hamsi.shard_kernels` accumulates its 2M-wide partial sums in small arrays, which numba
allocates on the heap: LLVM then loads and stores every accumulator at every entry. With M fixed
the sums live in local variables, and the same terms are added to each sum in the same index
order, so the bits are those of the general kernel (tests/test_engine.py). The iterations
without a pair (two of a cycle's three at K = 2) want W^T g and the norms (`wtg_norms_m5`); the
pair iteration wants every partial with the safeguard, the pair and W^T g without it
(`pair_iteration_m5` either way: forming gram and norms as well costs less than the general
kernel). Each took about half the general kernel's time per entry (docs/benchmarks.md). The
step (`lbfgs_step_m5`, `store_pair_and_step_m5`) takes about three quarters of the general
one's, with its ten terms written out in the general kernel's order (S rows, then Y rows).
"""

from __future__ import annotations

from partition.jit import cached_njit

MEMORY = 5


@cached_njit(nogil=True)
def wtg_norms_m5(x, g, S, Y, wtg, norms, want_norms):
    """Write [S_j.g, Y_j.g] (10) of the shard into wtg and, when want_norms, [g.g, x.x] into norms.

    shard_iteration_partials' want_wtg (and want_norms) for M = 5: the iterations without a pair.
    """
    a0 = a1 = a2 = a3 = a4 = 0.0
    b0 = b1 = b2 = b3 = b4 = 0.0
    gg = xx = 0.0
    for i in range(g.shape[0]):
        gi = g[i]
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
        if want_norms:
            gg += gi * gi
            xx += x[i] * x[i]
    _write10(wtg, 0, a0, a1, a2, a3, a4, b0, b1, b2, b3, b4)
    if want_norms:
        norms[0] = gg
        norms[1] = xx


@cached_njit(nogil=True)
def pair_iteration_m5(
    x, x_start, g, g_start, S, Y, s_new, y_new, pair, new_pair_g, gram, wtg, norms
):
    """shard_iteration_partials wanting every partial (a pair with the safeguard) for M = 5.

    Stores s = x - x_start, y = g - g_start in row 0 of s_new, y_new and writes pair (12) =
    [s.y, y.y, S_j.y, Y_j.y], new_pair_g = [s.g, y.g], gram (11) = [s.s, S_j.s, Y_j.s],
    wtg (10) = [S_j.g, Y_j.g] and norms = [g.g, x.x], in one pass.
    """
    sy = yy = sg = yg = ss = gg = xx = 0.0
    p0 = p1 = p2 = p3 = p4 = q0 = q1 = q2 = q3 = q4 = 0.0  # S_j.y, Y_j.y
    r0 = r1 = r2 = r3 = r4 = t0 = t1 = t2 = t3 = t4 = 0.0  # S_j.s, Y_j.s
    w0 = w1 = w2 = w3 = w4 = z0 = z1 = z2 = z3 = z4 = 0.0  # S_j.g, Y_j.g
    for i in range(x.shape[0]):
        gi = g[i]
        xi = x[i]
        s = xi - x_start[i]
        y = gi - g_start[i]
        s_new[0, i] = s
        y_new[0, i] = y
        sy += s * y
        yy += y * y
        sg += s * gi
        yg += y * gi
        m0, m1, m2, m3, m4 = S[0, i], S[1, i], S[2, i], S[3, i], S[4, i]
        n0, n1, n2, n3, n4 = Y[0, i], Y[1, i], Y[2, i], Y[3, i], Y[4, i]
        p0 += m0 * y
        p1 += m1 * y
        p2 += m2 * y
        p3 += m3 * y
        p4 += m4 * y
        q0 += n0 * y
        q1 += n1 * y
        q2 += n2 * y
        q3 += n3 * y
        q4 += n4 * y
        ss += s * s
        r0 += m0 * s
        r1 += m1 * s
        r2 += m2 * s
        r3 += m3 * s
        r4 += m4 * s
        t0 += n0 * s
        t1 += n1 * s
        t2 += n2 * s
        t3 += n3 * s
        t4 += n4 * s
        w0 += m0 * gi
        w1 += m1 * gi
        w2 += m2 * gi
        w3 += m3 * gi
        w4 += m4 * gi
        z0 += n0 * gi
        z1 += n1 * gi
        z2 += n2 * gi
        z3 += n3 * gi
        z4 += n4 * gi
        gg += gi * gi
        xx += xi * xi
    pair[0] = sy
    pair[1] = yy
    _write10(pair, 2, p0, p1, p2, p3, p4, q0, q1, q2, q3, q4)
    new_pair_g[0] = sg
    new_pair_g[1] = yg
    gram[0] = ss
    _write10(gram, 1, r0, r1, r2, r3, r4, t0, t1, t2, t3, t4)
    _write10(wtg, 0, w0, w1, w2, w3, w4, z0, z1, z2, z3, z4)
    norms[0] = gg
    norms[1] = xx


@cached_njit(nogil=True)
def lbfgs_step_m5(x, g, S, Y, coef, sigma, inv_beta):
    """shard_lbfgs_step for M = 5: x -= inv_beta (sigma g + W coef), the same terms in the same order."""
    c0, c1, c2, c3, c4 = coef[0], coef[1], coef[2], coef[3], coef[4]
    e0, e1, e2, e3, e4 = coef[5], coef[6], coef[7], coef[8], coef[9]
    for i in range(x.shape[0]):
        x[i] -= inv_beta * _direction(sigma * g[i], S, Y, i, c0, c1, c2, c3, c4, e0, e1, e2, e3, e4)


@cached_njit(nogil=True)
def store_pair_and_step_m5(x, g, S, Y, s_new, y_new, slot, coef, sigma, inv_beta):
    """shard_store_pair_and_step for M = 5: each entry's pair written, then its step formed."""
    c0, c1, c2, c3, c4 = coef[0], coef[1], coef[2], coef[3], coef[4]
    e0, e1, e2, e3, e4 = coef[5], coef[6], coef[7], coef[8], coef[9]
    for i in range(x.shape[0]):
        S[slot, i] = s_new[0, i]
        Y[slot, i] = y_new[0, i]
        x[i] -= inv_beta * _direction(sigma * g[i], S, Y, i, c0, c1, c2, c3, c4, e0, e1, e2, e3, e4)


@cached_njit(nogil=True, inline="always")
def _direction(d, S, Y, i, c0, c1, c2, c3, c4, e0, e1, e2, e3, e4):
    """Return d + sum_j c_j S[j, i] + sum_j e_j Y[j, i], added one term at a time in that order."""
    d += c0 * S[0, i]
    d += c1 * S[1, i]
    d += c2 * S[2, i]
    d += c3 * S[3, i]
    d += c4 * S[4, i]
    d += e0 * Y[0, i]
    d += e1 * Y[1, i]
    d += e2 * Y[2, i]
    d += e3 * Y[3, i]
    d += e4 * Y[4, i]
    return d


@cached_njit(nogil=True, inline="always")
def _write10(out, at, a0, a1, a2, a3, a4, b0, b1, b2, b3, b4):
    """Write out[at:at + 5] = a0..a4 and out[at + 5:at + 10] = b0..b4."""
    out[at] = a0
    out[at + 1] = a1
    out[at + 2] = a2
    out[at + 3] = a3
    out[at + 4] = a4
    out[at + 5] = b0
    out[at + 6] = b1
    out[at + 7] = b2
    out[at + 8] = b3
    out[at + 9] = b4
