"""Outputs under bad conditions: exact paths, refused directories and formats, a full disk; the outputs are replaced as a set or kept."""

from __future__ import annotations

import numpy as np
import pytest
from bad_input_corpus import (
    fail_midway,
    refused,
    run,
)

pytestmark = pytest.mark.timeout(120)


def plot_partition(corpus_dir, target) -> list:
    """Return the arguments of `hamsi partition` on the corpus' u.data with STRATA, B = 2, --plot target."""
    return [
        "partition",
        corpus_dir / "u.data",
        "--partitioner",
        "strata",
        "-B",
        "2",
        "--plot",
        target,
    ]


def test_partition_plot_without_extension_writes_exactly_that_path(corpus_dir, tmp_path, capsys):
    target = tmp_path / "picture"
    code, out, err = run(
        plot_partition(corpus_dir, target),
        capsys,
    )
    assert code == 0 and f"picture written to {target}\n" in out
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["picture"]


@pytest.mark.parametrize(
    "target,says",
    [
        ("{tmp}", "is a directory"),
        ("{tmp}/p.xyz", "unknown picture format"),
        ("{tmp}/missing/p.png", "cannot write there"),
    ],
)
def test_partition_plot_refuses_directories_and_unknown_formats(
    corpus_dir, tmp_path, capsys, target, says
):
    target = target.format(tmp=tmp_path)
    refused(
        plot_partition(corpus_dir, target),
        capsys,
        f"--plot {target}",
        says,
    )
    assert not list(tmp_path.glob("*.png"))


def test_partition_plot_on_a_full_disk_keeps_the_old_picture(
    corpus_dir, tmp_path, capsys, monkeypatch
):
    from matplotlib.figure import Figure

    def write_part(args, kwargs):
        with open(args[1], "wb") as handle:
            handle.write(b"\x89PNG half")

    monkeypatch.setattr(Figure, "savefig", fail_midway(write_part))
    target = tmp_path / "p.png"
    target.write_bytes(b"old picture")
    refused(
        plot_partition(corpus_dir, target),
        capsys,
        f"--plot {target}",
        "No space left on device",
    )
    assert target.read_bytes() == b"old picture" and sorted(p.name for p in tmp_path.iterdir()) == [
        "p.png"
    ]


def test_factorize_replaces_its_outputs_as_a_set(corpus_dir, tmp_path, capsys, monkeypatch):
    """The trace is written first; --out then fails on a full disk: the old trace must survive."""

    def write_part(args, kwargs):
        args[0].write(b"PK half")

    monkeypatch.setattr(np, "savez", fail_midway(write_part))
    trace, out, plot = tmp_path / "trace.csv", tmp_path / "model.npz", tmp_path / "run.png"
    for path in (trace, out, plot):
        path.write_bytes(b"old " + path.name.encode())
    refused(
        [
            "factorize",
            corpus_dir / "u.data",
            "--workers",
            "0",
            "-q",
            "--rank",
            "2",
            "--threads",
            "1",
            "--max-cycles",
            "2",
            "--trace",
            trace,
            "--out",
            out,
            "--plot",
            plot,
        ],
        capsys,
        f"--out {out}",
        "No space left on device",
    )
    for path in (trace, out, plot):
        assert path.read_bytes() == b"old " + path.name.encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz", "run.png", "trace.csv"]


def test_data_convert_keeps_real_timestamps(corpus_dir, tmp_path, capsys):
    source = tmp_path / "u.data"
    lines = [line.split("\t") for line in (corpus_dir / "u.data").read_text().splitlines()]
    times = [str(978300760 + 37 * k * k) for k in range(len(lines))]
    source.write_text("".join(f"{u}\t{i}\t{r}\t{t}\n" for (u, i, r, _), t in zip(lines, times)))
    target = tmp_path / "ratings.csv"
    code, _, err = run(["data", "convert", source, target], capsys)
    assert code == 0 and err == ""
    written = [line.split(",") for line in target.read_text().splitlines()[1:]]
    assert [row[3] for row in written] == times
    assert [row[:2] for row in written] == [[u, i] for u, i, _, _ in lines]
