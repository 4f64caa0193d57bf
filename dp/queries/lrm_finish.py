"""Finishing an ALM decomposition: exact B = W L^+, refinement of L, and the identity fallback.

lrm_strategy passes Alg. 1's result through finished_decomposition: when W lies in the row space
of L, B = W L^+ removes the bias of Theorem 3 and L is refined on the exact objective
(dp.queries.lrm_refine); the Laplace identity strategy replaces any result that is noisier.
"""

from __future__ import annotations

import math

import numpy as np

from dp.queries.lrm_alm import LowRankDecomposition, revive_dead_rows, unit_noise
from dp.queries.lrm_refine import exact_fit, refine_decomposition

# W counts as inside the row space of L when ||W - W L^+ L||_F <= ROW_SPACE_TOL ||W||_F
ROW_SPACE_TOL = 1e-9
# an ALM result whose residual exceeds this fraction of ||W||_F is replaced by the identity strategy
FALLBACK_RESIDUAL = 1e-2
# an exact but ill-conditioned L (rank n, r >= n) is mixed with t [I; 0] before it is refined: the first
# t that makes it well conditioned (measured: WRange 1024 x 1024 stopped at 150 s needed more than 1 %)
CONDITIONING_MIX = (1e-2, 1e-1, 0.5)


def exact_reconstruction(W: np.ndarray, L: np.ndarray) -> np.ndarray | None:
    """Return B = W L^+ when every query of W lies in the row space of L (then W = B L), else None.

    For a fixed L this B fits W best in least squares and, W being inside the row space, is the
    minimum-norm exact one: the matrix mechanism's reconstruction, free of the bias of Theorem 3.
    """
    B = W @ np.linalg.pinv(L)
    inside = np.linalg.norm(W - B @ L) <= ROW_SPACE_TOL * np.linalg.norm(W)
    return B if inside else None


def refinement_start(W: np.ndarray, L: np.ndarray) -> np.ndarray | None:
    """Return L scaled to Delta = 1, or when that is too ill-conditioned for exact_fit and r >= n,
    (1 - t) L + t [I; 0] for the first t of CONDITIONING_MIX that is not (inside the ball, rank n,
    so still exact); None when r < n or no t helps.
    """
    start = L / np.abs(L).sum(axis=0).max()
    if exact_fit(W, start) is not None:
        return start
    r, n = L.shape
    for t in CONDITIONING_MIX if r >= n else ():
        mixed = (1.0 - t) * start
        mixed[:n] += t * np.eye(n)
        if exact_fit(W, mixed) is not None:
            return mixed
    return None


def finished_decomposition(
    W: np.ndarray, result: LowRankDecomposition, refine: bool = True, **refine_options
) -> tuple[np.ndarray, np.ndarray, str, str]:
    """Return (B, L, status, message): the ALM's result made exact, refined, never worse than identity.

    When W lies in the row space of the ALM's L (after reviving rows that died since the last
    revival), B becomes W L^+ (no bias) and, with refine=True, L (scaled to Delta = 1) is refined by
    dp.queries.lrm_refine.refine_decomposition on tr(B^T B) with B = W L^+, never worse than its
    start. An exact L is refined even when its W L^+ is noisier than identity (the ALM's B is a
    ridge solution, W L^+ of an ill-conditioned L can be far larger; measured on WRange
    1024 x 1024 stopped at 150 s: 1650 x identity). The identity itself is not refined: its columns
    are vertices of the ball and it is a stationary point (measured: the refinement returns it).
    The Laplace identity strategy (L = I, B = W: Phi = ||W||_F^2, Delta = 1, no bias) replaces the
    result when that is noisier or leaves too large a residual (never_worse_than_identity).
    """
    B, L, status, message = result.B, result.L, result.status, result.message
    exact = exact_reconstruction(W, L)
    if exact is None and not np.all(np.any(L, axis=1)):  # rows died since the last revival
        revived = revive_dead_rows(L, W - B @ L)
        exact = exact_reconstruction(W, revived)
        L = L if exact is None else revived
    if exact is not None:
        B, message = exact, message + "; B = W L^+ (W in the row space of L: no bias)"
        start = refinement_start(W, L) if refine else None
        if start is not None:
            refined = refine_decomposition(W, start, **refine_options)
            B, L, message = refined.B, refined.L, f"{message}; {refined.message}"
        elif refine:
            message += "; not refined (L too ill-conditioned for a Cholesky solve)"
    return never_worse_than_identity(W, B, L, status, message, "ALM")


def never_worse_than_identity(
    W: np.ndarray, B: np.ndarray, L: np.ndarray, status: str, message: str, source: str
) -> tuple[np.ndarray, np.ndarray, str, str]:
    """Return (B, L, status, message), or the Laplace identity strategy (L = I, B = W: Phi = ||W||_F^2,
    Delta = 1, no bias) when that is less noisy or B L leaves a residual above FALLBACK_RESIDUAL ||W||_F
    (its bias ||(W - B L) x||^2 grows with the data); the status then says "identity fallback" and why.
    """
    identity_scale = float(np.einsum("ij,ij->", W, W))
    objective = unit_noise(B, L)
    residual = float(np.linalg.norm(W - B @ L))
    if objective >= identity_scale or residual > FALLBACK_RESIDUAL * math.sqrt(identity_scale):
        why = (
            f"{message}; ||W - B L||_F = {residual:.3g} ({residual / math.sqrt(identity_scale):.2g} ||W||_F) "
            f"and Phi Delta^2 = {objective:.4g} vs identity's ||W||_F^2 = {identity_scale:.4g}"
        )
        return (
            W.copy(),
            np.eye(W.shape[1]),
            "identity fallback",
            f"identity fallback: {source} {why}",
        )
    return B, L, status, message
