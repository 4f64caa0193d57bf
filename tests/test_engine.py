"""The in-process HAMSI and mb-GD engine: convergence, reproducibility, the shard contract, stops."""

import math
import os

import numpy as np
import pytest

import partition
from hamsi import kernels, shard_kernels
from hamsi.data.synth import make_ratings
from hamsi.lbfgs import LBFGSMemory
from hamsi.optimizer import engine_rngs, minimize_hamsi, minimize_mbgd, numba_threads
from hamsi.problems import MatrixFactorization
from hamsi.trace import TRACE_COLUMNS


@pytest.fixture(scope="module")
def ratings():
    return make_ratings(users=60, items=80, ratings=1500, rank=3, seed=3)


def run(
    ratings,
    blocks=2,
    rank=4,
    reg=0.0,
    biases=False,
    algorithm=minimize_hamsi,
    scheme="strata-b",
    **options,
):
    cover = partition.make(
        scheme,
        ratings,
        blocks=blocks,
        **({"subsets": options.pop("subsets")} if "subsets" in options else {}),
    )
    problem = MatrixFactorization(ratings, rank, reg=reg, biases=biases)
    options.setdefault("threads", 1)
    options.setdefault("random_state", 0)
    return problem, algorithm(problem, cover, **options)


@pytest.mark.parametrize("blocks,epochs,factor", [(1, 600, 1e-4), (2, 200, 2e-3)])
def test_gradient_norm_goes_to_zero(ratings, blocks, epochs, factor):
    """Thesis Thm 3.1.3: the full gradient norm tends to zero along the deterministic cycles.

    With K = 1 (full gradient) the decrease is fast; with K = 2 the cycle-end iterate keeps an
    incremental oscillation of the order of the step 1/beta_t, which decays slowly (gamma 0.51).
    """
    problem, result = run(ratings, blocks=blocks, reg=0.5, biases=True, eta=0.2, max_cycles=epochs)
    start = problem.initial_point(engine_rngs(0)[0])
    initial, final = (
        np.linalg.norm(problem.gradient(start)),
        np.linalg.norm(problem.gradient(result.x)),
    )
    assert result.reason == "epoch_limit" and result.pairs_accepted > 100
    assert final < factor * initial
    objective = result.trace.column("objective")
    assert objective[-1] < objective[len(objective) // 2] < objective[0]


def test_hamsi_beats_mbgd_on_the_same_partition(ratings):
    _, hamsi = run(ratings, rank=5, max_cycles=40)
    _, mbgd = run(ratings, rank=5, max_cycles=40, algorithm=minimize_mbgd)
    assert hamsi.trace.column("train_rmse")[-1] < 0.8 * mbgd.trace.column("train_rmse")[-1]
    # and in the same optimization time: mb-GD gets 3x HAMSI's time and still trails
    _, mbgd_longer = run(
        ratings, rank=5, max_cycles=10_000, max_time=3 * hamsi.time, algorithm=minimize_mbgd
    )
    assert hamsi.trace.column("train_rmse")[-1] < mbgd_longer.trace.column("train_rmse")[-1]


@pytest.mark.parametrize("schedule", ["det", "stoc"])
def test_same_seed_same_trace(ratings, schedule):
    _, first = run(ratings, schedule=schedule, max_cycles=15, random_state=5)
    _, second = run(ratings, schedule=schedule, max_cycles=15, random_state=5)
    np.testing.assert_array_equal(first.x, second.x)
    for name in ("cycle", "inner", "train_rmse", "objective"):
        np.testing.assert_array_equal(first.trace.column(name), second.trace.column(name))
    _, other = run(ratings, schedule=schedule, max_cycles=15, random_state=6)
    assert not np.array_equal(first.x, other.x)


@pytest.mark.parametrize("vector_min", [0, kernels.PARALLEL_VECTOR_MIN])
def test_thread_count_does_not_change_the_iterates(ratings, monkeypatch, vector_min):
    # vector_min 0: two threads run the parallel vector kernels, one thread their one-thread twins
    monkeypatch.setattr(kernels, "PARALLEL_VECTOR_MIN", vector_min)
    _, one = run(ratings, blocks=2, max_cycles=12, threads=1)
    _, two = run(ratings, blocks=2, max_cycles=12, threads=2)
    np.testing.assert_array_equal(one.x, two.x)


def test_the_vector_kernels_follow_the_thread_count_and_the_size():
    with numba_threads(2):
        assert (
            kernels.vector_kernels(kernels.PARALLEL_VECTOR_MIN).sharded_copy is kernels.sharded_copy
        )
        assert (
            kernels.vector_kernels(kernels.PARALLEL_VECTOR_MIN - 1).sharded_copy
            is not kernels.sharded_copy
        )
    with numba_threads(1):
        twin = kernels.vector_kernels(kernels.PARALLEL_VECTOR_MIN).sharded_copy
        assert twin is not kernels.sharded_copy and not twin.targetoptions.get("parallel")


def test_the_sharded_drivers_visit_every_shard_once_pairing_u_and_v_shards():
    for n in range(1, 10):
        order = [kernels.interleaved(q, n) for q in range(n)]
        assert sorted(order) == list(range(n))
    # x = U_0, U_1, V_0, V_1: numba's contiguous split of 2 threads gives each a U and a V shard
    assert [kernels.interleaved(q, 4) for q in range(4)] == [0, 2, 1, 3]


def test_a_cold_warm_up_has_a_second_process_compile_the_gradient_into_the_cache(tmp_path):
    """On an empty numba cache the helper process compiles the gradient; this process then loads it."""
    import subprocess
    import sys

    probe = (
        "from hamsi import kernels; kernels.warm_up(0); "
        "print(sum(kernels.sum_partials_in_order.stats.cache_misses.values()), "
        "sum(kernels.mf_subset_gradient.stats.cache_hits.values()), "
        "sum(kernels.mf_subset_gradient.stats.cache_misses.values()))"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    cold = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert cold.stdout.split() == [
        "1",
        "1",
        "0",
    ]  # the probe missed; the gradient came from the helper
    warm = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert warm.stdout.split() == ["0", "1", "0"]  # everything cached: no helper


def test_huge_steps_diverge_with_a_clear_message_without_the_safeguard(ratings):
    _, result = run(ratings, eta=1e-12, max_cycles=200, safeguard=False)
    assert result.reason == "diverged" and result.status == 2 and not result.success
    # the step is 1/(eta t)^gamma: a larger eta gives smaller steps, and the message says so
    assert (
        "diverged" in result.message
        and "larger eta" in result.message
        and "smaller steps" in result.message
    )
    assert not math.isfinite(result.trace.column("objective")[-1])
    assert result.n_cycles < 200


def test_safeguard_keeps_huge_steps_finite_and_falls_back(ratings):
    problem, result = run(ratings, eta=1e-12, max_cycles=60)
    assert result.reason == "epoch_limit" and result.success and np.isfinite(result.x).all()
    objective = result.trace.column("objective")
    assert np.isfinite(objective).all() and objective[-1] < objective[0]
    assert result.fallbacks >= 1 and result.phase_times["safeguard"] > 0
    # the pair counts are the run's, not those of the memory the last fallback left
    assert (
        result.pairs_accepted + result.pairs_rejected == result.n_cycles
    )  # every cycle judged a pair
    # the fallback returns to an iterate at most JUMP_FACTOR x the best objective seen before it
    from hamsi.stepper import JUMP_FACTOR

    assert np.all(objective <= JUMP_FACTOR * np.minimum.accumulate(objective) * (1 + 1e-12))


def test_step_cap_norm_from_small_reductions_matches_the_dense_step():
    """|sigma g + W c|^2 from g'g, W'g and the memory's Gram matrix equals the dense norm."""
    from hamsi.exchange import Reductions
    from hamsi.stepper import STEP_RADIUS, Stepper

    rng = np.random.default_rng(4)
    n, M = 30, 3
    stepper = Stepper(
        method="hamsi",
        n_subsets=2,
        n_params=n,
        memory=M,
        eta=1.0,
        gamma=0.5,
        eta_gd=1.0,
        safeguard=True,
    )
    S, Y = np.zeros((M, n)), np.zeros((M, n))
    for slot in [0, 1, 2, 0]:  # the ring wraps: slot 0 is overwritten
        s = rng.standard_normal(n)
        y = s + 0.1 * rng.standard_normal(n)
        products = np.concatenate([[s @ y, y @ y], S @ y, Y @ y])
        gram = np.concatenate([[s @ s], S @ s, Y @ s])
        assert stepper.lbfgs.next_slot == slot
        assert (
            stepper._consider_pair(
                Reductions(pair=products[None], gram=gram[None]),
                exchange=type("E", (), {"store_pair": lambda self, k: None})(),
            )
            == slot
        )
        S[slot], Y[slot] = s, y
    W = np.vstack([S, Y])
    np.testing.assert_allclose(stepper.gram, W @ W.T, rtol=1e-12)
    g, x = rng.standard_normal(n), 1e-3 * rng.standard_normal(n)
    coef = stepper.lbfgs.coefficients(np.concatenate([S @ g, Y @ g]))
    direction = stepper.lbfgs.sigma * g + coef @ W
    norms = np.array([[g @ g, x @ x]])
    capped = stepper._capped(1e6, Reductions(norms=norms), coef, stepper.lbfgs.sigma, W @ g)
    assert capped * np.linalg.norm(direction) == pytest.approx(STEP_RADIUS * np.sqrt(n), rel=1e-9)
    assert stepper._capped(1e-9, Reductions(norms=norms), coef, stepper.lbfgs.sigma, W @ g) == 1e-9


def test_safeguard_skips_nearly_orthogonal_pairs():
    from hamsi.exchange import Reductions
    from hamsi.stepper import Stepper

    stepper = Stepper(
        method="hamsi",
        n_subsets=2,
        n_params=4,
        memory=2,
        eta=1.0,
        gamma=0.5,
        eta_gd=1.0,
        safeguard=True,
    )
    s, y = np.array([1.0, 0, 0, 0]), np.array([1e-5, 1.0, 0, 0])  # cosine 1e-5 < CURVATURE_COSINE
    products = np.concatenate([[s @ y, y @ y], np.zeros(4)])
    red = Reductions(pair=products[None], gram=np.concatenate([[s @ s], np.zeros(4)])[None])
    assert stepper._consider_pair(red, exchange=None) is None and stepper.lbfgs.n_rejected == 1
    plain = LBFGSMemory(2)  # the thesis rule alone (s'y / |y| > 1e-6) would have kept it
    assert plain.consider_pair(products)


def test_time_limit_stops_the_run(ratings):
    _, result = run(ratings, reg=0.5, biases=True, eta=0.2, max_cycles=None, max_time=0.2)
    assert result.reason == "time_limit" and "max_time" in result.message
    assert 0.2 <= result.time < 1.0
    times = result.trace.column("time_s")
    assert np.all(np.diff(times) > 0) and times[0] == 0.0


def test_target_tolerance_and_early_stopping(ratings):
    train, test = ratings.split(0.2, seed=0)
    _, target = run(train, max_cycles=500, target=1.0)
    assert target.reason == "target" and target.trace.column("train_rmse")[-1] <= 1.0
    _, tolerance = run(train, max_cycles=5000, tol=1e-3)
    assert tolerance.reason == "tolerance"
    _, early = run(train, rank=10, max_cycles=5000, validation=test, patience=3)
    assert early.reason == "early_stop" and early.n_cycles < 5000
    assert np.isfinite(early.trace.column("validation_rmse")).all()


def test_early_stopping_returns_the_best_validation_iterate(ratings):
    train, test = ratings.split(0.2, seed=0)
    problem, early = run(train, rank=10, reg=0.0, max_cycles=500, validation=test, patience=4)
    errors = early.trace.column("validation_rmse")
    assert early.reason == "early_stop"
    assert early.best_cycle == int(np.argmin(errors)) < early.n_cycles
    assert problem.heldout_error(early.x, test) == errors[early.best_cycle]
    # the same run cut at the best cycle ends at the same iterate
    _, cut = run(train, rank=10, reg=0.0, max_cycles=early.best_cycle, validation=test)
    np.testing.assert_array_equal(early.x, cut.x)
    train_rmse = early.trace.column("train_rmse")
    rose = errors[-1] > errors[early.best_cycle] and train_rmse[-1] < train_rmse[early.best_cycle]
    assert early.overfitting == rose and ("overfitting" in early.message) == rose
    assert rose  # rank 10 without regularization on 1,200 ratings overfits


def test_no_patience_keeps_the_last_iterate(ratings):
    train, test = ratings.split(0.2, seed=0)
    problem, result = run(train, rank=10, max_cycles=8, validation=test)
    assert problem.heldout_error(result.x, test) == result.trace.column("validation_rmse")[-1]


def test_trace_rows_and_phase_split(ratings, tmp_path):
    _, result = run(ratings, blocks=3, max_cycles=6)
    trace = result.trace
    assert len(trace) == 7  # the start (cycle 0) and one row per cycle
    np.testing.assert_array_equal(trace.column("cycle"), np.arange(7))
    np.testing.assert_array_equal(trace.column("inner"), 4 * np.arange(7))  # K + 1 = 4 per cycle
    assert result.time == pytest.approx(sum(result.phase_times.values()))
    assert all(
        result.phase_times[name] > 0 for name in ("gradient", "update", "hessian", "safeguard")
    )
    assert result.phase_times["exchange"] == result.phase_times["wait"] == 0.0
    path = tmp_path / "trace.csv"
    trace.write_csv(path)
    lines = path.read_text().splitlines()
    assert (
        lines[0]
        == ",".join(TRACE_COLUMNS)
        == "cycle,inner,time_s,train_rmse,validation_rmse,objective"
    )
    assert len(lines) == 8


def test_single_subset_forms_a_pair_every_inner_iteration(ratings):
    _, result = run(ratings, blocks=1, max_cycles=20)
    assert result.nit == 20 and result.pairs_accepted + result.pairs_rejected == 19


def test_overlapping_hogwild_blocks_run_deterministically(ratings):
    _, first = run(ratings, scheme="hogwild", blocks=2, subsets=4, max_cycles=8, threads=2)
    _, second = run(ratings, scheme="hogwild", blocks=2, subsets=4, max_cycles=8, threads=2)
    np.testing.assert_array_equal(first.x, second.x)
    assert np.isfinite(first.x).all()


def test_regularizer_sums_row_shards_in_order_and_matches_the_closed_form(ratings):
    """F's penalty: |U|^2 per row shard of the arranged cover, added in shard order, then |V|^2."""
    part = partition.make("strata", ratings, blocks=3, seed=1)
    problem = MatrixFactorization(ratings, 4, reg=0.7, biases=True, reg_weighting="count")
    problem.arrange(part)
    x = problem.initial_point(np.random.default_rng(3))
    U, V = problem.factors(x)
    row_bounds = np.asarray(part.row_bounds, dtype=np.int64)
    partials = np.empty(3)
    kernels.row_shard_norms(U, problem.row_norm_weight, row_bounds, partials)
    for p in range(3):
        lo, hi = row_bounds[p], row_bounds[p + 1]
        assert partials[p] == pytest.approx(
            problem.row_norm_weight[lo:hi] @ (U[lo:hi] ** 2).sum(axis=1), rel=1e-13
        )
    # the shard order fixes the bits: a Python sum of the partials then |V|^2 gives exactly the kernel's
    penalty = kernels.regularizer_in_order(partials, V, problem.col_norm_weight)
    assert penalty == (partials[0] + partials[1] + partials[2]) + kernels.weighted_row_norms(
        V, problem.col_norm_weight
    )
    sse = problem.squared_error(x)
    assert problem.evaluate(x)[1] == 0.5 * problem.scale * (sse + penalty)
    closed_form = problem.row_norm_weight @ (U**2).sum(axis=1) + problem.col_norm_weight @ (
        V**2
    ).sum(axis=1)
    assert penalty == pytest.approx(closed_form, rel=1e-13)


def test_lbfgs_memory_is_laid_out_entry_by_entry():
    """kernels.memory_rows: S[j, i] and Y[j, i] of one entry side by side; as_memory_rows copies only other layouts."""
    from hamsi import kernels

    S, Y = kernels.memory_rows(3, 7)
    assert S.shape == Y.shape == (3, 7) and S.strides == Y.strides == (8, 48)
    assert S.base is Y.base and Y.ctypes.data - S.ctypes.data == 24  # one block, Y beside S
    assert kernels.as_memory_rows(S, Y)[0] is S
    plain_S, plain_Y = np.arange(21.0).reshape(3, 7), -np.arange(21.0).reshape(3, 7)
    S2, Y2 = kernels.as_memory_rows(plain_S, plain_Y)
    assert S2.strides == (8, 48) and np.array_equal(S2, plain_S) and np.array_equal(Y2, plain_Y)
    # the step gives the same bits in either layout
    rng = np.random.default_rng(0)
    x, g, coef = rng.standard_normal(7), rng.standard_normal(7), rng.standard_normal(6)
    a, b = x.copy(), x.copy()
    kernels.shard_lbfgs_step(a, g, plain_S, plain_Y, coef, 0.5, 0.1)
    kernels.shard_lbfgs_step(b, g, S2, Y2, coef, 0.5, 0.1)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("rank,biases", [(3, False), (4, True), (10, True), (13, False)])
@pytest.mark.parametrize("order", ["random", "by user"])
@pytest.mark.parametrize("reg", [True, False])
def test_the_hot_kernels_predict_as_predict_one_bit_for_bit(rank, biases, order, reg):
    """mf_block_gradient and mf_clipped_squared_error write predict_one's sum out: the same bits.

    The gradient, rating by rating into gradient rows that already hold something: ratings in
    random order, and grouped by user as blocks are (runs of one user, a user coming back later).
    """
    rng = np.random.default_rng(rank)
    m, n, nnz, width = 30, 40, 500, rank + (1 if biases else 0)
    rows = rng.integers(0, m, nnz).astype(np.int32)
    if order == "by user":
        rows = np.sort(rows)
        rows[nnz // 2 : nnz // 2 + 7] = rows[3]  # user rows[3] again, after others
    cols = rng.integers(0, n, nnz).astype(np.int32)
    vals = rng.uniform(1, 5, nnz)
    U, V = rng.standard_normal((m, width)), rng.standard_normal((n, width))
    row_reg, col_reg = rng.random(m), rng.random(n)
    if not reg:
        row_reg, col_reg = np.zeros(m), np.zeros(n)
    offset, scale = 3.1, 1.0 / nnz
    predictions = [kernels.predict_one(U, V, a, b, rank, offset) for a, b in zip(rows, cols)]
    for lo, hi in ((-np.inf, np.inf), (1.5, 4.5)):
        total = 0.0
        for p, v in zip(predictions, vals):
            e = v - (lo if p < lo else hi if p > hi else p)
            total += e * e
        got = kernels.mf_clipped_squared_error(rows, cols, vals, U, V, rank, offset, lo, hi)
        assert got == total
    gU, gV = rng.standard_normal(U.shape), rng.standard_normal(V.shape)
    want_U, want_V = gU.copy(), gV.copy()
    for i, (a, b) in enumerate(zip(rows, cols)):
        minus_e = scale * (predictions[i] - vals[i])
        ra, rb = scale * row_reg[a], scale * col_reg[b]
        for l in range(rank):
            ua, vb = U[a, l], V[b, l]
            if reg:
                want_U[a, l] += minus_e * vb + ra * ua
                want_V[b, l] += minus_e * ua + rb * vb
            else:
                want_U[a, l] += minus_e * vb
                want_V[b, l] += minus_e * ua
        if biases:
            want_U[a, rank] += minus_e + (ra * U[a, rank] if reg else 0.0)
            want_V[b, rank] += minus_e + (rb * V[b, rank] if reg else 0.0)
    empty = np.zeros(0)
    kernels.mf_block_gradient(
        rows,
        cols,
        vals,
        U,
        V,
        gU,
        gV,
        rank,
        scale,
        offset,
        *((row_reg, col_reg) if reg else (empty, empty)),
    )
    assert np.array_equal(gU, want_U) and np.array_equal(gV, want_V)


@pytest.mark.parametrize("store", [False, True])
def test_the_memory5_step_is_the_general_one_bit_for_bit(store):
    """At M = 5 the step (and the step that stores a pair) has the general loop's bits."""
    rng = np.random.default_rng(6)
    n, M = 1001, 5
    x, g = rng.standard_normal(n), rng.standard_normal(n)
    coef = rng.standard_normal(2 * M)
    new_rows = rng.standard_normal((1, n)), rng.standard_normal((1, n))
    results = []
    for step, store_and_step in (
        (kernels.shard_lbfgs_step, kernels.shard_store_pair_and_step),
        (shard_kernels._any_memory_step, shard_kernels._any_memory_store_and_step),
    ):
        S, Y = kernels.memory_rows(M, n)
        S[:], Y[:] = np.sin(np.arange(M * n)).reshape(M, n), np.cos(np.arange(M * n)).reshape(M, n)
        out = x.copy()
        if store:
            store_and_step(out, g, S, Y, *new_rows, 2, coef, 0.7, 0.3)
        else:
            step(out, g, S, Y, coef, 0.7, 0.3)
        results.append((out, S.copy(), Y.copy()))
    (fast, S5, Y5), (general, S_any, Y_any) = results
    assert fast.tobytes() == general.tobytes()
    assert S5.tobytes() == S_any.tobytes() and Y5.tobytes() == Y_any.tobytes()
    assert not np.array_equal(fast, x)


@pytest.mark.parametrize(
    "wants",
    [
        (False, False, True, True),
        (False, False, True, False),
        (True, True, True, True),
        (True, True, False, True),
        (True, False, True, False),
        (True, True, True, False),
        (True, False, True, True),
    ],
)
def test_the_memory5_partials_are_the_general_ones_bit_for_bit(wants):
    """At M = 5 (hamsi.memory5_kernels for some requests) every partial has the general kernels' bits."""
    rng = np.random.default_rng(5)
    n, M = 1001, 5
    x, x_start, g, g_start = (rng.standard_normal(n) for _ in range(4))
    S, Y = kernels.memory_rows(M, n)
    S[:], Y[:] = rng.standard_normal((M, n)), rng.standard_normal((M, n))
    results = []
    for kernel in (kernels.shard_iteration_partials, shard_kernels._fused_partials):
        new_rows = [np.full((1, n), 7.0), np.full((1, n), 7.0)]
        out = [np.full(w, 7.0) for w in (2 * M + 2, 2, 2 * M + 1, 2 * M, 2)]
        kernel(x, x_start, g, g_start, S, Y, *new_rows, *wants, *out)
        results.append(new_rows + out)
    fast, general = results
    assert all(np.array_equal(a, b) for a, b in zip(fast, general))
    want_pair, want_gram, want_wtg, want_norms = wants
    reference = np.full(2 * M, 7.0)
    if want_wtg:
        kernels.shard_wtg_partials(g, S, Y, reference)
    assert np.array_equal(fast[5], reference)
    reference = np.full(2, 7.0)
    if want_norms:
        kernels.shard_norm_partials(x, g, reference)
    assert np.array_equal(fast[6], reference)
    if want_pair:
        pair = np.empty(2 * M + 2)
        kernels.shard_pair_partials(x, x_start, g, g_start, S, Y, pair)
        assert np.array_equal(fast[2], pair) and np.array_equal(fast[0][0], x - x_start)
