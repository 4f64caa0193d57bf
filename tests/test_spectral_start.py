"""The spectral start: its SVD against numpy's, its scales against the nuclear norm's proximal step."""

import numpy as np
import pytest

from hamsi import defaults, spectral_start
from hamsi.data.ratings import Ratings
from hamsi.problems.matrix_factorization import MatrixFactorization
from hamsi.spectral_start import LocalShards, ResidualShard, spectral_factors, top_singular


def shards_of(matrix, mask, cuts, row_weight):
    """Return ResidualShards of `matrix`'s entries where `mask`, rows cut at `cuts`."""
    m, n = matrix.shape
    bounds = [0, *cuts, m]
    shards = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        rows, cols = np.nonzero(mask[lo:hi])
        shards.append(
            ResidualShard(lo, rows, cols, matrix[lo:hi][rows, cols], hi - lo, n, row_weight[lo:hi])
        )
    return shards


def planted(m=40, n=30, rank=3, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, rank)) @ rng.standard_normal((rank, n)) * 3 + noise * (
        rng.standard_normal((m, n))
    )


def test_the_top_singular_triplets_are_numpys():
    matrix = planted()
    shards = shards_of(matrix, np.ones(matrix.shape, bool), [13, 27], np.ones(40))
    omega = np.random.default_rng(1).standard_normal((30, 13))
    left, sigma, right = top_singular(LocalShards(shards), matrix.shape, 3, omega)
    p, s, qt = np.linalg.svd(matrix)
    assert np.allclose(sigma, s[:3], rtol=1e-9)
    # the same subspaces: every principal angle's cosine is 1
    assert np.allclose(np.linalg.svd(left.T @ p[:, :3])[1], 1.0, atol=1e-9)
    assert np.allclose(np.linalg.svd(right.T @ qt[:3].T)[1], 1.0, atol=1e-9)


@pytest.mark.parametrize("reg", [0.0, 2.5, 1e6])
def test_fully_observed_the_uniform_penalty_soft_thresholds_the_singular_values(reg):
    """Observed everywhere, F = |X - R|^2 + 2 reg |X|_* along each direction: s_k = max(sigma_k - reg, 0)."""
    matrix = np.random.default_rng(2).standard_normal((12, 9))
    shards = shards_of(matrix, np.ones(matrix.shape, bool), [5], np.full(12, reg))
    dU, dV = spectral_factors(
        LocalShards(shards), matrix.shape, 4, np.full(9, reg), np.random.default_rng(3)
    )
    p, s, qt = np.linalg.svd(matrix)
    shrunk = np.maximum(s[:4] - reg, 0.0)
    assert np.allclose(dU @ dV.T, (p[:, :4] * shrunk) @ qt[:4], atol=1e-9)
    # the balanced split: |U_k| = |V_k| under equal weights
    assert np.allclose(np.linalg.norm(dU, axis=0), np.linalg.norm(dV, axis=0))


def test_the_split_of_the_rows_changes_only_rounding():
    matrix = planted(noise=0.5)
    mask = np.random.default_rng(4).random(matrix.shape) < 0.4
    weights = np.full(40, 0.7)
    results = [
        spectral_factors(
            LocalShards(shards_of(matrix, mask, cuts, weights)),
            matrix.shape,
            5,
            np.full(30, 0.7),
            np.random.default_rng(5),
        )
        for cuts in ([], [7, 19, 33])
    ]
    assert np.allclose(results[0][0], results[1][0], atol=1e-10)
    assert np.allclose(results[0][1], results[1][1], atol=1e-10)
    assert np.abs(results[0][0]).max() > 0.1  # a real start, not zeros


