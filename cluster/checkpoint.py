"""Checkpoints: the full run state in one file, written atomically; read back for a bit-exact resume."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np

from hamsi.atomic import atomic_output
from hamsi.errors import InputError

FILENAME = "state.npz"


def save(directory, *, arrays: dict, meta: dict, fingerprint: dict) -> None:
    """Write DIR/state.npz: the arrays, the small pickled state (stepper, stop rules, trace), the fingerprint.

    A temp file is renamed into place, so a crash leaves the previous checkpoint intact.
    """
    os.makedirs(directory, exist_ok=True)
    out = dict(arrays)
    out["meta"] = np.frombuffer(pickle.dumps(meta), dtype=np.uint8)  # pickling keeps every bit
    out["fingerprint"] = np.frombuffer(json.dumps(fingerprint, sort_keys=True).encode(), dtype=np.uint8)
    with atomic_output(os.path.join(directory, FILENAME), "wb") as handle:
        np.savez(handle, **out)


def load(directory, fingerprint: dict) -> tuple[dict, dict]:
    """Return (arrays, meta) saved in DIR; raise InputError when it belongs to a different run setup."""
    path = os.path.join(directory, FILENAME)
    if not os.path.exists(path):
        raise InputError(f"{path}: no checkpoint to resume from")
    with np.load(path) as data:
        saved = json.loads(data["fingerprint"].tobytes().decode())
        if saved != json.loads(json.dumps(fingerprint, sort_keys=True)):
            diff = sorted(k for k in set(saved) | set(fingerprint) if saved.get(k) != fingerprint.get(k))
            raise InputError(f"{path}: checkpoint was written for a different run (differs in {', '.join(diff)})")
        meta = pickle.loads(data["meta"].tobytes())
        arrays = {k: data[k].copy() for k in data.files if k not in ("meta", "fingerprint")}
    return arrays, meta
