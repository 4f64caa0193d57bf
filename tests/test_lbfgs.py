"""The compact L-BFGS memory against the explicit recursive BFGS inverse-Hessian update."""

import numpy as np
import pytest

from hamsi import kernels
from hamsi.lbfgs import LBFGSMemory
from hamsi.stepper import summed


def explicit_bfgs_inverse(pairs, sigma, n):
    """Return H from H0 = sigma I and the BFGS inverse update over pairs (oldest first)."""
    H = sigma * np.eye(n)
    for s, y in pairs:
        rho = 1.0 / (s @ y)
        V = np.eye(n) - rho * np.outer(y, s)
        H = V.T @ H @ V + rho * np.outer(s, s)
    return H


def feed(memory, pairs, n):
    """Offer the pairs to the memory as the drivers do; return dense S, Y in ring order."""
    S = np.zeros((memory.memory, n))
    Y = np.zeros((memory.memory, n))
    for s, y in pairs:
        products = np.concatenate([[s @ y, y @ y], S @ y, Y @ y])
        slot = memory.next_slot
        if memory.consider_pair(products):
            S[slot], Y[slot] = s, y
    return S, Y


def convex_pairs(rng, n, count):
    A = rng.standard_normal((n, n))
    A = A @ A.T + n * np.eye(n)
    pairs = []
    for _ in range(count):
        s = rng.standard_normal(n)
        pairs.append((s, A @ s))
    return pairs


@pytest.mark.parametrize("memory_size,count", [(1, 1), (3, 3), (5, 5), (5, 8), (4, 13)])
def test_compact_product_equals_explicit_bfgs(memory_size, count):
    rng = np.random.default_rng(memory_size * 100 + count)
    n = 9
    pairs = convex_pairs(rng, n, count)
    memory = LBFGSMemory(memory_size)
    S, Y = feed(memory, pairs, n)
    assert memory.full
    H = explicit_bfgs_inverse(pairs[-memory_size:], memory.sigma, n)
    g = rng.standard_normal(n)
    np.testing.assert_allclose(memory.direction(g, S, Y), H @ g, rtol=1e-9, atol=1e-12)


def test_sigma_starts_at_500_and_keeps_the_minimum():
    memory = LBFGSMemory(2)
    assert memory.sigma == 500.0
    s, y = np.array([1.0, 0.0]), np.array([4.0, 0.0])
    feed(memory, [(s, y)], 2)
    assert memory.sigma == pytest.approx(0.25)
    feed(memory, [(s, 0.1 * y)], 2)  # s'y/y'y = 2.5 > 0.25: sigma stays
    assert memory.sigma == pytest.approx(0.25)


def test_pairs_without_positive_curvature_are_rejected():
    memory = LBFGSMemory(2)
    s = np.array([1.0, 0.0])
    feed(memory, [(s, -s), (s, np.array([1e-9, 1.0])), (s, np.zeros(2))], 2)
    assert memory.n_accepted == 0 and memory.n_rejected == 3
    assert not memory.full


def engine_partials(x, x0, g, g0, S, Y, bounds, want_pair=False, want_wtg=False):
    """Return the shard-order sums of kernels.sharded_iteration_partials (what LocalExchange hands the stepper)."""
    B, M = bounds.size - 1, S.shape[0]
    out = dict(
        pair=np.zeros((B, 2 * M + 2)),
        new_pair_g=np.zeros((B, 2)),
        gram=np.zeros((B, 2 * M + 1)),
        wtg=np.zeros((B, 2 * M)),
        norms=np.zeros((B, 2)),
    )
    s_new, y_new = np.zeros((1, x.size)), np.zeros((1, x.size))
    kernels.sharded_iteration_partials(
        x,
        x0,
        g,
        g0,
        S,
        Y,
        s_new,
        y_new,
        bounds,
        want_pair,
        want_wtg,
        False,
        False,
        out["pair"],
        out["new_pair_g"],
        out["gram"],
        out["wtg"],
        out["norms"],
    )
    sums = {name: summed(partials) for name, partials in out.items()}
    return dict(sums, s_new=s_new, y_new=y_new)


