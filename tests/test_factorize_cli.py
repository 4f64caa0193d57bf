"""`hamsi factorize --workers 0` (the in-process engine): outputs (trace CSV, factors, plot), progress lines, and clear errors."""

import numpy as np
import pytest

from hamsi.cli import main
from hamsi.data.synth import make_ratings


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    ratings = make_ratings(users=50, items=70, ratings=1200, rank=3, seed=2)
    path = tmp_path_factory.mktemp("data") / "u.data"
    with open(path, "w") as handle:
        for row, col, value in zip(ratings.rows, ratings.cols, ratings.values):
            handle.write(f"{row + 1}\t{col + 1}\t{int(value)}\t0\n")
    return path


def test_factorize_writes_trace_factors_and_plot(data_file, tmp_path, capsys):
    trace, out, plot = (
        tmp_path / "trace.csv",
        tmp_path / "factors.npz",
        tmp_path / "convergence.png",
    )
    code = main(
        [
            "factorize",
            str(data_file),
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
            "--test-fraction",
            "0.2",
            "--reg",
            "0.5",
            "--eta",
            "0.2",
            "--trace",
            str(trace),
            "--out",
            str(out),
            "--plot",
            str(plot),
        ]
    )
    assert code == 0
    lines = trace.read_text().splitlines()
    assert lines[0] == "cycle,inner,time_s,train_rmse,test_rmse,objective"
    assert len(lines) == 1 + 7
    last = lines[-1].split(",")
    assert last[0] == "6" and last[1] == "18" and np.isfinite(float(last[4]))
    factors = np.load(out)
    assert factors["user_factors"].shape == (50, 3) and factors["item_factors"].shape == (70, 3)
    assert plot.stat().st_size > 1000
    captured = capsys.readouterr()
    assert (
        captured.err.count("\ncycle ") + captured.err.startswith("cycle ") == 7
    )  # a line per cycle
    assert "reached max_cycles" in captured.out
    assert not list(tmp_path.glob(".tmp-*"))  # atomic writes leave no temporaries


def test_mbgd_and_stoc(data_file, tmp_path):
    trace = tmp_path / "t.csv"
    assert (
        main(
            [
                "factorize",
                str(data_file),
                "--workers",
                "0",
                "--rank",
                "2",
                "--reg",
                "1",
                "--algorithm",
                "mbgd",
                "--schedule",
                "stoc",
                "--blocks",
                "2",
                "--threads",
                "1",
                "--max-cycles",
                "3",
                "--trace",
                str(trace),
                "-q",
            ]
        )
        == 0
    )
    assert len(trace.read_text().splitlines()) == 5


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--rank", "0"], "--rank must be an integer >= 1"),
        (["--rank", "2", "--partitioner", "zigzag"], "unknown --partitioner 'zigzag'"),
        (["--blocks", "0"], "--blocks must be an integer >= 1"),
        (["--patience", "0"], "--patience must be an integer >= 1"),
        (
            ["--validation-fraction", "1.5"],
            "--validation-fraction must be a finite number in [0, 1)",
        ),
        (["--reg", "-1"], "--reg must be a finite number >= 0 or 'auto'"),
        (["--rank", "2", "--max-time", "-3"], "--max-time"),
        (["--rank", "2", "--workers", "-1"], "--workers must be >= 0"),
        (["--rank", "2", "--test-fraction", "1.5"], "--test-fraction"),
    ],
)
def test_bad_arguments_give_one_clear_line(data_file, extra, message, capsys):
    assert main(["factorize", str(data_file), "--workers", "0"] + extra) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_empty_ratings_file(tmp_path, capsys):
    empty = tmp_path / "empty.data"
    empty.write_text("")
    assert main(["factorize", str(empty), "--workers", "0", "--rank", "2"]) == 2
    assert "error" in capsys.readouterr().err


