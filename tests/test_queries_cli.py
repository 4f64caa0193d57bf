"""`hamsi queries`: output and clear errors."""

import re

import pytest

from hamsi.cli import main


@pytest.mark.parametrize("method", ["coa", "coa-dual"])
def test_queries_prints_expected_and_empirical_error(capsys, method):
    code = main(
        [
            "queries",
            "--workload",
            "range",
            "-m",
            "64",
            "-n",
            "16",
            "--method",
            method,
            "--epsilon",
            "0.5",
            "--delta",
            "1e-4",
            "--repeats",
            "5",
            "--noise-seed",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    expected = float(re.search(r"expected error: (\S+) total", out).group(1))
    empirical = float(re.search(r"empirical error: (\S+) total", out).group(1))
    assert 0.3 < empirical / expected < 3 and "time:" in out and "duality gap" in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["-n", "0"], "-n must be"),
        (["--delta", "0"], "--delta must"),
        (["--epsilon", "-1"], "--epsilon must"),
        (["--method", "lrm2"], "--method must be one of"),
        (["--workload", "marginal", "-n", "13"], "prime"),
    ],
)
def test_queries_bad_flags_are_named(capsys, argv, message):
    assert main(["queries", "-m", "8", *argv]) == 2
    assert message in capsys.readouterr().err


def test_queries_replace_one_neighbours_raise_the_sensitivity(capsys):
    found = {}
    for relation in ("add-remove", "replace-one"):
        assert (
            main(
                [
                    "queries",
                    "--workload",
                    "range",
                    "-m",
                    "32",
                    "-n",
                    "8",
                    "--method",
                    "identity",
                    "--repeats",
                    "2",
                    "--noise-seed",
                    "1",
                    "--neighbouring",
                    relation,
                ]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert f"{relation} neighbours" in out
        found[relation] = (
            float(re.search(r"sensitivity (\S+)", out).group(1)),
            float(re.search(r"expected error: (\S+) total", out).group(1)),
        )
    assert found["add-remove"][0] == 1 and found["replace-one"][0] == pytest.approx(
        2**0.5, rel=1e-3
    )
    assert found["replace-one"][1] / found["add-remove"][1] == pytest.approx(2, rel=1e-3)
