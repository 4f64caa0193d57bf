"""One loop, two exchanges: the Dask engine runs the in-process engine's decisions for any problem."""

import numpy as np
import pytest
from helpers import block_least_squares, least_squares_cover

import partition
from cluster.connect import connect
from cluster.driver import fit_distributed
from cluster.driver import minimize_hamsi as dask_minimize_hamsi
from hamsi.data.synth import make_ratings
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization, SparseLeastSquares

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def client():
    with connect(n_workers=2, threads_per_worker=1, quiet=True) as dask_client:
        yield dask_client


@pytest.fixture(scope="module")
def ratings():
    return make_ratings(users=300, items=400, ratings=6000, seed=4)


def without_time(trace):
    return np.array([row[:2] + row[3:] for row in trace.rows])


@pytest.mark.parametrize("safeguard", [True, False])
def test_sparse_least_squares_on_dask_gives_the_in_process_iterates(client, safeguard):
    A, b = block_least_squares()
    cover = least_squares_cover(A)
    heldout = (A[:10], b[:10])
    ref = minimize_hamsi(
        SparseLeastSquares(A, b),
        cover,
        random_state=0,
        max_cycles=60,
        threads=1,
        safeguard=safeguard,
        validation=heldout,
    )
    got = dask_minimize_hamsi(
        SparseLeastSquares(A, b),
        cover,
        client=client,
        random_state=0,
        max_cycles=60,
        safeguard=safeguard,
        validation=heldout,
        chunk_cycles=25,
    )
    assert (
        got.reason == ref.reason == "epoch_limit" and got.pairs_accepted == ref.pairs_accepted > 50
    )
    np.testing.assert_array_equal(got.x, ref.x)
    np.testing.assert_array_equal(without_time(got.trace), without_time(ref.trace))
    exact = np.linalg.lstsq(A.toarray(), b, rcond=None)[0]
    assert np.abs(got.x - exact).max() < 0.1


@pytest.mark.parametrize("shared,owned", [(None, None), (False, False), (False, True)])
def test_safeguard_fallbacks_are_the_same_on_dask(ratings, client, shared, owned):
    """Steps so large that the safeguard caps them and falls back: same decisions, same bits."""
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    options = dict(random_state=1, max_cycles=12, eta=1e-12)
    ref = minimize_hamsi(MatrixFactorization(ratings, 5), part, threads=2, **options)
    got = fit_distributed(
        ratings,
        rank=5,
        partition=part,
        client=client,
        chunk_cycles=5,
        shared_memory=shared,
        owned_v=owned,
        **options,
    )
    assert got.shared_memory is (shared is None) and got.owned_v is bool(owned)
    assert ref.fallbacks >= 1 and got.fallbacks == ref.fallbacks
    assert got.pairs_rejected == ref.pairs_rejected
    np.testing.assert_array_equal(got.x, ref.x)
    np.testing.assert_array_equal(without_time(got.trace), without_time(ref.trace))


@pytest.mark.parametrize(
    "rules",
    [dict(target=0.9), dict(patience=3), dict(patience=3, shared_memory=False, owned_v=True)],
)
def test_stop_rules_run_the_same_through_both_exchanges(ratings, client, rules):
    """The same StopRules on the same trace: same stopping cycle, reason, message and best iterate."""
    train, test = ratings.split(0.2, seed=2)
    part = partition.make("strata-b", train, blocks=2, seed=1)
    placement = {
        k: rules.pop(k) for k in ("shared_memory", "owned_v") if k in rules
    }  # owned: the best V restored
    options = dict(random_state=1, max_cycles=300, validation=test, **rules)
    ref = minimize_hamsi(MatrixFactorization(train, 20), part, threads=2, **options)
    got = fit_distributed(
        train, rank=20, partition=part, client=client, chunk_cycles=7, **options, **placement
    )
    assert got.reason == ref.reason != "epoch_limit"
    assert got.message == ref.message and got.n_cycles == ref.n_cycles
    for name in ("cycle", "inner", "train_rmse", "objective"):
        np.testing.assert_array_equal(got.trace.column(name), ref.trace.column(name))
    # the held-out sum is split by row shards on Dask, by fixed chunks in process: equal to rounding
    np.testing.assert_allclose(
        got.trace.column("validation_rmse"), ref.trace.column("validation_rmse"), rtol=1e-12
    )
    assert got.best_cycle == ref.best_cycle and got.overfitting == ref.overfitting
    np.testing.assert_array_equal(got.x, ref.x)
    if "patience" in rules:  # early stopping returned the best-validation iterate on both
        assert ref.best_cycle < ref.n_cycles
        assert MatrixFactorization(train, 20).heldout_error(got.x, test) == pytest.approx(
            ref.trace.column("validation_rmse")[ref.best_cycle], rel=1e-12
        )


def _spy_on_the_freeze():
    """In a worker: record gc.get_freeze_count() as each chunk starts its cycles."""
    import gc

    from hamsi import loop

    original = loop.run_cycles
    loop.freeze_counts = []

    def spy(*args, **kwargs):
        loop.freeze_counts.append(gc.get_freeze_count())
        return original(*args, **kwargs)

    loop.run_cycles, loop.original_run_cycles = spy, original


def _unspy():
    from hamsi import loop

    loop.run_cycles = loop.original_run_cycles
    return loop.freeze_counts


def test_a_chunk_freezes_the_workers_heap_and_gives_it_back(ratings, client):
    """run_chunk freezes the worker's existing objects for its cycles (no full collection of the
    Dask worker's heap mid-chunk) and unfreezes them after: none stays frozen."""
    import gc

    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    client.run(_spy_on_the_freeze)
    try:
        fit_distributed(
            ratings,
            rank=3,
            partition=part,
            client=client,
            max_cycles=4,
            chunk_cycles=2,
            random_state=1,
        )
    finally:
        counts = client.run(_unspy)
    assert all(len(c) == 2 and min(c) > 1000 for c in counts.values())  # two chunks, each frozen
    assert set(client.run(gc.get_freeze_count).values()) == {0}
