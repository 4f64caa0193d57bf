"""The Dask side's renamed keywords (docs/glossary.md): the old ones still work, warn FutureWarning,
and give the new ones' iterates bit for bit."""

import numpy as np
import pytest
from helpers import dask_frame

pytestmark = pytest.mark.cluster


def test_fit_distributed_old_keywords_give_the_new_ones_iterates(client, frame):
    from cluster.driver import fit_distributed

    common = dict(rank=3, client=client, random_state=3, memory=2, shared_memory=False)
    new = fit_distributed(
        dask_frame(frame),
        partitioner="strata",
        validation_fraction=0.1,
        max_cycles=3,
        chunk_cycles=2,
        **common,
    )
    with pytest.warns(FutureWarning) as caught:
        old = fit_distributed(
            dask_frame(frame),
            scheme="strata",
            heldout_fraction=0.1,
            max_epochs=3,
            chunk_epochs=2,
            **common,
        )
    said = " ".join(str(w.message) for w in caught if issubclass(w.category, FutureWarning))
    for old_name, new_name in [
        ("scheme", "partitioner"),
        ("heldout_fraction", "validation_fraction"),
        ("max_epochs", "max_cycles"),
        ("chunk_epochs", "chunk_cycles"),
    ]:
        assert f"({old_name}=...) is deprecated" in said and f"use {new_name}=" in said
    assert old.n_cycles == new.n_cycles == 3
    np.testing.assert_array_equal(old.x, new.x)
    validation = new.trace.column("validation_rmse")
    assert np.isfinite(validation).all()
    np.testing.assert_array_equal(old.trace.column("validation_rmse"), validation)


def test_load_worker_ratings_old_keywords(client, frame):
    from cluster.dataset import load_worker_ratings

    new = load_worker_ratings(
        client, dask_frame(frame), partitioner="strata", n_blocks=2, validation_fraction=0.2
    )
    with pytest.warns(FutureWarning) as caught:
        old = load_worker_ratings(
            client, dask_frame(frame), scheme="strata", n_blocks=2, heldout_fraction=0.2
        )
    said = " ".join(str(w.message) for w in caught)
    assert "use partitioner=" in said and "use validation_fraction=" in said
    assert old.n_test == new.n_test > 0 and old.cover.scheme == new.cover.scheme == "strata"
