"""COA's program solved through its n-variable dual by projected Newton ("coa-dual"; not in the paper).

For weights y >= 0 on the constraints diag(X) = 1 of program (10) (theta = 0) and W = T F with
T orthonormal (m x r) and F of rank r = rank(W) (r x n), the dual function is

    phi(y) = 2 tr((F Y F')^1/2) - sum(y),   Y = diag(y)          (dp.queries.dual, Lemma 3 of COA),

concave in y because F Y F' is linear in y and the square root is operator concave. With
F Y F' = U diag(s^2) U' and B = F'U (n x r) every quantity comes from one r x r eigendecomposition:
- the primal point X(y) = B diag(1/s) B' = A'A with strategy A = diag(s)^-1/2 U'F and
  reconstruction R = T U diag(s)^1/2 (R A = T F = W), whose diagonal d = (B*B) (1/s) is
  grad phi + 1;
- the certificate: A rescaled to unit sensitivity has error max(d) sum(s); tr(S)^2 / sum(y) bounds
  every strategy from below (weak duality), so the relative gap is max(d) sum(y) / sum(s) - 1;
- the Hessian (Daleckii-Krein: the second divided difference of tr(M^1/2)): -hess(phi) v =
  rowsum(B * (B (Gamma * (B' diag(v) B)))) with Gamma_kl = 1 / (s_k s_l (s_k + s_l)), two GEMMs.

Newton directions come from Jacobi-preconditioned CG on that operator. When n > rank(W) (or on
some rank-deficient workloads) part of y* is 0, so the steps are projected (Bertsekas' projected
Newton): weights near 0 whose gradient pushes them down are set to 0, and a step may shrink any
other weight by at most `shrink` (a weight driven to 0 too early behaves like 2 sqrt(c y) - y,
where Newton recovers only geometrically). Armijo backtracking along the projected path.

Cost per iteration (r = rank W <= min(m, n)): one eigh of r x r (~9 r^3 with the D&C driver),
B = F'U (2 n r^2), each CG product 4 n r^2 (2-6 products per iteration in our runs), the certificate
nothing extra. No n x n Cholesky or inverse: n = 8192 at m = 1024 costs what n = 1024 does, times 8
in the GEMMs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
from scipy.linalg import eigh, qr

from dp.queries.coa import Costs
from dp.queries.schur_direction import preconditioned_cg
from dp.queries.strategy import Certificate, Iteration, Strategy, with_objective


@dataclass
class DualPoint:
    """The dual weights y with the spectral data of F Y F' = U diag(s^2) U' (B = F'U, d = diag X(y))."""

    y: np.ndarray
    s: np.ndarray
    U: np.ndarray
    B: np.ndarray
    d: np.ndarray

    @property
    def value(self) -> float:
        """phi(y) = 2 sum(s) - sum(y)."""
        return 2.0 * float(np.sum(self.s)) - float(np.sum(self.y))

    @property
    def objective(self) -> float:
        """Expected error (unit noise) of the strategy X(y) rescaled to unit sensitivity: max(d) sum(s)."""
        return float(np.max(self.d)) * float(np.sum(self.s))

    @property
    def lower_bound(self) -> float:
        """sum(s)^2 / sum(y): a lower bound on every strategy's error (weak duality)."""
        return float(np.sum(self.s)) ** 2 / float(np.sum(self.y))


def gram_factor(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (T, F) with W = T F, T'T = I (m x r) and r = rank(W), from the smaller Gram matrix.

    m <= n: T = the range of W W', F = T'W. m > n: E spans the range of W'W and W E = T F0 (QR),
    F = F0 E'. Either way T is orthonormal to rounding, so ||R||_F^2 = tr(S) for R = T U S^1/2.
    """
    m, n = W.shape
    small = W @ W.T if m <= n else W.T @ W
    lam, vectors = eigh(small, check_finite=False, driver="evd", overwrite_a=True)
    keep = (
        lam > lam[-1] * max(m, n) * np.finfo(float).eps
    )  # rank tolerance on squared singular values
    if m <= n:
        T = vectors[:, keep]
        return T, T.T @ W
    E = vectors[:, keep]
    T, F0 = qr(W @ E, mode="economic", check_finite=False)
    return T, F0 @ E.T


def distinct_cells(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (cells, group): one cell per distinct nonzero column of W, and each cell's index into
    `cells` (-1 for a cell no query touches).

    Cells with equal columns are indistinguishable to the workload: the dual depends only on the
    sum of their weights and the optimal strategy gives them equal columns, so the program is
    solved once per group (WRange at n > 2m has at most 2m + 1 distinct columns).
    """
    used = np.flatnonzero(np.any(W != 0, axis=0))
    _, first, inverse = np.unique(W[:, used], axis=1, return_index=True, return_inverse=True)
    group = np.full(W.shape[1], -1)
    group[used] = inverse.ravel()
    return used[first], group


def dual_point(F: np.ndarray, y: np.ndarray, costs: Costs) -> DualPoint | None:
    """Return the DualPoint at y, or None when F Y F' is numerically singular (phi has no Newton model)."""
    started = time.perf_counter()
    lam, U = eigh((F * y) @ F.T, check_finite=False, driver="evd", overwrite_a=True)
    middle = time.perf_counter()
    costs.eigen += middle - started
    if (
        not lam[0] > lam[-1] * np.finfo(float).eps
    ):  # gram_factor's rank tolerance keeps y = 1 above this
        return None
    s = np.sqrt(lam)
    B = F.T @ U
    d = (B * B) @ (1.0 / s)
    costs.gradient += time.perf_counter() - middle
    return DualPoint(y=y, s=s, U=U, B=B, d=d)


def rescaled(point: DualPoint) -> DualPoint:
    """Return the point at t y with the t maximizing phi(t y) (t = (sum s / sum y)^2; U, B unchanged)."""
    root = float(np.sum(point.s)) / float(np.sum(point.y))
    return DualPoint(y=point.y * root**2, s=point.s * root, U=point.U, B=point.B, d=point.d / root)


def newton_direction(
    point: DualPoint, free: np.ndarray, rtol: float, max_cg: int, costs: Costs, damping: float = 0.0
) -> tuple[np.ndarray, int]:
    """Return (Delta, CG steps): the damped Newton direction of phi on the free weights (zero elsewhere).

    Solves (-hess(phi)_FF + damping J) Delta_F = grad(phi)_F, J = diag(-hess(phi)_FF) (Marquardt's
    scaling), by Jacobi-preconditioned CG to relative residual rtol. The Hessian has rank at most
    r(r+1)/2, so for n beyond that (low-rank workloads) only the damping makes the system solvable.
    """
    s, B = point.s, point.B
    gamma = 1.0 / (s[:, None] * s[None, :] * (s[:, None] + s[None, :]))
    Bf = B[free]
    squares = Bf * Bf
    jacobi = np.einsum("ij,ij->i", squares @ gamma, squares)

    def apply(v: np.ndarray) -> np.ndarray:
        started = time.perf_counter()
        out = np.einsum("ij,ij->i", Bf @ (gamma * ((Bf.T * v) @ Bf)), Bf) + damping * jacobi * v
        costs.hessian += time.perf_counter() - started
        costs.counts["hessian"] += 1
        return out

    step, steps = preconditioned_cg(
        apply, point.d[free] - 1.0, 1.0 / ((1.0 + damping) * jacobi), max_cg, rtol
    )
    direction = np.zeros_like(point.y)
    direction[free] = step
    return direction, steps


def projected_step(
    F: np.ndarray,
    point: DualPoint,
    direction: np.ndarray,
    floor: np.ndarray,
    sigma: float,
    max_trials: int,
    costs: Costs,
) -> tuple[DualPoint | None, float]:
    """Return (new point, alpha): the first alpha = 2^-t with phi(y(alpha)) >= phi(y) + sigma <grad, y(alpha) - y>,
    y(alpha) = max(y + alpha Delta, floor) (Armijo along the projected path); (None, 0) if none of max_trials."""
    gradient, alpha = point.d - 1.0, 1.0
    for _ in range(max_trials):
        y = np.maximum(point.y + alpha * direction, floor)
        candidate = dual_point(F, y, costs)
        if candidate is not None and candidate.value >= point.value + sigma * float(
            gradient @ (y - point.y)
        ):
            return candidate, alpha
        alpha *= 0.5
    return None, 0.0


def _record(
    history: list, point: DualPoint, identity_error: float, started: float, step: float, inner: int
) -> None:
    gradient = point.d - 1.0
    projected = np.where((point.y <= 0) & (gradient < 0), 0.0, gradient)
    history.append(
        Iteration(
            iteration=len(history),
            objective=point.objective,
            error_ratio=point.objective / identity_error,
            gradient_norm=float(np.linalg.norm(projected)),
            step=step,
            inner=inner,
            seconds=time.perf_counter() - started,
        )
    )


def coa_dual_strategy(
    W: np.ndarray,
    gap_tol: float = 1e-3,
    max_iter: int = 100,
    max_time: float | None = None,
    rtol: float = 0.1,
    max_cg: int = 100,
    shrink: float = 0.1,
    active_tol: float = 1e-3,
    marquardt: float = 0.1,
    sigma: float = 1e-4,
    max_trials: int = 40,
) -> Strategy:
    """Return the optimal strategy for W (program (10), theta = 0) by projected Newton on the dual.

    Starts at equal weights; stops at the first y whose duality gap is <= gap_tol ("converged"),
    or at max_iter / max_time ("max_iter", "time_limit"; "line_search_failed", "rounding" when the
    returned matrices' certificate misses gap_tol by rounding). Weights <= active_tol * mean(y) with a negative gradient are set
    to 0 (the active set); other weights shrink by at most `shrink` per step.
    """
    if not (0 < gap_tol < 1 and 0 < rtol < 1 and 0 < shrink < 1 and 0 < active_tol < 1):
        raise ValueError(
            f"gap_tol, rtol, shrink and active_tol must lie in (0, 1), got "
            f"{gap_tol}, {rtol}, {shrink}, {active_tol}"
        )
    started, costs, history = time.perf_counter(), Costs(), []
    cells, group = distinct_cells(W)
    T, F = gram_factor(W[:, cells])
    point = dual_point(F, np.ones(F.shape[1]), costs)
    if point is None:
        raise FloatingPointError(
            "the dual at equal weights is singular; the workload's Gram factor is degenerate"
        )
    point, step, inner, status = rescaled(point), 0.0, 0, "max_iter"
    identity_error = float(np.sum(W * W))
    for iteration in range(max_iter + 1):
        _record(history, point, identity_error, started, step, inner)
        if point.objective <= point.lower_bound * (1 + gap_tol):
            status = "converged"
            break
        if iteration == max_iter or (
            max_time is not None and time.perf_counter() - started > max_time
        ):
            status = "max_iter" if iteration == max_iter else "time_limit"
            break
        gradient = point.d - 1.0
        active = (point.y <= active_tol * np.mean(point.y)) & (gradient < 0)
        damping = marquardt * float(
            np.max(np.abs(gradient[~active]))
        )  # -> 0 near the optimum: fast local rate
        direction, inner = newton_direction(point, ~active, rtol, max_cg, costs, damping)
        direction[active] = -point.y[active]
        if not np.all(np.isfinite(direction)):
            raise FloatingPointError(
                f"COA dual diverged: non-finite Newton direction at iteration {iteration}"
            )
        costs.counts["newton"] += 1
        floor = np.where(active, 0.0, shrink * point.y)
        new, step = projected_step(F, point, direction, floor, sigma, max_trials, costs)
        if new is None:
            status = "line_search_failed"
            break
        point = new
    return _strategy(W, T, F, group, point, history, costs, status, gap_tol, started)


def _strategy(
    W,
    T,
    F,
    group,
    point: DualPoint,
    history,
    costs: Costs,
    status: str,
    gap_tol: float,
    started: float,
) -> Strategy:
    """Return the Strategy A = diag(s)^-1/2 U'F / sqrt(max d) (each cell gets its group's column, unused
    cells 0) and R = T U diag(s)^1/2 sqrt(max d), so that R A = W; info["weights"]: the dual weight
    of each cell (a group's weight split evenly)."""
    scale = np.sqrt(float(np.max(point.d)))
    used = group >= 0
    A = np.zeros((F.shape[0], W.shape[1]))
    A[:, used] = ((point.U.T @ F) / (np.sqrt(point.s)[:, None] * scale))[:, group[used]]
    R = (T @ point.U) * (np.sqrt(point.s) * scale)
    weights = np.zeros(W.shape[1])
    weights[used] = point.y[group[used]] / np.bincount(group[used])[group[used]]
    strategy = with_objective(
        Strategy(method="coa-dual", matrix=A, reconstruction=R, noise="gaussian")
    )
    certificate = Certificate(
        objective=strategy.objective, lower_bound=point.lower_bound
    )  # of the matrices returned
    if status == "converged" and certificate.gap > gap_tol:
        status = (
            "rounding"  # the eigendecomposition's rounding moved the returned strategy past gap_tol
        )
    message = (
        f"duality gap {certificate.gap:.2e} ({'<=' if certificate.gap <= gap_tol else '>'} {gap_tol:g}) "
        f"after {len(history) - 1} projected Newton iterations on the dual over {point.y.size} distinct "
        f"cells; {int(np.sum(point.y == 0))} weights at 0"
    )
    return replace(
        strategy,
        history=tuple(history),
        status=status,
        message=message,
        certificate=certificate,
        seconds=time.perf_counter() - started,
        info={
            "theta": 0.0,
            "costs": costs,
            "weights": weights,
            "rank": F.shape[0],
            "distinct_cells": point.y.size,
        },
    )
