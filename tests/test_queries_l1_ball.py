"""The column-wise L1-ball projection of LRM's ALM (dp.queries.l1_ball): exact, sort-free, threaded."""

import itertools

import numpy as np
import pytest

from dp.queries.l1_ball import PARALLEL_MIN_ENTRIES, project_columns_l1, projected_gradient_step


def _brute_force_projection(v, radius):
    """Return the nearest point of the L1 ball by enumerating every face of it (3^d of them).

    On the face with support S and signs s the ball is the affine set {s . w_S = radius,
    w_rest = 0}; the projection onto that set is a candidate when it keeps the signs s. The
    answer is v itself when inside, else the closest candidate.
    """
    if np.abs(v).sum() <= radius:
        return v.copy()
    best, best_distance = None, np.inf
    for pattern in itertools.product((-1, 0, 1), repeat=v.size):
        signs = np.array(pattern, dtype=float)
        support = signs != 0
        if not support.any():
            continue
        shift = (signs[support] @ v[support] - radius) / support.sum()
        w = np.where(support, v - shift * signs, 0.0)
        if np.all(w[support] * signs[support] >= -1e-15):
            distance = np.sum((w - v) ** 2)
            if distance < best_distance:
                best, best_distance = w, distance
    return best


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 6])
@pytest.mark.parametrize("radius", [0.3, 1.0, 2.5])
def test_projection_matches_a_brute_force_qp_on_tiny_inputs(rows, radius):
    rng = np.random.default_rng(100 * rows + int(10 * radius))
    V = rng.standard_normal((rows, 7)) * rng.choice([0.05, 1.0, 3.0], size=7)
    P = project_columns_l1(V, radius)
    for j in range(V.shape[1]):
        assert np.allclose(P[:, j], _brute_force_projection(V[:, j], radius), atol=1e-12)


def test_projection_is_the_nearest_feasible_point():
    """Variational inequality of a projection: <v - P v, y - P v> <= 0 for every y in the ball."""
    rng = np.random.default_rng(7)
    V = rng.standard_normal((40, 300)) * 0.2
    V[:, 0] = 0.0
    V[:, 1] = np.eye(40)[0] * 5.0  # one large entry: projected to exactly e_1
    P = project_columns_l1(V)
    norms = np.abs(P).sum(axis=0)
    assert np.all(norms <= 1 + 1e-12)
    inside = np.abs(V).sum(axis=0) <= 1
    assert np.array_equal(P[:, inside], V[:, inside])
    assert np.allclose(norms[~inside], 1.0)
    assert np.allclose(P[:, 1], np.eye(40)[0])
    for _ in range(20):
        Y = project_columns_l1(rng.standard_normal((40, 300)) * rng.uniform(0.01, 1.0))
        assert np.all(np.einsum("ij,ij->j", V - P, Y - P) <= 1e-12)


def test_projection_rejects_bad_input():
    with pytest.raises(ValueError, match="radius"):
        project_columns_l1(np.ones((2, 2)), 0.0)
    with pytest.raises(ValueError, match="2-D"):
        project_columns_l1(np.ones(3))


def _duchi_sorted_projection(V, radius):
    """Duchi et al. (2008) Fig. 1 column by column: sort, find rho, soft-threshold (the reference)."""
    out = V.copy()
    for j in range(V.shape[1]):
        v = V[:, j]
        if np.abs(v).sum() <= radius:
            continue
        u = np.sort(np.abs(v))[::-1]
        sums = np.cumsum(u) - radius
        rho = np.nonzero(u * np.arange(1, u.size + 1) > sums)[0][-1]
        out[:, j] = np.sign(v) * np.maximum(np.abs(v) - sums[rho] / (rho + 1), 0.0)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_sort_free_projection_equals_the_sorted_reference_with_ties_and_zeros(seed):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 60))
    V = rng.standard_normal((rows, 200)) * rng.choice([1e-3, 0.05, 1.0, 1e6], size=200)
    V[:, :20] = np.round(V[:, :20] * 4) / 4  # ties and exact zeros
    V[:, 20] = 0.0
    for radius in (0.5, 1.0, 7.0):
        P = project_columns_l1(V, radius)
        assert np.allclose(
            P, _duchi_sorted_projection(V, radius), rtol=1e-12, atol=1e-12 * np.abs(V).max()
        )
        assert np.all(np.abs(P).sum(axis=0) <= radius * (1 + 1e-12))


def test_projection_split_over_threads_is_bitwise_the_single_thread_result_and_writes_into_out():
    rng = np.random.default_rng(11)
    V = rng.standard_normal((70, 2000)) * rng.choice(
        [1e-3, 0.05, 1.0], size=2000
    )  # > PARALLEL_MIN_ENTRIES
    single = project_columns_l1(V, threads=1)
    out = np.empty_like(V)
    for threads in (2, 3, 8):
        assert project_columns_l1(V, out=out, threads=threads) is out
        assert np.array_equal(out, single)
    assert np.allclose(single, _duchi_sorted_projection(V, 1.0), rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="out must be"):
        project_columns_l1(V, out=V)
    with pytest.raises(ValueError, match="out must be"):
        project_columns_l1(V, out=np.empty((70, 3)))
    assert V.size > PARALLEL_MIN_ENTRIES


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_projected_gradient_step_equals_the_numpy_step_of_alg_2(threads):
    rng = np.random.default_rng(12 + threads)
    r, n = 70, 2000  # > PARALLEL_MIN_ENTRIES: split over threads
    search, current = (
        rng.standard_normal((r, n)) * 0.05,
        project_columns_l1(rng.standard_normal((r, n))),
    )
    gradient, linear = rng.standard_normal((r, n)), rng.standard_normal((r, n))
    omega, momentum = 3.5, 0.4
    expected = _duchi_sorted_projection(search - (gradient - linear) / omega, 1.0)
    following, new_search = np.empty((r, n)), search.copy()
    distance, size = projected_gradient_step(
        new_search, gradient, linear, omega, current, following, momentum, threads=threads
    )
    assert np.allclose(following, expected, rtol=1e-12, atol=1e-15)
    assert np.allclose(
        new_search, following + momentum * (following - current), rtol=1e-12, atol=1e-15
    )
    assert np.isclose(distance, np.linalg.norm(search - following), rtol=1e-12)
    assert np.isclose(size, np.linalg.norm(following), rtol=1e-12)
