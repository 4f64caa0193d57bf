"""GIL-free entry points to the engine's kernels, for the worker's task thread.

hamsi.kernels compiles without nogil, so while a worker's task thread runs a kernel its event loop
cannot read or write peer messages. These wrappers call the very same compiled functions from a
nogil=True frame: the arithmetic is unchanged (no fastmath, the same code), but the worker's comms
progress concurrently with the compute (a peer's gradient block is received while we still sum).
"""

from __future__ import annotations

from numba import njit

from hamsi import kernels

_k = kernels


@njit(nogil=True, cache=True)
def mf_block_gradient(rows, cols, vals, U, V, gU, gV, rank, scale, offset, row_reg, col_reg):
    """Return None; kernels.mf_block_gradient without the GIL."""
    _k.mf_block_gradient(rows, cols, vals, U, V, gU, gV, rank, scale, offset, row_reg, col_reg)


@njit(nogil=True, cache=True)
def mf_squared_error(rows, cols, vals, U, V, rank, offset):
    """Return kernels.mf_squared_error(...) computed without the GIL."""
    return _k.mf_squared_error(rows, cols, vals, U, V, rank, offset)


@njit(nogil=True, cache=True)
def shard_wtg_partials(g, S, Y, out):
    """Return None; kernels.shard_wtg_partials without the GIL."""
    _k.shard_wtg_partials(g, S, Y, out)


@njit(nogil=True, cache=True)
def shard_pair_partials(x, x_start, g, g_start, S, Y, out):
    """Return None; kernels.shard_pair_partials without the GIL."""
    _k.shard_pair_partials(x, x_start, g, g_start, S, Y, out)


@njit(nogil=True, cache=True)
def shard_store_pair(x, x_start, g, g_start, S, Y, slot):
    """Return None; kernels.shard_store_pair without the GIL."""
    _k.shard_store_pair(x, x_start, g, g_start, S, Y, slot)


@njit(nogil=True, cache=True)
def shard_lbfgs_step(x, g, S, Y, coef, sigma, inv_beta):
    """Return None; kernels.shard_lbfgs_step without the GIL."""
    _k.shard_lbfgs_step(x, g, S, Y, coef, sigma, inv_beta)


@njit(nogil=True, cache=True)
def shard_gradient_step(x, g, inv_beta):
    """Return None; kernels.shard_gradient_step without the GIL."""
    _k.shard_gradient_step(x, g, inv_beta)
