"""`hamsi dp-learn`: accuracy, f - f* and the spend printed; a PNG plot; clear errors."""

import re

import numpy as np
import pytest

from hamsi.cli import main


@pytest.fixture
def csv_file(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3))
    y = (X @ np.array([2.0, -1.0, 0.5]) > 0).astype(int)
    path = tmp_path / "data.csv"
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header="a,b,c,label", comments="")
    return path


def test_dp_learn_prints_accuracy_gap_and_spend_and_plots(csv_file, tmp_path, capsys):
    plot = tmp_path / "gap.png"
    code = main(["dp-learn", str(csv_file), "--target", "label", "--method", "dp-sgdws", "--epsilon", "1",
                 "--batch-size", "20", "--n-iter", "200", "--seed", "1", "--plot", str(plot)])
    assert code == 0
    text = capsys.readouterr().out
    assert "privacy spent: epsilon=1 delta=0" in text and "iterations: 200" in text
    accuracy = float(re.search(r"training accuracy: ([0-9.]+)", text).group(1))
    gap = float(re.search(r"f - f\*: ([0-9.e+-]+)", text).group(1))
    assert 0 <= accuracy <= 1 and gap >= 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # without noise the same method separates these (separable) classes
    assert main(["dp-learn", str(csv_file), "--target", "label", "--method", "dp-sgdws", "--epsilon", "inf",
                 "--batch-size", "20", "--n-iter", "200", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert float(re.search(r"training accuracy: ([0-9.]+)", text).group(1)) > 0.9
    assert "privacy: none" in text


def test_dp_learn_target_by_number_and_gaussian_spend(csv_file, capsys):
    code = main(["dp-learn", str(csv_file), "--target", "4", "--method", "dp-gdws-gauss", "--epsilon", "1",
                 "--delta", "1e-5", "--n-iter", "50", "--seed", "2"])
    assert code == 0
    assert "epsilon=1 delta=1e-05, rho=" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--target", "nope", "--epsilon", "1"], "--target 'nope' is neither a column name"),
    (["--target", "a", "--epsilon", "1"], "exactly 2 distinct values"),
    (["--target", "label", "--epsilon", "1", "--method", "dp-sgdws"], "needs a batch_size"),
    (["--target", "label", "--epsilon", "-2"], "epsilon must be"),
])
def test_dp_learn_bad_input_is_one_clear_line(csv_file, capsys, argv, message):
    assert main(["dp-learn", str(csv_file), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
