"""The Low-Rank Mechanism's decomposition W ~ B L by the inexact augmented Lagrangian method.

LRM paper (Yuan et al., VLDB 2012), Alg. 1 on Formula (8): B in closed form (Eq. (9)), L by
Nesterov's accelerated projected gradient on the quadratic (10) (Alg. 2), each column projected
onto the unit L1 ball exactly (dp.queries.l1_ball). Ours, measured where they are: the penalty's
starting value (BETA0_BALANCE), the schedule with revival (REVIVED_SCHEDULE) and the revival of
rows the projection zeroes (revive_dead_rows; without it Alg. 1 stalls).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from dp.queries.l1_ball import project_columns_l1, projected_gradient_step
from dp.queries.strategy import column_sensitivity

DEFAULT_RANK_FACTOR = 1.2  # r = 1.2 rank(W): LRM paper sec. 6.1, Fig. 3
BETA_DOUBLING_PERIOD = 10  # Alg. 1, lines 10-11: beta doubles every 10 outer iterations
# (Alg. 2 steps per outer iteration, outer iterations per doubling of beta). The paper prints the
# doubling period, not N_in; revive=False keeps 10 and 10, as this module always did.
PAPER_SCHEDULE = (10, BETA_DOUBLING_PERIOD)
# Ours, with revive=True: the same 100 Alg. 2 steps per penalty, but B updated half as often and L
# solved twice as far for each B. Measured (m = 256, n = 1024, 1 BLAS thread, side by side with the
# paper's schedule): WDiscrete 0.40 x identity in 1,284 steps against 0.89 in 1,540; WRange 0.39
# converged in 1,760 steps against 0.56 at the beta limit; (15, 5) 0.43, (30, 4) 0.42, (50, 2)
# 0.49, (20, 10) 0.38 in 2,378 steps, (5, 20) beta limit.
REVIVED_SCHEDULE = (20, 5)
# Alg. 1 starts at beta = 1, which is only meaningful at one scale of L: with L's columns in the
# unit L1 ball, lambda_max(L L^T) ~ n / r^2, and at beta lambda_max << 1 the ridge term of Eq. (9)
# shrinks B to nothing in the first step (directions die and never return; measured: residual
# stuck at 40-80 % of ||W||_F). We start at beta0 = BETA0_BALANCE / lambda_max(L0 L0^T) instead,
# where penalty and ridge are of the same order; 10 gave the lowest objective of {1, 3, 10, 30}
# on WDiscrete, WRange and WRelated (m = 64, n = 128).
BETA0_BALANCE = 10.0
PHASES = ("B update (Eq. 9)", "L update (Alg. 2)", "residual and multiplier")
PROJECTION = "of which projected step"  # part of the L update (fused step + L1 projection), reported beside it


@dataclass(frozen=True)
class ALMIterate:
    """One outer iteration of Alg. 1: where the penalty, the residual and the objective stood."""

    outer: int
    beta: float
    residual: float  # tau = ||W - B L||_F (Alg. 1, line 7)
    scale: float  # Phi(B, L) = tr(B^T B) (Definition 1)
    sensitivity: float  # Delta(B, L) = max_j sum_i |L_ij| (Definition 2)
    inner_iterations: int
    seconds: float


@dataclass
class LowRankDecomposition:
    """B (m x r) and L (r x n) with W ~ B L; how and why the solver stopped."""

    B: np.ndarray
    L: np.ndarray
    gamma: float
    residual: float
    status: str  # "converged" | "beta limit" | "iteration limit" | "time limit"
    message: str
    n_outer: int
    n_inner: int
    seconds: float
    history: list[ALMIterate] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        """Return r, the number of columns of B (rows of L)."""
        return self.L.shape[0]

    @property
    def sensitivity(self) -> float:
        """Return Delta(B, L): the largest column L1 norm of L (Definition 2)."""
        return column_sensitivity(self.L, "laplace")

    @property
    def scale(self) -> float:
        """Return Phi(B, L) = tr(B^T B) (Definition 1)."""
        return float(np.einsum("ij,ij->", self.B, self.B))

    @property
    def objective(self) -> float:
        """Return Phi Delta^2, the epsilon-free part of the noise error of Lemma 1."""
        return unit_noise(self.B, self.L)

    @property
    def converged(self) -> bool:
        """Return True when ||W - B L||_F <= gamma was reached."""
        return self.status == "converged"


def unit_noise(B: np.ndarray, L: np.ndarray) -> float:
    """Return Phi Delta^2 = tr(B^T B) max_j ||L_:j||_1^2: Lemma 1's noise error without 2 / epsilon^2."""
    return float(np.einsum("ij,ij->", B, B)) * column_sensitivity(L, "laplace") ** 2


