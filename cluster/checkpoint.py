"""Checkpoints: the full run state in one file, written atomically; read back for a bit-exact resume.

state.npz holds plain numeric arrays only: the vectors, and the small state (stepper, stop rules,
trace) as JSON text plus the arrays it refers to. Checkpoints are files users copy between
machines, so reading one never runs code: np.load(allow_pickle=False), and the JSON is rebuilt
into a fixed list of classes (STATE_CLASSES) by setting their fields, never by calling anything
the file names. Python's float repr round-trips, so JSON keeps every bit (inf and nan included).
"""

from __future__ import annotations

import json
import math
import os
import zipfile

import numpy as np

from hamsi.atomic import PRIVATE, atomic_output
from hamsi.errors import InputError

FILENAME = "state.npz"
META = "meta"
FINGERPRINT = "fingerprint"
META_ARRAY = "meta_array_"  # prefix of the arrays the JSON state refers to
# The random generators a stepper may hold (their state is a dict of integers).
BIT_GENERATORS = {"PCG64": np.random.PCG64}


def _state_classes() -> dict:
    """Return {name: class} of the objects a checkpoint's state may contain (and nothing else)."""
    from hamsi.exchange import Evaluation
    from hamsi.lbfgs import LBFGSMemory
    from hamsi.stepper import Stepper
    from hamsi.stop_rules import StopRules

    return {cls.__name__: cls for cls in (Stepper, StopRules, LBFGSMemory, Evaluation)}


# ------------------------------------------------------------------ what a checkpoint may hold
# The run state nests about six levels (meta -> stepper -> lbfgs -> arrays); JSON nested deeper is
# refused before Python's recursion limit could turn it into a RecursionError traceback.
MAX_STATE_DEPTH = 32
# The small state (the JSON text) of a long run is a few MB (the trace: ~100 bytes per cycle).
MAX_JSON_BYTES = 256 << 20
RUN_META = ("trace", "stepper", "stop", "time_used", "cycles_done")
TRACE_WIDTH = 6  # hamsi.trace.TRACE_COLUMNS


def _integer(low: int = 0, high: float = math.inf):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            bound = f">= {low}" if high == math.inf else f"in [{low}, {high}]"
            return f"{value!r:.40}, not an integer {bound}"

    return check


