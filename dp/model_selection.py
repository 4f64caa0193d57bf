"""K-fold choice of the penalty on NON-private data (Bien and Tibshirani 2011, as in Su et al. 5.1).

Choosing alpha on the private data would itself look at the data many times; to keep a privacy
guarantee it would have to be paid for from the budget (e.g. split epsilon across folds and
alphas). This module is therefore only used when epsilon is None, or on public/held-out data.
"""

from __future__ import annotations

import numpy as np

from dp.graphical_lasso import graphical_lasso_path
from dp.ridge_precision import ridge_precision


def alpha_grid(S: np.ndarray, n_alphas: int = 10, ratio: float = 1e-2) -> np.ndarray:
    """Return n_alphas penalties spaced geometrically from max |S_ij| (i != j) down by `ratio`."""
    off = np.abs(S - np.diag(np.diag(S))).max()
    top = off if off > 0 else 1.0
    return np.geomspace(top, top * ratio, n_alphas)


def neg_log_likelihood(precision: np.ndarray, S: np.ndarray) -> float:
    """Return -log det Theta + tr(S Theta) (Su et al. eq. 1.1; inf if Theta is not PD)."""
    sign, logdet = np.linalg.slogdet(precision)
    return float(-logdet + np.sum(S * precision)) if sign > 0 else np.inf


def cross_validate_alpha(
    X: np.ndarray,
    alphas=None,
    estimator: str = "glasso",
    cv: int = 5,
    random_state=0,
    **solver_kwargs,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Return (best alpha, alphas, mean held-out negative log-likelihood per alpha).

    Folds split the rows; each fold fits on X^T X / n of the others (a warm-started path for
    the graphical lasso) and scores eq. (1.1) on the held-out second-moment matrix.
    """
    n = X.shape[0]
    if cv < 2 or cv > n:
        raise ValueError(f"cv must be between 2 and the number of rows ({n}), got {cv}")
    if alphas is None:
        # the ridge optimum often sits far below the largest covariance, so search wider
        alphas = alpha_grid(X.T @ X / n, 12, 1e-2 if estimator == "glasso" else 1e-5)
    alphas = np.sort(np.asarray(alphas, dtype=np.float64))[::-1]
    folds = np.array_split(np.random.default_rng(random_state).permutation(n), cv)
    scores = np.zeros((cv, alphas.size))
    for k, test in enumerate(folds):
        train = np.setdiff1d(np.arange(n), test)
        S_train = X[train].T @ X[train] / train.size
        S_test = X[test].T @ X[test] / test.size
        if estimator == "glasso":
            precisions = [
                r.precision for r in graphical_lasso_path(S_train, alphas, **solver_kwargs)
            ]
        elif estimator == "ridge":
            precisions = [ridge_precision(S_train, a) for a in alphas]
        else:
            raise ValueError(f"estimator must be 'glasso' or 'ridge', got {estimator!r}")
        scores[k] = [neg_log_likelihood(P, S_test) for P in precisions]
    mean = scores.mean(axis=0)
    return float(alphas[int(np.argmin(mean))]), alphas, mean
