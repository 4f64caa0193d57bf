"""Ratings that never pass through the client: read, split, routed and scored on the workers."""

import os

import numpy as np
import pandas as pd
import pytest
from helpers import N_ITEMS, N_USERS, WORKER_DATA_OPTIONS, dask_frame

from hamsi.data.synth import make_ratings
from hamsi.errors import InputError

pytestmark = pytest.mark.cluster


# search=False: both paths take auto's unsearched values (reg from the data) and must agree to
# the bit (the search on the workers: test_cluster_search.py)
OPTIONS = WORKER_DATA_OPTIONS


@pytest.mark.parametrize(
    "penalty", [{}, {"reg_weighting": "count", "reg": 0.1, "reg_damping": 20.0}]
)
def test_dask_frame_gives_the_in_memory_iterates_and_split(client, frame, penalty):
    from cluster import DaskMatrixFactorizer

    memory = DaskMatrixFactorizer(client=client, **OPTIONS, **penalty).fit(frame)
    on_workers = DaskMatrixFactorizer(client=client, **OPTIONS, **penalty).fit(dask_frame(frame))
    assert on_workers.reg_damping_ == memory.reg_damping_ == penalty.get("reg_damping", 0.0)
    # defaults (reg, init scale from the spread), bias start, held-out pairs and every cycle agree to the bit
    assert on_workers.reg_ == memory.reg_ and on_workers.init_scale_ == memory.init_scale_
    assert np.array_equal(on_workers.user_ids_, memory.user_ids_)
    assert np.array_equal(on_workers.user_factors_, memory.user_factors_)
    assert np.array_equal(on_workers.item_factors_, memory.item_factors_)
    assert np.array_equal(on_workers.user_bias_, memory.user_bias_)
    # every cycle's (cycle, iterations, train RMSE, test RMSE, objective) agree; only the times differ
    assert [r[:2] + r[3:] for r in on_workers.trace_.rows] == [
        r[:2] + r[3:] for r in memory.trace_.rows
    ]
    assert np.all(np.isfinite([r[4] for r in memory.trace_.rows]))  # the validation split was used
    assert on_workers.global_mean_ == memory.global_mean_


def test_ratings_on_the_workers_run_with_v_owned(client, frame):
    """The data path's V homes (gathered from the shards' hosts) drive the owned V: same bits as replicated."""
    from cluster.driver import fit_distributed

    options = dict(
        rank=3,
        partitioner="strata-b",
        client=client,
        max_cycles=4,
        random_state=3,
        chunk_cycles=3,
        memory=2,
        safeguard=False,
        shared_memory=False,
    )
    owned = fit_distributed(dask_frame(frame), owned_v=True, **options)
    replicated = fit_distributed(dask_frame(frame), owned_v=False, **options)
    assert owned.owned_v and not replicated.owned_v
    assert (
        np.array_equal(owned.x, replicated.x)
        and owned.pairs_accepted == replicated.pairs_accepted >= 2
    )
    assert owned.reason == "epoch_limit" and np.all(np.isfinite(owned.x))


def test_the_hash_split_holds_out_the_same_pairs_whatever_the_partitioning(frame):
    from hamsi.data.ratings import heldout_mask

    whole = heldout_mask(frame["user"].to_numpy(), frame["item"].to_numpy(), 0.1, 3)
    whole = np.concatenate([whole[i::7] for i in range(7)])  # in the order of the parts below
    parts = np.concatenate(
        [
            heldout_mask(p["user"].to_numpy(), p["item"].to_numpy(), 0.1, 3)
            for p in (frame.iloc[i::7] for i in range(7))
        ]
    )
    assert np.array_equal(whole, parts)
    assert abs(whole.mean() - 0.1) < 0.03  # about the fraction asked for (3000 pairs)
    assert not np.array_equal(
        whole, heldout_mask(frame["user"].to_numpy(), frame["item"].to_numpy(), 0.1, 4)
    )


def test_the_client_never_holds_the_ratings(client, frame, tmp_path, gathered):
    import dask.dataframe as dd

    from cluster import fit_distributed
    from hamsi import load_ratings

    files = []
    for i in range(7):
        files.append(str(tmp_path / f"part{i}.parquet"))
        frame.iloc[i::7].to_parquet(files[-1])

    def read_on_a_worker(path):
        from distributed import get_worker

        get_worker()  # raises ValueError outside a worker: a partition read in the client fails the test
        return pd.read_parquet(path)

    # meta given: without it dask itself computes the first partition into the client to infer it
    ratings = dd.from_map(read_on_a_worker, files, meta=frame.iloc[:0])
    result = fit_distributed(
        ratings,
        rank=3,
        client=client,
        max_cycles=2,
        random_state=0,
        quiet=True,
        biases=True,
        reg=1.0,
    )
    assert gathered and max(gathered) <= max(N_USERS, N_ITEMS)
    assert result.x.size == (N_USERS + N_ITEMS) * 4 and np.isfinite(result.x).all()
    # the check can fail: the in-memory reader collects the partitions into the client
    gathered.clear()
    load_ratings(ratings)
    assert max(gathered) == float("inf")