def _number(low: float = -math.inf, finite: bool = True, nan: bool = False):
    """Checker of a real number >= low: finite, or else also +-inf (and NaN when `nan`)."""

    def check(value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{value!r:.40}, not a number"
        if math.isnan(value):
            return None if nan else "NaN"
        if (finite and math.isinf(value)) or value < low:
            return f"{value!r}, not a {'finite ' if finite else ''}number >= {low}"

    return check


def _one_of(*choices):
    return lambda value: None if value in choices else f"{value!r:.40}, not one of {choices}"


def _instance(kind):
    def check(value):
        if not isinstance(value, kind):
            return f"of type {type(value).__name__}, expected {kind.__name__}"

    return check


def _optional(check):
    return lambda value: None if value is None else check(value)


def _matrix(value):
    if not (isinstance(value, np.ndarray) and value.dtype == np.float64 and value.ndim == 2):
        return f"of type {type(value).__name__}, expected a float64 matrix"
    if not np.all(np.isfinite(value)):
        return "a matrix holding NaN or inf"


def _pair_of_counts(value):
    if not (isinstance(value, tuple) and len(value) == 2 and not any(_integer()(v) for v in value)):
        return f"{value!r:.40}, not a pair of counts"


def _state_fields() -> dict:
    """Return {class name: {field: checker}}: every field an object in a checkpoint must have, checked.

    A checker returns None for a good value, else what is wrong with it. Stepper's cleared_pairs
    may be missing (checkpoints written before it: the class default).
    """
    from hamsi.exchange import Evaluation
    from hamsi.lbfgs import LBFGSMemory
    from hamsi.schedules import SCHEDULES
    from hamsi.stepper import METHODS

    count, real = _integer(), _number(nan=True)
    return {
        "Stepper": {
            "method": _one_of(*METHODS),
            "n_subsets": _integer(1),
            "n_params": _integer(1),
            "schedule": _one_of(*SCHEDULES),
            "eta": _number(0.0),
            "gamma": _number(0.0),
            "eta_gd": _number(0.0),
            "safeguard": _instance(bool),
            "memory_size": _integer(1),
            "lbfgs": _instance(LBFGSMemory),
            "schedule_rng": _instance(np.random.Generator),
            "inner": count,
            "have_start": _instance(bool),
            "gram": _matrix,
            "step_scale": _number(0.0),
            "fallbacks": count,
            "cleared_pairs": _pair_of_counts,
            "best_objective": _number(finite=False),
            "good": _optional(_instance(Evaluation)),
        },
        "LBFGSMemory": {
            "memory": _integer(1),
            "sigma": _number(0.0),
            "threshold": _number(0.0),
            "n_accepted": count,
            "n_rejected": count,
            "sy": _matrix,
            "yy": _matrix,
            "_scaled_n": _optional(_matrix),
        },
        "StopRules": {
            "max_epochs": _optional(count),
            "max_time": _optional(_number(0.0, finite=False)),
            "tol": _number(0.0),
            "target": _optional(_number()),
            "patience": _optional(_integer(1)),
            "has_heldout": _instance(bool),
            "eta": _number(0.0),
            "safeguard": _instance(bool),
            "metric": _instance(str),
            "best_heldout": _number(finite=False),
            "best_epoch": _optional(count),
            "new_best": _instance(bool),
            "without_gain": count,
            "previous_objective": _optional(_number(finite=False, nan=True)),
        },
        "Evaluation": {
            "train": real,
            "objective": real,
            "heldout": real,
            "time_s": _number(0.0),
            "seconds": _number(0.0),
        },
    }


OPTIONAL_FIELDS = {"Stepper": ("cleared_pairs",)}


def _check_fields(decoder, cls, fields: dict, where: str) -> None:
    """Refuse (decoder.refuse) an object whose fields are missing, extra or of the wrong type or range."""
    schema = _state_fields()[cls.__name__]
    missing = set(schema) - set(fields) - set(OPTIONAL_FIELDS.get(cls.__name__, ()))
    extra = set(fields) - set(schema)
    if missing or extra:
        wrong = sorted(missing) or sorted(extra)
        decoder.refuse(
            f"{where} ({cls.__name__}) {'lacks' if missing else 'has unknown'} field "
            f"{', '.join(wrong)[:80]}"
        )
    for name, value in fields.items():
        problem = schema[name](value)
        if problem:
            decoder.refuse(f"{where}.{name} is {problem}")


class _Encoder:
    """Turns the run's small state into JSON-ready values and a list of plain arrays."""

    def __init__(self):
        self.classes = _state_classes()
        self.arrays: list[np.ndarray] = []

    def value(self, obj):
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, np.bool_):
            return bool(obj)
        if isinstance(obj, (int, np.integer)):
            return int(obj)
        if isinstance(obj, (float, np.floating)):
            return float(obj)
        if isinstance(obj, list):
            return [self.value(v) for v in obj]
        if isinstance(obj, tuple):
            return {"tuple": [self.value(v) for v in obj]}
        if isinstance(obj, dict):
            if not all(isinstance(k, str) for k in obj):
                raise TypeError("checkpoint state keys must be strings")
            return {"dict": {k: self.value(v) for k, v in obj.items()}}
        if isinstance(obj, np.ndarray):
            self.arrays.append(obj)
            return {"array": len(self.arrays) - 1}
        if isinstance(obj, np.random.Generator):
            return {"generator": self.value(obj.bit_generator.state)}
        name = type(obj).__name__
        if self.classes.get(name) is type(obj):
            return {"object": name, "fields": self.value(vars(obj))["dict"]}
        raise TypeError(f"checkpoint state cannot hold a {type(obj).__name__}")


