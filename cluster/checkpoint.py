"""Checkpoints: the full run state in one file, written atomically; read back for a bit-exact resume.

state.npz holds plain numeric arrays only: the vectors, and the small state (stepper, stop rules,
trace) as JSON text plus the arrays it refers to. Checkpoints are files users copy between
machines, so reading one never runs code: np.load(allow_pickle=False), and the JSON is rebuilt
into a fixed list of classes (STATE_CLASSES) by setting their fields, never by calling anything
the file names. Python's float repr round-trips, so JSON keeps every bit (inf and nan included).
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from cluster.state_codec import (
    MAX_STATE_DEPTH,
    META,
    META_ARRAY,
    StateDecoder,
    StateEncoder,
    instance_check,
    integer_check,
    number_check,
)
from hamsi.atomic import PRIVATE, atomic_output
from hamsi.errors import InputError
from hamsi.model_io import npz_member_headers, read_npz_member
from hamsi.stepper import Stepper
from hamsi.stop_rules import StopRules

FILENAME = "state.npz"
FINGERPRINT = "fingerprint"
# The small state (the JSON text) of a long run is a few MB (the trace: ~100 bytes per cycle).
MAX_JSON_BYTES = 256 << 20
RUN_META = ("trace", "stepper", "stop", "time_used", "cycles_done")
TRACE_WIDTH = 6  # hamsi.trace.TRACE_COLUMNS


def save(directory, *, arrays: dict, meta: dict, fingerprint: dict) -> None:
    """Write DIR/state.npz: the arrays, the small state as JSON + plain arrays, the fingerprint.

    A temp file is renamed into place, so a crash leaves the previous checkpoint intact; the file
    holds the factors, so it is owner-only (atomic.PRIVATE).
    """
    os.makedirs(directory, exist_ok=True)
    encoder = StateEncoder()
    text = json.dumps(encoder.value(meta))
    out = dict(arrays)
    out.update({f"{META_ARRAY}{i}": a for i, a in enumerate(encoder.arrays)})
    out[META] = np.frombuffer(text.encode(), dtype=np.uint8)
    out[FINGERPRINT] = np.frombuffer(
        json.dumps(fingerprint, sort_keys=True).encode(), dtype=np.uint8
    )
    with atomic_output(os.path.join(directory, FILENAME), "wb", permissions=PRIVATE) as handle:
        np.savez(handle, **out)


def _read(path: str) -> dict:
    """Return every array of the checkpoint file, its members checked before they are inflated.

    The limits are the model loader's (hamsi.model_io.npz_member_headers): no object arrays, each
    member the size its header declares, a bounded compression ratio, the total within memory.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            headers = npz_member_headers(archive, path, "checkpoint")
            return {name: read_npz_member(archive, headers, name) for name in headers}
    except InputError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise InputError(
            f"{path}: cannot read the checkpoint ({type(exc).__name__}: {exc})"
        ) from None


