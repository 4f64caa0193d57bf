"""Recovery on a real Dask cluster: a worker killed between chunks or mid-chunk is replaced, the factors unchanged."""

import os
import signal

import numpy as np
import pytest

import partition
from cluster.connect import connect
from cluster.driver import fit_distributed
from hamsi.data.synth import make_ratings
from hamsi.optimizer import minimize_hamsi
from hamsi.problems import MatrixFactorization

pytestmark = pytest.mark.cluster

RANK = 10


@pytest.fixture(scope="module")
def ratings():
    """943 x 1682 with 20,000 ratings (MovieLens-100K's shape, a fifth of its ratings)."""
    return make_ratings(users=943, items=1682, ratings=20_000, seed=1)


def in_process(ratings, partition, max_cycles, random_state, **dask_options):
    """Return the in-process run of fit_distributed's `rank`, cover and seed (its Dask options dropped)."""
    problem = MatrixFactorization(ratings, RANK)
    return minimize_hamsi(
        problem, partition, random_state=random_state, threads=2, max_cycles=max_cycles
    )


@pytest.mark.parametrize("kill_in_chunk,owned", [(0, None), (1, None), (1, True)])
def test_killed_worker_is_replaced_by_the_survivors(ratings, kill_in_chunk, owned):
    # chunk 0 restarts from the client's starting point, later chunks from the buddy snapshots;
    # owned: V on the message path, two shards (and V homes) per worker until the kill
    part = partition.make("strata-b", ratings, blocks=4, seed=1)
    options = dict(
        rank=RANK,
        partition=part,
        random_state=1,
        max_cycles=6,  # three chunks: the kill in chunk 1 leaves one after the rerun
        chunk_cycles=2,
        shared_memory=None if owned is None else False,
        owned_v=owned,
    )
    undisturbed = in_process(ratings, **options)
    with connect(n_workers=2, quiet=True) as dask_client:
        pids = dask_client.run(os.getpid)

        killed = []

        def kill_second_worker(info):
            if (
                info["chunk"] == kill_in_chunk and not killed
            ):  # the chunk's tasks were just submitted
                killed.append(info["workers"][1])
                os.kill(pids[killed[0]], signal.SIGKILL)

        recovered = fit_distributed(
            ratings, client=dask_client, on_chunk=kill_second_worker, **options
        )
    assert recovered.recoveries, "the kill was not noticed"
    assert recovered.owned_v is bool(owned)
    assert recovered.reason == "epoch_limit" and recovered.n_cycles == 6
    final, reference = recovered.trace.rows[-1].train_rmse, undisturbed.trace.rows[-1].train_rmse
    assert abs(final - reference) <= 0.01 * reference
    # shards are the unit of the reductions, so the survivors reproduce the undisturbed iterates
    # (the in-process ones: an undisturbed Dask run gives them bit for bit, tests/test_cluster.py)
    assert np.array_equal(recovered.x, undisturbed.x)


def test_a_worker_killed_mid_chunk_is_rerun_from_the_chunk_start_files(ratings):
    # chunks step their states in place: the survivor's state is then past the chunk's start, and
    # the rerun must read the start back from disk (cluster.snapshot), not take the stepped state
    part = partition.make("strata-b", ratings, blocks=4, seed=1)
    options = dict(
        rank=RANK, partition=part, random_state=1, max_cycles=9, chunk_cycles=3, shared_memory=False
    )

    def die_after(
        iterations,
    ):  # runs in the worker: it kills itself in its next chunk's inner iterations
        import os
        import signal

        from cluster.exchange import MailboxExchange

        original, count = MailboxExchange.iterate, [0]

        def iterate(self, request):
            count[0] += 1
            if count[0] > iterations:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(self, request)

        MailboxExchange.iterate = iterate

    undisturbed = in_process(ratings, **options)
    with connect(n_workers=2, quiet=True) as dask_client:
        armed = []

        def arm_second_worker(info):
            if info["chunk"] == 1 and not armed:
                armed.append(info["workers"][1])
                dask_client.run(die_after, 3, workers=armed)

        recovered = fit_distributed(
            ratings, client=dask_client, on_chunk=arm_second_worker, **options
        )
    assert armed and recovered.recoveries and len(recovered.workers) == 1
    assert recovered.n_cycles == 9 and np.array_equal(recovered.x, undisturbed.x)