def test_diverged_run_exits_1_and_writes_nothing(data_file, tmp_path, capsys):
    outputs = {
        "--trace": tmp_path / "t.csv",
        "--out": tmp_path / "m.npz",
        "--plot": tmp_path / "p.png",
    }
    code = main(
        [
            "factorize",
            str(data_file),
            "--workers",
            "0",
            "--rank",
            "3",
            "--blocks",
            "2",
            "--threads",
            "1",
            "--eta",
            "1e-12",
            "--no-safeguard",
            "--max-cycles",
            "200",
            "-q",
        ]
        + [part for flag, path in outputs.items() for part in (flag, str(path))]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "error: diverged: the objective became" in err and "Traceback" not in err
    assert not any(path.exists() for path in outputs.values()) and not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["--out", "--trace", "--plot"])
def test_unwritable_output_fails_before_the_fit_naming_the_users_path(
    data_file, tmp_path, capsys, flag, monkeypatch
):
    import hamsi.estimator

    def no_fit(*args, **kwargs):
        raise AssertionError("the fit started")

    monkeypatch.setattr(hamsi.estimator.MatrixFactorizer, "fit", no_fit)
    blocker = tmp_path / "file"
    blocker.write_text("")
    target = blocker / "result.out"  # a path under a regular file: not writable, even for root
    code = main(["factorize", str(data_file), "--workers", "0", flag, str(target)])
    err = capsys.readouterr().err
    assert code == 2 and f"{flag} {target}: cannot write there" in err and ".part" not in err
    assert main(["factorize", str(data_file), "--workers", "0", flag, str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_duplicates_flag_merges_and_the_error_names_it(tmp_path, capsys):
    path = tmp_path / "dup.csv"
    path.write_text("user,item,rating\n1,1,4\n1,2,3\n2,1,5\n2,2,2\n1,1,2\n3,1,1\n3,2,4\n")
    assert (
        main(
            [
                "factorize",
                str(path),
                "--workers",
                "0",
                "--rank",
                "1",
                "--reg",
                "1",
                "--max-cycles",
                "2",
                "--threads",
                "1",
                "-q",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "dup.csv:6:" in err and "--duplicates keep-last" in err and "duplicates='" not in err
    assert main(["data", "info", str(path)]) == 2
    assert "--duplicates keep-last" in capsys.readouterr().err
    model_path = tmp_path / "m.npz"
    assert (
        main(
            [
                "factorize",
                str(path),
                "--workers",
                "0",
                "--rank",
                "1",
                "--reg",
                "1",
                "--max-cycles",
                "2",
                "--threads",
                "1",
                "-q",
                "--duplicates",
                "mean",
                "--out",
                str(model_path),
            ]
        )
        == 0
    )
    from hamsi import MatrixFactorizer

    model = MatrixFactorizer.load(model_path)
    assert model._seen_items.size == 6  # the repeated (1, 1) merged into one rating
    assert main(["data", "info", str(path), "--duplicates", "keep-last"]) == 0
    assert "duplicates 1 merged" in capsys.readouterr().out


def test_plot_marks_the_bias_baseline_and_the_chosen_stop(data_file, tmp_path, monkeypatch):
    import hamsi.plots

    drawn = {}
    original = hamsi.plots.plot_convergence

    def spy(traces, path, **kwargs):
        drawn.update(kwargs, traces=traces)
        return original(traces, path, **kwargs)

    monkeypatch.setattr(hamsi.plots, "plot_convergence", spy)
    plot = tmp_path / "c.png"
    assert (
        main(
            [
                "factorize",
                str(data_file),
                "--workers",
                "0",
                "--rank",
                "2",
                "--max-cycles",
                "6",
                "--threads",
                "1",
                "--test-fraction",
                "0.2",
                "--plot",
                str(plot),
                "-q",
            ]
        )
        == 0
    )
    (trace,) = drawn["traces"].values()
    assert drawn["stop_epoch"] == trace.rows[-1][0] and drawn["heldout"] == "test"
    assert plot.read_bytes()[:4] == b"\x89PNG"
