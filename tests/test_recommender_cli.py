"""`hamsi recommend` on the model `hamsi factorize --out` writes; the progress display of factorize."""

import io
import json

import numpy as np
import pytest

from hamsi import MatrixFactorizer
from hamsi.cli import main
from hamsi.commands.progress import Progress
from hamsi.data.synth import make_ratings


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A u.data file with sparse ids (user 10 + 3r, item 7 + 2c) and the model factorize wrote from it."""
    ratings = make_ratings(users=40, items=60, ratings=1000, rank=3, seed=4)
    folder = tmp_path_factory.mktemp("rec")
    data, model = folder / "u.data", folder / "factors.npz"
    with open(data, "w") as handle:
        for row, col, value in zip(ratings.rows, ratings.cols, ratings.values):
            handle.write(f"{10 + 3 * row}\t{7 + 2 * col}\t{int(value)}\t0\n")
    assert (
        main(
            [
                "factorize",
                str(data),
                "--workers",
                "0",
                "--rank",
                "3",
                "--blocks",
                "2",
                "--threads",
                "1",
                "--max-cycles",
                "5",
                "--out",
                str(model),
                "-q",
            ]
        )
        == 0
    )
    return data, model, ratings


def test_recommend_prints_the_models_top_items(fitted, capsys):
    data, model_file, ratings = fitted
    capsys.readouterr()
    assert main(["recommend", str(model_file), "--user", "13", "-n", "4", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    model = MatrixFactorizer.load(model_file)
    items, scores = model.recommend(13, n=4)
    unclipped = model.predict([13] * 4, items, clip=False)
    assert shown == {
        "user": 13,
        "items": items.tolist(),
        "ratings": scores.tolist(),
        "scores": unclipped.tolist(),
    }
    assert np.all(np.diff(unclipped) <= 0)
    seen = {7 + 2 * c for r, c in zip(ratings.rows, ratings.cols) if 10 + 3 * r == 13}
    assert seen and not seen & set(shown["items"])
    assert main(["recommend", str(model_file), "--user", "13", "-n", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and lines[1].split()[1] == str(items[0])


def test_recommend_unknown_user_and_bad_input(fitted, tmp_path, capsys):
    _, model_file, _ = fitted
    assert main(["recommend", str(model_file), "--user", "11", "-n", "2"]) == 0  # 11 is not 10 + 3r
    assert "user 11 is not in" in capsys.readouterr().err
    assert main(["recommend", str(model_file), "--user", "ann"]) == 2
    assert "--user must be an integer id" in capsys.readouterr().err
    old = tmp_path / "old.npz"
    np.savez(old, user_factors=np.zeros((2, 2)), item_factors=np.zeros((2, 2)))
    assert main(["recommend", str(old), "--user", "13"]) == 2
    err = capsys.readouterr().err
    assert "no format version" in err and "Traceback" not in err


def test_factorize_patience_without_test_set_uses_a_validation_fraction(fitted, tmp_path, capsys):
    data, _, ratings = fitted
    trace = tmp_path / "t.csv"
    assert (
        main(
            [
                "factorize",
                str(data),
                "--workers",
                "0",
                "--rank",
                "3",
                "--blocks",
                "2",
                "--threads",
                "1",
                "--max-cycles",
                "6",
                "--patience",
                "2",
                "--validation-fraction",
                "0.2",
                "--trace",
                str(trace),
                "-q",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "validation RMSE" in out and "reg " in out and "eta " in out
    heldout = [float(line.split(",")[4]) for line in trace.read_text().splitlines()[1:]]
    assert np.isfinite(heldout).all()


def test_progress_bar_shows_limits_and_best_validation():
    stream = io.StringIO()
    progress = Progress(10, 4.0, stream=stream, bar=True)
    for cycle, (seconds, heldout) in enumerate([(0.0, 1.2), (1.0, 0.9), (3.0, 0.95)]):
        progress(
            dict(
                cycle=cycle,
                inner=3 * cycle,
                time_s=seconds,
                train_rmse=1.0,
                validation_rmse=heldout,
                objective=1.0,
            )
        )
    assert (
        progress.fraction(dict(cycle=2, time_s=3.0)) == 0.75
    )  # time is the nearer limit: 3/4 > 2/10
    progress.close()
    text = stream.getvalue()
    assert "cycle 2/10" in text and "optimization 3.00/4 s" in text and "elapsed" in text
    assert "best validation RMSE 0.9000 (cycle 1)" in text


def test_progress_lines_when_not_a_terminal():
    stream = io.StringIO()
    progress = Progress(5, None, stream=stream)
    progress(
        dict(
            cycle=1,
            inner=3,
            time_s=0.5,
            train_rmse=1.0,
            validation_rmse=float("nan"),
            objective=2.0,
        )
    )
    progress.close()
    assert (
        stream.getvalue().startswith("cycle    1/5  inner      3")
        and "best" not in stream.getvalue()
    )
