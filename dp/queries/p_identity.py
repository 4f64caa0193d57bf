"""p-Identity strategies for the Laplace matrix mechanism, the structured start of LRM's full-rank path.

A p-Identity strategy (McKenna, Miklau, Hay, Machanavajjhala: HDMM, PVLDB 11(10), 2018, its OPT_0)
is L(Theta) = [I; Theta] D with Theta >= 0 (p x n) and D = diag(1 / d), d = 1 + 1^T Theta, so
that every column of L has L1 norm exactly 1 (sensitivity 1) and L has rank n: every workload
lies in its row space and W = (W L^+) L exactly. It is therefore a feasible point of the LRM paper's
Formula (7) with r = n + p rows, and its noise is the matrix mechanism's

    f(Theta) = ||W L^+||_F^2 = tr(G (L^T L)^-1),  G = W^T W.

With L^T L = D^-1 (I + Theta^T Theta) D^-1, G' = diag(d) G diag(d) and P = I_p + Theta Theta^T,
Woodbury's identity gives

    f = tr(G') - <P^-1 Theta, Theta G'>,
    df/dTheta = -2 P^-1 (Theta G' - (Theta G' Theta^T) P^-1 Theta)  (d held fixed),
    df/dd_j  = 2 (G_jj d_j - [Theta diag(d) G]_:j . [P^-1 Theta]_:j),

so one evaluation costs O(p n min(2 m, n)), never O(n^3). Minimized by L-BFGS-B with
the bound Theta >= 0 from a seeded start; stops when the best f fell by less than tol f over the
last STALL_WINDOW iterations.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize
from threadpoolctl import threadpool_limits

# stop when the best objective fell by less than tol * f over this many L-BFGS-B iterations
# (WRange 1024 x 1024, p = 64, 1 thread: 0.17025 x identity after 11 s, against 0.17007 after the
# 91 s that scipy's own tolerance takes; the 0.172 of HDMM's OPT_0 is reached at 4.7 s)
STALL_WINDOW = 50
DEFAULT_P_FRACTION = 16  # p = n / 16: HDMM's default; p = 1.2 rank - n = 52 was worse on WRange 256 (0.3726 vs 0.3668)
# the random starts' local minima depend on p at small n (WRange 96 x 32: p = 2 ends at the identity,
# p = 8 at 0.905 x identity), so the_best_p_identity sweeps p = 1, 2, 4, ... up to
# max(MIN_LARGEST_P, n / 16): twice the time of the largest p alone
MIN_LARGEST_P = 8
# ... and no further than one evaluation's work p n min(2 m, n) allows: n = 1024's p = 64 (about 8 ms
# on one core); WRange 256 x 8192 at p = 512 had not finished one fit in 10 minutes
MAX_EVALUATION_WORK = 64 * 1024 * 1024
STARTS = ("random", "total")


@dataclass(frozen=True)
class PIdentityFit:
    """The optimized p-Identity strategy: L = [I; Theta] D and its noise f = ||W L^+||_F^2."""

    theta: np.ndarray
    scale: float
    start: str
    iterations: int
    status: str  # "converged" | "iteration limit" | "time limit"
    seconds: float

    @property
    def L(self) -> np.ndarray:
        """Return the (n + p) x n strategy [I; Theta] D, every column of L1 norm 1."""
        return p_identity_matrix(self.theta)


def p_identity_matrix(theta: np.ndarray) -> np.ndarray:
    """Return [I; Theta] diag(1 / (1 + 1^T Theta)) for a non-negative p x n Theta."""
    n = theta.shape[1]
    return np.vstack([np.eye(n), theta]) / (1.0 + theta.sum(axis=0))


def p_identity_objective(
    theta: np.ndarray, workload: np.ndarray, gram: np.ndarray | None = None
) -> tuple[float, np.ndarray]:
    """Return f(Theta) = tr(G (L^T L)^-1) and its gradient in Theta (the module's Woodbury forms).

    The one product with G goes through `gram` = G when given (O(p n^2)), else through
    `workload` = W twice (O(p n m); cheaper when 2 m < n). `workload` gives diag(G) either way.
    """
    d = 1.0 + theta.sum(axis=0)
    weighted = theta * d
    scaled = (
        weighted @ gram if gram is not None else weighted @ workload.T @ workload
    )  # Theta diag(d) G, p x n
    theta_g = scaled * d  # Theta G'
    factor = scipy.linalg.cho_factor(np.eye(theta.shape[0]) + theta @ theta.T, check_finite=False)
    solved = scipy.linalg.cho_solve(factor, theta, check_finite=False)  # P^-1 Theta
    diagonal = np.einsum("ij,ij->j", workload, workload)  # diag(G)
    value = float(diagonal @ (d * d) - np.einsum("ij,ij->", solved, theta_g))
    inner = theta_g - (theta_g @ theta.T) @ solved
    gradient = -2.0 * scipy.linalg.cho_solve(factor, inner, check_finite=False)
    gradient += 2.0 * (diagonal * d - np.einsum("ij,ij->j", scaled, solved))
    return value, gradient


def p_identity_start(n: int, p: int, start: str, random_state) -> np.ndarray:
    """Return the starting Theta: "random" uniform on [0, 1) (HDMM's), or "total": a row of ones
    (the total query, which WDiscrete's all -1 but 2 % entries need) over 1 % noise in the others.
    """
    rng = np.random.default_rng(random_state)
    if start == "random":
        return rng.random((p, n))
    if start == "total":
        theta = 0.01 * rng.random((p, n))
        theta[0] = 1.0
        return theta
    raise ValueError(f"start must be one of {', '.join(STARTS)}, got {start!r}")


class _Stall:
    """L-BFGS-B callback: stops after STALL_WINDOW iterations that improved the best f by < tol f, or at max_time."""

    def __init__(self, tol: float, max_time: float | None):
        self.tol, self.deadline = tol, None if max_time is None else time.perf_counter() + max_time
        self.best: list[float] = []
        self.status = "converged"

    def __call__(self, intermediate_result):
        self.best.append(
            min(intermediate_result.fun, self.best[-1]) if self.best else intermediate_result.fun
        )
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.status = "time limit"
            raise StopIteration
        if (
            len(self.best) > STALL_WINDOW
            and self.best[-1 - STALL_WINDOW] - self.best[-1] <= self.tol * self.best[-1]
        ):
            raise StopIteration


def optimize_p_identity(
    W: np.ndarray,
    p: int | None = None,
    start: str = "random",
    max_iter: int = 5000,
    tol: float = 1e-4,
    max_time: float | None = None,
    random_state=0,
) -> PIdentityFit:
    """Return the p-Identity strategy minimizing ||W L^+||_F^2 by L-BFGS-B on Theta >= 0 (HDMM's OPT_0).

    p defaults to max(1, n // DEFAULT_P_FRACTION) for the random start and to 1 for "total".
    Stops when the best f fell by less than tol f over STALL_WINDOW iterations ("converged"),
    after max_iter iterations or max_time seconds (then the last iterate, which L-BFGS-B's line
    search keeps no worse than the start).
    """
    W = np.asarray(W, dtype=np.float64)
    m, n = W.shape
    if p is None:
        p = 1 if start == "total" else max(1, n // DEFAULT_P_FRACTION)
    gram = (
        W.T @ W if 2 * m >= n else None
    )  # one n x n product per evaluation instead of two through W
    theta0 = p_identity_start(n, p, start, random_state)
    stall = _Stall(tol, max_time)
    started = time.perf_counter()

    def value_and_gradient(flat):
        value, gradient = p_identity_objective(flat.reshape(p, n), W, gram)
        return value, gradient.ravel()

    result = scipy.optimize.minimize(
        value_and_gradient,
        theta0.ravel(),
        jac=True,
        method="L-BFGS-B",
        bounds=scipy.optimize.Bounds(0.0, np.inf),
        callback=stall,
        options={"maxiter": max_iter},
    )
    if result.status == 99:  # the callback raised StopIteration
        status = stall.status
    else:
        status = "iteration limit" if result.nit >= max_iter else "converged"
    return PIdentityFit(
        theta=result.x.reshape(p, n),
        scale=float(result.fun),
        start=start,
        iterations=result.nit,
        status=status,
        seconds=time.perf_counter() - started,
    )


def sweep_sizes(m: int, n: int) -> list[int]:
    """Return the p of the random starts the_best_p_identity tries: 1, 2, 4, ... <= max(MIN_LARGEST_P, n / 16),
    <= n, and with p n min(2 m, n) <= MAX_EVALUATION_WORK (p = 1 always).
    """
    largest = max(
        1,
        min(
            n,
            max(MIN_LARGEST_P, n // DEFAULT_P_FRACTION),
            MAX_EVALUATION_WORK // (n * min(2 * m, n)),
        ),
    )
    return [2**k for k in range(largest.bit_length())]


def the_best_p_identity(
    W: np.ndarray, max_time: float | None = None, random_state=0, n_jobs: int = 2
) -> tuple[PIdentityFit, list]:
    """Return (the least noisy fit, all fits): random starts at every p of sweep_sizes and the total start (p = 1).

    The fits are independent: n_jobs threads run them, largest p first, each with one BLAS thread
    (their products release the GIL; the largest fit takes about half of the sweep's work). Every
    fit is seeded, so the result does not depend on n_jobs.
    """
    runs = [("total", 1)] + [("random", p) for p in sweep_sizes(*W.shape)]

    def fit(run):
        return optimize_p_identity(
            W, p=run[1], start=run[0], max_time=max_time, random_state=random_state
        )

    with threadpool_limits(1), ThreadPoolExecutor(max(1, n_jobs)) as pool:
        fits = list(pool.map(fit, runs[::-1]))[::-1]
    return min(fits, key=lambda one: one.scale), fits


__all__ = [
    "PIdentityFit",
    "STARTS",
    "optimize_p_identity",
    "p_identity_matrix",
    "p_identity_objective",
    "sweep_sizes",
    "the_best_p_identity",
]
