"""The `Strategy` record: what a query-answering mechanism releases and how it reconstructs W.

A strategy answers the p queries A x with noise and reconstructs the workload as R (A x + noise),
with W ~ R A (exact for the matrix mechanism, R = W A^+; approximate for LRM, R = B, A = L).
Everything `answer` and `expected_error` need is here: A, R and the noise kind, which fixes the
norm of the sensitivity (Gaussian: L2, Laplace: L1); the neighbour relation fixes the rest
(add/remove: the largest column norm of A; replace-one: the largest distance between two columns,
`Strategy.sensitivity_for`). Strategies are optimized for the add/remove sensitivity (the papers'),
and stay valid under replace-one with the larger noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.spatial.distance import cdist

from dp.accounting import check_neighbouring

NOISE_KINDS = ("gaussian", "laplace")


@dataclass(frozen=True)
class Iteration:
    """One row of a solver's convergence history."""

    iteration: int
    objective: float  # the solver's objective at this iterate (with its regularization)
    error_ratio: float  # expected error / the identity strategy's (unregularized)
    gradient_norm: float  # Frobenius norm of the projected gradient
    step: float  # accepted step length
    inner: int  # inner iterations (CG steps) spent on the direction
    seconds: float  # wall time since the solver started
    theta: float = 0.0  # homotopy regularization in force


@dataclass(frozen=True)
class Certificate:
    """A duality-gap certificate: the optimum lies in [lower_bound, objective]."""

    objective: (
        float  # unregularized objective of the returned strategy, tr(W X^-1 W') with diag(X) = 1
    )
    lower_bound: float  # a dual bound valid for every strategy
    seconds: float = 0.0

    @property
    def gap(self) -> float:
        """Relative gap (objective - bound) / bound."""
        return (self.objective - self.lower_bound) / self.lower_bound


@dataclass(frozen=True)
class Strategy:
    """A strategy matrix A (p x n), reconstruction R (m x p) and noise kind, with solver facts."""

    method: str
    matrix: np.ndarray
    reconstruction: np.ndarray
    noise: str = "gaussian"
    objective: float = float(
        "nan"
    )  # sensitivity^2 * ||R||_F^2: expected total squared error at unit noise
    history: tuple[Iteration, ...] = ()
    status: str = "exact"  # "exact" (closed form), "converged", "max_iter", "time_limit", ...
    message: str = ""
    certificate: Certificate | None = None
    seconds: float = 0.0
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.noise not in NOISE_KINDS:
            raise ValueError(f"noise must be one of {NOISE_KINDS}, got {self.noise!r}")
        A, R = np.asarray(self.matrix), np.asarray(self.reconstruction)
        if A.ndim != 2 or R.ndim != 2 or R.shape[1] != A.shape[0]:
            raise ValueError(f"reconstruction {R.shape} does not match strategy matrix {A.shape}")

    @property
    def sensitivity(self) -> float:
        """Max column L2 norm of A (Gaussian) or max column L1 norm (Laplace): add/remove neighbours."""
        return column_sensitivity(self.matrix, self.noise)

    def sensitivity_for(self, neighbouring: str) -> float:
        """Return the sensitivity of x -> A x under `neighbouring` in the norm of the noise.

        "add-remove" (one count +-1, the papers' relation): the largest column norm.
        "replace-one" (one record moves from cell i to cell j): max over i != j of
        ||A (e_i - e_j)||, at most twice the largest column norm (`replace_one_sensitivity`).
        Depends on A only (public), computed once per strategy.
        """
        if check_neighbouring(neighbouring) == "add-remove":
            return self.sensitivity
        cached = self.__dict__.get("_replace_one_sensitivity")
        if cached is None:
            cached = replace_one_sensitivity(np.asarray(self.matrix), self.noise)
            object.__setattr__(self, "_replace_one_sensitivity", cached)  # a cache, not a field
        return cached

    @property
    def shape(self) -> tuple[int, int]:
        """(m, n): the workload shape this strategy answers."""
        return (self.reconstruction.shape[0], self.matrix.shape[1])


def column_sensitivity(A: np.ndarray, noise: str) -> float:
    """Return the sensitivity of x -> A x when one count changes by 1 (L2 or L1 by noise kind)."""
    order = 2 if noise == "gaussian" else 1
    return float(np.max(np.linalg.norm(A, ord=order, axis=0)))


