"""`hamsi data synth|info|convert` end to end through the CLI dispatcher."""

import os

import pytest

from hamsi.cli import main
from hamsi.data.readers import load_ratings


def test_synth_then_info(tmp_path, capsys):
    out = tmp_path / "r.dat"
    assert (
        main(
            [
                "data",
                "synth",
                "--users",
                "40",
                "--items",
                "30",
                "--ratings",
                "900",
                "--rank",
                "4",
                "--seed",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    ratings = load_ratings(out)
    assert ratings.nnz == 900 and ratings.shape == (40, 30)
    capsys.readouterr()
    assert main(["data", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ratings    900" in text and "users      40" in text and "density    75.0000%" in text
    assert "per user" in text and "histogram" in text


def test_synth_preset_and_convert(tmp_path, capsys):
    out = tmp_path / "small.parquet"
    assert (
        main(
            [
                "data",
                "synth",
                "--preset",
                "ml-100k-like",
                "--ratings",
                "20000",
                "--seed",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert load_ratings(out).nnz == 20000
    converted = tmp_path / "small.txt"
    assert main(["data", "convert", str(out), str(converted)]) == 0
    assert converted.read_text().splitlines()[:3] == ["2", "943 1682", "20000"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["data", "info", "{dir}/missing.csv"], "no such file"),
        (["data", "info", "{dir}/bad.data"], "bad.data:2: rating is not a finite number"),
        (
            [
                "data",
                "synth",
                "--users",
                "3",
                "--items",
                "3",
                "--ratings",
                "10",
                "--out",
                "{dir}/x.csv",
            ],
            "do not fit",
        ),
        (["data", "synth", "--users", "3", "--out", "{dir}/x.csv"], "give --preset"),
        (
            ["data", "synth", "--preset", "ml-100k-like", "--out", "{dir}/x.xlsx"],
            "cannot tell the format",
        ),
    ],
)
def test_errors_print_one_line_and_exit_nonzero(tmp_path, capsys, argv, message):
    (tmp_path / "bad.data").write_text("1\t2\t3\t4\n1\t3\tnan\t5\n")
    code = main([arg.format(dir=tmp_path) for arg in argv])
    error = capsys.readouterr().err
    assert code != 0
    assert message in error and "Traceback" not in error and error.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["bad.data"]  # nothing half-written
