"""The Dask engine against the in-process engine, on real worker processes on loopback."""

import os
import time

import numpy as np
import pytest

import partition
from cluster import ClusterError
from cluster.connect import connect
from cluster.driver import fit_distributed
from hamsi.data.synth import make_ratings
from hamsi.errors import InputError
from hamsi.optimizer import minimize_hamsi, minimize_mbgd
from hamsi.problems import MatrixFactorization

pytestmark = pytest.mark.cluster

RANK = 10


@pytest.fixture(scope="module")
def ratings():
    """943 x 1682 with 20,000 ratings (MovieLens-100K's shape, a fifth of its ratings)."""
    return make_ratings(users=943, items=1682, ratings=20_000, seed=1)


@pytest.fixture(scope="module")
def client():
    """Two worker processes on 127.0.0.1, shut down after the module."""
    with connect(n_workers=2, threads_per_worker=1, quiet=True) as dask_client:
        yield dask_client


@pytest.fixture(scope="module")
def client4():
    """Four worker processes on 127.0.0.1: a cover of B blocks runs on B of them (B = 2, 3, 4)."""
    with connect(n_workers=4, threads_per_worker=1, quiet=True) as dask_client:
        yield dask_client


def in_process(ratings, part, method="hamsi", **options):
    problem = MatrixFactorization(ratings, RANK)
    minimize = minimize_hamsi if method == "hamsi" else minimize_mbgd
    return minimize(problem, part, random_state=1, threads=2, **options)


def without_time(trace):
    """Return the trace as an array without the (machine-dependent) time column; NaN == NaN below."""
    return np.array([row[:2] + row[3:] for row in trace.rows])


@pytest.mark.parametrize(
    "scheme,method,schedule,shared",
    [
        ("strata-b", "hamsi", "det", None),
        ("strata-b", "hamsi", "det", False),
        ("strata", "hamsi", "stoc", None),
        ("strata", "hamsi", "stoc", False),
        ("strata-b", "mbgd", "det", None),
    ],
)
def test_strata_iterates_are_bitwise_the_in_process_ones(
    ratings, client, scheme, method, schedule, shared
):
    """V in shared memory (the default on one host) or gV rows sent between workers: the same bits."""
    part = partition.make(scheme, ratings, blocks=2, seed=1)
    ref = in_process(ratings, part, method, schedule=schedule, max_cycles=5)
    got = fit_distributed(
        ratings,
        rank=RANK,
        method=method,
        partition=part,
        schedule=schedule,
        random_state=1,
        max_cycles=5,
        client=client,
        chunk_cycles=2,
        shared_memory=shared,
    )
    assert (
        got.shared_memory is (shared is None) and not got.owned_v
    )  # 2 workers: replicated V sends fewer bytes
    worker_pids = client.run(
        os.getpid
    ).values()  # files are named hamsi-<lead pid>-<run>: only ours count
    assert not [
        f
        for f in os.listdir("/dev/shm")
        if any(f.startswith(f"hamsi-{pid}-") for pid in worker_pids)
    ]
    assert got.reason == ref.reason == "epoch_limit"
    np.testing.assert_array_equal(without_time(got.trace), without_time(ref.trace))
    assert np.array_equal(got.x, ref.x)
    assert got.nit == ref.nit


@pytest.mark.parametrize("blocks", [2, 3, 4])
@pytest.mark.parametrize(
    "scheme,method,schedule,safeguard,reg",
    [
        ("strata-b", "hamsi", "det", True, 0.0),
        ("strata", "hamsi", "stoc", False, 0.0),
        ("strata-b", "hamsi", "stoc", False, 1.0),
        ("strata", "hamsi", "det", True, 1.0),
        ("strata-b", "mbgd", "det", False, 0.0),
    ],
)
def test_owned_v_is_bitwise_the_in_process_one(
    ratings, client4, blocks, scheme, method, schedule, safeguard, reg
):
    """V_j handed along the strata on the message path (cluster.work.OwnedFactorWork), across chunks."""
    part = partition.make(scheme, ratings, blocks=blocks, seed=1)
    problem = MatrixFactorization(ratings, RANK, reg=reg, biases=reg > 0)
    # memory 2: quasi-Newton steps (they read the pair rows and cycle-start copies) once 2 pairs are kept;
    # the safeguard rejects some pairs, and the plain method diverges after cycle 4 on these data
    epochs = 7 if safeguard else 4
    if method == "hamsi":
        ref = minimize_hamsi(
            problem,
            part,
            random_state=1,
            threads=2,
            max_cycles=epochs,
            schedule=schedule,
            safeguard=safeguard,
            memory=2,
        )
    else:
        ref = minimize_mbgd(
            problem, part, random_state=1, threads=2, max_cycles=epochs, schedule=schedule
        )
    got = fit_distributed(
        ratings,
        rank=RANK,
        reg=reg,
        biases=reg > 0,
        method=method,
        partition=part,
        schedule=schedule,
        safeguard=safeguard,
        random_state=1,
        max_cycles=epochs,
        client=client4,
        chunk_cycles=3,
        shared_memory=False,
        owned_v=True,
        memory=2,
    )
    assert got.owned_v and not got.shared_memory and len(got.workers) == blocks
    assert method == "mbgd" or got.pairs_accepted == ref.pairs_accepted >= 2
    assert ref.reason == "epoch_limit" and np.all(np.isfinite(ref.x))
    np.testing.assert_array_equal(without_time(got.trace), without_time(ref.trace))
    assert np.array_equal(got.x, ref.x)


