"""Bad model files: missing or malformed entries, object arrays, a zip bomb, sizes beyond memory; one line naming the entry, exit 2."""

from __future__ import annotations

import json
import time
import tracemalloc
import zipfile

import numpy as np
import pytest
from bad_input_corpus import model_contents, refused, run

pytestmark = pytest.mark.timeout(120)


MALFORMED = {
    "missing user_ids": "'user_ids'",
    "missing item_factors": "'item_factors'",
    "missing seen_indptr": "'seen_indptr'",
    "missing params": "'params'",
    "user_factors shape": "'user_factors'",
    "item_factors NaN": "'item_factors'",
    "user_bias strings": "'user_bias'",
    "params not JSON": "'params'",
    "rank not an integer": "'rank_'",
    "user_ids repeated": "'user_ids'",
    "seen_items out of range": "'seen_items'",
    "format_version text": "'format_version'",
    "global_mean_ missing": "'global_mean_'",
}


def malformed(contents: dict, name: str):
    contents = dict(contents)
    if name == "missing user_ids":
        del contents["user_ids"]
    elif name == "missing item_factors":
        del contents["item_factors"]
    elif name == "missing seen_indptr":
        del contents["seen_indptr"]
    elif name == "missing params":
        del contents["params"]
    elif name == "user_factors shape":
        contents["user_factors"] = contents["user_factors"][:, :1].copy()
    elif name == "item_factors NaN":
        contents["item_factors"] = contents["item_factors"].copy()
        contents["item_factors"][0, 0] = np.nan
    elif name == "user_bias strings":
        contents["user_bias"] = contents["user_bias"].astype(str)
    elif name == "params not JSON":
        contents["params"] = np.array("{rank: 2")
    elif (
        name == "rank not an integer"
    ):  # the fitted rank_ sizes the arrays (params' rank may be "auto")
        fitted = json.loads(str(contents["fitted"]))
        contents["fitted"] = np.array(json.dumps(dict(fitted, rank_="two")))
    elif name == "user_ids repeated":
        contents["user_ids"] = np.zeros_like(contents["user_ids"])
    elif name == "seen_items out of range":
        contents["seen_items"] = contents["seen_items"] + 10_000
    elif name == "format_version text":
        contents["format_version"] = np.array("one")
    elif name == "global_mean_ missing":
        fitted = json.loads(str(contents["fitted"]))
        del fitted["global_mean_"]
        contents["fitted"] = np.array(json.dumps(fitted))
    return contents


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_model_is_refused_naming_the_entry(corpus_dir, tmp_path, capsys, case):
    path = tmp_path / "model.npz"
    np.savez(path, **malformed(model_contents(corpus_dir), case))
    line = refused(["recommend", path, "--user", "1"], capsys, path, MALFORMED[case])
    assert "rank" in line or "malformed" in line


def test_object_array_in_a_model_is_refused(corpus_dir, tmp_path, capsys):
    path = tmp_path / "model.npz"
    contents = model_contents(corpus_dir)
    contents["user_ids"] = np.array(
        [1, "a", None] + [0] * (contents["user_ids"].size - 3), dtype=object
    )
    np.savez(path, **contents)  # saving objects pickles them; loading must not
    refused(["recommend", path, "--user", "1"], capsys, path, "'user_ids'", "Python objects")


def write_zero_member(archive: zipfile.ZipFile, name: str, shape: tuple, compression: int) -> None:
    """Add name.npy: an npy header declaring float64 `shape` and that many zero bytes, streamed."""
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    info = zipfile.ZipInfo(f"{name}.npy")
    info.compress_type = compression
    with archive.open(info, "w", force_zip64=True) as member:
        np.lib.format.write_array_header_1_0(member, header)
        chunk = bytes(1 << 22)
        left = int(np.prod(shape)) * 8
        while left:
            member.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))


@pytest.mark.alone  # a wall-time bound
def test_zip_bomb_model_is_refused_quickly_without_allocating(corpus_dir, tmp_path, capsys):
    """A 120 MB all-zero user_factors deflated to about 120 KB (a bomb of a few MB once took gigabytes)."""
    path = tmp_path / "bomb.npz"
    contents = model_contents(corpus_dir)
    with zipfile.ZipFile(path, "w") as archive:
        for name, value in contents.items():
            if name != "user_factors":
                with archive.open(f"{name}.npy", "w") as member:
                    np.lib.format.write_array(member, value, allow_pickle=False)
        write_zero_member(archive, "user_factors", (7_500_000, 2), zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 2_000_000
    tracemalloc.start()
    started = time.perf_counter()
    refused(["recommend", path, "--user", "1"], capsys, path, "'user_factors'", "zip bomb")
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 5 and peak < 20_000_000


def test_stored_member_shorter_than_its_header_declares(corpus_dir, tmp_path, capsys):
    path = tmp_path / "short.npz"
    contents = model_contents(corpus_dir)
    with zipfile.ZipFile(path, "w") as archive:
        for name, value in contents.items():
            with archive.open(f"{name}.npy", "w") as member:
                if name == "user_factors":  # a header claiming 10^9 x 2 over 16 bytes of data
                    np.lib.format.write_array_header_1_0(
                        member, {"descr": "<f8", "fortran_order": False, "shape": (10**9, 2)}
                    )
                    member.write(bytes(16))
                else:
                    np.lib.format.write_array(member, value, allow_pickle=False)
    refused(["recommend", path, "--user", "1"], capsys, path, "'user_factors'", "(1000000000, 2)")


def test_consistent_model_larger_than_memory_is_refused(corpus_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("hamsi.limits.available_bytes", lambda: 1000)
    refused(
        ["recommend", corpus_dir / "model.npz", "--user", "1"],
        capsys,
        corpus_dir / "model.npz",
        "needs about",
    )


def test_valid_model_still_recommends(corpus_dir, capsys):
    code, out, err = run(
        ["recommend", corpus_dir / "model.npz", "--user", "1", "-n", "3", "--json"], capsys
    )
    assert code == 0 and len(json.loads(out)["items"]) == 3