def write_files(tmp_path, frames, kind="parquet"):
    paths = []
    for i, part in enumerate(frames):
        paths.append(tmp_path / f"ratings-{i}.{kind}")
        part.to_parquet(paths[-1]) if kind == "parquet" else part.to_csv(paths[-1], index=False)
    return paths


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_a_glob_of_files_fits_like_the_frame(client, frame, tmp_path, kind):
    from cluster import fit_distributed
    from hamsi import load_ratings

    write_files(tmp_path, [frame.iloc[:1000], frame.iloc[1000:2200], frame.iloc[2200:]], kind)
    options = dict(
        rank=3, client=client, max_cycles=2, random_state=5, quiet=True, biases=True, reg=0.5
    )
    on_workers = fit_distributed(str(tmp_path / f"*.{kind}"), **options)
    in_memory = fit_distributed(load_ratings(frame), **options)
    assert np.array_equal(on_workers.x, in_memory.x)


def test_bad_input_on_the_workers_is_one_clear_error(client, frame, tmp_path):
    from cluster import fit_distributed

    options = dict(rank=2, client=client, max_cycles=1, quiet=True)
    with pytest.raises(InputError, match="matches no Parquet or CSV file"):
        fit_distributed(str(tmp_path / "nothing-*.parquet"), **options)
    missing = tmp_path / "missing"
    missing.mkdir()
    write_files(missing, [frame.iloc[:10], frame.iloc[10:20].drop(columns="rating")])
    with pytest.raises(InputError, match=r"ratings-1\.parquet.*rating"):
        fit_distributed(str(missing), **options)
    text = tmp_path / "text"
    text.mkdir()
    bad = frame.iloc[10:20].astype({"rating": object})
    bad.iloc[3, 2] = "five"
    write_files(text, [frame.iloc[:10], bad], "csv")
    with pytest.raises(InputError, match=r"ratings-1\.csv: row 3: rating 'five'"):
        fit_distributed(str(text / "*.csv"), **options)
    twice = tmp_path / "twice"
    twice.mkdir()
    write_files(twice, [frame.iloc[:10], frame.iloc[10:20], frame.iloc[[15]]])
    user, item = frame.iloc[15]["user"], frame.iloc[15]["item"]
    with pytest.raises(
        InputError,
        match=rf"duplicate \(user, item\) pair \({user:.0f}, {item:.0f}\) in "
        rf".*ratings-1\.parquet row 5 and .*ratings-2\.parquet row 0",
    ):
        fit_distributed(str(twice), **options)
    with pytest.raises(InputError, match="no column 'stars'"):
        fit_distributed(dask_frame(frame), columns=("user", "item", "stars"), **options)


@pytest.fixture(scope="module")
def fitted(frame):
    from hamsi import MatrixFactorizer

    return MatrixFactorizer(rank=3, max_cycles=3, random_state=0, threads=1).fit(frame)


def test_predict_on_workers_equals_predict(client, frame, fitted):
    from cluster import scoring

    pairs = pd.concat(
        [frame[["user", "item"]], pd.DataFrame({"user": [-7, 4], "item": [5, -3]})],
        ignore_index=True,
    )  # two pairs with unknown ids take the fallback
    series = scoring.predict(fitted, dask_frame(pairs, 5))
    assert type(series).__module__.startswith("dask")
    got = series.compute()
    assert np.array_equal(
        got.to_numpy(), fitted.predict(pairs["user"].to_numpy(), pairs["item"].to_numpy())
    )
    assert got.index.equals(pairs.index)


def test_recommend_all_equals_per_user_recommend(client, fitted):
    from cluster import scoring

    top = scoring.recommend_all(fitted, n=4, users_per_task=7).compute()
    assert sorted(top["user"].unique()) == sorted(fitted.user_ids_)
    for user, rows in top.groupby("user"):
        items, ratings = fitted.recommend(user, n=4)
        assert np.array_equal(rows.sort_values("rank")["item"].to_numpy(), items)
        assert np.array_equal(rows.sort_values("rank")["rating"].to_numpy(), ratings)
    everything = scoring.recommend_all(fitted, n=2, exclude_seen=False).compute()
    user = fitted.user_ids_[5]
    assert np.array_equal(
        everything[everything["user"] == user]["item"].to_numpy(),
        fitted.recommend(user, n=2, exclude_seen=False)[0],
    )


