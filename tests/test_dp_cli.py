"""`hamsi glasso`: outputs, printed privacy spend, clear errors for bad input."""

import numpy as np
import pytest

from hamsi.cli import main


@pytest.fixture
def csv_file(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4)) * 0.1
    X[0] *= 20  # one row beyond the clipping bound
    path = tmp_path / "data.csv"
    np.savetxt(path, X, delimiter=",", header="a,b,c,d", comments="")
    return path, X


def test_private_glasso_writes_outputs_and_reports_spend(csv_file, tmp_path, capsys):
    path, X = csv_file
    out, graph = tmp_path / "prec.npy", tmp_path / "g.png"
    code = main(
        [
            "glasso",
            str(path),
            "--alpha",
            "0.05",
            "--epsilon",
            "1",
            "--seed",
            "3",
            "--out",
            str(out),
            "--graph",
            str(graph),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "privacy spent: epsilon=1 delta=0" in text
    assert "clipped" in text and "not reported" in text and "1 of 60" not in text
    P = np.load(out)
    assert P.shape == (4, 4) and np.allclose(P, P.T)
    assert graph.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".tmp-")]


def test_non_private_ridge_matches_library_and_says_not_private(csv_file, tmp_path, capsys):
    import dp

    path, X = csv_file
    out = tmp_path / "p.npy"
    assert (
        main(["glasso", str(path), "--alpha", "0.1", "--estimator", "ridge", "--out", str(out)])
        == 0
    )
    assert "NOT private" in capsys.readouterr().out
    assert np.allclose(np.load(out), dp.ridge_precision(X.T @ X / len(X), 0.1))


