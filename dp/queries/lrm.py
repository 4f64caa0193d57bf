"""The Low-Rank Mechanism's workload decomposition W ~ B L (Yuan et al., VLDB 2012).

Formula (8): minimize tr(B^T B) subject to ||W - B L||_F <= gamma and every column of L in the
unit L1 ball. Answering L x with Laplace noise of scale max_j ||L_:j||_1 / epsilon and
reconstructing with B is epsilon-DP; its expected squared error is 2 tr(B^T B) Delta(L)^2 /
epsilon^2 plus the bias ||(W - B L) x||^2 (Lemma 1, Theorem 3).

Solved by the inexact augmented Lagrangian method (Alg. 1): B in closed form (Eq. (9)), L by
Nesterov's accelerated projected gradient on the quadratic (10) (Alg. 2), each column projected
onto the L1 ball exactly (dp.queries.l1_ball). All products are BLAS-3 on float64 arrays; the
r x r Gram matrices are formed once per outer iteration, so one outer iteration costs
O(m n r + N_in r^2 n); each Alg. 2 step is one product and one fused numba pass
(dp.queries.l1_ball.projected_gradient_step). Ours, measured and documented where they are: rows
of L that the projection zeroes are revived (revive_dead_rows; without it Alg. 1 stalls), and lrm_strategy's finish makes
B exact (W L^+), refines L on the exact objective (dp.queries.lrm_refine) and falls back to the
identity strategy when that is better.

This module holds lrm_strategy, which runs Alg. 1 or p-Identity (or both) and keeps the less noisy;
the solver is dp.queries.lrm_alm and the finish dp.queries.lrm_finish (both re-exported here).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np
from threadpoolctl import threadpool_limits

from dp.queries.lrm_alm import (
    BETA0_BALANCE,
    BETA_DOUBLING_PERIOD,
    DEFAULT_RANK_FACTOR,
    INITIAL_L,
    PAPER_SCHEDULE,
    PHASES,
    PROJECTION,
    REVIVED_SCHEDULE,
    ALMIterate,
    DecompositionDiverged,
    LowRankDecomposition,
    check_rank,
    default_rank,
    largest_eigenvalue,
    low_rank_decomposition,
    nesterov_projected_gradient,
    random_feasible_L,
    revive_dead_rows,
    svd_feasible_L,
    unit_noise,
    update_B,
)
from dp.queries.lrm_finish import (
    CONDITIONING_MIX,
    FALLBACK_RESIDUAL,
    ROW_SPACE_TOL,
    exact_reconstruction,
    finished_decomposition,
    never_worse_than_identity,
    refinement_start,
)
from dp.queries.lrm_refine import exact_reconstruction_B
from dp.queries.p_identity import the_best_p_identity
from dp.queries.strategy import Strategy, with_objective

# lrm_strategy's parts, importable from here as before they had modules of their own.
__all__ = [
    "BETA0_BALANCE",
    "BETA_DOUBLING_PERIOD",
    "CONDITIONING_MIX",
    "DEFAULT_RANK_FACTOR",
    "FALLBACK_RESIDUAL",
    "INITIAL_L",
    "PAPER_SCHEDULE",
    "PHASES",
    "PROJECTION",
    "REVIVED_SCHEDULE",
    "ROW_SPACE_TOL",
    "SOLVERS",
    "ALMIterate",
    "DecompositionDiverged",
    "LowRankDecomposition",
    "default_rank",
    "exact_reconstruction",
    "finished_decomposition",
    "largest_eigenvalue",
    "low_rank_decomposition",
    "lrm_strategy",
    "nesterov_projected_gradient",
    "never_worse_than_identity",
    "random_feasible_L",
    "refinement_start",
    "revive_dead_rows",
    "svd_feasible_L",
    "unit_noise",
    "update_B",
]


SOLVERS = ("auto", "alm", "p-identity")


@dataclass
class _Candidate:
    """One decomposition lrm_strategy may return, and the solver it came from."""

    B: np.ndarray
    L: np.ndarray
    status: str
    message: str
    source: str

    @property
    def noise(self) -> float:
        """Return Phi Delta^2 (unit_noise)."""
        return unit_noise(self.B, self.L)


def _alm_candidate(
    W, rank, gamma, finish, refine, refine_max_iter, refine_max_time, info, **options
) -> _Candidate:
    """Run Alg. 1 (and, with finish=True, finished_decomposition); record its figures in `info`."""
    result = low_rank_decomposition(W, rank=rank, gamma=gamma, **options)
    started = time.perf_counter()
    if finish:
        B, L, status, message = finished_decomposition(
            W, result, refine=refine, max_iter=refine_max_iter, max_time=refine_max_time
        )
    else:
        B, L, status, message = result.B, result.L, result.status, result.message
    info.update(
        alm_residual=result.residual,
        alm_objective=result.objective,
        alm_seconds=result.seconds,
        finish_seconds=time.perf_counter() - started,
        gamma=result.gamma,
        alm_rank=result.rank,
        outer=result.n_outer,
        inner=result.n_inner,
        phase_seconds=result.phase_seconds,
        history=tuple(result.history),
    )
    return _Candidate(B, L, status, message, "ALM")


def _p_identity_candidate(
    W: np.ndarray, max_time: float | None, random_state, info, n_jobs: int = 2
) -> _Candidate:
    """Return the best p-Identity strategy (dp.queries.p_identity.the_best_p_identity), with B = W L^+ (exact)."""
    started = time.perf_counter()
    best, fits = the_best_p_identity(W, max_time=max_time, random_state=random_state, n_jobs=n_jobs)
    L = best.L
    info.update(
        p_identity_objective=best.scale,
        p_identity_seconds=time.perf_counter() - started,
        p_identity_fits={f"{fit.start} p={fit.theta.shape[0]}": fit.scale for fit in fits},
    )
    message = (
        f"p-Identity L = [I; Theta] D (HDMM's OPT_0 family, start {best.start!r}, p = {best.theta.shape[0]}): "
        f"{best.status} after {best.iterations} L-BFGS-B iterations; B = W L^+ (exact, no bias)"
    )
    B, L, status, message = never_worse_than_identity(
        W, exact_reconstruction_B(W, L), L, best.status, message, "p-Identity"
    )
    return _Candidate(B, L, status, message, "p-Identity")


def lrm_strategy(
    W: np.ndarray,
    rank: int | None = None,
    gamma: float = 0.01,
    solver: str = "auto",
    finish: bool = True,
    refine: bool = True,
    refine_max_iter: int = 2000,
    refine_max_time: float | None = None,
    p_identity_max_time: float | None = None,
    **options,
) -> Strategy:
    """Return the Low-Rank Mechanism as a Strategy: A = L, R = B, Laplace noise (LRM paper, Eq. (6)).

    The release B (L x + Lap(Delta(L) / epsilon)^r) is epsilon-DP; when B L != W its error has the
    data-dependent bias ||(W - B L) x||^2 (Theorem 3), which expected_error adds when given x.
    solver="alm": Alg. 1 (options go to low_rank_decomposition: max_outer, max_inner, max_time,
    init, revive, random_state, ...); finish=True passes its result through finished_decomposition
    (exact B, the refinement of dp.queries.lrm_refine for at most refine_max_iter steps or
    refine_max_time seconds, identity fallback), finish=False returns Alg. 1's result as the paper
    does, bias and all (only with solver="alm"). solver="p-identity": the best p-Identity strategy
    (dp.queries.p_identity.the_best_p_identity, each fit capped at p_identity_max_time seconds;
    r = n + p rows, exact). solver="auto" (default):
    "p-identity" when r = rank >= n (then Alg. 1's L has rank n, every such L is exact, Formula (7)
    is the L1 matrix mechanism, and Alg. 1 reached it slower and no better: WRange 1024 x 1024 0.346
    x identity after 300 s against 0.170 in 11 s), else (the low-rank case) both, side by side on two
    threads with one BLAS thread each (Alg. 1's fused step on `threads`, default 1), keeping the
    less noisy. Never noisier than the identity (with finish; each candidate falls back on its own).
    info["alm_objective"] is Alg. 1's Phi Delta^2 before any finishing; info["solver"] names the winner.
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
    if not finish and solver != "alm":
        raise ValueError(
            "finish=False returns Alg. 1's own result (the paper's); use it with solver='alm'"
        )
    started, info = time.perf_counter(), {}
    if solver != "p-identity":  # the SVD behind the default rank decides only Alg. 1's part
        rank = default_rank(W) if rank is None else check_rank(rank)
    run_alm = solver == "alm" or (solver == "auto" and rank < W.shape[1])
    alm = partial(
        _alm_candidate, W, rank, gamma, finish, refine, refine_max_iter, refine_max_time, info
    )
    p_identity = partial(
        _p_identity_candidate, W, p_identity_max_time, options.get("random_state", 0), info
    )
    if run_alm and solver == "auto":  # both, side by side on two threads with one BLAS thread each
        with threadpool_limits(1), ThreadPoolExecutor(1) as pool:
            alm_run = pool.submit(alm, **{**options, "threads": options.get("threads", 1)})
            candidates = [p_identity(n_jobs=1), alm_run.result()]
    else:
        candidates = [alm(**options)] if run_alm else [p_identity()]
    best = min(candidates, key=lambda candidate: candidate.noise)
    B, L, status, message = best.B, best.L, best.status, best.message
    if len(candidates) > 1:
        message += (
            "; "
            + ", ".join(f"{c.source} Phi Delta^2 = {c.noise:.6g}" for c in candidates)
            + f": {best.source} kept"
        )
    return with_objective(
        Strategy(
            method="lrm",
            matrix=L,
            reconstruction=B,
            noise="laplace",
            history=info.pop("history", ()),
            status=status,
            message=message,
            seconds=time.perf_counter() - started,
            info={
                **info,
                "solver": best.source,
                "residual": float(np.linalg.norm(W - B @ L)),
                "rank": L.shape[0],
            },
        )
    )