@pytest.mark.parametrize("chunk", [spectral_start.LINE_CHUNK, 7])
def test_a_shards_sums_are_those_over_its_ratings(monkeypatch, chunk):
    """direction_sums and line_sums, formed from R's products and the rated pattern, against the ratings one by one."""
    monkeypatch.setattr(spectral_start, "LINE_CHUNK", chunk)
    rng = np.random.default_rng(8)
    matrix, mask = planted(noise=0.5), rng.random((40, 30)) < 0.3
    weights = rng.random(40)
    shard = shards_of(matrix, mask, [11], weights)[1]  # rows 11..39
    left, right = rng.standard_normal((40, 4)), rng.standard_normal((30, 4))
    rows, cols = np.nonzero(mask[11:])
    e, p, q = matrix[11:][rows, cols], left[11:][rows], right[cols]
    z = p * q  # z_k on the ratings
    expected = np.stack([z.T @ e, (z * z).sum(axis=0), weights[11:] @ left[11:] ** 2])
    assert np.allclose(shard.direction_sums(left, right), expected, rtol=1e-12)
    x = z.sum(axis=1)
    assert np.allclose(shard.line_sums(left, right), [x @ e, x @ x], rtol=1e-12)


def test_more_rank_than_rows_fills_what_there_is():
    matrix = planted(m=6, n=30, rank=2)
    shards = shards_of(matrix, np.ones(matrix.shape, bool), [], np.full(6, 0.1))
    dU, dV = spectral_factors(
        LocalShards(shards),
        matrix.shape,
        10,
        np.full(30, 0.1),
        np.random.default_rng(0),
    )
    assert dU.shape == (6, 10) and dV.shape == (30, 10)
    assert np.allclose(dU @ dV.T, matrix, atol=0.2)  # 6 directions span every row


def problem_of(init_factors, seed=0):
    matrix = planted(m=60, n=50, rank=3, noise=0.3, seed=seed) + 3.0
    rows, cols = np.nonzero(np.random.default_rng(seed).random(matrix.shape) < 0.3)
    ratings = Ratings(rows, cols, matrix[rows, cols], shape=matrix.shape)
    return MatrixFactorization(
        ratings,
        3,
        reg=1.0,
        biases=True,
        init_scale=0.05,
        init_biases=True,
        init_factors=init_factors,
    )


def test_the_problem_starts_lower_and_adds_to_the_random_start():
    random_start = problem_of("random").initial_point(np.random.default_rng(7))
    problem = problem_of("spectral")
    start = problem.initial_point(np.random.default_rng(7))
    again = problem.initial_point(np.random.default_rng(7))
    assert np.array_equal(start, again)  # seeded
    objective = [problem.evaluate(x)[1] for x in (random_start, start)]
    assert objective[1] < 0.5 * objective[0]
    # the biases are the bias start's; the factors are the random start plus the spectral part
    (U0, V0), (U1, V1) = problem.factors(random_start), problem.factors(start)
    assert np.array_equal(U0[:, 3], U1[:, 3]) and np.array_equal(V0[:, 3], V1[:, 3])
    dU, dV = problem.spectral_factors(random_start, np.random.default_rng(0))
    assert np.abs(dU).max() > 0.1 and np.abs(dV).max() > 0.1


def test_sum_in_order_has_the_engines_reduction_bits_on_any_shape():
    from hamsi import kernels
    from hamsi.data.moments import sum_in_order

    rng = np.random.default_rng(9)
    parts = [rng.standard_normal((7, 5)) * 10.0 ** rng.integers(-8, 8, (7, 5)) for _ in range(4)]
    parts[1][0, 0], parts[0][0, 1], parts[1][0, 1] = -0.0, -0.0, -0.0
    expected = np.empty(35)
    kernels.sum_partials_in_order(np.stack([part.ravel() for part in parts]), expected)
    assert sum_in_order(parts).tobytes() == expected.reshape(7, 5).tobytes()


def test_the_bias_fit_is_computed_once_per_row_shards_and_handed_out_as_copies(monkeypatch):
    problem = problem_of("spectral")
    fits = []
    original = problem._ridge_biases
    monkeypatch.setattr(
        problem, "_ridge_biases", lambda sweeps: fits.append(sweeps) or original(sweeps)
    )
    first = problem.ridge_biases()
    first[0][:] = 99.0  # a caller's change does not reach the kept fit
    second = problem.ridge_biases()
    assert len(fits) == 1 and not np.any(second[0] == 99.0)
    assert np.array_equal(second[1], first[1])
    problem.ridge_biases(sweeps=3)
    assert len(fits) == 2  # another fit, another key


