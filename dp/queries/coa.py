"""COA: the optimal strategy for linear queries under (epsilon, delta)-DP (Yuan, Yang, Zhang, Hao).

Program (10): minimize F(X) = <X^-1, V> subject to diag(X) = 1, X > 0, with V = W'W + theta c I
(eq. (8); c = mean(diag(W'W)) makes theta free of the workload's scale, as in the authors' code).
The strategy is A = L' for X = L L' (so every column of A has unit L2 norm) and R = W A^-1.

Algorithm 1 (Newton's method with Armijo steps that keep X positive definite), Algorithm 2 (the
Newton direction by conjugate gradient on the Hessian operator, the diagonal held at zero) and
Algorithm 3 (homotopy on theta), with these changes, each measured in benchmarks/:
- CG stops on a relative residual (default 0.1, up to `max_cg` steps) instead of a fixed T = 5
  steps, and is preconditioned by the Hessian's diagonal Z_ii P_jj + P_ii Z_jj (Jacobi);
- the homotopy stops as soon as the duality gap of the unregularized program (dp.queries.dual)
  is below `gap_tol`, so the run ends with a certificate instead of a guess.
`coa_schur_strategy` ("coa-schur") solves the same program with exact Newton directions
(dp.queries.schur_direction), a warm start (sqrt_start) and an adaptive theta schedule;
dp.queries.dual_newton ("coa-dual", the fastest) solves its n-variable dual instead.

Cost per Newton iteration for n cells, k CG steps and t line-search trials, all BLAS-3 (V = Q Q'
is factored once per theta): each trial n^3/3 (Cholesky test, potrf) + n^3 (objective
||L^-1 Q||_F^2, trsm); the gradient n^3 (trsm) + 2 n^3 (P = Y Y', GEMM) + 2n^3/3 (Z = X^-1,
potri); each CG step 4 n^3 (two GEMMs, (Z D) P). The n^2 x n^2 Hessian is never formed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.linalg import LinAlgError, cholesky, eigh, solve_triangular
from scipy.linalg.lapack import dpotri

from dp.queries.dual import nuclear_norm_squared_over_sum, polish_dual_weights
from dp.queries.schur_direction import schur_newton_direction
from dp.queries.strategy import Certificate, Iteration, Strategy, with_objective


@dataclass
class Point:
    """A feasible iterate X with its Cholesky factor L (X = L L'), U = L^-1 Q and F(X) = ||U||_F^2."""

    X: np.ndarray
    L: np.ndarray
    U: np.ndarray
    value: float


@dataclass
class Costs:
    """Seconds spent in each part of the solver (printed by the benchmarks)."""

    cholesky: float = 0.0  # Cholesky tests and objective values (line search)
    gradient: float = 0.0  # X^-1 and P = X^-1 V X^-1
    hessian: float = 0.0  # Hessian-operator (or multiplier-system) products inside CG
    eigen: float = 0.0  # eigendecompositions of the Schur direction and the sqrt start
    certificate: float = 0.0  # dual bounds
    counts: dict = field(default_factory=lambda: {"cholesky": 0, "hessian": 0, "newton": 0})


def cholesky_point(X: np.ndarray, Q: np.ndarray) -> Point | None:
    """Return the Point for X, or None when the Cholesky factorization fails (X not PD; Alg. 1 step 7)."""
    try:
        L = cholesky(X, lower=True, check_finite=False)
    except LinAlgError:
        return None
    if not np.all(np.isfinite(L)):
        return None
    U = solve_triangular(L, Q, lower=True, check_finite=False)
    return Point(X=X, L=L, U=U, value=float(np.sum(U * U)))


def gradient_parts(point: Point) -> tuple[np.ndarray, np.ndarray]:
    """Return (Z, P) with Z = X^-1 and P = Z V Z = -G(X), the negated gradient of eq. (11)."""
    Y = solve_triangular(point.L, point.U, lower=True, trans="T", check_finite=False)  # X^-1 Q
    P = Y @ Y.T
    inverse, info = dpotri(point.L, lower=1)
    if info != 0:
        raise LinAlgError(f"potri failed (info={info})")
    Z = np.tril(inverse) + np.tril(inverse, -1).T
    return Z, P


def hessian_product(Z: np.ndarray, P: np.ndarray, D: np.ndarray) -> np.ndarray:
    """Return mat(H vec(D)) = Z D P + P D Z for symmetric D (eq. (11) with G = -P; two GEMMs)."""
    S = (Z @ D) @ P
    return S + S.T


def newton_direction(
    Z: np.ndarray, P: np.ndarray, max_cg: int, rtol: float, costs: Costs | None = None
) -> tuple[np.ndarray, int]:
    """Return (D, steps): the Newton direction of program (15) by preconditioned CG (Alg. 2).

    Solves offdiag(H(D)) = offdiag(P) over symmetric D with zero diagonal; the residual and the
    iterates keep a zero diagonal (Alg. 2 lines 4 and 9). Jacobi preconditioner: the diagonal
    Z_ii P_jj + P_ii Z_jj of the Hessian operator. Stops at ||r|| <= rtol ||r_0|| or max_cg steps.
    """
    zd, pd = np.diag(Z), np.diag(P)
    inv_diag = 1.0 / (np.outer(zd, pd) + np.outer(pd, zd))
    residual = P.copy()
    np.fill_diagonal(residual, 0.0)
    D = np.zeros_like(P)
    precond = residual * inv_diag
    direction = precond.copy()
    rho = float(np.sum(residual * precond))
    r0 = np.sqrt(np.sum(residual * residual))
    steps = 0
    for steps in range(1, max_cg + 1):  # noqa: B007 (the count is read after the loop)
        started = time.perf_counter()
        Hd = hessian_product(Z, P, direction)
        if costs is not None:
            costs.hessian += time.perf_counter() - started
            costs.counts["hessian"] += 1
        np.fill_diagonal(Hd, 0.0)
        curvature = float(np.sum(direction * Hd))
        if not curvature > 0:  # only rounding can make the (positive definite) Hessian look flat
            break
        step = rho / curvature
        D += step * direction
        residual -= step * Hd
        if np.sqrt(np.sum(residual * residual)) <= rtol * r0:
            break
        precond = residual * inv_diag
        rho_new = float(np.sum(residual * precond))
        direction = precond + (rho_new / rho) * direction
        rho = rho_new
    return D, steps


def armijo_step(
    point: Point,
    D: np.ndarray,
    slope: float,
    Q: np.ndarray,
    beta: float,
    sigma: float,
    max_trials: int,
    costs: Costs | None = None,
) -> tuple[Point | None, float, int]:
    """Return (new point, alpha, trials): the first alpha = beta^t with X + alpha D positive definite
    (Cholesky test) and F(X + alpha D) <= F(X) + alpha sigma <G, D> (eq. (16)); None if none of
    max_trials steps qualifies."""
    alpha = 1.0
    for trial in range(1, max_trials + 1):
        started = time.perf_counter()
        candidate = cholesky_point(point.X + alpha * D, Q)
        if costs is not None:
            costs.cholesky += time.perf_counter() - started
            costs.counts["cholesky"] += 1
        if candidate is not None and candidate.value <= point.value + alpha * sigma * slope:
            return candidate, alpha, trial
        alpha *= beta
    return None, 0.0, max_trials


@dataclass(frozen=True)
class NewtonOptions:
    """Settings of Algorithm 1 and its direction solver (defaults: the authors' code where it says)."""

    direction: str = (
        "cg"  # "cg": Alg. 2 on the Hessian operator; "schur": dp.queries.schur_direction
    )
    max_cg: int = 50
    rtol: float | None = None  # CG relative residual; None: 0.1 for "cg", 1e-3 for "schur"
    beta: float = 0.5  # Armijo backtracking factor (authors' code)
    sigma: float = 1e-4  # Armijo sufficient-decrease constant (authors' code)
    max_trials: int = 50
    max_iter: int = 200  # Newton iterations per theta
    gap_tol: float = 1e-3  # stop when the certified relative duality gap is below this
    tol: float = 1e-12  # a Newton decrement -<G, D>/F below this ends the theta stage
    polish_steps: int = 5  # dual fixed-point steps when a theta stage ends (dp.queries.dual)

    def solve_direction(self, point: Point, Z: np.ndarray, P: np.ndarray, costs: Costs, warm: dict):
        """Return (D, steps): the Newton direction at `point` by the chosen solver (`warm`: its carried state)."""
        if self.direction == "schur":
            rtol = 1e-3 if self.rtol is None else self.rtol
            return schur_newton_direction(point.X, point.L, point.U, self.max_cg, rtol, costs, warm)
        rtol = 0.1 if self.rtol is None else self.rtol
        return newton_direction(Z, P, self.max_cg, rtol, costs)


@dataclass
class Stage:
    """Where one run of Algorithm 1 at a fixed theta stopped, and why."""

    point: Point
    Z: np.ndarray  # X^-1 at `point`
    P: np.ndarray  # X^-1 V X^-1 at `point`
    status: str  # "certified", "theta_converged", "max_iter", "time_limit", "line_search_failed"
    certificate: Certificate | None = None


class _Recorder:
    """Collects the convergence history (Iteration rows) and the cost breakdown of one solve."""

    def __init__(self, W: np.ndarray, max_time: float | None):
        self.started = time.perf_counter()
        self.deadline = None if max_time is None else self.started + max_time
        self.identity_error = float(np.sum(W * W))
        self.history: list[Iteration] = []
        self.costs = Costs()

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def record(
        self,
        point: Point,
        Z: np.ndarray,
        P: np.ndarray,
        shift: float,
        theta: float,
        step: float,
        inner: int,
    ) -> None:
        unregularized = point.value - shift * float(np.trace(Z))
        offdiag = P - np.diag(np.diag(P))
        self.history.append(
            Iteration(
                iteration=len(self.history),
                objective=point.value,
                error_ratio=unregularized / self.identity_error,
                gradient_norm=float(np.sqrt(np.sum(offdiag * offdiag))),
                step=step,
                inner=inner,
                seconds=time.perf_counter() - self.started,
                theta=theta,
            )
        )


def newton_coa(
    point: Point,
    Q: np.ndarray,
    shift: float,
    theta: float,
    recorder: _Recorder,
    options: NewtonOptions,
    check,
) -> Stage:
    """Return the Stage reached by Algorithm 1 from `point` for V = Q Q' (V = W'W + shift I).

    Once the Newton decrement -<G, D>/F is below 3 gap_tol, every iteration is certified by
    check(point, Z, P, polish) -> Certificate; the stage ends "certified" when the gap is small
    enough and "theta_converged" when the decrement is below a tenth of the gap even after
    polishing the dual weights (what remains is the bias of theta, for the homotopy to remove).
    """
    costs = recorder.costs
    decrement, step, inner, warm = np.inf, 0.0, 0, {}
    for iteration in range(options.max_iter + 1):
        started = time.perf_counter()
        Z, P = gradient_parts(point)
        costs.gradient += time.perf_counter() - started
        recorder.record(point, Z, P, shift, theta, step, inner)
        if decrement <= 3 * options.gap_tol:
            certificate = check(point, Z, P, polish=False)
            if certificate.gap > options.gap_tol and decrement <= max(
                0.1 * certificate.gap, options.tol
            ):
                certificate = check(
                    point, Z, P, polish=True
                )  # converged at this theta: sharpen the bound
                if certificate.gap > options.gap_tol:
                    return Stage(point, Z, P, "theta_converged", certificate)
            if certificate.gap <= options.gap_tol:
                return Stage(point, Z, P, "certified", certificate)
        if iteration == options.max_iter or recorder.out_of_time():
            break
        D, inner = options.solve_direction(point, Z, P, costs, warm)
        costs.counts["newton"] += 1
        slope = -float(np.sum(D * P))  # <G, D> with G = -P
        if not np.isfinite(slope):
            raise FloatingPointError(
                f"COA diverged: non-finite Newton direction at iteration {iteration}"
            )
        decrement = max(-slope / point.value, 0.0)
        new, step, _ = armijo_step(
            point, D, slope, Q, options.beta, options.sigma, options.max_trials, costs
        )
        if new is None:
            return Stage(point, Z, P, "line_search_failed", check(point, Z, P, True))
        point = new
    status = "time_limit" if recorder.out_of_time() else "max_iter"
    return Stage(point, Z, P, status, check(point, Z, P, True))


def certify(
    W: np.ndarray,
    G: np.ndarray,
    point: Point,
    Z: np.ndarray,
    P: np.ndarray,
    shift: float,
    costs: Costs,
    gap_tol: float,
    polish_steps: int,
) -> Certificate:
    """Return the duality-gap certificate of the unregularized program at X = point.X.

    Objective: max(diag X) tr(X^-1 G). Bound (dp.queries.dual) at the dual weights diag(Z G Z);
    with polish_steps > 0 also at diag(Z V Z), the better polished by up to `polish_steps`
    fixed-point steps while the gap exceeds gap_tol.
    """
    started = time.perf_counter()
    objective = float(np.sum(Z * G)) * float(np.max(np.diag(point.X)))
    candidates = [
        w for w in (np.diag(P) - shift * np.sum(Z * Z, axis=0), np.diag(P)) if np.all(w > 0)
    ]
    if polish_steps == 0:  # the quick check of every iteration: one eigendecomposition
        candidates = candidates[:1]
    w = max(candidates, key=lambda c: nuclear_norm_squared_over_sum(W, c, gram=G))
    bound, _ = polish_dual_weights(W, w, polish_steps, target=objective / (1 + gap_tol), gram=G)
    elapsed = time.perf_counter() - started
    costs.certificate += elapsed
    return Certificate(objective=objective, lower_bound=bound, seconds=elapsed)


def sqrt_start(V: np.ndarray, costs: Costs) -> np.ndarray:
    """Return N V^1/2 N with N = diag(V^1/2)^-1/2: the dual-optimal X for equal weights, rescaled to diag 1.

    It is the optimum whenever V^1/2 has a constant diagonal, and a warm start otherwise.
    """
    started = time.perf_counter()
    lam, E = eigh(V, check_finite=False, driver="evd")
    root = (E * np.sqrt(np.clip(lam, 0.0, None))) @ E.T
    scale = 1.0 / np.sqrt(np.diag(root))
    costs.eigen += time.perf_counter() - started
    return scale[:, None] * root * scale[None, :]


def coa_strategy(
    W: np.ndarray,
    direction: str = "cg",
    start: str = "identity",
    theta: float | None = None,
    theta0: float = 1.0,
    theta_factor: float = 0.1,
    min_theta: float = 1e-12,
    adaptive_theta: bool = False,
    max_time: float | None = None,
    **newton,
) -> Strategy:
    """Return the COA strategy for W: Algorithm 3 (homotopy on theta) around Algorithm 1.

    theta=None runs theta0, theta0 * theta_factor, ... down to min_theta and stops at the first
    certified iterate (duality gap <= gap_tol); a number runs Algorithm 1 at that theta only
    (the paper's experiments use 1e-3). start: "identity" (Alg. 3) or "sqrt" (sqrt_start).
    adaptive_theta: divide theta by up to 100 at once, aiming the next stage's bias (about
    proportional to theta for a full-rank W) at half of gap_tol, instead of by 1/theta_factor.
    Other keywords go to NewtonOptions (direction solver, CG, Armijo, gap_tol).
    """
    if direction not in ("cg", "schur") or start not in ("identity", "sqrt"):
        raise ValueError(
            f"direction must be 'cg' or 'schur' and start 'identity' or 'sqrt', got {direction!r}, {start!r}"
        )
    options = NewtonOptions(direction=direction, **newton)
    recorder = _Recorder(W, max_time)
    G = W.T @ W
    n, scale = G.shape[0], float(np.mean(np.diag(G)))
    stage_theta, X = (theta0 if theta is None else theta), None
    while True:
        shift = stage_theta * scale
        V = G + shift * np.eye(n)
        if X is None:
            X = np.eye(n) if start == "identity" else sqrt_start(V, recorder.costs)
        Q = cholesky(V, lower=True, check_finite=False)
        point = cholesky_point(X, Q)
        if point is None:
            raise FloatingPointError("the starting point is not numerically positive definite")

        def check(point, Z, P, polish, shift=shift):
            steps = options.polish_steps if polish else 0
            return certify(W, G, point, Z, P, shift, recorder.costs, options.gap_tol, steps)

        stage = newton_coa(point, Q, shift, stage_theta, recorder, options, check)
        X = stage.point.X
        if (
            theta is not None
            or stage.status != "theta_converged"
            or stage_theta * theta_factor < min_theta
        ):
            break
        factor = theta_factor
        if adaptive_theta:
            factor = min(theta_factor, max(1e-2, 0.5 * options.gap_tol / stage.certificate.gap))
        stage_theta = max(stage_theta * factor, min_theta)
    return _finish(W, stage, recorder, stage_theta, options.gap_tol)


def coa_schur_strategy(W: np.ndarray, **options) -> Strategy:
    """Return coa_strategy with exact Newton directions (schur_direction), the sqrt start,
    theta0 = 1e-3 and the adaptive theta schedule."""
    settings = {
        "direction": "schur",
        "start": "sqrt",
        "theta0": 1e-3,
        "adaptive_theta": True,
        **options,
    }
    return replace(coa_strategy(W, **settings), method="coa-schur")


def _finish(W, stage: Stage, recorder: _Recorder, theta: float, gap_tol: float) -> Strategy:
    A = stage.point.L.T.copy()  # X = A'A, unit column norms
    R = solve_triangular(stage.point.L, W.T, lower=True, check_finite=False).T  # W A^-1
    gap = stage.certificate.gap
    status = "converged" if gap <= gap_tol else stage.status
    message = (
        f"duality gap {gap:.2e} ({'<=' if gap <= gap_tol else '>'} {gap_tol:g}) at theta={theta:g} after "
        f"{len(recorder.history) - 1} Newton iterations; last stage: {stage.status}"
    )
    return with_objective(
        Strategy(
            method="coa",
            matrix=A,
            reconstruction=R,
            noise="gaussian",
            history=tuple(recorder.history),
            status=status,
            message=message,
            certificate=stage.certificate,
            seconds=time.perf_counter() - recorder.started,
            info={"theta": theta, "costs": recorder.costs, "X": stage.point.X},
        )
    )
