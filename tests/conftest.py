"""Shared fixtures: small rating data built in code; real Dask clusters on loopback."""

import numpy as np
import pytest
from helpers import largest_rows, real_cluster, sparse_id_frame

from hamsi.data import Ratings

# Modules run in one process, never beside another test, when .ci/run spreads the fast tier over
# pytest-xdist workers: they start Dask workers or other processes, listen on loopback sockets, or
# bound a run's wall time tightly enough that a neighbour's CPU use could break the bound. A test
# elsewhere with such a bound carries `@pytest.mark.alone` itself.
ALONE_MODULES = frozenset(
    {
        "test_bench_hosts",
        "test_checkpoint_validation",
        "test_cluster",
        "test_cluster_cli",
        "test_cluster_coloring",
        "test_cluster_data",
        "test_cluster_engine",
        "test_cluster_faults",
        "test_cluster_file_pieces",
        "test_cluster_kept",
        "test_cluster_links",
        "test_cluster_recovery",
        "test_cluster_routing",
        "test_cluster_search",
        "test_cluster_units",
        "test_cold_start",
        "test_demo_cli",
        "test_engine",
        "test_names_cluster",
        "test_recommender_dask",
        "test_search",
        "test_security",
    }
)


def pytest_collection_modifyitems(items):
    """Mark every test of ALONE_MODULES `alone` (`-m alone` / `-m "not alone"` split the fast tier)."""
    for item in items:
        if item.path.stem in ALONE_MODULES:
            item.add_marker(pytest.mark.alone)


@pytest.fixture
def tiny_ratings():
    """A 6 x 5 matrix with 12 distinct ratings."""
    rng = np.random.default_rng(0)
    flat = rng.choice(30, size=12, replace=False)
    rows, cols = np.divmod(flat, 5)
    values = rng.integers(1, 6, size=12).astype(float)
    return Ratings(rows, cols, values, (6, 5))


@pytest.fixture(scope="module")
def client():
    """A client of two single-thread worker processes on 127.0.0.1, closed after the module."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as dask_client,
    ):
        yield dask_client


@pytest.fixture
def dask_cluster(tmp_path):
    """Yield the address of a scheduler with two single-thread workers on loopback; always stop them."""
    yield from real_cluster(tmp_path, 2)


@pytest.fixture
def dask_cluster4(tmp_path):
    """Yield the address of a scheduler with four single-thread workers on loopback; always stop them."""
    yield from real_cluster(tmp_path, 4)


@pytest.fixture(scope="module")
def frame():
    """The worker-data tests' ratings (helpers.sparse_id_frame): 3000 pairs of sparse raw ids."""
    return sparse_id_frame()


@pytest.fixture
def gathered(monkeypatch):
    """Record the most rows of anything the client gathers from the workers (helpers.largest_rows)."""
    from distributed import Client

    original, seen = Client._gather, []

    async def spy(self, futures, *args, **kwargs):
        out = await original(self, futures, *args, **kwargs)
        seen.append(largest_rows(out))
        return out

    monkeypatch.setattr(Client, "_gather", spy)
    return seen


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """The bad-input tests' corpus: rating files in every format, numeric CSVs and a fitted model."""
    # why lazy: only the bad-input modules use the corpus (and its fit)
    from bad_input_corpus import write_corpus

    from hamsi.data.synth import make_ratings

    ratings = make_ratings(users=30, items=40, ratings=400, rank=3, seed=2)
    return write_corpus(tmp_path_factory.mktemp("bad"), ratings)