def test_the_defaults_start_spectral_and_an_unknown_start_is_refused():
    ratings = problem_of("random")
    assert (
        defaults.choose_hyperparameters(
            Ratings(ratings.rows, ratings.cols, ratings.vals, shape=ratings.shape), 3
        )["init_factors"]
        == "spectral"
    )
    with pytest.raises(ValueError, match="init_factors must be one of"):
        problem_of("svd")


def noise_ratings(seed=0, density=0.5):
    """Ratings with biases and noise, nothing low-rank: a spectral start only fits noise."""
    rng = np.random.default_rng(seed)
    m, n = 50, 40
    rows, cols = np.nonzero(rng.random((m, n)) < density)
    values = 3.0 + rng.normal(0, 0.5, m)[rows] + rng.normal(0, 0.5, n)[cols]
    values = values + rng.normal(0, 1.0, rows.size)
    return Ratings(rows, cols, values, shape=(m, n))


def test_a_trial_keeps_the_biases_fit_when_it_beats_the_spectral_start_on_validation():
    from hamsi import MatrixFactorizer, search
    from hamsi.stepper import engine_rngs
    from hamsi.trials import TrialRun

    fit_part, validation = search.validation_split(noise_ratings(), seed=0)
    base = dict(MatrixFactorizer(blocks=2, threads=1, random_state=0).get_params())
    params = {"rank": 8, "reg_weighting": "uniform", "reg": 1e-3, "reg_damping": 0.0}
    trial = TrialRun(MatrixFactorizer, base, params, fit_part, validation)
    problem, exchange = trial.problem, trial.run.exchange
    biases = problem.initial_point(engine_rngs(0)[0], "random")
    spectral_rmse = problem.heldout_error(exchange.x, exchange.heldout)
    biases_rmse = problem.heldout_error(biases, exchange.heldout)
    assert biases_rmse < spectral_rmse  # the case this guards
    outcome = trial.outcome(0)
    assert outcome["validation_rmse"] == biases_rmse and outcome["best_epoch"] == 0
    # the run itself goes on from the spectral start; the trial's model is the kept biases fit
    assert np.array_equal(exchange.x, problem.initial_point(engine_rngs(0)[0]))
    exchange.restore("best")
    assert np.array_equal(exchange.x, biases)


def test_a_refit_of_zero_cycles_is_the_biases_fit():
    from hamsi import MatrixFactorizer
    from hamsi.training import InMemoryRatings

    model = MatrixFactorizer(rank=3, reg=1.0, reg_weighting="uniform", blocks=2, random_state=0)
    model.validate_params()
    model._choose_unsearched()
    data = InMemoryRatings(noise_ratings())
    model.partition_ = model._partition(data.ratings, 1)
    assert model._problem_and_options(data, None)[0].init_factors == "spectral"
    model._chosen["cycles"] = 0
    assert model._problem_and_options(data, None)[0].init_factors == "random"


def test_on_sparse_ratings_the_start_does_not_raise_the_objective_above_the_biases_fit():
    """Noise, 20 % observed, rank 20: the directions' own scales overshoot (F 0.96 against the
    biases' 0.35 without the line search); the line search along their sum stops that."""
    ratings = noise_ratings(1, density=0.2)
    options = dict(reg=0.01, biases=True, init_scale=1e-6, init_biases=True)
    spectral = MatrixFactorization(ratings, 20, init_factors="spectral", **options)
    biases = MatrixFactorization(ratings, 20, init_factors="random", **options)
    start = spectral.initial_point(np.random.default_rng(0))
    assert np.abs(start).max() > 0.1  # not an empty start
    assert (
        spectral.evaluate(start)[1]
        <= biases.evaluate(biases.initial_point(np.random.default_rng(0)))[1]
    )
