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

Add-remove neighbours (one row x added or removed). Then n itself is what differs: X^T X / n
moves by (x x^T - S) / (n + 1), and a noise scale computed from the data's own n differs between
neighbours (a Laplace or Gaussian scale that differs has unbounded privacy loss); calibrating
to the data's own n fails an audit (epsilon >= 2.42 measured for a claimed 1). So the release
is the sum X^T X, which changes by x x^T: its triangle has L2 norm
sqrt((||x||^4 + sum x_i^4) / 2) <= c^2 (sum x_i^4 <= ||x||^4; equality for one nonzero coordinate)
and L1 norm (||x||_1^2 + ||x||_2^2) / 2 <= (p + 1) c^2 / 2 (||x||_1 <= sqrt(p) ||x||_2; equality
for x = c / sqrt(p) * 1):
    Delta_2 = c^2,  Delta_1 = (p + 1) c^2 / 2,
with noise that depends on p and c only. It is then divided by a number that is not the data's:
- `public_n` given: a public row count (e.g. the size of a survey fixed in advance), i.e.
  X^T X / public_n with sensitivities c^2 / public_n and (p + 1) c^2 / (2 public_n); or
- by default: a noisy count n~ = n + Laplace(1 / (count_fraction * epsilon)) (the count has
  sensitivity 1 under add-remove), paid from the same budget: the count gets count_fraction of
  epsilon (pure, delta 0) and the sum the rest, so the pair is (epsilon, delta)-DP by basic
  composition, and S~ = (X^T X + E) / max(n~, 1) is post-processing.
The default is the noisy count because that is what add-remove means to a practitioner: the
number of records is private (diffprivlib and OpenDP release a count the same way when the size
is unknown); a caller who really knows n publicly passes it and spends all of epsilon on the sum.
`covariance_sensitivity(p, n, ...)` takes n as the public divisor.

Clipping is part of the mechanism and its count is data: how many rows were clipped differs
between neighbours (0 vs 1), so it is not returned (a release would have to be noised and paid).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from dp._random import as_random_bits
from dp.accounting import PrivacyAccountant, resolve_neighbouring, sensitivity_for
from dp.mechanisms import Release, gaussian_mechanism, laplace_mechanism
from dp.validation import (
    DEFAULT_CLIP,
    PrivacyParameterError,
    check_data,
    check_epsilon,
    check_mechanism_delta,
    check_positive,
    warn_implicit_clip,
)


@dataclass(frozen=True)
class PrivateCovariance:
    """A private second-moment matrix and how it was made.

    Every field is public or private: `n_samples` is the divisor, i.e. the row count under
    replace-one (public there), `public_n`, or the released noisy count under add-remove (never
    the data's own count, which is private under add-remove).
    """

    covariance: np.ndarray  # symmetric noisy S (may be indefinite)
    n_samples: float  # the divisor (see the class docstring)
    clip: float
    release: (
        Release | None
    )  # None for the non-private S; the noisy sum X^T X under add-remove by count
    neighbouring: str = "replace-one"  # the relation the release's guarantee holds for
    count_release: Release | None = None  # the noisy count (add-remove without public_n)
    noise_scale: float = (
        0.0  # noise scale of each entry of `covariance` (Laplace b or Gaussian sigma)
    )


def clip_rows(X: np.ndarray, clip: float) -> tuple[np.ndarray, int]:
    """Return (X with each row scaled to L2 norm <= clip, number of rows that were scaled).

    Part of a mechanism, so it neither warns nor branches on the values: the norm is computed as
    m |x / m| with m = max |x_j| (no overflow, however large the row: np.linalg.norm overflows
    above ~1e154 and the row would be zeroed, with a RuntimeWarning), and every row goes through
    the same arithmetic whether or not any row exceeds the clip (no early return that timing
    could tell). The count is data: callers inside a private release must not expose it.
    """
    X = np.asarray(X, dtype=np.float64)
    peak = np.max(np.abs(X), axis=1) if X.shape[1] else np.zeros(X.shape[0])
    unit = np.where(peak > 0, peak, 1.0)  # an all-zero row stays zero, without 0 / 0
    shape = X / unit[:, None]  # entries in [-1, 1], row norm in [1, sqrt(p)]
    spread = np.sqrt(np.einsum("ij,ij->i", shape, shape))
    limit = clip / np.where(spread > 0, spread, 1.0)
    over = peak > limit  # |x| = peak * spread > clip, without forming the product
    clipped = np.where(over[:, None], shape * limit[:, None], X)
    return clipped, int(np.count_nonzero(over))