class DecompositionDiverged(ArithmeticError):
    """The iterates of Alg. 1 became NaN or infinite."""


def default_rank(W: np.ndarray) -> int:
    """Return ceil(1.2 rank(W)), the seed's default number of rows of L (sec. 6.1)."""
    return max(1, math.ceil(DEFAULT_RANK_FACTOR * np.linalg.matrix_rank(W)))


def update_B(W_plus: np.ndarray, L: np.ndarray, beta: float) -> np.ndarray:
    """Return B = (beta W + pi) L^T (beta L L^T + I)^-1 (LRM paper, Eq. (9)).

    `W_plus` is beta W + pi; the r x r system is solved by Cholesky (it is SPD).
    """
    gram = beta * (L @ L.T)
    gram[np.diag_indices_from(gram)] += 1.0
    rhs = W_plus @ L.T
    return scipy.linalg.cho_solve(scipy.linalg.cho_factor(gram), rhs.T, check_finite=False).T


def nesterov_projected_gradient(
    gram: np.ndarray,
    linear: np.ndarray,
    L0: np.ndarray,
    max_iter: int,
    tol: float,
    threads: int | None = None,
) -> tuple[np.ndarray, int, float]:
    """Return (L, iterations, seconds in the fused projected step) minimizing 1/2 <L, gram L> - <linear, L> over
    unit-L1 columns.

    LRM paper, Alg. 2 on Formula (10) with gram = beta B^T B and linear = B^T (beta W + pi).
    The step 1/omega uses the exact Lipschitz constant omega = lambda_max(gram) of the gradient,
    so the sufficient-decrease test of lines 11-12 always holds and the backtracking of line 7
    never doubles omega; it is therefore not evaluated (one r^2 n product per step instead of
    two). Stops when ||S - L|| <= tol ||L|| (line 9, relative) or after max_iter steps. Each step
    is one BLAS product and one fused pass (dp.queries.l1_ball.projected_gradient_step, split
    over `threads` threads, default all cores).
    """
    omega = max(largest_eigenvalue(gram), np.finfo(np.float64).tiny)
    current = np.array(L0, dtype=np.float64, order="C")  # the caller's L0 is left alone
    search, following, gradient = current.copy(), np.empty_like(current), np.empty_like(current)
    delta = 1.0
    stepping = 0.0
    for t in range(1, max_iter + 1):  # four r x n buffers, no temporaries  # noqa: B007
        np.matmul(gram, search, out=gradient)
        delta_prev, delta = delta, (1.0 + math.sqrt(1.0 + 4.0 * delta * delta)) / 2.0
        started = time.perf_counter()
        distance, size = projected_gradient_step(
            search,
            gradient,
            linear,
            omega,
            current,
            following,
            momentum=(delta_prev - 1.0) / delta,
            threads=threads,
        )
        stepping += time.perf_counter() - started
        current, following = following, current
        if distance <= tol * max(size, 1.0):
            break
    return current, t, stepping


