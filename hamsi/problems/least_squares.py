"""Sparse linear least squares, min (1 / 2|I|) sum_i (a_i . x - b_i)^2, as a partially separable problem.

Function i touches the parameters alpha_i = the nonzero columns of row a_i. A small second
problem: it shows the optimizers only need the `PartiallySeparableProblem` interface, and its
exact minimizer (scipy lstsq) gives tests a closed form to converge to. NumPy/scipy only.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from hamsi.problems.base import (
    BlockLayout,
    PartiallySeparableProblem,
    block_layout,
    equal_bounds,
    no_shared_entries,
)


class SparseLeastSquares(PartiallySeparableProblem):
    """f_i(x) = (a_i . x - b_i)^2 / 2|I| for the rows a_i of a sparse matrix A."""

    def __init__(self, A, b, n_shards: int = 2):
        self._source = (sp.csr_matrix(A, dtype=np.float64), np.asarray(b, dtype=np.float64))
        self.A, self.b = self._source
        self.n_functions, self.n_params = self.A.shape
        self.n_shards = int(n_shards)
        self.scale = 1.0 / self.n_functions
        self.layout = None

    def arrange(self, partition) -> BlockLayout:
        """Reorder the rows of A so each block is contiguous; return the layout."""
        A = self._source[0]

        def touches_disjoint(blocks):
            return no_shared_entries([A[np.asarray(b)].indices for b in blocks])

        layout = block_layout(partition.subsets, touches_disjoint)
        self.A = self._source[0][layout.order]
        self.b = self._source[1][layout.order]
        self.layout = layout
        return layout

    def shard_bounds(self, partition) -> np.ndarray:
        """Return n_shards equal intervals of x."""
        return equal_bounds(self.n_params, self.n_shards)

    def initial_point(self, rng: np.random.Generator) -> np.ndarray:
        """Return x ~ N(0, 1)."""
        return rng.standard_normal(self.n_params)

    def add_subset_gradient(self, x: np.ndarray, g: np.ndarray, subset: int) -> None:
        """Add sum over the subset's blocks of A_blk^T (A_blk x - b_blk) / |I| into g, block by block."""
        for block in range(len(self.arranged.starts[subset])):
            self.add_block_gradient(x, g, subset, block)

    def add_block_gradient(self, x: np.ndarray, g: np.ndarray, subset: int, block: int) -> None:
        """Add A_blk^T (A_blk x - b_blk) / |I| of one block into g."""
        layout = self.arranged
        start, end = layout.starts[subset][block], layout.ends[subset][block]
        rows = self.A[start:end]
        g += self.scale * (rows.T @ (rows @ x - self.b[start:end]))

    def evaluate(self, x: np.ndarray) -> tuple[float, float]:
        """Return (residual RMSE, objective)."""
        residual = self.A @ x - self.b
        sse = float(residual @ residual)
        return float(np.sqrt(sse / self.n_functions)), 0.5 * self.scale * sse

    def heldout_error(self, x: np.ndarray, data) -> float:
        """Return the residual RMSE on held-out (A, b)."""
        A, b = data
        residual = A @ x - b
        return float(np.sqrt(residual @ residual / residual.size))