def covariance_sensitivity(
    p: int, n: int, clip: float = 1.0, norm: str = "l2", neighbouring: str = "replace-one"
) -> float:
    """Return the sensitivity of the upper triangle of X^T X / n for a PUBLIC n (module docstring).

    replace-one, "l2": sqrt(2) c^2 / n (Su et al. eq. 3.2); "l1": c^2 min(p/sqrt(2) + 1,
    sqrt(p(p+1))) / n. add-remove: c^2 / n and (p + 1) c^2 / (2 n), where n must not be the data's
    own row count (private under add-remove): n = 1 gives the sum X^T X, or a public_n.
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


def _check_divisor_options(public_n, count_fraction, neighbouring: str) -> None:
    """Refuse a public_n that is not a positive integer or comes with replace-one, and a count_fraction outside (0, 1)."""
    if public_n is not None:
        if isinstance(public_n, bool) or not isinstance(public_n, numbers.Integral) or public_n < 1:
            raise PrivacyParameterError(f"public_n must be a positive integer, got {public_n!r}")
        if neighbouring == "replace-one":
            raise PrivacyParameterError(
                "public_n is for add-remove neighbours; under replace-one the row count is public "
                "already (every neighbour has as many rows) and is the divisor"
            )
    if not (isinstance(count_fraction, numbers.Real) and 0.0 < count_fraction < 1.0):
        raise PrivacyParameterError(f"count_fraction must lie in (0, 1), got {count_fraction!r}")


def private_covariance(
    X,
    epsilon: float | None,
    delta: float = 0.0,
    mechanism: str = "laplace",
    clip: float = DEFAULT_CLIP,
    calibration: str = "analytic",
    random_state=None,
    budget: PrivacyAccountant | None = None,
    neighbouring: str | None = None,
    public_n: int | None = None,
    count_fraction: float = 0.1,
) -> PrivateCovariance:
    """Return S~ = X^T X / n + E, E symmetric noise on the upper triangle (Su et al. Alg. 1, 1-3).

    Rows are clipped to L2 norm <= clip first (left at its default, clip warns
    PrivacyLeakWarning). epsilon=None returns the non-private S (no clipping, nothing spent; a
    budget is then refused). Laplace gives epsilon-DP (delta must be 0), Gaussian (epsilon,
    delta)-DP, under `neighbouring` (default: the budget's relation, else replace-one):

    - replace-one: n is public (it is the same for every neighbour); the release is X^T X / n.
    - add-remove: n is private. With `public_n` the release is X^T X / public_n (public_n is a
      number the caller knows without looking at the data); otherwise the sum X^T X is released
      and divided by a noisy count that takes `count_fraction` of epsilon (module docstring).

    Every charge goes to `budget` before any noise is drawn. Preconditions (checked, but the
    refusal is not private, so make sure of them beforehand): X is a finite 2-D array.
    """
    if epsilon is None:
        return _nonprivate_covariance(X, budget)
    epsilon = check_epsilon(epsilon)
    delta = check_mechanism_delta(mechanism, delta)
    warn_implicit_clip(clip)
    clip = check_positive(clip, "clip")
    neighbouring = resolve_neighbouring(neighbouring, budget)
    _check_divisor_options(public_n, count_fraction, neighbouring)
    X = check_data(X, private=True)
    clipped, _ = clip_rows(X, clip)
    release = _CovarianceNoise(mechanism, delta, calibration, as_random_bits(random_state), budget)
    if budget is not None:
        budget.check(epsilon, delta)  # every part fits, or none is released
    if neighbouring == "replace-one" or public_n is not None:
        divisor = X.shape[0] if neighbouring == "replace-one" else int(public_n)
        return _fixed_divisor_covariance(clipped, divisor, clip, epsilon, neighbouring, release)
    return _counted_covariance(clipped, clip, epsilon, count_fraction, neighbouring, release)


def _nonprivate_covariance(X, budget) -> PrivateCovariance:
    """Return the exact X^T X / n (epsilon=None); a budget is refused: nothing would be charged."""
    if budget is not None:
        raise PrivacyParameterError(
            "a budget was given to a non-private release (epsilon=None): nothing would be "
            "charged; give an epsilon, or drop the budget"
        )
    X = check_data(X)
    n = X.shape[0]
    return PrivateCovariance(X.T @ X / n, n, math.inf, None)


@dataclass(frozen=True)
class _CovarianceNoise:
    """One noise mechanism, its noise source and the budget every release is charged to."""

    mechanism: str  # "laplace" or "gaussian"
    delta: float
    calibration: str
    bits: object
    budget: PrivacyAccountant | None

    @property
    def norm(self) -> str:
        return "l1" if self.mechanism == "laplace" else "l2"

    def __call__(self, values, sensitivity, eps, tag=None):
        """Return the release of `values` at `sensitivity` and eps (Laplace or Gaussian)."""
        tag = f"covariance ({self.mechanism})" if tag is None else tag
        if self.mechanism == "laplace":
            return laplace_mechanism(
                values, sensitivity, eps, random_state=self.bits, budget=self.budget, label=tag
            )
        return gaussian_mechanism(
            values,
            sensitivity,
            eps,
            self.delta,
            calibration=self.calibration,
            random_state=self.bits,
            budget=self.budget,
            label=tag,
        )


def _fixed_divisor_covariance(clipped, divisor, clip, epsilon, neighbouring, release):
    """Return the noisy clipped X^T X / divisor, the divisor n (replace-one) or public_n."""
    p = clipped.shape[1]
    out = release(
        (clipped.T @ clipped)[np.triu_indices(p)] / divisor,
        covariance_sensitivity(p, divisor, clip, release.norm, neighbouring),
        epsilon,
    )
    return PrivateCovariance(
        _symmetric_from_triangle(out.values, p),
        divisor,
        clip,
        out,
        neighbouring,
        noise_scale=out.noise_scale,
    )


def _counted_covariance(clipped, clip, epsilon, count_fraction, neighbouring, release):
    """Return the noisy clipped X^T X over a noisy row count (add-remove, n private): the count
    takes count_fraction of epsilon (pure Laplace), the sum the rest."""
    n, p = clipped.shape
    eps_count = count_fraction * epsilon
    count = laplace_mechanism(
        np.array([float(n)]),
        1.0,
        eps_count,
        random_state=release.bits,
        budget=release.budget,
        label="covariance row count (laplace)",
    )
    divisor = max(float(count.values[0]), 1.0)  # post-processing of the released count
    total = release(
        (clipped.T @ clipped)[np.triu_indices(p)],
        covariance_sensitivity(p, 1, clip, release.norm, "add-remove"),
        epsilon - eps_count,
        tag=f"covariance sum ({release.mechanism})",
    )
    return PrivateCovariance(
        _symmetric_from_triangle(total.values, p) / divisor,
        divisor,
        clip,
        total,
        neighbouring,
        count_release=count,
        noise_scale=total.noise_scale / divisor,
    )


def project_psd(S: np.ndarray, floor_ratio: float = 1e-3) -> np.ndarray:
    """Return the nearest (Frobenius) matrix to symmetric S with eigenvalues >= floor.

    floor = floor_ratio * mean |eigenvalue| of S, a scale-free positive floor. Applied to a
    private S~ this is post-processing (Su et al. Prop. 2.4) and spends no privacy.
    """
    w, V = np.linalg.eigh((S + S.T) / 2.0)
    floor = floor_ratio * max(np.abs(w).mean(), np.finfo(float).tiny)
    return (V * np.maximum(w, floor)) @ V.T