class _Decoder:
    """Rebuilds what _Encoder wrote; anything else in the file is refused naming it.

    Objects are rebuilt by setting fields, and only the fields STATE_FIELDS lists for their class,
    each of the type (and range) it gives: a state that passes runs the same code a fresh one does.
    """

    def __init__(self, path: str, arrays: dict):
        self.path, self.arrays, self.classes = path, arrays, _state_classes()

    def refuse(self, what: str):
        raise InputError(f"{self.path}: not a hamsi checkpoint (entry {META!r}: {what})")

    def value(self, obj, where: str = "state", depth: int = 0):
        if depth > MAX_STATE_DEPTH:
            self.refuse(f"{where} nests deeper than {MAX_STATE_DEPTH} levels")
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, list):
            return [self.value(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(obj)]
        if not (isinstance(obj, dict) and len(obj) in (1, 2)):
            self.refuse(f"{where} is an unexpected {str(obj)[:60]!r}")
        if "tuple" in obj and isinstance(obj["tuple"], list):
            return tuple(
                self.value(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(obj["tuple"])
            )
        if "dict" in obj and isinstance(obj["dict"], dict):
            return {k: self.value(v, f"{where}.{k}", depth + 1) for k, v in obj["dict"].items()}
        if "array" in obj:
            key = f"{META_ARRAY}{obj['array']}"
            if key not in self.arrays:
                self.refuse(f"{where} refers to a missing array {key}")
            return self.arrays[key]
        if "generator" in obj:
            return self.generator(self.value(obj["generator"], where, depth + 1), where)
        if "object" in obj and isinstance(obj.get("fields"), dict):
            cls = self.classes.get(obj["object"])
            if cls is None:
                self.refuse(f"{where} is an unknown object {str(obj['object'])[:40]!r}")
            fields = {k: self.value(v, f"{where}.{k}", depth + 1) for k, v in obj["fields"].items()}
            _check_fields(self, cls, fields, where)
            instance = object.__new__(cls)  # fields are set, no constructor or method runs
            instance.__dict__.update(fields)
            return instance
        self.refuse(f"{where} is an unexpected {str(obj)[:60]!r}")

    def generator(self, state, where: str):
        kind = BIT_GENERATORS.get(state.get("bit_generator")) if isinstance(state, dict) else None
        if kind is None:
            self.refuse(f"{where} is an unknown random generator")
        bits = kind()
        try:
            bits.state = state
        except (TypeError, ValueError, KeyError, OverflowError) as exc:
            self.refuse(f"{where} is a bad random generator state: {exc}")
        return np.random.Generator(bits)


def save(directory, *, arrays: dict, meta: dict, fingerprint: dict) -> None:
    """Write DIR/state.npz: the arrays, the small state as JSON + plain arrays, the fingerprint.

    A temp file is renamed into place, so a crash leaves the previous checkpoint intact; the file
    holds the factors, so it is owner-only (atomic.PRIVATE).
    """
    os.makedirs(directory, exist_ok=True)
    encoder = _Encoder()
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
    from hamsi.model_io import npz_member_headers, read_npz_member

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
        meta = _Decoder(path, data).value(_json_entry(path, data, META))
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
        "n_params": _integer(1),
        "n_functions": _integer(1),
        "n_shards": _integer(1),
        "n_subsets": _integer(1, fingerprint.get("n_functions", 1)),
        "memory": _integer(0),
        "problem": _instance(str),
    }
    for name, rule in sizes.items():
        problem = "missing" if name not in fingerprint else rule(fingerprint[name])
        if problem:
            raise InputError(
                f"{path}: not a hamsi checkpoint (entry {FINGERPRINT!r}: {name} is {problem})"
            )


def _check_run(path: str, arrays: dict, meta, fingerprint: dict) -> None:
    """Refuse a state the driver would trip over: missing parts, sizes unlike the fingerprint's, NaN."""

    def refuse(entry: str, what: str):
        raise InputError(f"{path}: not a hamsi checkpoint (entry {entry!r}: {what})")

    from hamsi.stepper import Stepper
    from hamsi.stop_rules import StopRules

    if not isinstance(meta, dict) or sorted(meta) != sorted(RUN_META):
        keys = sorted(meta) if isinstance(meta, dict) else type(meta).__name__
        refuse(META, f"the state holds {str(keys)[:80]}, expected {', '.join(RUN_META)}")
    for name, rule in (
        ("stepper", _instance(Stepper)),
        ("stop", _instance(StopRules)),
        ("time_used", _number(0.0)),
        ("cycles_done", _integer()),
        ("trace", _instance(list)),
    ):
        problem = rule(meta[name])
        if problem:
            refuse(META, f"{name} is {problem}")
    for i, row in enumerate(meta["trace"]):
        if not (
            isinstance(row, (list, tuple))
            and len(row) == TRACE_WIDTH
            and not any(_number(finite=False, nan=True)(v) for v in row)
        ):
            refuse(META, f"trace[{i}] is {str(row)[:60]!r}, not a row of {TRACE_WIDTH} numbers")
    n, M = fingerprint["n_params"], fingerprint["memory"]
    stepper = meta["stepper"]
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
            refuse(META, f"{what} is {value}, the fingerprint says {expected}")
    if lbfgs._scaled_n is not None and lbfgs._scaled_n.shape != (2 * M, 2 * M):
        refuse(
            META, f"stepper.lbfgs._scaled_n has shape {lbfgs._scaled_n.shape}, not {(2 * M, 2 * M)}"
        )
    if "x" not in arrays:
        refuse("x", "missing")
    if ("S" in arrays) != ("Y" in arrays):
        refuse("S" if "S" not in arrays else "Y", "missing (S and Y come together)")
    for name, array in arrays.items():
        shape = (M, n) if name in ("S", "Y") else (n,)
        if array.dtype != np.float64 or array.shape != shape:
            refuse(name, f"{array.dtype} of shape {array.shape}; expected float64 of shape {shape}")
        if not np.all(np.isfinite(array)):
            refuse(name, "holds NaN or inf")
