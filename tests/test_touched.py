"""The inner iteration over the rows a subset touches (hamsi.touched): same rows, same bits."""

import numpy as np
import pytest
from helpers import block_least_squares, least_squares_cover

import partition
from hamsi import exchange, kernels
from hamsi.data.synth import make_ratings
from hamsi.exchange import LocalExchange
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization, SparseLeastSquares
from hamsi.touched import TouchedRows, touched_rows

KERNEL_SETS = (kernels._PARALLEL, kernels._ONE_THREAD)


@pytest.fixture(scope="module")
def ratings():
    # sparse in items (as book-like): many items have no rating in a given subset
    return make_ratings(users=40, items=300, ratings=500, seed=3)


def arranged_problem(ratings, blocks=3, rank=3):
    cover = partition.make("strata-b", ratings, blocks=blocks, seed=0)
    problem = MatrixFactorization(ratings, rank, reg=0.3, biases=True)
    problem.arrange(cover)
    return problem, cover, problem.shard_bounds(cover)


def test_subset_rows_are_the_rows_with_ratings_in_the_subset(ratings):
    problem, cover, bounds = arranged_problem(ratings)
    m = ratings.shape[0]
    for k, blocks in enumerate(cover.subsets):
        taken = np.concatenate([np.asarray(b) for b in blocks])
        expected = sorted(set(ratings.rows[taken].tolist()) | {m + b for b in ratings.cols[taken]})
        assert problem.subset_rows(k).tolist() == expected
        assert 0 < len(expected) < m + ratings.shape[1]  # a real restriction on this data


def test_a_subset_gradient_is_zero_off_its_touched_rows_and_the_cuts_follow_the_shards(ratings):
    problem, cover, bounds = arranged_problem(ratings)
    touched = touched_rows(problem, bounds)
    x = problem.initial_point(np.random.default_rng(0))
    w = problem.row_width
    for k in range(cover.n_subsets):
        g = np.zeros(problem.n_params)
        problem.add_subset_gradient(x, g, k)
        off = np.ones(problem.n_params, dtype=bool)
        off[touched.entries(k)] = False
        assert np.all(g[off] == 0.0) and np.any(g[~off] != 0.0)
        for p in range(bounds.size - 1):
            rows = touched.rows[k][touched.cuts[k][p] : touched.cuts[k][p + 1]]
            assert np.all((rows * w >= bounds[p]) & (rows * w < bounds[p + 1]))
        assert touched.cuts[k][-1] == touched.rows[k].size


def test_touched_rows_refuse_bounds_that_cut_a_row():
    with pytest.raises(ValueError, match="whole rows of width 3"):
        TouchedRows([np.array([0])], 3, np.array([0, 4, 9]))
    with pytest.raises(ValueError, match="range"):
        TouchedRows([np.array([3])], 3, np.array([0, 3, 9]))


