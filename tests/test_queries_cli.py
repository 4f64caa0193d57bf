"""`hamsi queries`: output and clear errors."""

import re

import pytest

from hamsi.cli import main


@pytest.mark.parametrize("method", ["coa", "coa-dual"])
def test_queries_prints_expected_and_empirical_error(capsys, method):
    code = main(["queries", "--workload", "range", "-m", "64", "-n", "16", "--method", method,
                 "--epsilon", "0.5", "--delta", "1e-4", "--repeats", "5", "--noise-seed", "1"])
    out = capsys.readouterr().out
    assert code == 0
    expected = float(re.search(r"expected error: (\S+) total", out).group(1))
    empirical = float(re.search(r"empirical error: (\S+) total", out).group(1))
    assert 0.3 < empirical / expected < 3 and "time:" in out and "duality gap" in out


@pytest.mark.parametrize("argv,message", [
    (["-n", "0"], "-n must be"),
    (["--delta", "0"], "--delta must"),
    (["--epsilon", "-1"], "--epsilon must"),
    (["--method", "lrm2"], "--method must be one of"),
    (["--workload", "marginal", "-n", "13"], "prime"),
])
def test_queries_bad_flags_are_named(capsys, argv, message):
    assert main(["queries", "-m", "8", *argv]) == 2
    assert message in capsys.readouterr().err
