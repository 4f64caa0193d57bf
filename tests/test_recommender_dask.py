"""DaskMatrixFactorizer shares MatrixFactorizer's recommender API and keeps its client through clone."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold

from hamsi import MatrixFactorizer
from hamsi.data.synth import make_ratings

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def client():
    """One in-process worker on 127.0.0.1 (threads, no processes: fast to start)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=False,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as dask_client,
    ):
        yield dask_client


@pytest.fixture(scope="module")
def frame():
    ratings = make_ratings(users=30, items=40, ratings=600, rank=2, seed=8)
    return pd.DataFrame(
        {
            "user": ratings.user_ids[ratings.rows],
            "item": ratings.item_ids[ratings.cols],
            "rating": ratings.values,
        }
    )


def test_clone_and_grid_search_keep_the_same_client(client, frame):
    from cluster import DaskMatrixFactorizer
    from cluster.engine import DaskEngine

    model = DaskMatrixFactorizer(rank=2, max_cycles=3, random_state=0, client=client)
    copy = clone(model)
    assert copy.client is client and copy is not model
    seen = []
    original = DaskEngine.solve

    def spy(self, *args, **kwargs):
        seen.append(self.client)
        return original(self, *args, **kwargs)

    DaskEngine.solve = spy
    try:
        search = GridSearchCV(
            model, {"reg": [0.5, 2.0]}, cv=KFold(2, shuffle=True, random_state=0)
        ).fit(frame)
    finally:
        DaskEngine.solve = original
    assert len(seen) == 5 and all(c is client for c in seen)  # 2 x 2 folds + the refit
    assert search.best_estimator_.client is client and not client.status == "closed"


@pytest.mark.parametrize(
    "reg_weighting, reg_damping", [("uniform", 0.0), ("count", 0.0), ("count", 20.0)]
)
def test_dask_estimator_matches_in_process_on_raw_ids(
    client, frame, tmp_path, reg_weighting, reg_damping
):
    from cluster import DaskMatrixFactorizer

    # the defaults (safeguard on); the objective, which the safeguard and the stop rules read, must
    # be the same on both engines for either penalty (the Dask layout once weighted |U_a|^2 uniformly)
    options = dict(
        rank=2,
        blocks=2,
        max_cycles=4,
        random_state=1,
        reg_weighting=reg_weighting,
        reg_damping=reg_damping,
    )
    local = MatrixFactorizer(threads=1, **options).fit(frame)
    dask = DaskMatrixFactorizer(client=client, **options).fit(frame)
    assert np.array_equal(dask.user_factors_, local.user_factors_)
    local_objective = local.result_.trace.to_frame()["objective"].to_numpy()
    dask_objective = dask.result_.trace.to_frame()["objective"].to_numpy()
    np.testing.assert_allclose(dask_objective, local_objective, rtol=1e-12)
    users, items = frame["user"].to_numpy(), frame["item"].to_numpy()
    assert np.array_equal(dask.predict(users, items), local.predict(users, items))
    dask.save(tmp_path / "m.npz")
    loaded = DaskMatrixFactorizer.load(tmp_path / "m.npz")
    assert loaded.client is None and np.array_equal(
        loaded.predict(users, items), dask.predict(users, items)
    )
    assert list(loaded.recommend(users[0], n=4)[0]) == list(local.recommend(users[0], n=4)[0])
