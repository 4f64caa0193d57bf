"""Readers: every format written by hand in its exact layout, detection, and every bad input."""

import gzip

import numpy as np
import pandas as pd
import pytest

import hamsi
from hamsi.data import readers
from hamsi.data.readers import detect_format, load_ratings
from hamsi.errors import InputError

# The same four ratings in every format: users 196, 186, 22 and items 242, 302, 377.
TRIPLES = [(196, 242, 3.0), (186, 302, 3.0), (22, 377, 1.0), (196, 302, 4.5)]
FILES = {
    "u.data": "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n196\t302\t4.5\t1\n",
    "ratings.dat": "196::242::3::881250949\n186::302::3::891717742\n22::377::1::878887116\n196::302::4.5::1\n",
    "ratings.csv": "userId,movieId,rating,timestamp\n196,242,3.0,881250949\n186,302,3.0,891717742\n"
    "22,377,1.0,878887116\n196,302,4.5,1\n",
    "plain.csv": "196,242,3\n186,302,3\n22,377,1\n196,302,4.5\n",
    "named.tsv": "rating\titem\tuser\n3\t242\t196\n3\t302\t186\n1\t377\t22\n4.5\t302\t196\n",
}
EXPECTED_FORMATS = {
    "u.data": "ml-100k",
    "ratings.dat": "ml-dat",
    "ratings.csv": "ml-csv",
    "plain.csv": "csv",
    "named.tsv": "tsv",
}


def triples(ratings):
    return sorted(
        zip(
            ratings.user_ids[ratings.rows].tolist(),
            ratings.item_ids[ratings.cols].tolist(),
            ratings.values.tolist(),
        )
    )


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_text_format_is_detected_and_read(tmp_path, name):
    path = write(tmp_path, name, FILES[name])
    assert detect_format(path) == EXPECTED_FORMATS[name]
    ratings = load_ratings(path)
    assert triples(ratings) == sorted(TRIPLES)
    assert ratings.shape == (3, 3)
    assert ratings.user_ids.tolist() == [22, 186, 196]


@pytest.mark.parametrize("name", ["u.data", "ratings.dat"])
def test_explicit_format_matches_auto(tmp_path, name):
    path = write(tmp_path, name, FILES[name])
    fmt = {"u.data": "ml-100k", "ratings.dat": "ml-1m"}[name]
    assert triples(load_ratings(path, format=fmt)) == sorted(TRIPLES)


def test_lazy_top_level_export(tmp_path):
    path = write(tmp_path, "u.data", FILES["u.data"])
    assert triples(hamsi.load_ratings(path)) == sorted(TRIPLES)


def test_compressed_and_directory_sources(tmp_path):
    folder = tmp_path / "ml-1m"
    folder.mkdir()
    write(folder, "ratings.dat", FILES["ratings.dat"])
    assert triples(load_ratings(folder)) == sorted(TRIPLES)
    packed = tmp_path / "u.data.gz"
    packed.write_bytes(gzip.compress(FILES["u.data"].encode()))
    assert triples(load_ratings(packed)) == sorted(TRIPLES)


def test_hamsi_text_format_keeps_header_shape(tmp_path):
    path = write(tmp_path, "m.txt", "2\n4 5\n3\n1 1 2.5\n4  5 1\n2\t3 4\n")
    assert detect_format(path) == "hamsi"
    ratings = load_ratings(path)
    assert ratings.shape == (4, 5)
    assert ratings.rows.tolist() == [0, 3, 1] and ratings.cols.tolist() == [0, 4, 2]
    assert ratings.values.tolist() == [2.5, 1.0, 4.0]
    assert ratings.user_ids.tolist() == [1, 2, 3, 4]


def test_generic_csv_with_chosen_columns(tmp_path):
    path = write(
        tmp_path,
        "x.csv",
        "when;who;what;stars\n9;196;242;3\n9;186;302;3\n9;22;377;1\n9;196;302;4.5\n",
    )
    ratings = load_ratings(path, format="csv", sep=";", columns=("who", "what", "stars"))
    assert triples(ratings) == sorted(TRIPLES)
    by_position = load_ratings(path, format="csv", sep=";", columns=(1, 2, 3), header=True)
    assert triples(by_position) == sorted(TRIPLES)


