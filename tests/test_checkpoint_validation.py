"""A checkpoint is checked whole before any work: crafted files are one line naming the file and entry."""

import json
import os
import stat
import tracemalloc
import zipfile

import numpy as np
import pytest
from helpers import checkpoint_state

from cluster import checkpoint as ckpt
from hamsi.cli import main
from hamsi.errors import InputError


def saved(tmp_path, name="ckpt", **changes) -> tuple[str, dict]:
    """Return (directory, state) of a real checkpoint of checkpoint_state(**changes)."""
    state = checkpoint_state(**changes)
    directory = tmp_path / name
    ckpt.save(directory, **state)
    return str(directory), state


def rewrite(directory, arrays=None, meta=None, fingerprint=None) -> str:
    """Replace entries of DIR/state.npz (arrays by name; meta / fingerprint as JSON edits); return the file."""
    path = os.path.join(directory, ckpt.FILENAME)
    with np.load(path) as data:
        entries = {k: data[k] for k in data.files}
    for key, edit in ((ckpt.META, meta), (ckpt.FINGERPRINT, fingerprint)):
        if edit is not None:
            value = edit(json.loads(entries[key].tobytes()))
            text = value if isinstance(value, str) else json.dumps(value)
            entries[key] = np.frombuffer(text.encode(), dtype=np.uint8)
    entries.update(arrays or {})
    np.savez(path, **entries)
    return path


def field(meta_json, *names):
    """Return the JSON fields of the object at meta.names[0].names[1]... (as _Encoder wrote it)."""
    node = meta_json["dict"]
    for name in names:
        node = node[name]["fields"]
    return node


def stepper_lbfgs_is_an_evaluation(meta):
    field(meta, "stepper")["lbfgs"] = {
        "object": "Evaluation",
        "fields": {"train": 1.0, "objective": 1.0, "heldout": 1.0, "time_s": 0.0, "seconds": 0.0},
    }
    return meta


def stepper_n_subsets(value):
    def edit(meta):
        field(meta, "stepper")["n_subsets"] = value
        return meta

    return edit


