"""The wavelet strategy (WM; Xiao, Wang and Gehrke 2010, Privelet): Haar wavelet coefficients.

Rows: the total count, then for every node of the dyadic tree over the (padded) domain the
difference "left half minus right half". On n = 2^k cells A is square and invertible and every
column has k + 1 entries of +-1 (L2 sensitivity sqrt(k + 1)); other n use the padded tree with
its columns beyond n dropped. Reconstruction R = W A^+ (exact: W = R A).
"""

from __future__ import annotations

import numpy as np

from dp.queries.strategy import Strategy, matrix_mechanism


def haar_matrix(n: int) -> np.ndarray:
    """Return the unnormalized Haar matrix for the first n cells of a domain padded to a power of 2."""
    size = 1 << max(int(np.ceil(np.log2(n))), 0)
    rows = [np.ones(size)]
    width = size
    while width > 1:
        half = width // 2
        for start in range(0, size, width):
            row = np.zeros(size)
            row[start : start + half] = 1.0
            row[start + half : start + width] = -1.0
            rows.append(row)
        width = half
    A = np.array(rows)[:, :n]
    return A[np.any(A != 0, axis=1)]


def wavelet_strategy(W: np.ndarray, noise: str = "gaussian") -> Strategy:
    """Return WM for W: Haar coefficients with least-squares reconstruction."""
    return matrix_mechanism("wavelet", W, haar_matrix(W.shape[1]), noise)