def test_chunked_parsing_crosses_chunk_boundaries(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    users = rng.permutation(2000)[:500] + 1
    lines = "".join(f"{u}::{7 * k % 311 + 1}::{k % 5 + 1}::0\n" for k, u in enumerate(users))
    path = write(tmp_path, "ratings.dat", lines)
    monkeypatch.setattr(readers, "CHUNK_BYTES", 64)  # dozens of chunks, each cut mid-line
    ratings = load_ratings(path)
    assert ratings.nnz == 500
    assert ratings.user_ids[ratings.rows].tolist() == users.tolist()


def test_parquet_and_dataframes(tmp_path):
    frame = pd.DataFrame(
        {
            "userId": [196, 186, 22, 196],
            "movieId": [242, 302, 377, 302],
            "rating": [3.0, 3.0, 1.0, 4.5],
        }
    )
    frame.to_parquet(tmp_path / "r.parquet")
    assert triples(load_ratings(tmp_path / "r.parquet")) == sorted(TRIPLES)
    assert triples(load_ratings(frame)) == sorted(TRIPLES)
    dask_dataframe = pytest.importorskip("dask.dataframe")
    assert triples(load_ratings(dask_dataframe.from_pandas(frame, npartitions=2))) == sorted(
        TRIPLES
    )


def test_dataframe_errors_name_the_row():
    frame = pd.DataFrame(
        {"user": [1, 2, 3], "item": [1, 1, 1], "rating": [1.0, np.nan, 2.0]}, index=[10, 11, 12]
    )
    with pytest.raises(InputError, match="DataFrame row 11: rating is not a finite number"):
        load_ratings(frame)


# ----------------------------------------------------------------------------- bad input
BAD_FILES = [
    ("u.data", "1\t2\t3\t4\n1\t3\t4\n", r"u\.data:2: expected 4 fields separated by '\\t'"),
    ("u.data", "1\t2\t3\t4\n1\t3\tnan\t5\n", r"u\.data:2: rating is not a finite number: 'nan'"),
    ("u.data", "1\t2\t3\t4\n\n1\t3\tinf\t5\n", r"u\.data:3: rating is not a finite number: inf"),
    ("u.data", "1\t2\t3\t4\n1\t3\t\t5\n", r"u\.data:2: rating is not a number: ''"),
    ("u.data", "1\t2\t3\t4\n-1\t3\t2\t5\n", r"u\.data:2: user id is negative: -1"),
    ("u.data", "1\t2\t3\t4\n1\t3.5\t2\t5\n", r"u\.data:2: item id is not an integer: '3\.5'"),
    ("u.data", "1\t2\t3\t4\n1\tx\t2\t5\n", r"u\.data:2: item id is not an integer: 'x'"),
    (
        "u.data",
        "1\t2\t3\t4\n1\t3\t4\t5\n1\t2\t5\t6\n",
        r"u\.data:3: duplicate \(user, item\) pair \(1, 2\)",
    ),
    ("ratings.dat", "1::2::3::4\n1:3:2:5\n", r"ratings\.dat:2: expected 4 fields"),
    (
        "ratings.csv",
        "userId,movieId,rating,timestamp\n1,2,3,4\n1;3;2;5\n",
        r"ratings\.csv:3: expected 4 fields",
    ),
    (
        "ratings.csv",
        "userId,movieId,rating,timestamp\n",
        r"ratings\.csv: no ratings after the header",
    ),
    ("empty.data", "", r"empty\.data: file is empty"),
    ("blank.csv", "\n\n", r"blank\.csv: file is empty"),
    ("spaces.data", "1 2 3 4\n", r"spaces\.data:1: cannot detect the format"),
    ("m.txt", "2\n3 3\n2\n1 1 1\n", r"m\.txt: header announces 2 entries but the file holds 1"),
    ("m.txt", "2\n3 3\n2\n1 1 1\n4 1 1\n", r"m\.txt:5: row index 4 is outside 1\.\.3"),
    ("m.txt", "2\n3 3\n1\n1 1 nan\n", r"m\.txt:4: rating is not a finite number"),
    ("m.txt", "2\n3 3\n2\n1 1 1\n1 1 2\n", r"m\.txt:5: duplicate \(user, item\) pair \(1, 1\)"),
]


@pytest.mark.parametrize("name, text, message", BAD_FILES)
def test_bad_files_name_file_line_and_value(tmp_path, name, text, message):
    path = write(tmp_path, name, text)
    with pytest.raises(InputError, match=message):
        load_ratings(path)


def test_bad_value_found_after_many_good_lines(tmp_path, monkeypatch):
    good = "".join(f"{k}\t{k}\t3\t0\n" for k in range(1, 3001))
    path = write(tmp_path, "u.data", good + "5\t6\t-inf\t0\n")
    monkeypatch.setattr(readers, "CHUNK_BYTES", 4096)
    with pytest.raises(InputError, match=r"u\.data:3001: rating is not a finite number"):
        load_ratings(path)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_ratings(tmp_path / "nope.csv")
    path = write(tmp_path, "u.data", FILES["u.data"])
    with pytest.raises(InputError, match="unknown format"):
        load_ratings(path, format="xlsx")


def test_wrong_separator_with_explicit_format(tmp_path):
    path = write(tmp_path, "r.dat", "1,2,3,4\n")
    with pytest.raises(InputError, match=r"r\.dat:1: expected 4 fields separated by '::'"):
        load_ratings(path, format="ml-dat")


def test_duplicate_policy_applies_to_files(tmp_path):
    path = write(tmp_path, "u.data", "1\t2\t3\t4\n1\t3\t4\t5\n1\t2\t5\t6\n")
    ratings = load_ratings(path, duplicates="keep-last")
    assert triples(ratings) == [(1, 2, 5.0), (1, 3, 4.0)]
    assert ratings.summary()["duplicates_merged"] == 1
    assert triples(load_ratings(path, duplicates="mean")) == [(1, 2, 4.0), (1, 3, 4.0)]


def test_corrupt_parquet(tmp_path):
    path = write(tmp_path, "r.parquet", "not parquet at all")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        load_ratings(path)