def test_dask_estimator_takes_where_v_lives(ratings, client):
    """DaskMatrixFactorizer(shared_memory=False, owned_v=True): V owned on the message path, the in-process factors."""
    import pandas as pd

    from cluster import DaskMatrixFactorizer
    from hamsi import MatrixFactorizer

    frame = pd.DataFrame(
        {
            "user": ratings.user_ids[ratings.rows],
            "item": ratings.item_ids[ratings.cols],
            "rating": ratings.values,
        }
    )
    options = dict(
        rank=5,
        reg=0.05,
        reg_weighting="uniform",
        reg_damping=0.0,
        eta=0.05,
        init_scale=0.1,
        blocks=2,
        max_cycles=4,
        memory=2,
        random_state=1,
    )
    local = MatrixFactorizer(threads=2, **options).fit(frame)
    for shared, owned in ((False, True), (False, False)):
        dask = DaskMatrixFactorizer(
            client=client, shared_memory=shared, owned_v=owned, **options
        ).fit(frame)
        assert dask.result_.owned_v is owned and not dask.result_.shared_memory
        assert dask.result_.pairs_accepted == local.result_.pairs_accepted >= 1
        assert np.array_equal(dask.item_factors_, local.item_factors_)


def test_owned_v_sends_the_modeled_bytes_and_fewer_per_worker(ratings, client4):
    """Owned V: each V_j goes to its next home and is replicated once a cycle; replicated V: all gV rows to all."""
    from cluster.work import item_rows_per_iteration

    part = partition.make("strata-b", ratings, blocks=4, seed=1)
    sent = {}
    for owned in (False, True):
        got = fit_distributed(
            ratings,
            rank=RANK,
            partition=part,
            random_state=1,
            max_cycles=3,
            client=client4,
            safeguard=False,
            shared_memory=False,
            owned_v=owned,
        )
        assert got.owned_v is owned and len(got.worker_bytes_sent) == 4
        sent[owned] = sum(got.worker_bytes_sent.values()) / got.nit
        cycles = (
            len(got.trace.rows) - 1
        )  # the owned sync sends pair rows only in cycles that stored a pair
        modeled = (
            item_rows_per_iteration(4, 4, owned, got.pairs_accepted / cycles)
            * ratings.shape[1]
            * RANK
            * 8
        )
        assert modeled <= sent[owned] <= 1.05 * modeled  # the rest: partials and frame headers
    # per worker 0.8 of V's rows instead of 0.75 at 4 workers; at 8 workers 0.5 instead of 0.875
    assert sent[True] < 1.1 * sent[False]


def test_owned_v_stopped_mid_cycle_leaves_v_whole(ratings, client):
    """A time limit ends the cycle where it is: the evaluation and the result see every V_j's newest x."""
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    got = fit_distributed(
        ratings,
        rank=RANK,
        partition=part,
        random_state=1,
        max_cycles=None,
        max_time=0.2,
        client=client,
        shared_memory=False,
        owned_v=True,
    )
    assert got.reason == "time_limit" and got.owned_v
    train, objective = MatrixFactorization(ratings, RANK).evaluate(got.x)
    assert got.trace.rows[-1][5] == pytest.approx(objective, rel=1e-12)
    assert got.trace.rows[-1][3] == pytest.approx(train, rel=1e-12)


