"""The factor graph of a partially separable objective f(x) = sum_i f_i(x_{alpha_i}) (thesis sec. 3.1).

Function nodes are the ratings i in I; parameter nodes are the user rows and item columns (for a
3-way tensor, the slices of each mode). Parameter ids are global: mode d's index r has id
offsets[d] + r, so for a users x items matrix the rows are 0..m-1 and the columns m..m+n-1.

Two storage forms, chosen so that kernels never need a Python loop over functions:
- fixed arity (matrices, 3-way tensors): ``coords[d]`` is the d-th mode index of every function,
  no copy of the rating arrays is made;
- general: CSR-like ``indptr``/``indices``, alpha_i = indices[indptr[i]:indptr[i+1]].
"""

from __future__ import annotations

import numpy as np

from partition.errors import PartitionError


class FactorGraph:
    """Bipartite graph between function nodes and parameter nodes (thesis Fig. 3.2, left)."""

    def __init__(
        self,
        n_functions,
        n_params,
        *,
        coords=None,
        offsets=None,
        shape=None,
        indptr=None,
        indices=None,
    ):
        self.n_functions = int(n_functions)
        self.n_params = int(n_params)
        self.coords = coords
        self.offsets = offsets
        self.shape = shape
        self._indptr = indptr
        self._indices = indices

    # construction -------------------------------------------------------------------------
    @classmethod
    def from_coordinates(cls, coords, shape) -> FactorGraph:
        """Return the graph of a sparse matrix or tensor given per-mode index arrays (fast path)."""
        coords = tuple(np.asarray(c) for c in coords)
        shape = tuple(int(s) for s in shape)
        if len(coords) != len(shape):
            raise PartitionError(
                f"got {len(coords)} index arrays for a shape of {len(shape)} modes {shape}"
            )
        n = coords[0].shape[0]
        for d, c in enumerate(coords):
            if c.ndim != 1 or c.shape[0] != n:
                raise PartitionError(
                    f"index array of mode {d} has shape {c.shape}, expected ({n},)"
                )
            if not np.issubdtype(c.dtype, np.integer):
                raise PartitionError(
                    f"index array of mode {d} has dtype {c.dtype}, expected integers"
                )
        offsets = np.concatenate([[0], np.cumsum(shape)]).astype(np.int64)
        return cls(n, offsets[-1], coords=coords, offsets=offsets, shape=shape)

    @classmethod
    def from_ratings(cls, ratings) -> FactorGraph:
        """Return the graph of any object with `.rows`, `.cols` and `.shape` (a rating matrix)."""
        try:
            rows, cols, shape = ratings.rows, ratings.cols, ratings.shape
        except AttributeError as exc:
            raise PartitionError(
                f"ratings must have .rows, .cols and .shape; got {type(ratings).__name__}"
            ) from exc
        return cls.from_coordinates((rows, cols), shape)

    @classmethod
    def from_index_sets(cls, alphas, n_params) -> FactorGraph:
        """Return the graph of functions f_i touching parameter ids alphas[i] (general form)."""
        lengths = np.fromiter((len(a) for a in alphas), dtype=np.int64, count=len(alphas))
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        indices = (
            np.concatenate([np.asarray(a, dtype=np.int64) for a in alphas])
            if len(alphas)
            else np.zeros(0, np.int64)
        )
        if indices.size and (indices.min() < 0 or indices.max() >= n_params):
            raise PartitionError(
                f"parameter ids must lie in [0, {n_params}); got {indices.min()}..{indices.max()}"
            )
        return cls(len(alphas), n_params, indptr=indptr, indices=indices)

    # views --------------------------------------------------------------------------------
    @property
    def is_matrix(self) -> bool:
        """True for the two-mode (users x items) fast path."""
        return self.coords is not None and len(self.coords) == 2

    @property
    def arity(self) -> int:
        """Number of parameter nodes per function for the fixed-arity form, 0 for the general form."""
        return len(self.coords) if self.coords is not None else 0

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        """Return (indptr, indices): alpha_i = indices[indptr[i]:indptr[i+1]] (global parameter ids)."""
        if self._indptr is None:
            arity = self.arity
            self._indptr = np.arange(0, arity * self.n_functions + 1, arity, dtype=np.int64)
            indices = np.empty((self.n_functions, arity), dtype=np.int64)
            for d, c in enumerate(self.coords):
                indices[:, d] = c + self.offsets[d]
            self._indices = indices.ravel()
        return self._indptr, self._indices

    def function_parameters(self, functions: np.ndarray) -> np.ndarray:
        """Return the concatenated parameter ids touched by `functions` (with repeats)."""
        functions = np.asarray(functions, dtype=np.int64)
        if self.coords is not None:
            return np.concatenate(
                [c[functions].astype(np.int64) + self.offsets[d] for d, c in enumerate(self.coords)]
            )
        indptr, indices = self.csr()
        starts, ends = indptr[functions], indptr[functions + 1]
        lengths = ends - starts
        heads = np.cumsum(lengths) - lengths
        # position of every entry of every alpha_i, gathered without a Python loop
        positions = np.repeat(starts - heads, lengths) + np.arange(lengths.sum(), dtype=np.int64)
        return indices[positions]

    def block_parameters(self, functions: np.ndarray) -> np.ndarray:
        """Return alpha_{k,b}: the sorted union of parameter ids of a block (thesis sec. 3.1)."""
        return np.unique(self.function_parameters(functions))

    def shared_parameters(self, blocks) -> np.ndarray:
        """Return the sorted parameter ids touched by two or more of `blocks` (alpha overlaps)."""
        per_block = [self.block_parameters(b) for b in blocks]
        if not per_block:
            return np.zeros(0, np.int64)
        touched = np.concatenate(per_block)
        counts = (
            np.bincount(touched, minlength=self.n_params) if touched.size else np.zeros(0, np.int64)
        )
        return np.flatnonzero(counts > 1)
