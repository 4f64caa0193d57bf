"""Matrix factorization over observed entries, min ||Y - X1 X2||_F^2 (thesis eq. 3.1), as f = sum_i f_i.

One function per rating i = (a, b, v):
    f_i = (1 / 2|I|) [ (v - U_a . V_b - bu_a - bv_b - mu)^2 + reg (|U_a|^2 / n_a + |V_b|^2 / n_b) ]
(`hamsi.kernels` module docstring): the 1/|I| scaling is the reference implementation's, the
regularization reg (|U|^2 + |V|^2) is spread over each user's n_a and item's n_b ratings so the
objective stays partially separable; biases (when on) are an extra column of U and V,
regularized with them, and mu is the training mean (0 without biases, like the reference).

With reg_weighting="count" the penalty is reg (sum_a n_a |U_a|^2 + sum_b n_b |V_b|^2), the
weighted-lambda regularization of ALS-WR (Zhou et al. 2008): every rating then carries
reg (|U_a|^2 + |V_b|^2) itself, so a user's shrinkage grows with the evidence about them and
the best reg hardly moves with the rank or the size of the data (`hamsi.defaults`).
reg_damping d > 0 (count weighting only) makes it reg (sum_a (n_a + d) |U_a|^2 + ...): every row
counts as if it had d more ratings (the Bayesian damping of LensKit's bias model), so a row with
few ratings is shrunk like under the uniform penalty (reg d) and a popular one like under ALS-WR.
On the long-tail preset this beat both penalties by 0.01 RMSE (docs/accuracy.md).
"""

from __future__ import annotations

import numpy as np

from hamsi import kernels
from hamsi.data.moments import rating_mean, sum_in_order
from hamsi.problems.base import (
    BlockLayout,
    PartiallySeparableProblem,
    block_layout,
    equal_bounds,
    no_shared_entries,
)
from hamsi.spectral_start import LocalShards, ResidualShard, spectral_factors

HELDOUT_CHUNKS = 64
REG_WEIGHTINGS = ("uniform", "count")
INIT_FACTORS = ("random", "spectral")
BIAS_SWEEPS = 10


