"""W^T g on one shard for a memory of M = 5 pairs (the default), its sums in local variables.

`hamsi.shard_kernels` accumulates its 2M-wide partial sums in small arrays, which numba
allocates on the heap: LLVM then loads and stores every accumulator at every entry. With M fixed
the sums live in local variables, and the same terms are added to each sum in the same index
order, so the bits are those of the general kernel (tests/test_engine.py). Two of a cycle's
three inner iterations (K = 2) want only W^T g and the norms: `shard_iteration_partials` hands
those to `wtg_norms_m5` (docs/benchmarks.md). The pair iteration's 35 sums would not fit the
registers; the step (`shard_lbfgs_step`) was no faster this way.
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
        norms[0] = gg
        norms[1] = xx
