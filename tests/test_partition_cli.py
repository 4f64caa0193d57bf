"""`hamsi partition`: JSON and table output, picture, and user errors without tracebacks."""

import json

import pytest

from hamsi.cli import main


@pytest.fixture
def rating_file(tmp_path):
    """A 4 x 5 matrix with 6 ratings in the HAMSI text format (1-based indices)."""
    path = tmp_path / "tiny.txt"
    path.write_text("2\n4 5\n6\n1 1 5\n1 2 3\n2 3 4\n3 4 1\n4 5 2\n4 1 5\n")
    return path


@pytest.mark.parametrize("scheme", ["color", "color-b", "hogwild", "strata", "strata-b"])
def test_json_lists_block_sizes_in_schedule_order(rating_file, capsys, scheme):
    assert (
        main(
            [
                "partition",
                str(rating_file),
                "--partitioner",
                scheme,
                "--blocks",
                "2",
                "--subsets",
                "2",
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["scheme"] == scheme
    assert len(report["subsets"]) == 2
    assert sum(sum(s["blocks"]) for s in report["subsets"]) == 6
    assert all(len(s["blocks"]) == 2 for s in report["subsets"])
    assert report["imbalance"] >= 1.0 and report["seconds"] >= 0


def test_table_and_plot(rating_file, capsys, tmp_path):
    picture = tmp_path / "grid.png"
    assert (
        main(
            [
                "partition",
                str(rating_file),
                "--partitioner",
                "strata-b",
                "--blocks",
                "2",
                "--plot",
                str(picture),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "strata-b: 6 ratings of a 4 x 5 matrix" in out and "block sizes" in out
    assert picture.stat().st_size > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--partitioner", "strata", "--blocks", "9"], "blocks=9 is larger than a dimension"),
        (
            ["--partitioner", "strata", "--blocks", "2", "--subsets", "3"],
            "got subsets=3 with blocks=2",
        ),
        (["--partitioner", "hogwild", "--blocks", "0"], "blocks must be a positive integer; got 0"),
    ],
)
def test_user_errors_print_one_line(rating_file, capsys, argv, message):
    assert main(["partition", str(rating_file), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_scheme_is_a_deprecated_spelling_of_partitioner(rating_file, capsys):
    argv = ["partition", str(rating_file), "--blocks", "2", "--json"]
    assert main([*argv, "--scheme", "strata"]) == 0
    captured = capsys.readouterr()
    assert "--scheme is deprecated and will be removed in a future release; use --partitioner" in (
        captured.err
    )
    assert json.loads(captured.out)["scheme"] == "strata"
    assert main(argv) == 2
    assert "--partitioner is required" in capsys.readouterr().err