class MatrixFactorization(PartiallySeparableProblem):
    """Low-rank completion of a Ratings matrix; x = [U (m x w), V (n x w)], w = rank (+1 with biases)."""

    def __init__(
        self,
        ratings,
        rank: int,
        reg: float = 0.0,
        biases: bool = False,
        *,
        reg_weighting: str = "uniform",
        reg_damping: float = 0.0,
        init_scale: float = 1.0,
        init_biases: bool = False,
        init_factors: str = "random",
        clip_heldout: bool = True,
    ):
        check_penalty(reg_weighting, reg_damping)
        check_init_factors(init_factors)
        self.shape = (int(ratings.shape[0]), int(ratings.shape[1]))
        self.rank = int(rank)
        self.reg = float(reg)
        self.biases = bool(biases)
        self.reg_weighting = reg_weighting
        self.reg_damping = float(reg_damping)
        self.init_scale = float(init_scale)
        self.init_biases = bool(init_biases) and self.biases
        self.init_factors = init_factors
        self.width = self.rank + (1 if self.biases else 0)
        self.rows = np.ascontiguousarray(ratings.rows, dtype=np.int32)
        self.cols = np.ascontiguousarray(ratings.cols, dtype=np.int32)
        self.vals = np.ascontiguousarray(ratings.values, dtype=np.float64)
        self._source = (
            self.rows,
            self.cols,
            self.vals,
        )  # caller's order; arrange() permutes copies
        self.n_functions = int(self.rows.shape[0])
        self.n_params = (self.shape[0] + self.shape[1]) * self.width
        self.scale = 1.0 / self.n_functions
        # the mean as the Dask data path reduces it (hamsi.data.moments), so both agree to the bit
        self.offset = rating_mean(self.rows, self.vals, self.shape[0]) if self.biases else 0.0
        self.rating_range = (
            (float(self.vals.min()), float(self.vals.max()))
            if self.vals.size
            else (-np.inf, np.inf)
        )
        self.heldout_range = heldout_range(self.rating_range, clip_heldout)
        row_counts = np.bincount(self.rows, minlength=self.shape[0]).astype(np.float64)
        col_counts = np.bincount(self.cols, minlength=self.shape[1]).astype(np.float64)
        self.row_reg, self.row_norm_weight = penalty_weights(
            self.reg, row_counts, reg_weighting, self.reg_damping
        )
        self.col_reg, self.col_norm_weight = penalty_weights(
            self.reg, col_counts, reg_weighting, self.reg_damping
        )
        self.layout = None
        self._row_bounds = np.array([0, self.shape[0]], dtype=np.int64)
        self._block_bounds = np.array([0, self.n_functions], dtype=np.int64)
        self._bias_fits: dict = {}  # ridge_biases' fits by (sweeps, row shards)

    def factors(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return the views (U, V) of x, shapes (m, w) and (n, w)."""
        m, n = self.shape
        split = m * self.width
        return x[:split].reshape(m, self.width), x[split:].reshape(n, self.width)

    def arrange(self, partition) -> BlockLayout:
        """Reorder the ratings so each block of `partition` is a contiguous slice; return the layout."""
        if tuple(partition.shape) != self.shape:
            raise ValueError(
                f"partition is for a {partition.shape} matrix, ratings are {self.shape}"
            )
        if partition.n_functions != self.n_functions:
            raise ValueError(
                f"partition covers {partition.n_functions} ratings, there are {self.n_functions}"
            )
        rows, cols = self._source[0], self._source[1]

        def touches_disjoint(blocks):
            return no_shared_entries([rows[b] for b in blocks]) and no_shared_entries(
                [cols[b] for b in blocks]
            )

        layout = block_layout(partition.subsets, touches_disjoint)
        self.rows, self.cols, self.vals = (
            np.ascontiguousarray(a[layout.order]) for a in self._source
        )
        self.layout = layout
        self._row_bounds = (
            self.shard_bounds(partition)[: self.n_row_shards(partition) + 1] // self.width
        )
        self._block_bounds = layout.block_bounds
        return layout

    @staticmethod
    def n_row_shards(partition) -> int:
        """Return B, the number of row shards U_0..U_{B-1} (the largest subset's block count)."""
        return max(len(blocks) for blocks in partition.subsets)

    def shard_bounds(self, partition) -> np.ndarray:
        """Return offsets of U_0..U_{B-1}, V_0..V_{B-1} in x (row_bounds/col_bounds, else B equal)."""
        m, n = self.shape
        n_blocks = self.n_row_shards(partition)
        row_bounds = (
            np.asarray(partition.row_bounds, dtype=np.int64)
            if partition.row_bounds is not None
            else equal_bounds(m, n_blocks)
        )
        col_bounds = (
            np.asarray(partition.col_bounds, dtype=np.int64)
            if partition.col_bounds is not None
            else equal_bounds(n, n_blocks)
        )
        return np.concatenate([row_bounds * self.width, (m + col_bounds[1:]) * self.width]).astype(
            np.int64
        )

    def initial_point(
        self, rng: np.random.Generator, init_factors: str | None = None
    ) -> np.ndarray:
        """Return x with N(0, init_scale^2) factors, U row-major then V; biases 0 or fitted.

        init_scale 1 is the reference's start; rating data fits better from a small one. With
        init_biases the biases start at their penalized least-squares fit (`ridge_biases`); with
        init_factors="spectral" the factors then add the objective's minimizers along the top
        singular directions of what the biases leave (`hamsi.spectral_start`, drawing its test
        matrix from `rng` after the factors' normals). `init_factors` overrides the problem's.
        """
        x = np.zeros(self.n_params)
        U, V = self.factors(x)
        U[:, : self.rank] = rng.standard_normal((self.shape[0], self.rank))
        V[:, : self.rank] = rng.standard_normal((self.shape[1], self.rank))
        if self.init_scale != 1.0:
            x *= self.init_scale
        if self.init_biases:
            U[:, self.rank], V[:, self.rank] = self.ridge_biases()
        if (init_factors or self.init_factors) == "spectral":
            dU, dV = self.spectral_factors(x, rng)
            U[:, : self.rank] += dU
            V[:, : self.rank] += dV
        return x

    def _row_shards(self):
        """Yield (shard, row_lo, row_hi, positions of its ratings in the caller's order) per row shard of `arrange`."""
        rows = self._source[0]
        shard_of_row = np.repeat(np.arange(self._row_bounds.size - 1), np.diff(self._row_bounds))
        order = np.argsort(shard_of_row[rows], kind="stable")
        cuts = np.searchsorted(shard_of_row[rows][order], np.arange(self._row_bounds.size))
        for p in range(self._row_bounds.size - 1):
            lo, hi = int(self._row_bounds[p]), int(self._row_bounds[p + 1])
            yield p, lo, hi, order[cuts[p] : cuts[p + 1]]

    def ridge_biases(self, sweeps: int = BIAS_SWEEPS) -> tuple[np.ndarray, np.ndarray]:
        """Return (user, item) biases minimizing F with the factors at 0 (`ridge_bias_sweeps`).

        The ratings are reduced row shard by row shard (those of `arrange`), in the caller's order
        within a shard, as the Dask data path reduces them on the shards' hosts (cluster.dataset).
        The fit is kept per (sweeps, row shards): it is the same bits each time, and a search
        trial asks for it twice (its start and the guard of hamsi.trials).
        """
        key = (int(sweeps), self._row_bounds.tobytes())
        if key not in self._bias_fits:
            self._bias_fits[key] = self._ridge_biases(int(sweeps))
        row_bias, col_bias = self._bias_fits[key]
        return row_bias.copy(), col_bias.copy()

    def _ridge_biases(self, sweeps: int) -> tuple[np.ndarray, np.ndarray]:
        m, n = self.shape
        rows, cols, vals = self._source
        shards = [
            BiasShard(rows[take] - lo, cols[take], vals[take] - self.offset, hi - lo)
            for _, lo, hi, take in self._row_shards()
        ]
        col_counts = np.bincount(cols, minlength=n).astype(np.float64)
        row_biases, col_bias = ridge_bias_sweeps(
            shards, col_counts, self.reg, self.reg_weighting, sweeps, sum_in_order, self.reg_damping
        )
        return (np.concatenate(row_biases) if row_biases else np.zeros(m)), col_bias

    def spectral_factors(self, x: np.ndarray, rng: np.random.Generator):
        """Return (dU, dV) of the spectral start from x's biases (`spectral_start.spectral_factors`).

        Row shard by row shard (those of `arrange`), as the Dask data path forms them on the hosts.
        """
        U, V = self.factors(x)
        rows, cols, vals = self._source
        shards = []
        for _, lo, hi, take in self._row_shards():
            residual = vals[take] - self.offset
            if self.biases:
                residual = residual - U[rows[take], self.rank] - V[cols[take], self.rank]
            shards.append(
                ResidualShard(
                    lo,
                    rows[take] - lo,
                    cols[take],
                    residual,
                    hi - lo,
                    self.shape[1],
                    self.row_norm_weight[lo:hi],
                )
            )
        return spectral_factors(
            LocalShards(shards), self.shape, self.rank, self.col_norm_weight, rng
        )

    @property
    def row_width(self) -> int:
        """Return the entries of one row of x (a user's row of U or an item's of V): w."""
        return self.width

    def subset_rows(self, subset: int) -> np.ndarray:
        """Return the rows of x (users a, then items m + b) subset's ratings touch, ascending.

        The subset's gradient is zero on every other row (the penalty is per rating).
        """
        layout = self.arranged
        take = np.concatenate(
            [np.arange(lo, hi) for lo, hi in zip(layout.starts[subset], layout.ends[subset])]
            or [np.zeros(0, dtype=np.int64)]
        )
        users = np.unique(self.rows[take]).astype(np.int64)
        items = np.unique(self.cols[take]).astype(np.int64) + self.shape[0]
        return np.concatenate([users, items])

    def add_subset_gradient(self, x: np.ndarray, g: np.ndarray, subset: int) -> None:
        """Add the gradient of subset `subset`'s blocks into g, in parallel when they are disjoint."""
        layout = self.arranged
        U, V = self.factors(x)
        gU, gV = self.factors(g)
        kernel = (
            kernels.mf_subset_gradient
            if layout.disjoint[subset]
            else kernels.mf_subset_gradient_sequential
        )
        kernel(
            self.rows,
            self.cols,
            self.vals,
            layout.starts[subset],
            layout.ends[subset],
            U,
            V,
            gU,
            gV,
            self.rank,
            self.scale,
            self.offset,
            self.row_reg,
            self.col_reg,
        )

    def squared_error(self, x: np.ndarray) -> float:
        """Return the training SSE, summed block by block in (subset, block) order."""
        U, V = self.factors(x)
        return kernels.mf_squared_error_chunked(
            self.rows,
            self.cols,
            self.vals,
            U,
            V,
            self.rank,
            self.offset,
            -np.inf,
            np.inf,
            self._block_bounds,
        )

    def evaluate(self, x: np.ndarray) -> tuple[float, float]:
        """Return (train RMSE, objective F(x) = (SSE + penalty) / 2|I|), penalty as reg_weighting says.

        |U|^2 is summed per row shard of the arranged partition, then the shards in order
        (`kernels.regularizer_in_order`): the Dask engine forms the same partials on its workers.
        """
        sse = self.squared_error(x)
        objective = sse
        if self.reg > 0.0:
            U, V = self.factors(x)
            row_partials = np.empty(self._row_bounds.size - 1)
            kernels.row_shard_norms(U, self.row_norm_weight, self._row_bounds, row_partials)
            objective += kernels.regularizer_in_order(row_partials, V, self.col_norm_weight)
        return float(np.sqrt(sse / self.n_functions)), float(0.5 * self.scale * objective)

    def heldout_error(self, x: np.ndarray, data) -> float:
        """Return the RMSE of x on held-out Ratings `data` (same users and items).

        The predictions are those the model serves, clipped to the training range (`heldout_range`),
        so the trace's test RMSE is the estimator's score; unclipped with clip_heldout=False.
        """
        rows = np.ascontiguousarray(data.rows, dtype=np.int32)
        cols = np.ascontiguousarray(data.cols, dtype=np.int32)
        vals = np.ascontiguousarray(data.values, dtype=np.float64)
        if rows.size == 0:
            return float("nan")
        U, V = self.factors(x)
        chunks = equal_bounds(rows.size, min(HELDOUT_CHUNKS, rows.size))
        sse = kernels.mf_squared_error_chunked(
            rows, cols, vals, U, V, self.rank, self.offset, *self.heldout_range, chunks
        )
        return float(np.sqrt(sse / rows.size))

    def predict(self, x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Return the predictions U_a . V_b (+ biases + mu) for dense indices (rows, cols)."""
        U, V = self.factors(x)
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        values = np.einsum("ij,ij->i", U[rows, : self.rank], V[cols, : self.rank]) + self.offset
        if self.biases:
            values += U[rows, self.rank] + V[cols, self.rank]
        return values


def heldout_range(rating_range: tuple, clip_heldout: bool) -> tuple[float, float]:
    """Return the (lo, hi) held-out predictions are clipped to: the training range, or (-inf, inf) when off."""
    return (float(rating_range[0]), float(rating_range[1])) if clip_heldout else (-np.inf, np.inf)


def check_penalty(reg_weighting: str, reg_damping: float) -> None:
    """Raise ValueError unless reg_weighting is known and reg_damping >= 0 (and 0 with the uniform penalty)."""
    if reg_weighting not in REG_WEIGHTINGS:
        raise ValueError(f"reg_weighting must be one of {REG_WEIGHTINGS}; got {reg_weighting!r}")
    if not (
        isinstance(reg_damping, (int, float, np.floating))
        and np.isfinite(reg_damping)
        and reg_damping >= 0
    ):
        raise ValueError(f"reg_damping must be a finite number >= 0; got {reg_damping!r}")
    if reg_damping > 0 and reg_weighting != "count":
        raise ValueError(
            f"reg_damping={reg_damping!r} applies to reg_weighting='count' only; "
            f"got reg_weighting={reg_weighting!r}"
        )


def check_init_factors(init_factors: str) -> None:
    """Raise ValueError unless init_factors names a start of `initial_point` (INIT_FACTORS)."""
    if init_factors not in INIT_FACTORS:
        raise ValueError(f"init_factors must be one of {INIT_FACTORS}; got {init_factors!r}")


def penalty_weights(
    reg: float, counts: np.ndarray, reg_weighting: str, damping: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Return (per-rating penalty weights, the objective's weights of |U_a|^2) for `counts` ratings per row.

    The share of the penalty on |U_a|^2 carried by each of a's ratings is reg / n_a, or
    reg (n_a + damping) / n_a when the penalty is weighted by the count (then |U_a|^2 is weighted
    reg (n_a + damping)); 0 where n_a = 0. Empty per-rating weights for reg 0 (the kernels skip
    the penalty).
    """
    count_weighted = reg_weighting == "count"
    rated = counts > 0
    if reg > 0.0:
        if count_weighted and damping > 0.0:
            per_rating = reg * np.divide(
                counts + damping, counts, out=np.zeros_like(counts), where=rated
            )
        elif count_weighted:
            per_rating = reg * rated
        else:
            per_rating = np.divide(reg, counts, out=np.zeros_like(counts), where=rated)
    else:
        per_rating = np.zeros(0)
    return per_rating, reg * (np.where(rated, counts + damping, 0.0) if count_weighted else rated)


class BiasShard:
    """One row shard's ratings for the bias fit: local rows, cols, residuals v - mu, the shard's row count."""

    def __init__(self, rows, cols, residual, n_rows):
        self.rows, self.cols, self.residual, self.n_rows = rows, cols, residual, int(n_rows)
        self.row_counts = np.bincount(rows, minlength=self.n_rows).astype(np.float64)
        self.row_bias = np.zeros(self.n_rows)

    def col_partial(self, n_items: int) -> np.ndarray:
        """Return this shard's item sums of v - mu - b_a (one sweep's item half, before the reduction)."""
        return np.bincount(self.cols, self.residual - self.row_bias[self.rows], minlength=n_items)

    def solve_rows(
        self, col_bias: np.ndarray, reg: float, reg_weighting: str, damping: float = 0.0
    ) -> np.ndarray:
        """Set and return the shard's user biases given the item biases (one sweep's user half)."""
        weight = bias_weight(self.row_counts, reg, reg_weighting, damping)
        sums = np.bincount(self.rows, self.residual - col_bias[self.cols], minlength=self.n_rows)
        self.row_bias = np.divide(
            sums, weight, out=np.zeros(self.n_rows), where=self.row_counts > 0
        )
        return self.row_bias


def bias_weight(
    counts: np.ndarray, reg: float, reg_weighting: str, damping: float = 0.0
) -> np.ndarray:
    """Return w_a of the closed-form bias step: n_a + reg (n_a + damping) (count-weighted penalty) or n_a + reg."""
    if reg_weighting != "count":
        return counts + reg
    return counts * (1.0 + reg) + reg * damping if damping > 0.0 else counts * (1.0 + reg)


def ridge_bias_sweeps(shards, col_counts, reg, reg_weighting, sweeps, reduce, damping=0.0):
    """Return ([user biases per shard], item biases) minimizing F with the factors at 0.

    Alternating exact steps: b_a = sum_i (v_i - mu - c_b) / w_a, w_a as `bias_weight` (a user or
    item without ratings keeps 0); O(|I|) per sweep. The item sums are every shard's partial
    reduced by `reduce` in shard order (in process: `sum_in_order`; on Dask the same function on a
    worker, with the shards on their hosts), so both engines get the same bits.
    """
    n = col_counts.size
    col_weight = bias_weight(col_counts, reg, reg_weighting, damping)
    col_bias = np.zeros(n)
    for _ in range(sweeps):
        col_sums = reduce([shard.col_partial(n) for shard in shards])
        col_bias = np.divide(col_sums, col_weight, out=np.zeros(n), where=col_counts > 0)
        for shard in shards:
            shard.solve_rows(col_bias, reg, reg_weighting, damping)
    return [shard.row_bias for shard in shards], col_bias
