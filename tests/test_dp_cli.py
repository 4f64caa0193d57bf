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
    code = main(["glasso", str(path), "--alpha", "0.05", "--epsilon", "1", "--seed", "3",
                 "--out", str(out), "--graph", str(graph)])
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
    assert main(["glasso", str(path), "--alpha", "0.1", "--estimator", "ridge", "--out", str(out)]) == 0
    assert "NOT private" in capsys.readouterr().out
    assert np.allclose(np.load(out), dp.ridge_precision(X.T @ X / len(X), 0.1))


def test_headerless_csv_and_gaussian_mechanism(tmp_path, capsys):
    path = tmp_path / "plain.csv"
    np.savetxt(path, np.random.default_rng(1).random((30, 3)) / 3, delimiter=",")
    assert main(["glasso", str(path), "--alpha", "0.01", "--epsilon", "2", "--delta", "1e-3",
                 "--mechanism", "gaussian", "--seed", "1"]) == 0
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
        ("1,7\n3,7\n", ["--alpha", "0.1", "--epsilon", "1"], "column 2 is constant"),
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
