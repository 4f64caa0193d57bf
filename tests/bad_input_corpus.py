"""Shared by the bad-input tests: the CLI run in process, the one-line check, the corpus folder."""

from __future__ import annotations

import bz2
import errno
import gzip
import lzma
import os

import numpy as np

from hamsi.cli import main
from hamsi.data.writers import write_ratings

COMPRESSORS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}


def run(argv, capsys):
    """Return (exit code, stdout, stderr) of the CLI run in process."""
    try:
        code = main([str(arg) for arg in argv])
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(err: str, *names) -> str:
    """Assert stderr is one line without a traceback that names every one of `names`; return it."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0]


def refused(argv, capsys, *names, code=2) -> str:
    """Run argv, assert it exits `code` with one line naming `names`; return the line."""
    got, _, err = run(argv, capsys)
    assert got == code, err
    return assert_one_line(err, *names)


def write_corpus(folder, ratings):
    """Write rating files in every format, a numeric CSV, a labelled CSV and a fitted model into folder."""
    for name in ("u.data", "ratings.dat", "ratings.csv", "matrix.txt"):
        write_ratings(ratings, folder / name)
    rows = [
        f"{ratings.user_ids[r]},{ratings.item_ids[c]},{v:g}"
        for r, c, v in zip(ratings.rows, ratings.cols, ratings.values)
    ]
    (folder / "plain.csv").write_text("user,item,rating\n" + "\n".join(rows) + "\n")
    (folder / "plain.tsv").write_text("\n".join(row.replace(",", "\t") for row in rows) + "\n")
    X = np.random.default_rng(0).standard_normal((60, 4))
    np.savetxt(folder / "numeric.csv", X, delimiter=",")
    labelled = np.column_stack([X, (X[:, 0] > 0).astype(float)])
    np.savetxt(folder / "labelled.csv", labelled, delimiter=",")
    assert (
        main(
            [
                "factorize",
                str(folder / "u.data"),
                "--workers",
                "0",
                "--rank",
                "2",
                "--blocks",
                "2",
                "--threads",
                "1",
                "--max-cycles",
                "3",
                "--out",
                str(folder / "model.npz"),
                "-q",
            ]
        )
        == 0
    )
    return folder


def model_contents(folder) -> dict:
    """Return the arrays of the corpus's fitted model file, by name."""
    with np.load(folder / "model.npz", allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def fail_midway(write_part):
    """Return a writer that writes some bytes with write_part(target) and then hits a full disk."""

    def writer(*args, **kwargs):
        write_part(args, kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return writer


def damaged(folder, tmp_path, name: str, suffix: str, damage: str):
    """Write folder/name compressed with `suffix`, then cut in half or with a flipped byte; return the path."""
    packed = COMPRESSORS[suffix]((folder / name).read_bytes())
    if damage == "truncated":
        packed = packed[: len(packed) // 2]
    else:
        middle = bytearray(packed)
        for k in range(len(middle) // 3, len(middle) // 3 + 8):
            middle[k] ^= 0xA5
        packed = bytes(middle)
    path = tmp_path / f"{name}{suffix}"
    path.write_bytes(packed)
    return path
