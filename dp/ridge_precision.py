"""Ridge precision estimator in closed form (Kuismin et al. 2017; Su et al. eq. 3.1, Alg. 1 step 4)."""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh


def ridge_eigenvalues(phi: np.ndarray, alpha: float) -> np.ndarray:
    """Return 2 / (phi + sqrt(phi^2 + 8 alpha)), the positive root of 2 a t^2 + phi t - 1 = 0.

    Written as (sqrt(phi^2 + 8 alpha) - phi) / (4 alpha) where phi < 0 so that the large
    eigenvalues produced by a negative (noisy) phi do not lose digits to cancellation.
    """
    root = np.sqrt(phi * phi + 8.0 * alpha)
    out = np.empty_like(phi)
    pos = phi >= 0
    out[pos] = 2.0 / (phi[pos] + root[pos])
    out[~pos] = (root[~pos] - phi[~pos]) / (4.0 * alpha)
    return out


def ridge_precision(S: np.ndarray, alpha: float) -> np.ndarray:
    """Return argmin_{Theta > 0} -log det Theta + tr(S Theta) + alpha ||Theta||_F^2 (Su et al. 1.3).

    Closed form M diag(phi_hat) M^T from the eigen-decomposition S = M diag(phi) M^T; valid for
    any symmetric S, including the indefinite noisy S~ of DP-RP, as long as alpha > 0.
    """
    if not alpha > 0:
        raise ValueError(f"the ridge precision needs alpha > 0, got {alpha!r}")
    phi, M = eigh((S + S.T) / 2.0)
    theta = ridge_eigenvalues(phi, alpha)
    return (M * theta) @ M.T


def ridge_objective(theta: np.ndarray, S: np.ndarray, alpha: float) -> float:
    """Return -log det Theta + tr(S Theta) + alpha ||Theta||_F^2 (inf if Theta is not PD)."""
    sign, logdet = np.linalg.slogdet(theta)
    if sign <= 0:
        return np.inf
    return float(-logdet + np.sum(S * theta) + alpha * np.sum(theta * theta))
