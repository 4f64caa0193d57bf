"""Compiled hot loops of HAMSI and mb-GD: the kernel sets a run uses, and compiling them before it starts.

The kernels live by what they compute: `hamsi.mf_kernels` (gradient, squared errors, penalty),
`hamsi.shard_kernels` (per-shard L-BFGS algebra), `hamsi.sharded_kernels` (in-process drivers
over all shards); this module re-exports them, picks the parallel or one-thread set
(`vector_kernels`) and compiles what a run needs (`warm_up`).

Both drivers call these: the in-process engine (`hamsi.optimizer`) and the Dask driver
(`cluster`), which runs the same kernels on shards held by worker processes. No kernel uses
fastmath, so the floating-point operations happen in the order the kernels write them, and a shard gives
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

import multiprocessing
import subprocess
import sys
import types

import numba
import numpy as np

from hamsi import lbfgs
from hamsi.mf_kernels import (
    mf_block_gradient,
    mf_clipped_squared_error,
    mf_squared_error,
    mf_squared_error_chunked,
    mf_subset_gradient,
    mf_subset_gradient_sequential,
    one_block_gradient,
    one_block_squared_error,
    predict_one,
    regularizer_in_order,
    row_shard_norms,
    weighted_row_norms,
)
from hamsi.shard_kernels import (
    as_memory_rows,
    memory_rows,
    shard_copy_pair,
    shard_gradient_step,
    shard_gram_partials,
    shard_iteration_partials,
    shard_lbfgs_step,
    shard_norm_partials,
    shard_pair_partials,
    shard_store_pair,
    shard_store_pair_and_step,
    shard_wtg_partials,
    sum_partials_in_order,
)
from hamsi.sharded_kernels import (
    interleaved,
    sharded_copy,
    sharded_copy_pair,
    sharded_fill_zero,
    sharded_gradient_step,
    sharded_iteration_partials,
    sharded_lbfgs_step,
    sharded_store_pair_and_step,
)
from hamsi.touched_kernels import (
    sharded_touched_gradient_step,
    sharded_touched_partials,
    sharded_touched_zero,
    touched_shard_partials,
)
from partition.jit import cached_njit

__all__ = [
    "HELPER_TIMEOUT_S",
    "KERNEL_SETS",
    "PARALLEL_VECTOR_MIN",
    "VECTOR_KERNELS",
    "as_memory_rows",
    "interleaved",
    "memory_rows",
    "mf_block_gradient",
    "mf_clipped_squared_error",
    "mf_squared_error",
    "mf_squared_error_chunked",
    "mf_subset_gradient",
    "mf_subset_gradient_sequential",
    "one_block_gradient",
    "one_block_squared_error",
    "predict_one",
    "regularizer_in_order",
    "row_shard_norms",
    "shard_copy_pair",
    "shard_gradient_step",
    "shard_gram_partials",
    "shard_iteration_partials",
    "shard_lbfgs_step",
    "shard_norm_partials",
    "shard_pair_partials",
    "shard_store_pair",
    "shard_store_pair_and_step",
    "shard_wtg_partials",
    "sharded_copy",
    "sharded_copy_pair",
    "sharded_fill_zero",
    "sharded_gradient_step",
    "sharded_iteration_partials",
    "sharded_lbfgs_step",
    "sharded_store_pair_and_step",
    "sharded_touched_gradient_step",
    "sharded_touched_partials",
    "sharded_touched_zero",
    "sum_partials_in_order",
    "touched_shard_partials",
    "vector_kernels",
    "warm_up",
    "weighted_row_norms",
]


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
    "sharded_copy_pair",
    "sharded_copy",
    "sharded_fill_zero",
    "sharded_gradient_step",
    "sharded_lbfgs_step",
    "sharded_store_pair_and_step",
    "sharded_touched_partials",
    "sharded_touched_zero",
    "sharded_touched_gradient_step",
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
    new = np.zeros((1, 8))
    k.sharded_store_pair_and_step(
        x, g, S, Y, new, new.copy(), 0, np.zeros(2), 1.0, 1.0, np.array([0, 4, 8], dtype=np.int64)
    )
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
    k.sharded_copy_pair(new, new, S, Y, 0, bounds)
    k.sharded_gradient_step(x, g, 1.0, bounds)
    k.sharded_copy(x, g, bounds)
    k.sharded_fill_zero(g, bounds)
    rows, cuts = np.arange(2, dtype=np.int64), np.array([0, 1, 2], dtype=np.int64)
    five = memory_rows(5, 8)
    k.sharded_touched_partials(
        x, g, *five, bounds, rows, cuts, 4, True, True, np.zeros((2, 10)), np.zeros((2, 2))
    )
    k.sharded_touched_zero(g, bounds, rows, cuts, 4)
    k.sharded_touched_gradient_step(x, g, 1.0, bounds, rows, cuts, 4)


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
