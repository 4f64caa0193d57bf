"""Precision matrices of Su et al. sec. 5.1 (Models 1-4) and Gaussian samples from them."""

from __future__ import annotations

import numpy as np


def model_precision(model: int, p: int, random_state=None) -> np.ndarray:
    """Return the p x p precision matrix of Su et al. Model 1, 2, 3 or 4.

    1: W W^T / 10000 with W ~ N(0,1)^{p x 10000} (dense, unstructured).
    2: 1 on the diagonal, 0.5 elsewhere (dense, structured).
    3: AR(2) band, 0.5 on the first and 0.25 on the second off-diagonal; the paper prints
       theta_ii = 0, which is not positive definite, so the diagonal is 1.
    4: Cai et al. (2011): A + a I with off-diagonal A_ij = 0.5 w.p. 0.1, a set so that the
       condition number is p, then scaled to unit diagonal.
    """
    rng = np.random.default_rng(random_state)
    if model == 1:
        W = rng.standard_normal((p, 10000))
        return W @ W.T / 10000
    if model == 2:
        return np.full((p, p), 0.5) + 0.5 * np.eye(p)
    if model == 3:
        theta = np.eye(p)
        for k, v in ((1, 0.5), (2, 0.25)):
            idx = np.arange(p - k)
            theta[idx, idx + k] = theta[idx + k, idx] = v
        return theta
    if model == 4:
        upper = np.triu(rng.random((p, p)) < 0.1, 1) * 0.5
        A = upper + upper.T
        ev = np.linalg.eigvalsh(A)
        a = (ev[-1] - p * ev[0]) / (p - 1)
        theta = A + a * np.eye(p)
        d = 1.0 / np.sqrt(np.diag(theta))
        return theta * d[:, None] * d[None, :]
    raise ValueError(f"model must be 1, 2, 3 or 4, got {model!r}")


def sample_gaussian(precision: np.ndarray, n: int, random_state=None) -> np.ndarray:
    """Return n rows drawn from N(0, precision^{-1})."""
    rng = np.random.default_rng(random_state)
    # X = Z L^{-T} with precision = L L^T has covariance L^{-T} L^{-1} = precision^{-1}
    L = np.linalg.cholesky(precision)
    Z = rng.standard_normal((n, precision.shape[0]))
    return np.linalg.solve(L.T, Z.T).T


def normalize_rows_by_max_norm(X: np.ndarray) -> np.ndarray:
    """Return X / max_i ||x_i||_2, the preprocessing of Su et al. sec. 5.1 (not itself private)."""
    return X / np.max(np.linalg.norm(X, axis=1))