def test_sharded_kernels_match_dense_algebra():
    rng = np.random.default_rng(3)
    n, M = 23, 3
    pairs = convex_pairs(rng, n, 6)
    memory = LBFGSMemory(M)
    S, Y = feed(memory, pairs, n)
    bounds = np.array([0, 5, 6, 14, 23], dtype=np.int64)
    g = rng.standard_normal(n)
    wtg = engine_partials(g, g, g, g, S, Y, bounds, want_wtg=True)["wtg"]
    np.testing.assert_allclose(wtg, np.concatenate([S @ g, Y @ g]), rtol=1e-12)
    x = rng.standard_normal(n)
    expected = x - 0.5 * memory.direction(g, S, Y)
    kernels.sharded_lbfgs_step(x, g, S, Y, memory.coefficients(wtg), memory.sigma, 0.5, bounds)
    np.testing.assert_allclose(x, expected, rtol=1e-10, atol=1e-12)


def test_pair_products_and_store():
    rng = np.random.default_rng(4)
    n, M = 11, 2
    S, Y = rng.standard_normal((M, n)), rng.standard_normal((M, n))
    x, x0, g, g0 = (rng.standard_normal(n) for _ in range(4))
    bounds = np.array([0, 4, 11], dtype=np.int64)
    out = engine_partials(x, x0, g, g0, S, Y, bounds, want_pair=True)
    s, y = x - x0, g - g0
    np.testing.assert_allclose(
        out["pair"], np.concatenate([[s @ y, y @ y], S @ y, Y @ y]), rtol=1e-12
    )
    np.testing.assert_allclose(out["new_pair_g"], [s @ g, y @ g], rtol=1e-12)
    kernels.sharded_copy_pair(out["s_new"], out["y_new"], S, Y, 1, bounds)  # hamsi.exchange's store
    np.testing.assert_array_equal(S[1], s)
    np.testing.assert_array_equal(Y[1], y)


@pytest.mark.parametrize(
    "flags",
    [
        (p, gr, w, nm)
        for p in (False, True)
        for gr in (False, True)
        for w in (False, True)
        for nm in (False, True)
    ],
)
def test_fused_iteration_partials_are_bitwise_the_separate_kernels(flags):
    want_pair, want_gram, want_wtg, want_norms = flags
    rng = np.random.default_rng(7)
    M, n = 3, 257
    x, x_start, g, g_start = (rng.standard_normal(n) for _ in range(4))
    S, Y = (
        rng.standard_normal((M, 2 * n))[:, ::2],
        rng.standard_normal((M, n)),
    )  # a strided and a plain layout
    expected = {
        "pair": np.zeros(2 * M + 2),
        "new_pair_g": np.zeros(2),
        "gram": np.zeros(2 * M + 1),
        "wtg": np.zeros(2 * M),
        "norms": np.zeros(2),
    }
    s_ref, y_ref = np.zeros((1, n)), np.zeros((1, n))
    if want_pair:
        kernels.shard_store_pair(x, x_start, g, g_start, s_ref, y_ref, 0)
        kernels.shard_pair_partials(x, x_start, g, g_start, S, Y, expected["pair"])
        kernels.shard_wtg_partials(g, s_ref, y_ref, expected["new_pair_g"])
    if want_gram:
        kernels.shard_gram_partials(x, x_start, S, Y, expected["gram"])
    if want_wtg:
        kernels.shard_wtg_partials(g, S, Y, expected["wtg"])
    if want_norms:
        kernels.shard_norm_partials(x, g, expected["norms"])
    got = {k: np.full_like(v, np.nan) for k, v in expected.items()}
    s_new, y_new = np.zeros((1, n)), np.zeros((1, n))
    kernels.shard_iteration_partials(
        x,
        x_start,
        g,
        g_start,
        S,
        Y,
        s_new,
        y_new,
        want_pair,
        want_gram,
        want_wtg,
        want_norms,
        got["pair"],
        got["new_pair_g"],
        got["gram"],
        got["wtg"],
        got["norms"],
    )
    for name, wanted in zip(("pair", "gram", "wtg", "norms"), flags):
        if wanted:
            assert got[name].tobytes() == expected[name].tobytes(), name
        else:
            assert np.isnan(got[name]).all(), f"{name} written although not requested"
    if want_pair:
        assert got["new_pair_g"].tobytes() == expected["new_pair_g"].tobytes()
        assert s_new.tobytes() == s_ref.tobytes() and y_new.tobytes() == y_ref.tobytes()