def largest_eigenvalue(symmetric: np.ndarray) -> float:
    """Return the largest eigenvalue of a symmetric positive semi-definite r x r matrix."""
    top = symmetric.shape[0] - 1
    return float(
        scipy.linalg.eigvalsh(symmetric, subset_by_index=[top, top], check_finite=False)[0]
    )


def random_feasible_L(W: np.ndarray, rank: int, random_state) -> np.ndarray:
    """Return a seeded standard Gaussian r x n matrix with every column projected onto the L1 ball."""
    return project_columns_l1(
        np.random.default_rng(random_state).standard_normal((rank, W.shape[1]))
    )


def svd_feasible_L(W: np.ndarray, rank: int, random_state) -> np.ndarray:
    """Return L0 = S_k^(1/2) V_k^T of W = U S V^T, scaled so its largest column L1 norm is 1.

    With B0 = U_k S_k^(1/2) this is the exact factorization W = B0 L0 when r >= rank(W) (scaling
    L by c and B by 1/c leaves B L and Phi Delta^2 unchanged, so the start is feasible). Rows
    beyond k = min(r, rank(W)) are small seeded Gaussian rows (1e-3 of the mean row norm): zero
    rows would give zero columns of B in Eq. (9) and zero gradient, so they could never be used.
    """
    U, S, Vt = np.linalg.svd(W, full_matrices=False)
    k = min(rank, int(np.count_nonzero(S > S[0] * max(W.shape) * np.finfo(np.float64).eps)))
    L = np.sqrt(S[:k])[:, None] * Vt[:k]
    if rank > k:
        pad = np.random.default_rng(random_state).standard_normal((rank - k, W.shape[1]))
        pad *= 1e-3 * np.linalg.norm(L) / math.sqrt(k) / np.linalg.norm(pad) * math.sqrt(rank - k)
        L = np.vstack([L, pad])
    return L / np.abs(L).sum(axis=0).max()


def revive_dead_rows(L: np.ndarray, gap: np.ndarray) -> np.ndarray:
    """Return L with its all-zero rows set to the directions W - B L misses most, columns re-projected.

    The L1 projection can zero a whole row of L; Eq. (9) then gives B a zero column, the
    gradient of Formula (10) on that row vanishes and the row is lost for good (measured on
    WRange 1024 x 256, r = 308: 14 dead rows after the first outer iteration, 60 after 30, rank
    L 247 < rank W = 256, ||W - B L||_F stuck at 2.2 % of ||W||_F). Each dead row becomes one of
    the leading right singular vectors of the residual `gap` = W - B L (the directions of R^n the
    product lacks), with the median L2 norm of the live rows, so that it survives the next
    projection and the next B update (Eq. (9)) can use it.
    """
    dead = np.flatnonzero(~np.any(L, axis=1))
    if dead.size == 0 or dead.size == L.shape[0]:
        return L
    L = L.copy()
    directions = np.linalg.svd(gap, full_matrices=False)[2][: dead.size]
    live_norm = float(np.median(np.linalg.norm(np.delete(L, dead, axis=0), axis=1)))
    L[dead[: directions.shape[0]]] = live_norm * directions
    return project_columns_l1(L)


INITIAL_L = {"svd": svd_feasible_L, "random": random_feasible_L}


def _alm_start(W, rank: int, init: str, beta0: float | None, random_state):
    """Return (L0, beta0) of Alg. 1: the chosen start of L and the penalty balancing it (BETA0_BALANCE)."""
    if init not in INITIAL_L:
        raise ValueError(f"init must be one of {', '.join(INITIAL_L)}, got {init!r}")
    L = INITIAL_L[init](W, rank, random_state)
    beta = (
        BETA0_BALANCE / largest_eigenvalue(L @ L.T)
        if beta0 is None
        else check_positive(beta0, "beta0")
    )
    return L, beta


