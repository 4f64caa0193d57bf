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

from hamsi.atomic import atomic_output
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
    """Rebuilds what _Encoder wrote; anything else in the file is refused naming it."""

    def __init__(self, path: str, arrays: dict):
        self.path, self.arrays, self.classes = path, arrays, _state_classes()

    def refuse(self, what: str):
        raise InputError(f"{self.path}: not a hamsi checkpoint ({what})")

    def value(self, obj):
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, list):
            return [self.value(v) for v in obj]
        if not (isinstance(obj, dict) and len(obj) in (1, 2)):
            self.refuse(f"unexpected entry {str(obj)[:60]!r}")
        if "tuple" in obj and isinstance(obj["tuple"], list):
            return tuple(self.value(v) for v in obj["tuple"])
        if "dict" in obj and isinstance(obj["dict"], dict):
            return {k: self.value(v) for k, v in obj["dict"].items()}
        if "array" in obj:
            key = f"{META_ARRAY}{obj['array']}"
            if key not in self.arrays:
                self.refuse(f"missing array {key}")
            return self.arrays[key]
        if "generator" in obj:
            return self.generator(self.value(obj["generator"]))
        if "object" in obj and isinstance(obj.get("fields"), dict):
            cls = self.classes.get(obj["object"])
            if cls is None:
                self.refuse(f"unknown object {str(obj['object'])[:40]!r}")
            instance = object.__new__(cls)  # fields are set, no constructor or method runs
            instance.__dict__.update({k: self.value(v) for k, v in obj["fields"].items()})
            return instance
        self.refuse(f"unexpected entry {str(obj)[:60]!r}")

    def generator(self, state):
        kind = BIT_GENERATORS.get(state.get("bit_generator")) if isinstance(state, dict) else None
        if kind is None:
            self.refuse("unknown random generator")
        bits = kind()
        try:
            bits.state = state
        except (TypeError, ValueError, KeyError) as exc:
            self.refuse(f"bad random generator state: {exc}")
        return np.random.Generator(bits)


def save(directory, *, arrays: dict, meta: dict, fingerprint: dict) -> None:
    """Write DIR/state.npz: the arrays, the small state as JSON + plain arrays, the fingerprint.

    A temp file is renamed into place, so a crash leaves the previous checkpoint intact.
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
    with atomic_output(os.path.join(directory, FILENAME), "wb") as handle:
        np.savez(handle, **out)


def _read(path: str) -> dict:
    """Return every array of the checkpoint file; InputError naming it when it is not a plain .npz."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise InputError(
                    f"{path}: not a hamsi checkpoint (a single array, not an .npz archive)"
                )
            return {k: data[k] for k in data.files}
    except InputError:
        raise
    except ValueError as exc:  # object arrays need pickle: refused
        raise InputError(f"{path}: not a hamsi checkpoint ({exc})") from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise InputError(
            f"{path}: cannot read the checkpoint ({type(exc).__name__}: {exc})"
        ) from None


def _json_entry(path: str, data: dict, key: str):
    """Return the JSON value stored as UTF-8 bytes under `key`; InputError naming the file otherwise."""
    entry = data.get(key)
    if entry is None or entry.dtype != np.uint8 or entry.ndim != 1:
        raise InputError(f"{path}: not a hamsi checkpoint (no {key} entry)")
    try:
        return json.loads(entry.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a hamsi checkpoint ({key} is not JSON: {exc})") from None


def load(directory, fingerprint: dict) -> tuple[dict, dict]:
    """Return (arrays, meta) saved in DIR; raise InputError when it belongs to a different run setup."""
    path = os.path.join(directory, FILENAME)
    if not os.path.exists(path):
        raise InputError(f"{path}: no checkpoint to resume from")
    data = _read(path)
    saved = _json_entry(path, data, FINGERPRINT)
    if not isinstance(saved, dict):
        raise InputError(f"{path}: not a hamsi checkpoint (the fingerprint is not a mapping)")
    if saved != json.loads(json.dumps(fingerprint, sort_keys=True)):
        diff = sorted(
            k for k in set(saved) | set(fingerprint) if saved.get(k) != fingerprint.get(k)
        )
        raise InputError(
            f"{path}: checkpoint was written for a different run (differs in {', '.join(diff)})"
        )
    meta = _Decoder(path, data).value(_json_entry(path, data, META))
    if not isinstance(meta, dict):
        raise InputError(f"{path}: not a hamsi checkpoint (the state is not a mapping)")
    arrays = {
        k: v
        for k, v in data.items()
        if k not in (META, FINGERPRINT) and not k.startswith(META_ARRAY)
    }
    return arrays, meta