def _json_entry(path: str, data: dict, key: str):
    """Return the JSON value stored as UTF-8 bytes under `key`; InputError naming the file otherwise."""
    entry = data.get(key)
    if entry is None or entry.dtype != np.uint8 or entry.ndim != 1:
        raise InputError(f"{path}: not a hamsi checkpoint (no {key} entry)")
    if entry.size > MAX_JSON_BYTES:
        raise InputError(
            f"{path}: not a hamsi checkpoint (entry {key!r} exceeds {MAX_JSON_BYTES} bytes)"
        )
    try:
        return json.loads(entry.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a hamsi checkpoint ({key} is not JSON: {exc})") from None
    except RecursionError:
        raise InputError(
            f"{path}: not a hamsi checkpoint (entry {key!r} nests deeper than {MAX_STATE_DEPTH} levels)"
        ) from None


def read_checked(directory) -> tuple[dict, dict, dict]:
    """Return (arrays, meta, fingerprint) of DIR/state.npz, every part checked; InputError otherwise.

    The one validation of a checkpoint: the archive's limits, the fingerprint's types and ranges,
    the state's classes, fields and their types, the arrays' shapes against the fingerprint (n_params,
    memory) and their finiteness. Nothing of the run is needed, so callers run it before any work
    (`check`); `load` runs it again and then compares the fingerprint with the run's.
    """
    path = os.path.join(directory, FILENAME)
    if not os.path.exists(path):
        raise InputError(f"{path}: no checkpoint to resume from")
    data = _read(path)
    fingerprint = _json_entry(path, data, FINGERPRINT)
    _check_fingerprint(path, fingerprint)
    try:
        meta = StateDecoder(path, data).value(_json_entry(path, data, META))
    except RecursionError:  # bounded by MAX_STATE_DEPTH; kept for a lowered recursion limit
        raise InputError(
            f"{path}: not a hamsi checkpoint (entry {META!r} nests too deep)"
        ) from None
    arrays = {
        k: v
        for k, v in data.items()
        if k not in (META, FINGERPRINT) and not k.startswith(META_ARRAY)
    }
    _check_run(path, arrays, meta, fingerprint)
    return arrays, meta, fingerprint


def check(directory) -> None:
    """Raise InputError naming the file and the entry unless DIR holds a checkpoint `load` accepts.

    For `--resume` / resume=: called before the data is read or a cluster is started.
    """
    read_checked(directory)


def load(directory, fingerprint: dict) -> tuple[dict, dict]:
    """Return (arrays, meta) saved in DIR; raise InputError when it belongs to a different run setup."""
    path = os.path.join(directory, FILENAME)
    arrays, meta, saved = read_checked(directory)
    if saved != json.loads(json.dumps(fingerprint, sort_keys=True)):
        diff = sorted(
            k for k in set(saved) | set(fingerprint) if saved.get(k) != fingerprint.get(k)
        )
        raise InputError(
            f"{path}: checkpoint was written for a different run (differs in {', '.join(diff)})"
        )
    return arrays, meta


def _check_fingerprint(path: str, fingerprint) -> None:
    """Refuse a fingerprint that is not the driver's: the sizes the arrays are checked against."""
    if not isinstance(fingerprint, dict):
        raise InputError(f"{path}: not a hamsi checkpoint (the fingerprint is not a mapping)")
    sizes = {
        "n_params": integer_check(1),
        "n_functions": integer_check(1),
        "n_shards": integer_check(1),
        "n_subsets": integer_check(1, fingerprint.get("n_functions", 1)),
        "memory": integer_check(0),
        "problem": instance_check(str),
    }
    for name, rule in sizes.items():
        problem = "missing" if name not in fingerprint else rule(fingerprint[name])
        if problem:
            raise InputError(
                f"{path}: not a hamsi checkpoint (entry {FINGERPRINT!r}: {name} is {problem})"
            )


def _check_run(path: str, arrays: dict, meta, fingerprint: dict) -> None:
    """Refuse a state the driver would trip over: missing parts, sizes unlike the fingerprint's, NaN."""
    _check_run_meta(path, meta)
    _check_stepper_sizes(path, meta["stepper"], fingerprint)
    _check_run_arrays(path, arrays, fingerprint["n_params"], fingerprint["memory"])


def _refuse_entry(path: str, entry: str, what: str):
    raise InputError(f"{path}: not a hamsi checkpoint (entry {entry!r}: {what})")


def _check_run_meta(path: str, meta) -> None:
    """Refuse a run state without exactly RUN_META's fields, of their types, or a malformed trace."""
    if not isinstance(meta, dict) or sorted(meta) != sorted(RUN_META):
        keys = sorted(meta) if isinstance(meta, dict) else type(meta).__name__
        _refuse_entry(
            path, META, f"the state holds {str(keys)[:80]}, expected {', '.join(RUN_META)}"
        )
    for name, rule in (
        ("stepper", instance_check(Stepper)),
        ("stop", instance_check(StopRules)),
        ("time_used", number_check(0.0)),
        ("cycles_done", integer_check()),
        ("trace", instance_check(list)),
    ):
        problem = rule(meta[name])
        if problem:
            _refuse_entry(path, META, f"{name} is {problem}")
    for i, row in enumerate(meta["trace"]):
        if not (
            isinstance(row, (list, tuple))
            and len(row) == TRACE_WIDTH
            and not any(number_check(finite=False, nan=True)(v) for v in row)
        ):
            _refuse_entry(
                path, META, f"trace[{i}] is {str(row)[:60]!r}, not a row of {TRACE_WIDTH} numbers"
            )


def _check_stepper_sizes(path: str, stepper, fingerprint: dict) -> None:
    """Refuse a stepper whose sizes (parameters, subsets, memory) differ from the fingerprint's."""
    n, M = fingerprint["n_params"], fingerprint["memory"]
    lbfgs = stepper.lbfgs
    for what, value, expected in (
        ("stepper.n_params", stepper.n_params, n),
        ("stepper.n_subsets", stepper.n_subsets, fingerprint["n_subsets"]),
        ("stepper.memory_size", stepper.memory_size, M),
        ("stepper.lbfgs.memory", lbfgs.memory, M),
        ("stepper.gram's shape", stepper.gram.shape, (2 * M, 2 * M)),
        ("stepper.lbfgs.sy's shape", lbfgs.sy.shape, (M, M)),
        ("stepper.lbfgs.yy's shape", lbfgs.yy.shape, (M, M)),
    ):
        if value != expected:
            _refuse_entry(path, META, f"{what} is {value}, the fingerprint says {expected}")
    if lbfgs._scaled_n is not None and lbfgs._scaled_n.shape != (2 * M, 2 * M):
        _refuse_entry(
            path,
            META,
            f"stepper.lbfgs._scaled_n has shape {lbfgs._scaled_n.shape}, not {(2 * M, 2 * M)}",
        )


def _check_run_arrays(path: str, arrays: dict, n: int, M: int) -> None:
    """Refuse missing x, S without Y (or the reverse), arrays not float64 of their shape, NaN or inf."""
    if "x" not in arrays:
        _refuse_entry(path, "x", "missing")
    if ("S" in arrays) != ("Y" in arrays):
        _refuse_entry(path, "S" if "S" not in arrays else "Y", "missing (S and Y come together)")
    for name, array in arrays.items():
        shape = (M, n) if name in ("S", "Y") else (n,)
        if array.dtype != np.float64 or array.shape != shape:
            _refuse_entry(
                path,
                name,
                f"{array.dtype} of shape {array.shape}; expected float64 of shape {shape}",
            )
        if not np.all(np.isfinite(array)):
            _refuse_entry(path, name, "holds NaN or inf")
