"""A certified lower bound on the optimal strategy's error: the dual of COA's program (10).

For G = W'W and weights w > 0 on the n constraints diag(X) = 1, the Lagrangian
tr(X^-1 G) + sum_i w_i (X_ii - 1) is minimized over X > 0 at X = D^-1/2 (D^1/2 G D^1/2)^1/2 D^-1/2
(D = diag(w)), with value 2 tr((D^1/2 G D^1/2)^1/2) - sum(w). Maximizing over the scale t of
t w gives, for every w > 0 (weak duality),

    min { tr(X^-1 G) : diag(X) = 1, X > 0 }  >=  ||W D^1/2||_*^2 / sum(w),

since tr((D^1/2 G D^1/2)^1/2) is the nuclear norm of W D^1/2. At the optimum X*, the
stationarity condition X*^-1 G X*^-1 = D makes w = diag(X^-1 G X^-1) the dual weights; the
bound is then tight (COA Lemma 3 writes the same dual with X kept as a variable).

When the optimum is not attained (rank-deficient W: X* singular, some w*_i = 0), the weights
read off a regularized iterate are loose; `polish_dual_weights` improves them by the fixed point
w <- diag((D^1/2 G D^1/2)^1/2), whose fixed points satisfy diag(X(w)) = 1 (the KKT condition).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh, eigvalsh


def nuclear_norm_squared_over_sum(
    W: np.ndarray, w: np.ndarray, gram: np.ndarray | None = None
) -> float:
    """Return ||W diag(w)^1/2||_*^2 / sum(w) for w > 0, from the smaller of the two Gram matrices.

    `gram` = W'W may be passed to save its product when n <= m.
    """
    w = np.asarray(w, dtype=np.float64)
    if np.any(w <= 0) or not np.all(np.isfinite(w)):
        raise ValueError("dual weights must be finite and > 0")
    m, n = W.shape
    if m < n:
        K = (W * w) @ W.T  # W D W' (m x m): same nonzero eigenvalues as D^1/2 G D^1/2
    else:
        G = W.T @ W if gram is None else gram
        root = np.sqrt(w)
        K = root[:, None] * G * root[None, :]
    eigenvalues = eigvalsh(K, check_finite=False)
    return float(np.sum(np.sqrt(np.clip(eigenvalues, 0.0, None))) ** 2 / np.sum(w))


def _sqrt_diagonal(W: np.ndarray, w: np.ndarray, gram: np.ndarray | None) -> np.ndarray:
    """Return diag((D^1/2 G D^1/2)^1/2) for D = diag(w), from the smaller Gram matrix."""
    m, n = W.shape
    if m < n:
        lam, U = eigh((W * w) @ W.T, check_finite=False)
        keep = lam > lam[-1] * 1e-13
        projected = W.T @ U[:, keep]  # D^1/2 W' U = V S, so diag(V S V') = w * sum((W'U)^2 / S)
        return w * np.sum(projected**2 / np.sqrt(lam[keep]), axis=1)
    G = W.T @ W if gram is None else gram
    root = np.sqrt(w)
    lam, E = eigh(root[:, None] * G * root[None, :], check_finite=False)
    return np.sum(E**2 * np.sqrt(np.clip(lam, 0.0, None)), axis=1)


def polish_dual_weights(
    W: np.ndarray, w: np.ndarray, steps: int, target: float = np.inf, gram: np.ndarray | None = None
) -> tuple[float, np.ndarray]:
    """Return (best bound, its weights) after up to `steps` fixed-point steps from w (stops at `target`)."""
    best_w = np.asarray(w, dtype=np.float64)
    best = nuclear_norm_squared_over_sum(W, best_w, gram)
    for _ in range(steps):
        if best >= target:
            break
        candidate = _sqrt_diagonal(W, best_w, gram)
        candidate = np.maximum(candidate, candidate.max() * 1e-15)  # the bound needs w > 0
        value = nuclear_norm_squared_over_sum(W, candidate, gram)
        if not value > best:
            break
        stalled = value - best < 0.1 * (
            target - best
        )  # steps that close < 10% of the gap are not worth an eigh
        best, best_w = value, candidate
        if stalled:
            break
    return best, best_w
