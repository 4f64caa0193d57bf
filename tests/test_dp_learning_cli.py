"""`hamsi dp-learn`: private coefficients and the spend; non-private diagnostics only when asked; clear errors."""

import re

import numpy as np
import pytest

from hamsi.cli import main

BOUNDS = ["--classes", "0,1", "--data-norm", "4"]


@pytest.fixture
def csv_file(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3))
    y = (X @ np.array([2.0, -1.0, 0.5]) > 0).astype(int)
    path = tmp_path / "data.csv"
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header="a,b,c,label", comments="")
    return path


def _coefficients(text):
    return np.array(
        re.search(r"coefficients \(class 1 vs 0\): (.*)", text).group(1).split(), dtype=float
    )


def test_dp_learn_prints_the_private_coefficients_and_spend_and_nothing_computed_on_the_data(
    csv_file, capsys
):
    code = main(
        [
            "dp-learn",
            str(csv_file),
            "--target",
            "label",
            "--method",
            "dp-sgdws",
            "--epsilon",
            "1",
            "--batch-size",
            "20",
            "--n-iter",
            "200",
            "--seed",
            "1",
            *BOUNDS,
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "privacy spent: epsilon=1 delta=0" in text and "iterations: 200" in text
    assert _coefficients(text).shape == (3,)
    assert "accuracy" not in text and "f*" not in text and "NON-PRIVATE" not in text


def test_dp_learn_nonprivate_diagnostics_are_labelled_and_plot(csv_file, tmp_path, capsys):
    plot = tmp_path / "gap.png"
    assert (
        main(
            [
                "dp-learn",
                str(csv_file),
                "--target",
                "label",
                "--method",
                "dp-sgdws",
                "--epsilon",
                "inf",
                "--batch-size",
                "20",
                "--n-iter",
                "200",
                "--seed",
                "1",
                *BOUNDS,
                "--nonprivate-diagnostics",
                "--plot",
                str(plot),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    diagnostics = text[text.index("NON-PRIVATE diagnostics") :]
    accuracy = float(re.search(r"training accuracy: ([0-9.]+)", diagnostics).group(1))
    gap = float(re.search(r"f - f\*: ([0-9.e+-]+)", diagnostics).group(1))
    assert (
        accuracy > 0.9 and gap >= 0
    )  # without noise the method separates these (separable) classes
    assert "privacy: none" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dp_learn_defaults_and_gaussian_spend(csv_file, capsys):
    code = main(
        [
            "dp-learn",
            str(csv_file),
            "--target",
            "4",
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--seed",
            "2",
            *BOUNDS,
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "method: dp-mag-gauss" in text and "epsilon=1 delta=1e-05, rho=" in text


def test_dp_learn_warns_in_one_line_each_when_classes_and_data_norm_are_left_implicit(
    csv_file, capsys
):
    assert (
        main(["dp-learn", str(csv_file), "--target", "label", "--epsilon", "1", "--seed", "3"]) == 0
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(
        line.startswith("warning (PrivacyLeakWarning): ") for line in lines
    )
    assert "--classes not given" in lines[0] and "data_norm" in lines[1]
    assert "the same seed gives the same noise" in lines[2]
    # the command line's advice is in its flags: omit --seed, not the API's random_state=None
    assert lines[2].endswith(
        "; omit --seed (fresh OS entropy for every release) for a real release"
    )
    assert "random_state" not in "".join(lines)
    assert main(["dp-learn", str(csv_file), "--target", "label", "--epsilon", "1"]) == 0
    assert len(capsys.readouterr().err.strip().splitlines()) == 2  # no --seed, no seed warning


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--target", "nope", "--epsilon", "1", *BOUNDS],
            "--target 'nope' is neither a column name",
        ),
        (["--target", "a", "--epsilon", "1", *BOUNDS], "holds a value outside --classes 0,1"),
        (["--target", "label", "--epsilon", "1", "--classes", "0"], "two distinct numbers"),
        (
            ["--target", "label", "--epsilon", "1", *BOUNDS, "--plot", "x.png"],
            "add --nonprivate-diagnostics",
        ),
        (["--target", "label", "--epsilon", "-2", *BOUNDS], "epsilon must be"),
        (
            ["--target", "label", "--epsilon", "1", "--classes", "0,1", "--data-norm", "0"],
            "data_norm must be",
        ),
    ],
)
def test_dp_learn_bad_input_is_one_clear_line(csv_file, capsys, argv, message):
    assert main(["dp-learn", str(csv_file), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_dp_learn_fits_the_estimators_model_with_its_intercept(tmp_path, capsys):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((400, 2)) / 2
    y = (X[:, 0] > 0.4).astype(int)  # a boundary away from the origin: the intercept matters
    path = tmp_path / "shifted.csv"
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header="a,b,label", comments="")
    argv = ["dp-learn", str(path), "--target", "label", "--epsilon", "4", "--seed", "5", *BOUNDS]
    assert main(argv) == 0
    text = capsys.readouterr().out
    intercept = float(re.search(r"intercept: (\S+)", text).group(1))
    import dp

    with pytest.warns(dp.PrivacyLeakWarning, match="the same seed gives the same noise"):
        model = dp.PrivateLogisticRegression(
            epsilon=4.0, data_norm=4.0, classes=[0, 1], random_state=5
        ).fit(X, y)
    np.testing.assert_allclose(_coefficients(text), model.coef_[0], rtol=1e-5)
    assert intercept == pytest.approx(model.intercept_[0], rel=1e-5) and intercept < 0
    assert "row scale" in text and "noisy mean row norm" in text
