"""Shared fixtures: small rating data built in code; real Dask clusters on loopback."""

import numpy as np
import pytest
from helpers import largest_rows, real_cluster, sparse_id_frame

from hamsi.data import Ratings


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