@pytest.mark.slow
def test_a_worker_killed_in_the_shuffle_or_the_fit_ends_in_the_undisturbed_result(frame, tmp_path):
    import signal

    import dask.dataframe as dd

    from cluster import fit_distributed
    from cluster.connect import connect

    files = [str(p) for p in write_files(tmp_path, [frame.iloc[i::5] for i in range(5)])]
    marker, armed = tmp_path / "killed", tmp_path / "armed"

    def read_or_die(path):
        # the first read of part 3 kills its worker: the shuffle loses a worker mid-way
        if (
            path.endswith("ratings-3.parquet")
            and os.path.exists(armed)
            and not os.path.exists(marker)
        ):
            open(marker, "w").close()
            os._exit(1)
        return pd.read_parquet(path)

    options = dict(
        rank=3,
        blocks=4,
        random_state=1,
        max_cycles=6,
        chunk_cycles=2,
        quiet=True,
        biases=True,
        reg=0.5,
        validation_fraction=0.1,
    )
    with connect(n_workers=2, quiet=True) as dask_client:
        ratings = dd.from_map(read_or_die, files, meta=frame.iloc[:0])
        undisturbed = fit_distributed(ratings, client=dask_client, **options)
        armed.touch()
        in_shuffle = fit_distributed(ratings, client=dask_client, **options)
        assert marker.exists(), "no worker was killed"
        assert np.array_equal(in_shuffle.x, undisturbed.x)
        for kill_in_chunk in (0, 1):
            dask_client.wait_for_workers(2, timeout=60)  # the nanny restarts the killed worker
            killed = []

            def kill_second_worker(info):
                if info["chunk"] == kill_in_chunk and not killed:
                    killed.append(info["workers"][1])
                    os.kill(
                        dask_client.run(os.getpid, workers=[killed[0]])[killed[0]], signal.SIGKILL
                    )

            recovered = fit_distributed(
                ratings, client=dask_client, on_chunk=kill_second_worker, **options
            )
            assert recovered.recoveries, "the kill was not noticed"
            assert np.array_equal(recovered.x, undisturbed.x), f"killed in chunk {kill_in_chunk}"


def test_cli_factorizes_a_parquet_glob_and_writes_every_users_top_n(client, frame, tmp_path):
    from hamsi import MatrixFactorizer
    from hamsi.cli import main

    renamed = frame.rename(columns={"user": "u", "item": "i", "rating": "stars"})
    data = tmp_path / "ratings"
    data.mkdir()
    write_files(data, [renamed.iloc[:1500], renamed.iloc[1500:]])
    address = client.scheduler.address
    model_file, top_dir = tmp_path / "model.npz", tmp_path / "top.parquet"
    assert (
        main(
            [
                "factorize",
                str(data / "*.parquet"),
                "--columns",
                "u,i,stars",
                "--scheduler",
                address,
                "--rank",
                "2",
                "--max-cycles",
                "2",
                "--quiet",
                "--out",
                str(model_file),
            ]
        )
        == 0
    )
    model = MatrixFactorizer.load(model_file)
    assert model.user_ids_.size == frame["user"].nunique()
    # a model fitted on the workers keeps no seen lists: --all without --include-seen says so
    assert (
        main(
            [
                "recommend",
                str(model_file),
                "--all",
                "-n",
                "3",
                "--out",
                str(top_dir),
                "--scheduler",
                address,
            ]
        )
        == 2
    )
    assert not top_dir.exists()  # nothing half-written
    assert (
        main(
            [
                "recommend",
                str(model_file),
                "--all",
                "-n",
                "3",
                "--out",
                str(top_dir),
                "--include-seen",
                "--scheduler",
                address,
            ]
        )
        == 0
    )
    top = pd.read_parquet(top_dir)
    user = model.user_ids_[7]
    mine = top[top["user"] == user].sort_values("rank")
    assert np.array_equal(
        mine["item"].to_numpy(), model.recommend(user, n=3, exclude_seen=False)[0]
    )
    assert len(top) == 3 * model.user_ids_.size


def test_the_reductions_both_paths_share_agree_with_numpy():
    import partition
    from hamsi.data.moments import rating_mean, rating_spread
    from hamsi.problems.matrix_factorization import MatrixFactorization
    from partition.strata import balanced_bounds, balanced_bounds_of_counts

    r = make_ratings(users=50, items=40, ratings=900, rank=2, seed=4)
    assert rating_mean(r.rows, r.values, 50) == pytest.approx(r.values.mean(), rel=1e-14)
    assert rating_spread(r.rows, r.values, 50) == pytest.approx(r.values.std(), rel=1e-12)
    counts = np.bincount(r.rows, minlength=50)
    assert np.array_equal(balanced_bounds_of_counts(counts, 3), balanced_bounds(r.rows, 50, 3))
    # the bias start reduced over 3 row shards is the one-shard start up to rounding
    one, three = (MatrixFactorization(r, 2, reg=2.0, biases=True) for _ in range(2))
    one.arrange(partition.make("strata-b", r, blocks=1))
    three.arrange(partition.make("strata-b", r, blocks=3))
    for a, b in zip(one.ridge_biases(), three.ridge_biases()):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
