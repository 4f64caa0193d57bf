"""A single large rating file read by the workers in pieces: CSV byte ranges and Parquet row groups."""

import dask.config
import numpy as np
import pandas as pd
import pytest

from hamsi.errors import InputError

BLOCK = 4096  # bytes: the 3000-rating test file is cut into about 10 pieces


@pytest.fixture
def small_blocks():
    with dask.config.set({"hamsi.read-block-bytes": BLOCK}):
        yield


def read_all(path):
    from cluster.sources import read_piece, source_pieces

    pieces = source_pieces(path)
    return pieces, pd.concat([read_piece(p, None) for p in pieces], ignore_index=True)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_the_pieces_hold_every_row_once_in_file_order(frame, tmp_path, small_blocks, kind):
    path = tmp_path / f"ratings.{kind}"
    if kind == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, row_group_size=200)
    pieces, whole = read_all(path)
    assert len(pieces) >= 5 and {p.path for p in pieces} == {str(path)}
    assert np.array_equal(whole.to_numpy(), frame[["user", "item", "rating"]].to_numpy())
    # each piece knows the file's rows before it (counted for a CSV byte range)
    from cluster.sources import read_piece

    sizes = np.cumsum([0] + [len(read_piece(p, None)) for p in pieces])
    assert [p.rows_before() for p in pieces] == sizes[:-1].tolist()


def test_a_file_of_one_block_is_read_in_process_and_a_larger_one_on_the_workers(frame, tmp_path):
    from cluster.sources import is_distributed_source

    path = tmp_path / "ratings.csv"
    frame.to_csv(path, index=False)
    assert not is_distributed_source(str(path))  # 40 kB: one block of the default 64 MiB
    with dask.config.set({"hamsi.read-block-bytes": BLOCK}):
        assert is_distributed_source(str(path))
        assert not is_distributed_source(str(tmp_path / "missing.csv"))
    movielens = tmp_path / "u.data"
    movielens.write_text("1\t2\t3\t0\n" * 2000)
    with dask.config.set({"hamsi.read-block-bytes": BLOCK}):
        assert not is_distributed_source(str(movielens))  # not a Parquet/CSV file


def test_a_bad_value_in_a_later_piece_names_the_row_of_the_file(frame, tmp_path, small_blocks):
    bad = frame.astype({"rating": object})
    bad.iloc[2500, bad.columns.get_loc("rating")] = "x"
    path = tmp_path / "ratings.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(InputError, match=f"{path}: row 2500: rating 'x' in column 'rating'"):
        read_all(path)


def test_the_block_setting_is_checked():
    from cluster.file_pieces import block_bytes

    with dask.config.set({"hamsi.read-block-bytes": 0}):
        with pytest.raises(InputError, match="hamsi.read-block-bytes"):
            block_bytes()


@pytest.mark.cluster
def test_a_large_csv_file_on_the_workers_gives_the_in_memory_iterates(
    client, frame, tmp_path, small_blocks, gathered
):
    import warnings

    from cluster import DaskMatrixFactorizer

    path = tmp_path / "ratings.csv"
    frame.to_csv(path, index=False)
    options = dict(rank=3, blocks=2, max_cycles=3, random_state=3, chunk_cycles=2, search=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on_workers = DaskMatrixFactorizer(client=client, **options).fit(str(path))
        assert gathered and max(gathered) < len(frame)  # read by the workers, not the client
        memory = DaskMatrixFactorizer(client=client, **options).fit(frame)
    assert np.array_equal(on_workers.user_factors_, memory.user_factors_)
    assert np.array_equal(on_workers.item_factors_, memory.item_factors_)


@pytest.mark.cluster
def test_a_duplicate_pair_across_pieces_names_both_rows_of_the_file(
    client, frame, tmp_path, small_blocks
):
    from cluster.dataset import load_worker_ratings

    repeated = pd.concat([frame, frame.iloc[[10]]], ignore_index=True)
    path = tmp_path / "ratings.csv"
    repeated.to_csv(path, index=False)
    user, item = int(frame["user"].iloc[10]), int(frame["item"].iloc[10])
    with pytest.raises(InputError) as caught:
        load_worker_ratings(client, str(path), n_blocks=2)
    assert f"({user}, {item})" in str(caught.value)
    assert f"{path} row 10 and {path} row {len(frame)}" in str(caught.value)


def test_flags_the_workers_cannot_honour_keep_a_file_in_process_and_refuse_a_glob(
    frame, tmp_path, small_blocks, capsys
):
    import argparse

    from hamsi.cli import main
    from hamsi.commands.factorize import _on_workers

    path = tmp_path / "ratings.csv"
    frame.to_csv(path, index=False)
    base = dict(workers=None, scheduler="tcp://127.0.0.1:1", test=None, split_column=None)
    args = argparse.Namespace(data=str(path), duplicates="error", **base)
    assert _on_workers(args)  # larger than a block: the workers read it
    args.duplicates = "mean"
    assert not _on_workers(args)  # repeated pairs merged: only the in-process reader does that
    args.duplicates, args.scheduler = "error", None
    assert not _on_workers(args)  # the Dask engine not asked for: a single file is read here
    args.workers = 2
    assert _on_workers(args)
    glob = str(tmp_path / "*.csv")
    code = main(["factorize", glob, "--scheduler", "tcp://127.0.0.1:1", "--duplicates", "mean"])
    assert code == 2
    assert "--duplicates mean needs the ratings in this process" in capsys.readouterr().err