def low_rank_decomposition(
    W,
    rank: int | None = None,
    gamma: float = 0.01,
    max_outer: int = 2000,
    max_inner: int | None = None,
    inner_tol: float = 1e-6,
    beta0: float | None = None,
    beta_max: float = 1e12,
    beta_period: int | None = None,
    max_time: float | None = None,
    init: str = "random",
    revive: bool = True,
    random_state=0,
    threads: int | None = None,
) -> LowRankDecomposition:
    """Return B, L with ||W - B L||_F <= gamma (if reached) minimizing tr(B^T B) (LRM paper, Alg. 1).

    rank: r, the rows of L (default ceil(1.2 rank(W))). gamma: the tolerance of Formula (8), in
    the units of W (absolute, as in the paper). Alg. 1 starts from a seeded random L projected
    onto the constraint (init="random") or from the SVD of W (init="svd", svd_feasible_L; measured
    worse: its columns have large L1 norms), pi = 0 and beta0 (default BETA0_BALANCE / lambda_max(L L^T), see the
    constant); beta doubles every beta_period outer iterations and pi += beta (W - B L) after each
    one. Each outer iteration is one B update (Eq. (9)) and at most max_inner steps of Alg. 2
    (defaults: PAPER_SCHEDULE with revive=False, REVIVED_SCHEDULE with revive=True). Stops
    when tau <= gamma ("converged"), beta > beta_max, after max_outer iterations or max_time
    seconds; NaN/inf raises DecompositionDiverged. revive=True (default; ours) re-seeds the rows
    the projection zeroed every beta_period outer iterations (revive_dead_rows; WRange 1024 x 256:
    converges instead of stalling); revive=False is Alg. 1 as printed. threads: those of Alg. 2's
    fused projected step (default all cores; BLAS has its own). W is trusted (optimize checks it).
    """
    W = np.asarray(W, dtype=np.float64)
    start, phases = time.perf_counter(), dict.fromkeys((*PHASES, PROJECTION), 0.0)
    rank = default_rank(W) if rank is None else check_rank(rank)
    gamma = check_positive(gamma, "gamma")
    max_outer = check_count(max_outer, "max_outer")
    max_inner, beta_period = _schedule(revive, max_inner, beta_period)
    L, beta = _alm_start(W, rank, init, beta0, random_state)
    multiplier = np.zeros_like(W)
    history: list[ALMIterate] = []
    n_inner, status, inner_solve = 0, "iteration limit", (max_inner, inner_tol, threads)
    for outer in range(1, max_outer + 1):
        revive_now = revive and outer % beta_period == 0
        B, L, gap, inner, clock = _alm_step(W, multiplier, L, beta, inner_solve, revive_now, phases)
        n_inner += inner
        residual = _finite_residual(gap, outer, beta)
        history.append(_iterate(outer, beta, residual, B, L, inner, start))
        if residual <= gamma:
            status = "converged"
            break
        beta = _next_penalty(beta, outer, beta_period, multiplier, gap)
        _add_phase_seconds(phases, [*clock, time.perf_counter()])
        stopped = _limit_reached(beta, beta_max, max_time, start)
        if stopped is not None:
            status = stopped
            break
    return _decomposition(
        B, L, gamma, residual, status, outer, beta, n_inner, start, history, phases
    )


def _alm_step(W, multiplier, L, beta: float, inner_solve: tuple, revive_rows: bool, phases: dict):
    """Return (B, L, W - B L, Alg. 2 steps, clock) of one outer iteration of Alg. 1 before its tests.

    B by Eq. (9), then L by at most max_inner steps of Alg. 2 from the current L (inner_solve:
    max_inner, inner_tol, threads); with revive_rows, the rows the projection zeroed are revived
    (revive_dead_rows). clock: the times before, between and after the two updates; the projected
    step's seconds are added to phases.
    """
    clock = [time.perf_counter()]
    W_plus = beta * W + multiplier
    B = update_B(W_plus, L, beta)
    clock.append(time.perf_counter())
    max_inner, inner_tol, threads = inner_solve
    L, inner, projecting = nesterov_projected_gradient(
        beta * (B.T @ B), B.T @ W_plus, L, max_inner, inner_tol, threads
    )
    clock.append(time.perf_counter())
    phases[PROJECTION] += projecting
    gap = W - B @ L
    if revive_rows:
        L = revive_dead_rows(L, gap)
        gap = W - B @ L
    return B, L, gap, inner, clock


