"""The two trivial strategies: noise on the counts (identity) and noise on the answers (workload)."""

from __future__ import annotations

import numpy as np

from dp.queries.strategy import Strategy, with_objective


def _exact(method: str, A: np.ndarray, R: np.ndarray, noise: str) -> Strategy:
    return with_objective(Strategy(method=method, matrix=A, reconstruction=R, noise=noise))


def identity_strategy(W: np.ndarray, noise: str = "gaussian") -> Strategy:
    """Return A = I, R = W: noise every count once (sensitivity 1), answer W from the noisy counts."""
    return _exact("identity", np.eye(W.shape[1]), W.copy(), noise)


def workload_strategy(W: np.ndarray, noise: str = "gaussian") -> Strategy:
    """Return A = W, R = I: the Gaussian (or Laplace) mechanism on W x directly (GM in COA sec. 5)."""
    return _exact("workload", W.copy(), np.eye(W.shape[0]), noise)
