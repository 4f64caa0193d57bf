"""The `Ratings` container: a sparse rating matrix in coordinate form with its id maps."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hamsi.errors import InputError


@dataclass(eq=False)
class Ratings:
    """Observed entries (rows[i], cols[i]) = values[i] of a users x items matrix.

    rows and cols are dense 0-based int32 indices; user_ids[r] and item_ids[c] give the
    original ids (MovieLens ids are sparse and 1-based). Each (row, col) pair occurs once.
    """

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    shape: tuple[int, int]
    user_ids: np.ndarray | None = None
    item_ids: np.ndarray | None = None
    source: str = "<memory>"
    notes: dict = field(default_factory=dict)

    def __post_init__(self):
        self.rows = np.ascontiguousarray(self.rows, dtype=np.int32)
        self.cols = np.ascontiguousarray(self.cols, dtype=np.int32)
        self.values = np.ascontiguousarray(self.values, dtype=np.float64)
        self.shape = (int(self.shape[0]), int(self.shape[1]))
        n = self.rows.shape[0]
        if self.cols.shape[0] != n or self.values.shape[0] != n:
            raise InputError(
                f"{self.source}: rows, cols and values have different lengths "
                f"({n}, {self.cols.shape[0]}, {self.values.shape[0]})"
            )
        if self.user_ids is None:
            self.user_ids = np.arange(self.shape[0], dtype=np.int64)
        if self.item_ids is None:
            self.item_ids = np.arange(self.shape[1], dtype=np.int64)

    @property
    def nnz(self) -> int:
        """Number of observed ratings."""
        return int(self.rows.shape[0])

    def __len__(self) -> int:
        return self.nnz

    def __repr__(self) -> str:
        return f"Ratings({self.shape[0]} users x {self.shape[1]} items, {self.nnz} ratings, source={self.source!r})"

    def subset(self, index: np.ndarray) -> "Ratings":
        """Return the ratings at `index`, keeping the full shape and id maps."""
        return Ratings(self.rows[index], self.cols[index], self.values[index], self.shape,
                       self.user_ids, self.item_ids, self.source)
