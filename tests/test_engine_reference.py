"""safeguard=False is thesis Alg. 3 as the first release ran it: a literal shard-by-shard reference, bit for bit."""

import numpy as np
import pytest

import partition
from hamsi import kernels
from hamsi.data.synth import make_ratings
from hamsi.lbfgs import LBFGSMemory
from hamsi.optimizer import beta_schedule, engine_rngs, minimize_hamsi
from hamsi.problems import MatrixFactorization
from hamsi.schedules import hamsi_cycle


@pytest.fixture(scope="module")
def ratings():
    return make_ratings(users=60, items=80, ratings=1500, rank=3, seed=3)


def reference_gradient(problem, layout, subset: int, x: np.ndarray) -> np.ndarray:
    """Return the gradient of `subset` at x, block by block with kernels.mf_block_gradient."""
    g = np.zeros_like(x)
    U, V = problem.factors(x)
    gU, gV = problem.factors(g)
    for lo, hi in zip(layout.starts[subset], layout.ends[subset]):
        kernels.mf_block_gradient(
            problem.rows[lo:hi],
            problem.cols[lo:hi],
            problem.vals[lo:hi],
            U,
            V,
            gU,
            gV,
            problem.rank,
            problem.scale,
            problem.offset,
            problem.row_reg,
            problem.col_reg,
        )
    return g


def reference_step(x, g, S, Y, curvature, wtg, inv_beta: float) -> None:
    """Step every shard of x: along the L-BFGS direction once the memory is full, else along -g."""
    coefficients = curvature.coefficients(wtg) if curvature.full else None
    for p in range(len(x)):
        if coefficients is not None:
            kernels.shard_lbfgs_step(
                x[p], g[p], S[p], Y[p], coefficients, curvature.sigma, inv_beta
            )
        else:
            kernels.shard_gradient_step(x[p], g[p], inv_beta)


def reference_pair(curvature, products, x, x_start, g, g_start, S, Y) -> None:
    """Store the cycle's pair s = x - x_start, y = g - g_start in every shard when the memory accepts it."""
    slot = curvature.next_slot
    if curvature.consider_pair(products):
        for p in range(len(x)):
            kernels.shard_store_pair(x[p], x_start[p], g[p], g_start[p], S[p], Y[p], slot)


def shard_by_shard_hamsi(
    problem, cover, epochs, eta=0.06, gamma=0.51, memory=5, seed=0, schedule="det"
):
    """A literal reference of thesis Alg. 3 as the first release ran it (kept here, not imported):
    shard arrays of their own, per-shard kernels, partials summed with kernels.sum_partials_in_order,
    LBFGSMemory for the algebra; K = 1 pairs consecutive iterates. safeguard=False must match it."""
    layout = problem.arrange(cover)
    bounds = problem.shard_bounds(cover)
    x_full = problem.initial_point(engine_rngs(seed)[0])
    K = layout.n_subsets
    curvature = LBFGSMemory(memory)
    M = curvature.memory
    shards = range(bounds.size - 1)

    def cut(vector):
        return [np.ascontiguousarray(vector[bounds[p] : bounds[p + 1]]) for p in shards]

    x, x_start, g_start = cut(x_full), cut(np.zeros_like(x_full)), cut(np.zeros_like(x_full))
    S = [np.zeros((M, bounds[p + 1] - bounds[p])) for p in shards]
    Y = [np.zeros((M, bounds[p + 1] - bounds[p])) for p in shards]
    inner = 0
    schedule_rng = engine_rngs(seed)[1]

    def reduce(kernel, size, *arrays):
        partials = np.empty((len(shards), size))
        for p in shards:
            kernel(*[a[p] for a in arrays], partials[p])
        total = np.empty(size)
        kernels.sum_partials_in_order(partials, total)
        return total

    for epoch in range(1, epochs + 1):
        order = [0] if K == 1 else hamsi_cycle(schedule, K, epoch, schedule_rng)
        for position, subset in enumerate(order):
            inner += 1
            g = cut(reference_gradient(problem, layout, subset, np.concatenate(x)))
            if (K > 1 and position == K) or (K == 1 and inner > 1):
                products = reduce(
                    kernels.shard_pair_partials, 2 * M + 2, x, x_start, g, g_start, S, Y
                )
                reference_pair(curvature, products, x, x_start, g, g_start, S, Y)
            if position == 0:
                x_start, g_start = [a.copy() for a in x], [a.copy() for a in g]
            step = 1.0 / beta_schedule(eta if curvature.full else 0.001, gamma, inner)
            reference_step(
                x, g, S, Y, curvature, reduce(kernels.shard_wtg_partials, 2 * M, g, S, Y), step
            )
    return np.concatenate(x)


@pytest.mark.parametrize(
    "blocks,schedule,eta", [(3, "det", 0.06), (2, "stoc", 0.06), (1, "det", 0.06), (2, "det", 1e-4)]
)
def test_safeguard_off_reproduces_the_first_release_bit_for_bit(ratings, blocks, schedule, eta):
    """safeguard=False is thesis Alg. 3 exactly: the literal reference above, bit for bit (also the
    contract the Dask driver relies on: same kernels, same reduction order, same bits)."""
    cover = partition.make("strata-b", ratings, blocks=blocks)
    problem = MatrixFactorization(ratings, 4, reg=0.2, biases=True)
    engine = minimize_hamsi(
        problem,
        cover,
        max_cycles=10,
        random_state=0,
        threads=2,
        schedule=schedule,
        eta=eta,
        safeguard=False,
    )
    assert engine.pairs_accepted >= 6  # the L-BFGS step ran
    reference = shard_by_shard_hamsi(
        MatrixFactorization(ratings, 4, reg=0.2, biases=True), cover, 10, schedule=schedule, eta=eta
    )
    np.testing.assert_array_equal(engine.x, reference)
