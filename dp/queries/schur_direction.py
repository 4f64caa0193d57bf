"""The exact Newton direction of COA's program (15) from an n-variable system on the multipliers.

Faster companion of Alg. 2 (not in the paper). With X = L L' and the eigendecomposition
L^-1 V L^-T = E diag(lam) E', the congruence S = L E turns the Hessian operator of eq. (11)
into a diagonal one: H(S T S') = S^-T (T diag(lam) + diag(lam) T) S^-1. The stationarity
condition of program (15) with multipliers mu on diag(D) = 0 then reads

    D = X / 2 - S ((S' diag(mu) S) / (lam_k + lam_l)) S',   with K mu = diag(X) / 2 = 1/2,

where K mu = diag(S ((S' diag(mu) S) / (lam_k + lam_l)) S') is symmetric positive definite of
size n. K is well conditioned in practice (5-15 CG steps to 1e-6), so the direction is the exact
Newton step at the cost of one eigendecomposition and ~10 products of two GEMMs each, where
Alg. 2 on the n(n-1)/2 off-diagonal unknowns needs many more steps as theta shrinks.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.linalg import eigh


def schur_newton_direction(
    X: np.ndarray,
    L: np.ndarray,
    U: np.ndarray,
    max_cg: int = 200,
    rtol: float = 1e-6,
    costs=None,
    warm: dict | None = None,
) -> tuple[np.ndarray, int]:
    """Return (D, CG steps): the Newton direction with zero diagonal, for X = L L' and U = L^-1 Q.

    warm: a dict carried across Newton iterations; CG starts from its "mu" (the previous
    iteration's multipliers, which change little between iterates) and stores the new ones there.
    """
    started = time.perf_counter()
    lam, E = eigh(U @ U.T, check_finite=False, driver="evd")
    lam = np.clip(
        lam, lam[-1] * 1e-15, None
    )  # rounding may leave the smallest eigenvalues a hair below 0
    S = L @ E
    inverse_sums = 1.0 / (lam[:, None] + lam[None, :])
    if costs is not None:
        costs.eigen += time.perf_counter() - started

    def core(mu: np.ndarray) -> np.ndarray:
        return ((S * mu[:, None]).T @ S) * inverse_sums

    def apply_k(mu: np.ndarray) -> np.ndarray:
        started = time.perf_counter()
        out = np.einsum("ij,ij->i", S @ core(mu), S)
        if costs is not None:
            costs.hessian += time.perf_counter() - started
            costs.counts["hessian"] += 1
        return out

    squares = S * S
    jacobi = np.einsum("ij,ij->i", squares @ inverse_sums, squares)  # diag(K)
    start = None if warm is None else warm.get("mu")
    mu, steps = preconditioned_cg(apply_k, 0.5 * np.diag(X), 1.0 / jacobi, max_cg, rtol, start)
    if warm is not None:
        warm["mu"] = mu
    D = X / 2 - S @ core(mu) @ S.T
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, 0.0)
    return D, steps


def preconditioned_cg(
    apply,
    b: np.ndarray,
    inv_diag: np.ndarray,
    max_steps: int,
    rtol: float,
    start: np.ndarray | None = None,
):
    """Return (x, steps) with ||apply(x) - b|| <= rtol ||b|| by Jacobi-preconditioned CG from `start` (or 0)
    (earlier if the operator shows no positive curvature along a search direction)."""
    x = np.zeros_like(b) if start is None else start.copy()
    residual = b.copy() if start is None else b - apply(x)
    target = rtol * np.linalg.norm(b)
    if np.linalg.norm(residual) <= target:
        return x, 0
    z = residual * inv_diag
    direction = z.copy()
    rho = float(residual @ z)
    steps = 0
    for steps in range(1, max_steps + 1):  # noqa: B007 (the count is read after the loop)
        Ad = apply(direction)
        curvature = float(direction @ Ad)
        if not curvature > 0:  # a singular (semi-definite) operator: stop at the last iterate
            break
        step = rho / curvature
        x += step * direction
        residual -= step * Ad
        if np.linalg.norm(residual) <= target:
            break
        z = residual * inv_diag
        rho_new = float(residual @ z)
        direction = z + (rho_new / rho) * direction
        rho = rho_new
    return x, steps