def _finite_residual(gap: np.ndarray, outer: int, beta: float) -> float:
    """Return tau = ||W - B L||_F (Alg. 1, line 7); raise DecompositionDiverged when it is NaN or inf."""
    residual = float(np.linalg.norm(gap))
    if not math.isfinite(residual):
        raise DecompositionDiverged(f"Alg. 1 diverged at outer iteration {outer} (beta = {beta:g})")
    return residual


def _iterate(outer: int, beta: float, residual: float, B, L, inner: int, start: float):
    """Return the ALMIterate of this outer iteration: Phi(B, L) and Delta(B, L) beside tau and beta."""
    scale, sensitivity = float(np.einsum("ij,ij->", B, B)), column_sensitivity(L, "laplace")
    return ALMIterate(outer, beta, residual, scale, sensitivity, inner, time.perf_counter() - start)


def _next_penalty(beta: float, outer: int, beta_period: int, multiplier, gap) -> float:
    """Return the next beta (doubled every beta_period outer iterations, Alg. 1 lines 10-11).

    The multiplier pi is updated in place: pi += beta (W - B L), with the new beta.
    """
    if outer % beta_period == 0:
        beta *= 2.0
    multiplier += beta * gap
    return beta


def _add_phase_seconds(phases: dict, clock: list) -> None:
    """Add the seconds between consecutive clock times to PHASES (B update, L update, the rest)."""
    for phase, seconds in zip(PHASES, np.diff(clock).tolist()):
        phases[phase] += seconds


def _limit_reached(beta: float, beta_max: float, max_time: float | None, start: float):
    """Return "beta limit" or "time limit" when that limit of Alg. 1 is passed, else None."""
    if beta > beta_max:
        return "beta limit"
    if max_time is not None and time.perf_counter() - start > max_time:
        return "time limit"
    return None


def _decomposition(B, L, gamma, residual, status, outer, beta, n_inner, start, history, phases):
    """Return the LowRankDecomposition of the last iterate, its stop message and seconds since `start`."""
    return LowRankDecomposition(
        B=B,
        L=L,
        gamma=gamma,
        residual=residual,
        status=status,
        message=_stop_message(status, residual, gamma, outer, beta),
        n_outer=outer,
        n_inner=n_inner,
        seconds=time.perf_counter() - start,
        history=history,
        phase_seconds=phases,
    )


def _schedule(revive: bool, max_inner: int | None, beta_period: int | None) -> tuple[int, int]:
    """Return (Alg. 2 steps per B update, outer iterations per beta doubling): the given ones, else
    REVIVED_SCHEDULE with revive=True and the paper's PAPER_SCHEDULE without."""
    default_inner, default_period = REVIVED_SCHEDULE if revive else PAPER_SCHEDULE
    return (
        default_inner if max_inner is None else max_inner,
        default_period if beta_period is None else beta_period,
    )


def _stop_message(status: str, residual: float, gamma: float, outer: int, beta: float) -> str:
    reached = (
        f"||W - B L||_F = {residual:.3g} {'<=' if residual <= gamma else '>'} gamma = {gamma:g}"
    )
    return f"{status} after {outer} outer iterations (beta = {beta:g}): {reached}"


def check_positive(value, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.floating))
        or not (value > 0 and math.isfinite(value))
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_rank(rank) -> int:
    return check_count(rank, "rank")


def check_count(value, name: str) -> int:
    """Return `value` as an int; ValueError naming `name` unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