@pytest.mark.parametrize(
    "scheme,blocks,shared", [("strata-b", 2, None), ("strata-b", 2, False), ("strata", 3, False)]
)
def test_regularized_objective_is_bitwise_the_in_process_one(
    ratings, client, scheme, blocks, shared
):
    """reg > 0 with biases and the safeguard: the penalty's |U|^2 is summed per row shard on both sides."""
    part = partition.make(scheme, ratings, blocks=blocks, seed=1)
    problem = MatrixFactorization(ratings, RANK, reg=1.0, biases=True)
    ref = minimize_hamsi(problem, part, random_state=1, threads=2, max_cycles=6, safeguard=True)
    got = fit_distributed(
        ratings,
        rank=RANK,
        reg=1.0,
        biases=True,
        partition=part,
        random_state=1,
        max_cycles=6,
        client=client,
        chunk_cycles=3,
        safeguard=True,
        shared_memory=shared,
    )
    assert got.reason == ref.reason == "epoch_limit"
    np.testing.assert_array_equal(without_time(got.trace), without_time(ref.trace))
    assert np.array_equal(got.x, ref.x)


@pytest.mark.parametrize("scheme", ["hogwild", "color", "color-b"])
def test_overlapping_schemes_match_in_process_to_rounding(ratings, client, scheme):
    # gV partials of blocks spanning several row shards are summed in shard order, not rating order
    part = partition.make(scheme, ratings, blocks=2, subsets=4, seed=1)
    ref = in_process(ratings, part, max_cycles=4)
    got = fit_distributed(
        ratings, rank=RANK, partition=part, random_state=1, max_cycles=4, client=client
    )
    assert not got.shared_memory  # blocks that share items: V stays replicated
    np.testing.assert_allclose(
        got.trace.column("train_rmse"), ref.trace.column("train_rmse"), rtol=1e-9
    )
    np.testing.assert_allclose(got.x, ref.x, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("owned", [None, True])
def test_more_shards_than_workers(ratings, client, owned):
    # owned: two V homes per worker in every subset, some V_j handed on within a worker
    part = partition.make("strata-b", ratings, blocks=4, seed=1)
    ref = in_process(ratings, part, max_cycles=3)
    got = fit_distributed(
        ratings,
        rank=RANK,
        partition=part,
        random_state=1,
        max_cycles=3,
        client=client,
        shared_memory=None if owned is None else False,
        owned_v=owned,
    )
    assert sorted(set(got.shard_owner.values())) == sorted(got.workers) and len(got.workers) == 2
    assert got.owned_v is bool(owned)
    assert np.array_equal(got.x, ref.x)


def test_target_and_heldout_follow_the_engine_rules(ratings, client):
    train, test = ratings.split(0.2, seed=3)
    part = partition.make("strata-b", train, blocks=2, seed=1)
    problem = MatrixFactorization(train, RANK)
    ref = minimize_hamsi(
        problem, part, random_state=1, max_cycles=50, target=3.5, validation=test, threads=2
    )
    got = fit_distributed(
        train,
        rank=RANK,
        partition=part,
        random_state=1,
        max_cycles=50,
        target=3.5,
        validation=test,
        client=client,
        chunk_cycles=4,
    )
    assert got.reason == ref.reason == "target"
    assert got.n_cycles == ref.n_cycles
    np.testing.assert_allclose(
        got.trace.column("validation_rmse"), ref.trace.column("validation_rmse"), rtol=1e-12
    )


def test_time_limit_stops_the_run(ratings, client):
    got = fit_distributed(
        ratings, rank=RANK, random_state=1, max_cycles=None, max_time=0.3, client=client
    )
    assert got.reason == "time_limit"
    assert got.trace.rows[-1][2] >= 0.3


@pytest.mark.parametrize("shared,owned", [(None, None), (False, True)])
def test_checkpoint_resume_is_bit_exact(ratings, client, tmp_path, shared, owned):
    part = partition.make("strata-b", ratings, blocks=2, seed=1)
    options = dict(
        rank=RANK,
        partition=part,
        random_state=1,
        client=client,
        schedule="stoc",
        memory=2,
        shared_memory=shared,
        owned_v=owned,
    )  # memory 2: quasi-Newton steps after the resume
    whole = fit_distributed(ratings, max_cycles=4, **options)
    first = fit_distributed(
        ratings, max_cycles=2, checkpoint=str(tmp_path), checkpoint_every=2, **options
    )
    assert (tmp_path / "state.npz").exists() and first.n_cycles == 2
    resumed = fit_distributed(ratings, max_cycles=4, resume=str(tmp_path), **options)
    np.testing.assert_array_equal(without_time(resumed.trace), without_time(whole.trace))
    assert np.array_equal(resumed.x, whole.x)
    with pytest.raises(InputError, match="different run"):
        fit_distributed(
            ratings, max_cycles=4, resume=str(tmp_path), **dict(options, random_state=2)
        )


def test_dask_estimator_equals_in_process_estimator(ratings, client):
    from cluster import DaskMatrixFactorizer
    from hamsi.estimator import MatrixFactorizer

    ref = MatrixFactorizer(rank=RANK, blocks=2, threads=2, max_cycles=3, random_state=1).fit(
        ratings
    )
    model = DaskMatrixFactorizer(rank=RANK, max_cycles=3, random_state=1, client=client).fit(
        ratings
    )
    assert model.get_params()["client"] is client and model.partition_.n_subsets == 2
    assert np.array_equal(model.user_factors_, ref.user_factors_)
    assert model.rmse(ratings) == pytest.approx(ref.rmse(ratings), rel=1e-12)


def test_dask_trace_test_rmse_is_the_score_of_the_served_predictions(ratings, client):
    from cluster import DaskMatrixFactorizer
    from hamsi.estimator import MatrixFactorizer

    train, test = ratings.split(0.2, seed=3)
    known = (np.bincount(train.rows, minlength=train.shape[0])[test.rows] > 0) & (
        np.bincount(train.cols, minlength=train.shape[1])[test.cols] > 0
    )
    validation = test.subset(
        np.flatnonzero(known)
    )  # pairs predict scores by the factors, as the engine does
    options = dict(
        rank=RANK, biases=True, reg=0.0, max_cycles=4, random_state=1, search=False, patience=None
    )
    model = DaskMatrixFactorizer(client=client, **options).fit(train, validation=validation)
    ref = MatrixFactorizer(blocks=2, threads=2, **options).fit(train, validation=validation)
    unclipped = model.predict(validation, clip=False)
    assert np.any(
        (unclipped < model.rating_min_) | (unclipped > model.rating_max_)
    )  # clipping matters here
    assert model.trace_.column("validation_rmse")[-1] == pytest.approx(
        -model.score(validation), rel=1e-12
    )  # last cycle kept
    assert (
        model.trace_.column("validation_rmse")[-1]
        < np.sqrt(np.mean((unclipped - validation.values) ** 2)) - 1e-4
    )
    np.testing.assert_allclose(
        model.trace_.column("validation_rmse"), ref.trace_.column("validation_rmse"), rtol=1e-12
    )


def test_unreachable_scheduler_fails_fast_naming_the_address(ratings):
    start = time.perf_counter()
    with pytest.raises(ClusterError, match="127.0.0.1:9"):
        fit_distributed(ratings, rank=RANK, scheduler="tcp://127.0.0.1:9", max_cycles=1)
    assert time.perf_counter() - start < 15


def test_too_few_workers_is_a_clear_error(ratings, client):
    with pytest.raises(ClusterError, match="has 2 workers; this run needs at least 3"):
        fit_distributed(ratings, rank=RANK, client=client, n_workers=3, max_cycles=1)


def test_local_cluster_is_closed_on_exit():
    with connect(n_workers=1, quiet=True) as dask_client:
        pids = list(dask_client.run(os.getpid).values())
    time.sleep(0.5)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_worker_memory_limit_is_checked_before_placing(ratings):
    with connect(n_workers=1, memory_limit="400MiB", quiet=True) as small:
        with pytest.raises(ClusterError, match="memory limit"):
            fit_distributed(ratings, rank=2000, client=small, max_cycles=1)


def test_one_subset_pairs_consecutive_iterates_across_chunks(ratings, client):
    # K = 1 (one block): the engine pairs every two consecutive iterates, so x_start crosses chunks
    part = partition.make("strata-b", ratings, blocks=1, seed=1)
    ref = in_process(ratings, part, max_cycles=9)
    got = fit_distributed(
        ratings,
        rank=RANK,
        partition=part,
        random_state=1,
        max_cycles=9,
        client=client,
        chunk_cycles=2,
    )
    assert len(got.workers) == 1 and got.pairs_accepted == ref.pairs_accepted
    assert np.array_equal(got.x, ref.x)


def test_alive_workers_do_not_depend_on_the_cached_scheduler_identity(client, monkeypatch):
    """The client's periodic refresh can leave scheduler_info() with no workers; a run must not
    then take every worker for lost (this made runs on 16+ workers rerun their first chunk)."""
    from cluster.connect import worker_addresses, worker_info

    monkeypatch.setattr(client, "scheduler_info", lambda *a, **k: {"workers": {}})
    assert len(worker_info(client)) == 2
    assert len(worker_addresses(client, minimum=2)) == 2
