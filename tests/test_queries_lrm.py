"""The Low-Rank Mechanism's solver: L1-ball projection and the ALM decomposition (seed 001)."""

import itertools

import numpy as np
import pytest

from dp.queries.l1_ball import project_columns_l1
from dp.queries.lrm import low_rank_decomposition


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


def _range_workload(m, n, seed):
    rng = np.random.default_rng(seed)
    W = np.zeros((m, n))
    for i in range(m):
        a, b = sorted(rng.integers(0, n, 2))
        W[i, a : b + 1] = 1.0
    return W


def test_decomposition_reaches_W_equals_BL_within_gamma():
    W = _range_workload(24, 32, seed=3)
    result = low_rank_decomposition(W, gamma=1e-3, random_state=0)
    assert result.converged, result.message
    assert np.linalg.norm(W - result.B @ result.L) <= 1e-3
    assert result.residual == pytest.approx(np.linalg.norm(W - result.B @ result.L))
    assert result.history[-1].residual == pytest.approx(result.residual)
    assert np.abs(result.L).sum(axis=0).max() <= 1 + 1e-12
    assert result.rank == int(np.ceil(1.2 * np.linalg.matrix_rank(W)))
    # the decomposition must beat the trivial feasible one B = W, L = I with r = n columns only
    # when it may use that many rows; with r < n it must at least beat noise on the queries
    workload_objective = W.shape[0] * np.abs(W).sum(axis=0).max() ** 2
    assert result.objective < workload_objective


def test_decomposition_is_reproducible_and_seeded():
    W = _range_workload(10, 16, seed=4)
    a = low_rank_decomposition(W, random_state=5, max_outer=30)
    b = low_rank_decomposition(W, random_state=5, max_outer=30)
    c = low_rank_decomposition(W, random_state=6, max_outer=30)
    assert np.array_equal(a.B, b.B) and np.array_equal(a.L, b.L)
    assert not np.array_equal(a.L, c.L)


def test_decomposition_reports_why_it_stopped():
    W = _range_workload(10, 16, seed=4)
    result = low_rank_decomposition(W, gamma=1e-12, max_outer=3)
    assert result.status == "iteration limit" and not result.converged
    assert "iteration limit after 3 outer iterations" in result.message
    assert len(result.history) == 3
    assert set(result.phase_seconds) == {"B update (Eq. 9)", "L update (Alg. 2)", "residual and multiplier"}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"W": np.full((2, 2), np.nan)}, "NaN"),
        ({"W": np.zeros((2, 3))}, "all zeros"),
        ({"W": np.ones(3)}, "2-D"),
        ({"W": np.ones((2, 2)), "rank": 0}, "rank"),
        ({"W": np.ones((2, 2)), "gamma": -1.0}, "gamma"),
    ],
)
def test_decomposition_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        low_rank_decomposition(**kwargs)
