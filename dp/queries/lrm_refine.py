"""Refine an exact LRM decomposition on the objective the release pays: tr(B^T B) with B = W L^+.

The LRM paper's Formula (7) asks for W = B L exactly with every column of L in the unit L1 ball; for a
fixed L the best exact B is W L^+ (the matrix mechanism's reconstruction), so (7) is

    minimize f(L) = ||W L^+||_F^2  subject to  sum_i |L_ij| <= 1 for every column j,

over the L whose row space holds W's rows (then W L^+ L = W). Its gradient there is
-2 B^T B (L^+)^T with B = W L^+ (the rows of this gradient lie in L's row space, so a step along it
keeps W = B L to first order). We run spectral projected gradient with the exact column-wise
L1-ball projection (refine_decomposition): a point is accepted only if W stays in the row space
of it, and the best point is returned, so the result is never worse than its start. When L has
rank n (r >= n) every L is exact and this is the L1-sensitivity matrix-mechanism program
tr(W^T W (L^T L)^-1) that HDMM's epsilon-DP optimizer searches over p-Identity strategies; when
r < n, L1 steps that leave W's row space are refused and the refinement stops early. This step
is ours, not the paper's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from dp.queries.l1_ball import project_columns_l1

# W is in the row space of L when ||W - W L^+ L||_F <= EXACT_TOL ||W||_F (Cholesky-based L^+)
EXACT_TOL = 1e-8
NONMONOTONE_MEMORY = 10  # SPG accepts a step against the largest of the last 10 objectives
ARMIJO = 1e-4  # sufficient-decrease constant of the line search
ALPHA_RANGE = (
    1e-10,
    1e6,
)  # the Barzilai-Borwein step is kept within these multiples of the first one
MIN_LAMBDA = 1e-12  # the line search gives up below this fraction of the direction


@dataclass(frozen=True)
class ExactFit:
    """f = ||W L^+||_F^2 and its gradient in L for one L whose row space holds W."""

    scale: float
    gradient: np.ndarray


@dataclass
class Refinement:
    """The refined L, its exact B = W L^+ and the objective before and after."""

    B: np.ndarray
    L: np.ndarray
    start_scale: float  # f(L0) = ||W L0^+||_F^2
    scale: float  # f(L) of the result, <= start_scale
    iterations: int
    status: str  # "converged" | "iteration limit" | "time limit" | "no decrease"
    message: str
    seconds: float
    history: list[float] = field(default_factory=list)  # f after every accepted step


def exact_fit(W: np.ndarray, L: np.ndarray, gram: np.ndarray | None = None) -> ExactFit | None:
    """Return f = ||W L^+||_F^2 and its gradient when W lies in the row space of L (to EXACT_TOL), else None.

    r >= n (L of rank n): in R^n with M = (L^T L)^-1 and G = W^T W (pass `gram` to reuse it),
    f = tr(G M) and gradient -2 L M G M; exact when ||I - M L^T L||_F <= EXACT_TOL (then
    ||W - W L^+ L||_F <= EXACT_TOL ||W||_F). O(n^3 + r n^2) instead of O(m n r). r < n: B = W L^+
    by a Cholesky solve on L L^T, checked directly, gradient -2 B^T B (L^+)^T. None also when the
    Gram matrix is singular.
    """
    r, n = L.shape
    try:
        if r >= n:
            return _full_rank_fit(W.T @ W if gram is None else gram, L)
        pinv = scipy.linalg.cho_solve(scipy.linalg.cho_factor(L @ L.T), L, check_finite=False).T
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
        return None
    B = W @ pinv
    if not np.all(np.isfinite(B)) or np.linalg.norm(W - B @ L) > EXACT_TOL * np.linalg.norm(W):
        return None
    return ExactFit(scale=float(np.einsum("ij,ij->", B, B)), gradient=-2.0 * (B.T @ B) @ pinv.T)


def _full_rank_fit(gram: np.ndarray, L: np.ndarray) -> ExactFit | None:
    """Return exact_fit for r >= n from G = W^T W (raises LinAlgError when L^T L is singular)."""
    normal = L.T @ L
    M = scipy.linalg.cho_solve(
        scipy.linalg.cho_factor(normal), np.eye(L.shape[1]), check_finite=False
    )
    defect = M @ normal
    defect[np.diag_indices_from(defect)] -= 1.0
    if not np.all(np.isfinite(M)) or np.linalg.norm(defect) > EXACT_TOL:
        return None
    GM = gram @ M
    return ExactFit(scale=float(np.trace(GM)), gradient=-2.0 * L @ (M @ GM))


def exact_reconstruction_B(W: np.ndarray, L: np.ndarray) -> np.ndarray:
    """Return B = W L^+ (least squares) by a Cholesky solve on the smaller Gram matrix of L."""
    if L.shape[0] >= L.shape[1]:
        return W @ scipy.linalg.cho_solve(scipy.linalg.cho_factor(L.T @ L), L.T, check_finite=False)
    return W @ scipy.linalg.cho_solve(scipy.linalg.cho_factor(L @ L.T), L, check_finite=False).T


def refine_decomposition(
    W, L0, max_iter: int = 2000, tol: float = 1e-6, max_time: float | None = None
) -> Refinement:
    """Return L minimizing ||W L^+||_F^2 over unit-L1 columns by spectral projected gradient from L0.

    The spectral projected gradient of Birgin, Martinez and Raydan (SIAM J. Optim. 2000; the
    method the LRM paper's App. B uses for AMM): direction d = P(L - alpha grad) - L with the
    Barzilai-Borwein step alpha, a non-monotone Armijo search along d against the largest of the
    last NONMONOTONE_MEMORY objectives, and the best iterate kept, so the result is never worse
    than L0. L0 must be exact (W in its row space; ValueError otherwise). Stops when the best f
    improved by less than tol f over the last NONMONOTONE_MEMORY steps ("converged"), after
    max_iter steps or max_time seconds, or when the search finds no exact point ("no decrease").
    """
    W = np.asarray(W, dtype=np.float64)
    start = time.perf_counter()
    L = project_columns_l1(L0)
    gram = W.T @ W if L.shape[0] >= L.shape[1] else None
    fit = exact_fit(W, L, gram)
    if fit is None:
        raise ValueError(
            "refine_decomposition needs an exact start: W must lie in the row space of L0"
        )
    best_L, best, history = L, fit, [fit.scale]
    gradient = fit.gradient
    alpha = 1.0 / max(np.abs(gradient).max(), np.finfo(np.float64).tiny)
    alpha_range = (ALPHA_RANGE[0] * alpha, ALPHA_RANGE[1] * alpha)
    status, iteration = "iteration limit", 0
    for iteration in range(1, max_iter + 1):  # noqa: B007 (the count is read after the loop)
        direction = project_columns_l1(L - alpha * gradient) - L
        slope = float(np.einsum("ij,ij->", gradient, direction))
        L_new, fit_new = _nonmonotone_search(
            W, L, direction, slope, max(history[-NONMONOTONE_MEMORY:]), gram
        )
        if fit_new is None:
            status = "no decrease"
            break
        gradient_new = fit_new.gradient
        alpha = _barzilai_borwein(L_new - L, gradient_new - gradient, alpha_range)
        L, fit, gradient = L_new, fit_new, gradient_new
        history.append(fit.scale)
        if fit.scale < best.scale:
            best_L, best = L, fit
        if max_time is not None and time.perf_counter() - start > max_time:
            status = "time limit"
            break
        if (
            len(history) > NONMONOTONE_MEMORY
            and min(history[:-NONMONOTONE_MEMORY]) - best.scale <= tol * best.scale
        ):
            status = "converged"
            break
    message = (
        f"refinement {status} after {iteration} steps: ||W L^+||_F^2 {history[0]:.6g} -> {best.scale:.6g} "
        f"({best.scale / history[0]:.4f} of the start)"
    )
    return Refinement(
        B=exact_reconstruction_B(W, best_L),
        L=best_L,
        start_scale=history[0],
        scale=best.scale,
        iterations=iteration,
        status=status,
        message=message,
        seconds=time.perf_counter() - start,
        history=history,
    )


def _barzilai_borwein(s: np.ndarray, y: np.ndarray, bounds: tuple[float, float]) -> float:
    """Return the spectral step <s, s> / <s, y> clipped to `bounds` (the upper one if <s, y> <= 0)."""
    curvature = float(np.einsum("ij,ij->", s, y))
    if curvature <= 0:
        return bounds[1]
    return min(max(float(np.einsum("ij,ij->", s, s)) / curvature, bounds[0]), bounds[1])


def _nonmonotone_search(W, L, direction, slope, reference, gram):
    """Return (L + lam d, its ExactFit) for the first lam = 1, 1/2, ... passing the Armijo test, or (L, None)."""
    lam = 1.0
    while lam >= MIN_LAMBDA:
        candidate = L + lam * direction  # a convex combination of two points of the ball: inside it
        fit = exact_fit(W, candidate, gram)
        if fit is not None and fit.scale <= reference + ARMIJO * lam * slope:
            return candidate, fit
        lam /= 2.0
    return L, None


__all__ = ["ExactFit", "Refinement", "exact_fit", "exact_reconstruction_B", "refine_decomposition"]