CRAFTED = {
    "lbfgs is an Evaluation": (dict(meta=stepper_lbfgs_is_an_evaluation), "stepper.lbfgs"),
    "meta nested 200,000 deep": (dict(meta=lambda _: "[" * 200_000 + "]" * 200_000), "meta"),
    "x of 10 for 11 parameters": (dict(arrays={"x": np.zeros(10)}), "'x'"),
    "NaN in x": (dict(arrays={"x": np.full(11, np.nan)}), "'x'"),
    "stepper n_subsets 1e9": (dict(meta=stepper_n_subsets(1e9)), "stepper.n_subsets"),
    "stepper n_subsets 10**9": (dict(meta=stepper_n_subsets(10**9)), "stepper.n_subsets"),
    "fingerprint n_subsets 10**9": (
        dict(fingerprint=lambda f: dict(f, n_subsets=10**9)),
        "n_subsets",
    ),
    "S of the wrong memory": (dict(arrays={"S": np.zeros((3, 11))}), "'S'"),
    "a string in the trace": (
        dict(meta=lambda m: (m["dict"]["trace"].append([0, 0, "x", 1, 1, 1]), m)[1]),
        "trace[2]",
    ),
    "an unknown stepper field": (
        dict(meta=lambda m: (field(m, "stepper").update(extra=1), m)[1]),
        "extra",
    ),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_checkpoint_is_refused_naming_the_file_and_the_entry(tmp_path, case):
    changes, entry = CRAFTED[case]
    directory, state = saved(tmp_path)
    path = rewrite(directory, **changes)
    with pytest.raises(InputError) as caught:
        ckpt.check(directory)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and entry in message and "\n" not in message
    with pytest.raises(InputError, match="not a hamsi checkpoint"):
        ckpt.load(directory, state["fingerprint"])


def bomb(directory, megabytes: int) -> str:
    """Add to DIR/state.npz a member declaring `megabytes` MB of float64 zeros, deflated; return the file."""
    path = os.path.join(directory, ckpt.FILENAME)
    count = megabytes << 17  # float64 values
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("bomb.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(
                member, {"descr": "<f8", "fortran_order": False, "shape": (count,)}
            )
            zeros = bytes(1 << 20)
            for _ in range(megabytes):
                member.write(zeros)
    return path


def test_a_checkpoint_zip_bomb_is_refused_from_its_headers_in_little_memory(tmp_path):
    directory, state = saved(tmp_path)
    path = bomb(directory, 512)
    assert os.path.getsize(path) < 4 << 20  # half a gigabyte in about 0.5 MB
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="zip bomb") as caught:
            ckpt.load(directory, state["fingerprint"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100 << 20
    assert str(caught.value).startswith(f"{path}: entry 'bomb'")


def test_every_crafted_checkpoint_stops_the_cli_with_one_line_and_exit_2_before_any_work(
    tmp_path, capsys, monkeypatch
):
    def no_work(*args, **kwargs):
        raise AssertionError("work started before the checkpoint was checked")

    monkeypatch.setattr("hamsi.data.readers.load_ratings", no_work)
    monkeypatch.setattr("cluster.estimator.local_client", no_work)
    cases = dict(CRAFTED, **{"zip bomb": (None, "'bomb'")})
    for n, (case, (changes, entry)) in enumerate(sorted(cases.items())):
        directory, _ = saved(tmp_path, f"c{n}")
        path = bomb(directory, 64) if changes is None else rewrite(directory, **changes)
        code = main(
            ["factorize", str(tmp_path / "ratings.csv"), "--workers", "1", "--resume", directory]
        )
        err = capsys.readouterr().err
        assert code == 2, case
        assert err.count("\n") == 1 and path in err and entry in err, (case, err)


def test_a_good_checkpoint_passes_and_keeps_every_bit(tmp_path):
    directory, state = saved(tmp_path)
    ckpt.check(directory)
    arrays, meta = ckpt.load(directory, state["fingerprint"])
    for name, array in state["arrays"].items():
        assert np.array_equal(arrays[name], array)
    stepper = meta["stepper"]
    assert np.array_equal(stepper.cycle(2), state["meta"]["stepper"].cycle(2))
    assert np.array_equal(stepper.lbfgs.sy, state["meta"]["stepper"].lbfgs.sy)


def test_checkpoints_and_model_files_are_owner_only_whatever_the_umask(tmp_path, tiny_ratings):
    from hamsi.data.synth import make_ratings
    from hamsi.data.writers import write_ratings
    from hamsi.estimator import MatrixFactorizer

    write_ratings(make_ratings(users=20, items=15, ratings=120, seed=0), tmp_path / "r.csv")
    old = os.umask(0o022)
    try:
        directory, _ = saved(tmp_path)
        model = MatrixFactorizer(rank=2, search=False, max_cycles=2, random_state=0)
        model.fit(tiny_ratings).save(tmp_path / "model.npz")
        outputs = ["--out", str(tmp_path / "cli.npz"), "--trace", str(tmp_path / "trace.csv")]
        flags = ["--workers", "0", "--rank", "2", "--max-cycles", "2", "-q", *outputs]
        assert main(["factorize", str(tmp_path / "r.csv"), *flags]) == 0
    finally:
        os.umask(old)
    for path in (
        os.path.join(directory, ckpt.FILENAME),
        tmp_path / "model.npz",
        tmp_path / "cli.npz",
    ):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    # the trace, written in the same set, keeps the umask's permissions
    assert stat.S_IMODE(os.stat(tmp_path / "trace.csv").st_mode) == 0o644


@pytest.mark.parametrize(
    "params, entry",
    [
        ({"rank": 1e308}, "'rank'"),
        ({"__class__": "os.system"}, "'__class__'"),
        ({"biases": "yes"}, "'biases'"),
        ({"schedule": "fast"}, "'schedule'"),
        ({"memory": [5]}, "'memory'"),
    ],
)
def test_a_model_files_params_are_validated_on_load(tmp_path, tiny_ratings, capsys, params, entry):
    from hamsi.estimator import MatrixFactorizer

    path = tmp_path / "model.npz"
    MatrixFactorizer(rank=2, search=False, max_cycles=2, random_state=0).fit(tiny_ratings).save(
        path
    )
    with np.load(path) as data:
        entries = {k: data[k] for k in data.files}
    entries["params"] = np.array(json.dumps(dict(json.loads(str(entries["params"])), **params)))
    np.savez(path, **entries)
    with pytest.raises(InputError) as caught:
        MatrixFactorizer.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: malformed model: ") and entry in message
    assert main(["recommend", str(path), "--user", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and entry in err


def test_the_api_checks_resume_before_starting_a_cluster(tmp_path, tiny_ratings, monkeypatch):
    from cluster.estimator import DaskMatrixFactorizer

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started before the checkpoint was checked")

    monkeypatch.setattr("cluster.estimator.local_client", no_cluster)
    directory, _ = saved(tmp_path)
    path = rewrite(directory, arrays={"x": np.full(11, np.inf)})
    with pytest.raises(InputError, match=f"^{path}: .*'x'.*NaN or inf"):
        DaskMatrixFactorizer(rank=2, search=False, resume=directory).fit(tiny_ratings)


def test_a_model_refused_by_its_writer_names_the_output_flag_not_a_temporary_file(tmp_path):
    from hamsi.cli_io import write_as_set
    from hamsi.errors import DivergenceError
    from hamsi.model_io import write_model

    out = tmp_path / "model.npz"

    def diverged(temporary):
        write_model(temporary, {}, {}, {"user_factors": np.full((2, 2), np.nan)})

    with pytest.raises(DivergenceError) as caught:
        write_as_set({"--out": (out, diverged)}, private=("--out",))
    assert str(caught.value).startswith(f"--out {out}: not written") and ".part" not in str(
        caught.value
    )
    assert not list(tmp_path.iterdir())