def test_headerless_csv_and_gaussian_mechanism(tmp_path, capsys):
    path = tmp_path / "plain.csv"
    np.savetxt(path, np.random.default_rng(1).random((30, 3)) / 3, delimiter=",")
    assert (
        main(
            [
                "glasso",
                str(path),
                "--alpha",
                "0.01",
                "--epsilon",
                "2",
                "--delta",
                "1e-3",
                "--mechanism",
                "gaussian",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    assert "epsilon=2 delta=0.001" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content,args,message",
    [
        ("a,b\n1,2\n3,inf\n4,5\n", ["--alpha", "0.1"], "line 3, column 2"),
        ("a,b\n1,2\n3,x\n4,5\n", ["--alpha", "0.1"], "line 3, column 2"),
        ("1,2\n3,4\n,5\n", ["--alpha", "0.1"], "line 3, column 1"),
        ("1,2\n3,4\n", ["--alpha", "-1"], "alpha"),
        ("1,2\n3,4\n", ["--alpha", "0.1", "--epsilon", "0"], "epsilon"),
        ("1,2\n3,4\n", ["--alpha", "0.1", "--epsilon", "1", "--delta", "1.5"], "delta"),
        ("1,2\n3,4\n", ["--alpha", "cv", "--epsilon", "1"], "spend budget"),
        ("1,2\n3,4\n", ["--alpha", "0.1", "--epsilon", "1", "--mechanism", "gaussian"], "delta"),
        ("1,2\n3,4\n", ["--alpha", "0.1", "--epsilon", "1", "--delta", "1e-5"], "--delta"),
        ("1,2\n3,4\n", ["--alpha", "0.1", "--delta", "1e-5", "--mechanism", "gaussian"], "--delta"),
        ("a,b,c\n1,2,0\n3,4,0\n5,6,0\n", ["--alpha", "0.1"], "column 3 ('c') is constant"),
        ("1,2\n3,4\n", ["--alpha", "0.1", "--public-n", "5"], "--public-n is only used"),
        (
            "1,2\n3,4\n",
            ["--alpha", "0.1", "--epsilon", "1", "--public-n", "5"],
            "--public-n is only used",
        ),
        (
            "1,2\n3,4\n",
            ["--alpha", "0.1", "--epsilon", "1", "--neighbouring", "add-remove", "--public-n", "0"],
            "--public-n must be",
        ),
    ],
)
def test_bad_input_is_one_clear_line_and_writes_nothing(tmp_path, capsys, content, args, message):
    path = tmp_path / "d.csv"
    path.write_text(content)
    out = tmp_path / "p.npy"
    assert main(["glasso", str(path), *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_missing_file_is_a_user_error(tmp_path, capsys):
    assert main(["glasso", str(tmp_path / "nope.csv"), "--alpha", "0.1"]) == 2
    assert "no such file" in capsys.readouterr().err


def _noise_scale(text):
    return float(text.split("noise scale ")[1].split(")")[0])


def test_add_remove_neighbours_never_print_or_use_the_row_count(csv_file, capsys):
    # add-remove must not calibrate to c^2 / n with the data's own n (nor print it),
    # which would give a sqrt(2) smaller noise
    path, X = csv_file
    common = [
        "glasso",
        str(path),
        "--alpha",
        "0.05",
        "--epsilon",
        "1",
        "--delta",
        "1e-4",
        "--clip",
        "1",
        "--mechanism",
        "gaussian",
        "--seed",
        "1",
    ]
    assert main(common + ["--neighbouring", "replace-one"]) == 0
    replace = capsys.readouterr().out
    assert "rows: 60 " in replace and "replace-one neighbours" in replace
    assert main(common + ["--neighbouring", "add-remove"]) == 0
    added = capsys.readouterr().out
    assert "rows: private" in added and "60" not in added.split("columns")[0]
    assert "privacy spent: epsilon=1 delta=0.0001" in added and "noisy row count" in added
    # a public n divides the noisy sum instead of a paid count: c^2 / public_n in L2
    assert main(common + ["--neighbouring", "add-remove", "--public-n", "60"]) == 0
    public = capsys.readouterr().out
    assert "rows: 60 (public, --public-n)" in public
    assert _noise_scale(replace) / _noise_scale(public) == pytest.approx(2**0.5, rel=1e-2)


def test_private_runs_do_not_inspect_constant_columns_and_warn_about_an_implicit_clip(
    tmp_path, capsys
):
    # a refusal naming a constant column would depend on the data; no --clip gives
    # a warning that depends on the arguments only
    path = tmp_path / "d.csv"
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.standard_normal(40) * 0.1, np.full(40, 0.3)])
    np.savetxt(path, X, delimiter=",", header="a,b", comments="")
    assert main(["glasso", str(path), "--alpha", "0.05", "--epsilon", "1", "--seed", "1"]) == 0
    captured = capsys.readouterr()
    assert "constant" not in captured.err + captured.out
    assert (
        "hamsi glasso: warning: clip not given" in captured.err and "Traceback" not in captured.err
    )
    # without --seed (a seed warns: the same seed gives the same noise) nothing is left to warn about
    assert main(["glasso", str(path), "--alpha", "0.05", "--epsilon", "1", "--clip", "1"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["glasso", str(path), "--alpha", "0.05"]) == 2  # a non-private run still refuses it
    assert "column 2 ('b') is constant" in capsys.readouterr().err


def _private_error(argv, capsys, path):
    """Run a private command that must refuse; return its stderr with the file's path removed."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    return err.replace(str(path), "DATA")


@pytest.mark.parametrize(
    "command",
    [
        ["glasso", "--alpha", "0.1", "--clip", "1", "--epsilon", "1"],
        ["dp-learn", "--target", "1", "--classes", "0,1", "--data-norm", "1", "--epsilon", "1"],
    ],
)
def test_private_cli_messages_quote_no_cell_position_or_count(tmp_path, capsys, command):
    """Planted values (a bad cell, its line and column, the count of bad cells, the row count,
    a parser's line number) never reach a message under --epsilon."""
    name, *flags = command
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n0,1\n1,nan_secret_42\n0,1\n1,0\n")
    err = _private_error([name, str(bad), *flags], capsys, bad)
    assert "non-numeric or non-finite" in err
    for planted in ("nan_secret_42", "line 3", "column 2", "'b'", "1 bad", "in total"):
        assert planted not in err
    one_row = tmp_path / "one.csv"
    one_row.write_text("a,b\n1,0\n")
    err = _private_error([name, str(one_row), *flags], capsys, one_row)
    assert "at least 2 data rows" in err and "got" not in err and "1" not in err
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("0,1\n1,0\n0,1\n1,0,5\n")
    err = _private_error([name, str(ragged), *flags], capsys, ragged)
    assert "cannot parse" in err and "line" not in err and "4" not in err and "3" not in err


def test_non_private_cli_messages_still_point_at_the_bad_cell(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n0,1\n1,nan_secret_42\n0,1\n")
    assert main(["glasso", str(bad), "--alpha", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "line 3, column 2 ('b')" in err and "'nan_secret_42'" in err


def test_dp_learn_without_classes_does_not_count_the_labels(tmp_path, capsys):
    data = tmp_path / "labels.csv"
    rows = [f"{k % 7},{0.1 * k}" for k in range(40)]  # 7 distinct labels planted
    data.write_text("y,x\n" + "\n".join(rows) + "\n")
    argv = ["dp-learn", str(data), "--target", "y", "--data-norm", "1", "--epsilon", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.replace(str(data), "DATA")
    assert "exactly 2 distinct values" in err and "7" not in err


def test_glasso_without_edges_says_alpha_is_in_the_units_of_the_clipped_covariance(
    csv_file, capsys
):
    path, _ = csv_file
    argv = ["glasso", str(path), "--alpha", "1", "--epsilon", "1", "--clip", "0.5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "edges: 0" in out and "alpha 1 is in the units of S" in out
    assert "clipped to L2 norm 0.5, so S's entries are at most 0.25" in out
    assert main(["glasso", str(path), "--alpha", "0.001", "--epsilon", "1", "--clip", "0.5"]) == 0
    assert "no edge" not in capsys.readouterr().out


def test_glasso_seed_warning_advises_omitting_the_flag_and_the_api_the_keyword(csv_file, capsys):
    import warnings

    import dp

    path, X = csv_file
    argv = [
        "glasso",
        str(path),
        "--alpha",
        "0.1",
        "--epsilon",
        "1",
        "--clip",
        "1",
        "--seed",
        "1",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "hamsi glasso: warning: --seed given: the same seed gives"
    )
    assert err[0].endswith("; omit --seed (fresh OS entropy for every release) for a real release")
    assert "random_state" not in err[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dp.PrivateRidgePrecision(alpha=0.1, epsilon=1.0, clip=1.0, random_state=1).fit(X)
    said = [str(w.message) for w in caught if issubclass(w.category, dp.PrivacyLeakWarning)]
    assert len(said) == 1 and said[0].endswith(
        "; pass random_state=None (fresh OS entropy for every release) for a real release"
    )
    assert "--seed" not in said[0]
