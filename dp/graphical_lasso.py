"""Graphical lasso by ADMM (Boyd et al. 2011, sec. 6.5; Su et al. eq. 2.6-2.8, Alg. 2 step 4)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import eigh
from threadpoolctl import threadpool_limits


@dataclass
class GraphicalLassoResult:
    """Solution of the graphical lasso and how the solver got there (scipy.optimize style)."""

    precision: np.ndarray  # Z iterate: sparse, symmetric
    objective: float  # glasso_objective at `precision`
    n_iter: int
    converged: bool
    message: str
    rho: float  # final penalty parameter (after residual balancing)
    dual: np.ndarray  # scaled dual U, for warm starts
    primal_residuals: list = field(default_factory=list)
    dual_residuals: list = field(default_factory=list)


def glasso_objective(
    theta: np.ndarray, S: np.ndarray, alpha: float, penalize_diagonal: bool = False
) -> float:
    """Return -log det Theta + tr(S Theta) + alpha ||Theta||_1 (Su et al. eq. 1.2; inf if not PD).

    With penalize_diagonal=False the l1 norm runs over off-diagonal entries only (scikit-learn).
    """
    sign, logdet = np.linalg.slogdet(theta)
    if sign <= 0:
        return np.inf
    l1 = np.abs(theta).sum()
    if not penalize_diagonal:
        l1 -= np.abs(np.diag(theta)).sum()
    return float(-logdet + np.sum(S * theta) + alpha * l1)


def _theta_step(S: np.ndarray, Z: np.ndarray, U: np.ndarray, rho: float) -> np.ndarray:
    """Return argmin -log det T + tr(S T) + rho/2 ||T - Z + U||_F^2 (Boyd et al. sec. 6.5).

    Optimality rho T - T^{-1} = rho (Z - U) - S; in the eigenbasis of the right-hand side each
    eigenvalue l maps to the positive root (l + sqrt(l^2 + 4 rho)) / (2 rho).
    """
    lam, Q = eigh(rho * (Z - U) - S, overwrite_a=True, check_finite=False)
    root = np.sqrt(lam * lam + 4.0 * rho)
    # the cancellation-free form for negative l keeps small eigenvalues of T accurate
    theta = np.where(lam >= 0, (lam + root) / (2.0 * rho), 2.0 / np.maximum(root - lam, 1e-300))
    return (Q * theta) @ Q.T


def _soft_threshold(A: np.ndarray, kappa: float, penalize_diagonal: bool) -> np.ndarray:
    Z = np.sign(A) * np.maximum(np.abs(A) - kappa, 0.0)
    if not penalize_diagonal:
        np.fill_diagonal(Z, np.diag(A))
    return Z


def admm_graphical_lasso(
    S: np.ndarray,
    alpha: float,
    rho: float | None = None,
    tol: float = 1e-4,
    max_iter: int = 1000,
    penalize_diagonal: bool = False,
    adaptive_rho: bool = True,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    blas_threads: int | None = 1,
) -> GraphicalLassoResult:
    """Return the graphical lasso solution for a symmetric S by scaled-form ADMM (Boyd 6.5).

    Theta step by eigen-decomposition, Z step by soft thresholding at alpha/rho, U += Theta - Z.
    Stops when the primal residual ||Theta - Z||_F and the dual residual rho ||Z - Z_old||_F are
    below tol times the size of the iterates they compare with (`_tolerances`: relative, so
    rescaling the data never changes when the solver stops). With adaptive_rho,
    rho is rebalanced (x or / 2 when one residual, relative to its tolerance, exceeds 10x the
    other; Boyd eq. 3.13 with Wohlberg's 2017 normalization).
    rho=None picks (mean |S_ii|)^2: Theta scales like 1/S, so this makes the iterates
    invariant to rescaling the data (ADMM is slow when rho is off by orders of magnitude).
    `init=(Z, U)` warm-starts (U scaled for the given rho). S may be indefinite (noisy).
    `blas_threads` caps BLAS threads (None: leave as is); below p ~ 500 one thread is several
    times faster, since thread start-up dominates a small eigen-decomposition.
    """
    if rho is None:
        scale = np.abs(np.diag(S)).mean()
        rho = scale * scale if scale > 0 else 1.0
    if blas_threads is None:
        return _admm(S, alpha, rho, tol, max_iter, penalize_diagonal, adaptive_rho, init)
    with threadpool_limits(blas_threads):
        return _admm(S, alpha, rho, tol, max_iter, penalize_diagonal, adaptive_rho, init)


def _tolerances(theta, Z, U, S_norm, rho, tol) -> tuple[float, float]:
    """Return the relative primal and dual tolerances (Boyd eq. 3.12 with eps_abs = 0).

    The primal residual Theta - Z is measured against the iterates, the dual residual
    rho (Z - Z_old) against the terms of the optimality condition S - Theta^-1 + rho U = 0 (S and
    the unscaled dual rho U), as OSQP does. Both sides scale alike when S is rescaled, so the
    rule stops at the same iterate for X and c X; an absolute term (p * tol) would not.
    """
    tiny = np.finfo(float).tiny
    eps_pri = tol * max(np.linalg.norm(theta), np.linalg.norm(Z), tiny)
    eps_dual = tol * max(S_norm, rho * np.linalg.norm(U), tiny)
    return eps_pri, eps_dual


def _admm(
    S, alpha, rho, tol, max_iter, penalize_diagonal, adaptive_rho, init
) -> GraphicalLassoResult:
    p = S.shape[0]
    if init is None:
        d = np.diag(S).mean() + alpha
        Z = np.eye(p) / d if d > 0 else np.eye(p)
        U = np.zeros((p, p))
    else:
        Z, U = init[0].copy(), init[1].copy()
    S_norm = np.linalg.norm(S)
    primal, dual = [], []
    converged = False
    message = f"iteration limit ({max_iter}) reached"
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (the count is read after the loop)
        theta = _theta_step(S, Z, U, rho)
        Z_old = Z
        Z = _soft_threshold(theta + U, alpha / rho, penalize_diagonal)
        U += theta - Z
        r = np.linalg.norm(theta - Z)
        s = rho * np.linalg.norm(Z - Z_old)
        primal.append(r)
        dual.append(s)
        eps_pri, eps_dual = _tolerances(theta, Z, U, S_norm, rho, tol)
        if r <= eps_pri and s <= eps_dual:
            converged = True
            message = "converged: primal and dual residuals below tolerance"
            break
        if not (np.isfinite(r) and np.isfinite(s)):
            message = "diverged: non-finite residual"
            break
        if adaptive_rho:
            # balance residuals relative to their own scales (Wohlberg 2017): r lives on the
            # scale of Theta, s on the scale of S, so comparing them raw is not scale-invariant
            r_rel = r / max(eps_pri, 1e-300)
            s_rel = s / max(eps_dual, 1e-300)
            if r_rel > 10.0 * s_rel:
                rho *= 2.0
                U /= 2.0
            elif s_rel > 10.0 * r_rel:
                rho /= 2.0
                U *= 2.0
    Z = (Z + Z.T) / 2.0
    objective = glasso_objective(Z, S, alpha, penalize_diagonal)
    if not np.isfinite(objective):
        # Z can sit a hair outside the PD cone before convergence; Theta never does
        objective = glasso_objective(theta, S, alpha, penalize_diagonal)
    return GraphicalLassoResult(Z, objective, it, converged, message, rho, U, primal, dual)


def graphical_lasso_path(S: np.ndarray, alphas, **kwargs) -> list[GraphicalLassoResult]:
    """Return one GraphicalLassoResult per alpha, each warm-started from the previous solution.

    Pass alphas in decreasing order (sparse to dense) so each start is close to the next answer.
    Each step restarts rho from its initial value (a rho balanced for a sparser problem is a poor
    start) and carries the unscaled dual V = rho U over, rescaled by alpha_new / alpha_old since
    at the optimum V lies in alpha times the subdifferential of the l1 norm.
    """
    results = []
    init = kwargs.pop("init", None)
    rho = kwargs.pop("rho", None)
    if rho is None:
        scale = np.abs(np.diag(S)).mean()
        rho = scale * scale if scale > 0 else 1.0
    previous = None
    for alpha in alphas:
        alpha = float(alpha)
        if previous is not None:
            last = results[-1]
            factor = (alpha / previous if previous > 0 else 1.0) * last.rho / rho
            init = (last.precision, last.dual * factor)
        results.append(admm_graphical_lasso(S, alpha, rho=rho, init=init, **kwargs))
        previous = alpha
    return results
