"""The rows of x each subset's gradient can be nonzero on, cut by parameter shard.

x is a sequence of rows of `width` entries (for a rating factorization the users' rows of U,
then the items' rows of V). A subset's gradient writes only the rows its functions touch: with
the per-rating penalty (hamsi.mf_kernels) a row no rating of the subset touches gets g = 0
exactly. The inner-iteration kernels of hamsi.touched_kernels add W^T g and g.g over these rows
only and zero g on them only: every term they skip is an exact zero, so the sums keep their bits
(x + 0.0 == x). On book-like a subset touches about 40 % of V's rows.
"""

from __future__ import annotations

import numpy as np

# Above this share of x's rows in some subset the row-by-row passes save little and cost their
# loops: ml-100k-like's subsets touch 92 % of the rows (its default fit was no faster with them),
# long-tail-like's 71 %, book-like's 41 %. Either way the bits are the same.
TOUCHED_MAX_SHARE = 0.8


class TouchedRows:
    """Sorted touched rows of every subset, with per-shard cuts (rows[k][cuts[k][p]:cuts[k][p+1]])."""

    def __init__(self, rows_per_subset, width: int, bounds: np.ndarray):
        bounds = np.asarray(bounds, dtype=np.int64)
        if width < 1 or np.any(bounds % width):
            raise ValueError(
                f"shard bounds must be whole rows of width {width}; got {bounds.tolist()}"
            )
        self.width = int(width)
        n_rows = int(bounds[-1]) // self.width
        self.rows, self.cuts = [], []
        for rows in rows_per_subset:
            rows = np.unique(np.asarray(rows, dtype=np.int64))
            if rows.size and (rows[0] < 0 or rows[-1] >= n_rows):
                raise ValueError(f"touched rows must lie in range({n_rows})")
            self.rows.append(rows)
            self.cuts.append(np.searchsorted(rows, bounds // self.width).astype(np.int64))

    @property
    def n_subsets(self) -> int:
        return len(self.rows)

    def entries(self, subset: int) -> np.ndarray:
        """Return the entries of x in subset's touched rows, ascending (for tests and checks)."""
        rows = self.rows[subset]
        return (rows[:, None] * self.width + np.arange(self.width)).ravel()


def touched_rows(problem, bounds: np.ndarray) -> TouchedRows | None:
    """Return the problem's TouchedRows over `bounds`; None when it does not tell them or they are
    nearly all (more than TOUCHED_MAX_SHARE of the rows in some subset)."""
    rows_of = getattr(problem, "subset_rows", None)
    if rows_of is None:
        return None
    width = problem.row_width
    touched = TouchedRows([rows_of(k) for k in range(problem.arranged.n_subsets)], width, bounds)
    n_rows = int(bounds[-1]) // width
    if any(rows.size > TOUCHED_MAX_SHARE * n_rows for rows in touched.rows):
        return None
    return touched
