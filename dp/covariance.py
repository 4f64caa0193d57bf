"""Private second-moment matrix S = X^T X / n with clipped rows (Su et al., Alg. 1-2, steps 1-3).

Sensitivity of S under replace-one neighbours (same n, one row x replaced by x', both clipped to
||x||_2 <= c). Then S - S' = A / n with A = x x^T - x' x'^T, and we release the p(p+1)/2 entries
of the upper triangle including the diagonal (the lower triangle is a mirror: post-processing).

L2 (Gaussian). ||A||_F^2 = ||x||^4 + ||x'||^4 - 2 (x.x')^2 <= 2 c^4, and
sum_i A_ii^2 = sum_i (x_i^2 - x_i'^2)^2 <= sum_i x_i^4 + x_i'^4 <= 2 c^4. The triangle holds
each off-diagonal entry once, so its squared norm is (||A||_F^2 + sum_i A_ii^2) / 2 <= 2 c^4:
    Delta_2 = sqrt(2) c^2 / n,
attained by orthogonal x, x' of norm c; this is Su et al. eq. (3.2).

L1 (Laplace). The triangle's L1 norm is (||A||_1 + sum_i |A_ii|) / 2 with ||A||_1 over all p^2
entries. Cauchy-Schwarz gives ||A||_1 <= p ||A||_F <= sqrt(2) p c^2 and sum_i |A_ii| <=
||x||^2 + ||x'||^2 <= 2 c^2; also Cauchy-Schwarz on the triangle itself gives
sqrt(p(p+1)/2) * sqrt(2) c^2. Hence
    Delta_1 = c^2 min(p / sqrt(2) + 1, sqrt(p (p + 1))) / n,
which is ~30% below the naive (p + 1) c^2 / n. x = c sqrt(2/p) cos(w i), x' = c sqrt(2/p) sin(w i)
reaches about (2/pi) p c^2 / n, i.e. ~90% of the bound for large p.

Add-remove neighbours (one row x added or removed). The statistic is then the sum X^T X, which
changes by x x^T: its triangle has L2 norm sqrt((||x||^4 + sum x_i^4) / 2) <= c^2 (one nonzero
coordinate) and L1 norm (||x||_1^2 + ||x||_2^2) / 2 <= (p + 1) c^2 / 2 (x = c / sqrt(p) * 1):
    Delta_2 = c^2 / n,  Delta_1 = (p + 1) c^2 / (2 n)
for S = X^T X / n, i.e. sqrt(2) smaller in L2 than replace-one. Dividing by n is post-processing
only when the number of records n is public, as in Su et al.'s experiments; if it is not, release
it separately (a count, sensitivity 1 under add-remove) and pay for it.

Clipping is part of the mechanism and its count is data: how many rows were clipped differs
between neighbours (0 vs 1), so it is not returned (a release would have to be noised and paid).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dp.accounting import PrivacyAccountant, resolve_neighbouring, sensitivity_for
from dp.mechanisms import Release, gaussian_mechanism, laplace_mechanism
from dp.validation import check_data, check_mechanism_delta, check_positive


@dataclass(frozen=True)
class PrivateCovariance:
    """A private second-moment matrix and how it was made."""

    covariance: np.ndarray  # symmetric noisy S (may be indefinite)
    n_samples: int
    clip: float
    release: Release | None  # None for the non-private S
    neighbouring: str = "replace-one"  # the relation the release's guarantee holds for


def clip_rows(X: np.ndarray, clip: float) -> tuple[np.ndarray, int]:
    """Return (X with each row scaled to L2 norm <= clip, number of rows that were scaled)."""
    norms = np.linalg.norm(X, axis=1)
    over = norms > clip
    if not over.any():
        return X, 0
    scale = np.ones_like(norms)
    scale[over] = clip / norms[over]
    return X * scale[:, None], int(over.sum())


def covariance_sensitivity(p: int, n: int, clip: float = 1.0, norm: str = "l2",
                           neighbouring: str = "replace-one") -> float:
    """Return the sensitivity of the upper triangle of X^T X / n (module docstring).

    replace-one, "l2": sqrt(2) c^2 / n (Su et al. eq. 3.2); "l1": c^2 min(p/sqrt(2) + 1,
    sqrt(p(p+1))) / n. add-remove: c^2 / n and (p + 1) c^2 / (2 n).
    """
    c2 = clip * clip
    if norm == "l2":
        return sensitivity_for(neighbouring, replace_one=math.sqrt(2.0) * c2 / n, add_remove=c2 / n)
    if norm == "l1":
        return sensitivity_for(
            neighbouring,
            replace_one=c2 * min(p / math.sqrt(2.0) + 1.0, math.sqrt(p * (p + 1.0))) / n,
            add_remove=(p + 1.0) * c2 / (2.0 * n),
        )
    raise ValueError(f"norm must be 'l1' or 'l2', got {norm!r}")


def _symmetric_from_triangle(values: np.ndarray, p: int) -> np.ndarray:
    iu = np.triu_indices(p)
    out = np.zeros((p, p))
    out[iu] = values
    return out + np.triu(out, 1).T


def private_covariance(
    X,
    epsilon: float | None,
    delta: float = 0.0,
    mechanism: str = "laplace",
    clip: float = 1.0,
    calibration: str = "analytic",
    random_state=None,
    budget: PrivacyAccountant | None = None,
    neighbouring: str | None = None,
) -> PrivateCovariance:
    """Return S~ = X^T X / n + E, E symmetric noise on the upper triangle (Su et al. Alg. 1, 1-3).

    Rows are clipped to L2 norm <= clip first. epsilon=None returns the non-private S (no
    clipping, nothing spent). Laplace gives epsilon-DP (delta must be 0), Gaussian (epsilon,
    delta)-DP, under `neighbouring` (default: the budget's relation, else replace-one) with n
    public; the charge goes to `budget` before any noise is drawn.
    """
    X = check_data(X)
    n, p = X.shape
    if epsilon is None:
        return PrivateCovariance(X.T @ X / n, n, math.inf, None)
    clip = check_positive(clip, "clip")
    delta = check_mechanism_delta(mechanism, delta)
    neighbouring = resolve_neighbouring(neighbouring, budget)
    clipped, _ = clip_rows(X, clip)
    S = clipped.T @ clipped / n
    upper = S[np.triu_indices(p)]
    if mechanism == "laplace":
        release = laplace_mechanism(
            upper, covariance_sensitivity(p, n, clip, "l1", neighbouring), epsilon,
            random_state=random_state, budget=budget, label="covariance (laplace)",
        )
    else:
        release = gaussian_mechanism(
            upper, covariance_sensitivity(p, n, clip, "l2", neighbouring), epsilon, delta,
            calibration=calibration, random_state=random_state, budget=budget,
            label="covariance (gaussian)",
        )
    return PrivateCovariance(_symmetric_from_triangle(release.values, p), n, clip, release, neighbouring)


def project_psd(S: np.ndarray, floor_ratio: float = 1e-3) -> np.ndarray:
    """Return the nearest (Frobenius) matrix to symmetric S with eigenvalues >= floor.

    floor = floor_ratio * mean |eigenvalue| of S, a scale-free positive floor. Applied to a
    private S~ this is post-processing (Su et al. Prop. 2.4) and spends no privacy.
    """
    w, V = np.linalg.eigh((S + S.T) / 2.0)
    floor = floor_ratio * max(np.abs(w).mean(), np.finfo(float).tiny)
    return (V * np.maximum(w, floor)) @ V.T
