"""The hierarchical strategy (HM; Hay, Rastogi, Miklau and Suciu 2010): counts of a tree of intervals.

Every node of a complete `branching`-ary tree over the n cells asks for the sum of its interval;
the root asks for the total. The reconstruction is least squares, R = W A^+, which is what
Hay et al.'s constrained inference computes for these queries.
"""

from __future__ import annotations

import numpy as np

from dp.queries.strategy import Strategy, matrix_mechanism


def tree_intervals(n: int, branching: int = 2) -> list[tuple[int, int]]:
    """Return the half-open intervals [a, b) of every node, root first, splitting each into `branching` parts."""
    if branching < 2:
        raise ValueError(f"branching must be >= 2, got {branching}")
    intervals, level = [], [(0, n)]
    while level:
        intervals.extend(level)
        children = []
        for a, b in level:
            if b - a > 1:
                cuts = np.linspace(a, b, min(branching, b - a) + 1).round().astype(int)
                children.extend((int(lo), int(hi)) for lo, hi in zip(cuts[:-1], cuts[1:]))
        level = children
    return intervals


def hierarchical_matrix(n: int, branching: int = 2) -> np.ndarray:
    """Return the 0/1 strategy matrix with one row per tree node."""
    intervals = tree_intervals(n, branching)
    A = np.zeros((len(intervals), n))
    for row, (a, b) in enumerate(intervals):
        A[row, a:b] = 1.0
    return A


def hierarchical_strategy(W: np.ndarray, branching: int = 2, noise: str = "gaussian") -> Strategy:
    """Return HM for W: the tree of interval counts, least-squares reconstruction."""
    return matrix_mechanism("hierarchical", W, hierarchical_matrix(W.shape[1], branching), noise)