# exact pairwise maximum up to this many multiply-adds (n^2 p), else the bound top1 + top2
_PAIRWISE_WORK = {"gaussian": 6e9, "laplace": 1e9}


def replace_one_sensitivity(A: np.ndarray, noise: str) -> float:
    """Return max over i != j of ||a_i - a_j|| (L2 for Gaussian, L1 for Laplace), a_i the columns of A.

    Replace-one neighbours of a histogram move one record from cell i to cell j: x' = x - e_i +
    e_j, so A x moves by A (e_j - e_i). The maximum is exact (blocks of a Gram matrix for L2,
    pairwise L1 distances for L1, rounded up by a relative 1e-9) while n^2 p stays below a few
    billion operations; above that it is the bound ||a_i|| + ||a_j|| <= the two largest column
    norms added (never more than 2 x the largest), which is valid and at most that loose.
    One column (n = 1): no record can move, the sensitivity is 0 and the add-remove one is used.
    """
    A = np.asarray(A, dtype=np.float64)
    order = 2 if noise == "gaussian" else 1
    norms = np.linalg.norm(A, ord=order, axis=0)
    n = A.shape[1]
    if n == 1:
        return float(norms[0])
    top = np.sort(norms)[-2:]
    bound = float(top[0] + top[1])
    if float(n) * n * A.shape[0] > _PAIRWISE_WORK[noise]:
        return bound
    best = 0.0
    block = max(1, int(4e6 // n))
    if noise == "gaussian":
        sq = norms * norms
        for start in range(0, n, block):
            cols = slice(start, min(start + block, n))
            d2 = sq[cols, None] + sq[None, :] - 2.0 * (A[:, cols].T @ A)
            idx = np.arange(cols.start, cols.stop)
            d2[idx - start, idx] = -np.inf
            best = max(best, float(d2.max()))
        # Gram-matrix rounding is below 1e-12 of sq_i + sq_j for any sane p; round up
        value = math.sqrt(max(best, 0.0) + 1e-12 * float(sq.max())) * (1 + 1e-9)
    else:
        T = np.ascontiguousarray(A.T)
        for start in range(0, n, block):
            d1 = cdist(T[start : start + block], T, "cityblock")
            idx = np.arange(start, min(start + block, n))
            d1[idx - start, idx] = -np.inf
            best = max(best, float(d1.max()))
        value = best * (1 + 1e-9)
    return min(value, bound * (1 + 1e-9))


def unit_error(strategy: Strategy) -> float:
    """Return sensitivity^2 * ||R||_F^2: the total expected squared error per unit of noise scale^2."""
    return strategy.sensitivity**2 * float(np.sum(strategy.reconstruction**2))


def least_squares_reconstruction(W: np.ndarray, A: np.ndarray) -> np.ndarray:
    """Return R = W A^+ (the matrix mechanism's reconstruction, Li et al. 2010; COA eq. (2)).

    A of full column rank: R = W (A'A)^-1 A' by a Cholesky solve (BLAS-3); otherwise the SVD
    pseudo-inverse. Raises if some query of W lies outside the row space of A.
    """
    try:
        factor = cho_factor(A.T @ A, lower=True)
        R = (A @ cho_solve(factor, W.T)).T
    except LinAlgError:
        R = W @ np.linalg.pinv(A)
    scale = max(float(np.max(np.abs(W))), 1.0)
    if not np.allclose(R @ A, W, rtol=0.0, atol=1e-8 * scale * np.sqrt(A.shape[1])):
        raise ValueError(
            "the strategy cannot answer the workload: some query is outside its row space"
        )
    return R


def matrix_mechanism(
    method: str, W: np.ndarray, A: np.ndarray, noise: str = "gaussian", **fields
) -> Strategy:
    """Return the Strategy answering W through A with R = W A^+ and its objective filled in."""
    R = least_squares_reconstruction(W, A)
    return with_objective(
        Strategy(method=method, matrix=A, reconstruction=R, noise=noise, **fields)
    )


def with_objective(strategy: Strategy) -> Strategy:
    """Return a copy of `strategy` whose objective is its unit_error."""
    return replace(strategy, objective=unit_error(strategy))