def vectors(seed=0, width=4, n_rows=60):
    """Return (x, g, S, Y, bounds, rows, cuts): g zero off `rows`, S and Y of M = 5 of both signs."""
    rng = np.random.default_rng(seed)
    n = width * n_rows
    bounds = np.array([0, 12, 24, 40, n // width], dtype=np.int64) * width
    rows = np.sort(rng.choice(n_rows, n_rows // 3, replace=False)).astype(np.int64)
    t = TouchedRows([rows], width, bounds)
    x, g = rng.standard_normal(n), np.zeros(n)
    g[t.entries(0)] = rng.standard_normal(t.entries(0).size)
    S, Y = kernels.memory_rows(5, n)
    S[:], Y[:] = rng.standard_normal(S.shape), rng.standard_normal(Y.shape)
    return x, g, S, Y, bounds, t.rows[0], t.cuts[0]


@pytest.mark.parametrize("k", KERNEL_SETS)
@pytest.mark.parametrize("want_wtg,want_norms", [(True, True), (True, False), (False, True)])
def test_touched_partials_are_bit_for_bit_the_full_pass(k, want_wtg, want_norms):
    x, g, S, Y, bounds, rows, cuts = vectors()
    shards = bounds.size - 1
    full_wtg, full_norms = np.zeros((shards, 10)), np.zeros((shards, 2))
    k.sharded_iteration_partials(
        x, x, g, g, S, Y, np.zeros((1, x.size)), np.zeros((1, x.size)), bounds,
        False, want_wtg, False, want_norms,
        np.zeros((shards, 12)), np.zeros((shards, 2)), np.zeros((shards, 11)), full_wtg, full_norms,
    )  # fmt: skip
    wtg, norms = np.full((shards, 10), 7.0), np.full((shards, 2), 7.0)
    k.sharded_touched_partials(x, g, S, Y, bounds, rows, cuts, 4, want_wtg, want_norms, wtg, norms)
    if want_wtg:
        assert wtg.tobytes() == full_wtg.tobytes()
    if want_norms:
        assert norms.tobytes() == full_norms.tobytes()


@pytest.mark.parametrize("k", KERNEL_SETS)
def test_touched_zero_and_gradient_step_leave_the_bits_of_the_full_ones(k):
    x, g, S, Y, bounds, rows, cuts = vectors(seed=1)
    full_x, touched_x = x.copy(), x.copy()
    k.sharded_gradient_step(full_x, g, 0.37, bounds)
    k.sharded_touched_gradient_step(touched_x, g, 0.37, bounds, rows, cuts, 4)
    assert touched_x.tobytes() == full_x.tobytes()
    k.sharded_touched_zero(g, bounds, rows, cuts, 4)
    assert not np.any(g)


@pytest.mark.parametrize("k", KERNEL_SETS)
def test_storing_a_pair_in_the_step_is_store_then_step_bit_for_bit(k):
    x, g, S, Y, bounds, _, _ = vectors(seed=2)
    rng = np.random.default_rng(5)
    s_new, y_new = rng.standard_normal((1, x.size)), rng.standard_normal((1, x.size))
    coef = rng.standard_normal(10)
    x2, S2, Y2 = x.copy(), S.copy(), Y.copy()
    k.sharded_copy_pair(s_new, y_new, S, Y, 3, bounds)
    k.sharded_lbfgs_step(x, g, S, Y, coef, 0.8, 0.3, bounds)
    k.sharded_store_pair_and_step(x2, g, S2, Y2, s_new, y_new, 3, coef, 0.8, 0.3, bounds)
    assert x2.tobytes() == x.tobytes()
    assert S2.tobytes() == S.tobytes() and Y2.tobytes() == Y.tobytes()


def store_at_once(self, slot):
    """LocalExchange.store_pair as it was: both rows copied when the pair is accepted."""
    self.k.sharded_copy_pair(self.s_new, self.y_new, self.S, self.Y, slot, self.bounds)


@pytest.mark.parametrize("memory,safeguard", [(5, True), (5, False), (3, True)])
def test_the_engine_gives_the_iterates_of_full_passes_bit_for_bit(
    ratings, monkeypatch, memory, safeguard
):
    def fit():
        cover = partition.make("strata-b", ratings, blocks=3, seed=0)
        problem = MatrixFactorization(ratings, 3, reg=0.3, biases=True)
        return minimize_hamsi(
            problem, cover, memory=memory, safeguard=safeguard, eta=0.06,
            max_cycles=14, random_state=0, threads=1,
        )  # fmt: skip

    touched = fit()
    assert touched.pairs_accepted > memory  # the L-BFGS step ran
    with monkeypatch.context() as patch:
        patch.setattr(exchange, "touched_rows", lambda problem, bounds: None)
        patch.setattr(LocalExchange, "store_pair", store_at_once)
        full = fit()
    assert touched.x.tobytes() == full.x.tobytes()
    objectives = [row.objective for row in touched.trace.rows]
    assert objectives == [row.objective for row in full.trace.rows]
    assert touched.fallbacks == full.fallbacks


def test_a_problem_that_does_not_tell_its_rows_runs_full_passes():
    A, b = block_least_squares()
    problem = SparseLeastSquares(A, b)
    cover = least_squares_cover(A)
    problem.arrange(cover)
    assert touched_rows(problem, problem.shard_bounds(cover)) is None
    result = minimize_hamsi(problem, cover, max_cycles=12, random_state=0, threads=1)
    assert np.all(np.isfinite(result.x)) and result.pairs_accepted > 5


def test_subsets_touching_nearly_every_row_run_full_passes():
    dense = make_ratings(users=20, items=30, ratings=500, seed=1)
    problem, _, bounds = arranged_problem(dense, blocks=2)
    assert touched_rows(problem, bounds) is None
