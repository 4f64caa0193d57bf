"""The `Partition` result: a cover of the rating (function) indices by K subsets of blocks."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class Partition:
    """A cover S_1..S_K of the function indices, each S_k cut into blocks (thesis eq. 3.2).

    subsets[k][b] is a sorted int64 array of rating indices (positions in ratings.rows/cols);
    every rating is in exactly one block. Within a subset, blocks touch disjoint parameters
    (user rows and item columns), except for HOGWILD, which records its overlaps.

    For STRATA and STRATA-B, row_bounds and col_bounds hold the B+1 interval boundaries of each
    dimension, and block_intervals[k][b] = (p, j) says block b of subset k is the rectangle
    row interval p x column interval j, with j = (p + k) mod B.
    """

    scheme: str
    shape: tuple[int, int]
    subsets: list[list[np.ndarray]]
    seed: int | None = None
    row_bounds: np.ndarray | None = None
    col_bounds: np.ndarray | None = None
    block_intervals: list[list[tuple[int, int]]] | None = None
    info: dict = field(default_factory=dict)

    @property
    def n_subsets(self) -> int:
        """K, the number of subsets in the cover."""
        return len(self.subsets)

    @property
    def n_functions(self) -> int:
        """|I|, the number of rating indices covered."""
        return int(sum(block.size for subset in self.subsets for block in subset))
