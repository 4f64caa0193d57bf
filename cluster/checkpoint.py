"""Checkpoints: the full run state in one file, written atomically; read back for a bit-exact resume."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np

from hamsi.errors import InputError
from hamsi.atomic import atomic_output

FILENAME = "state.npz"


def save(directory, *, x, S, Y, memory, cycles_done, inner_done, extra, trace, stop, phases, fingerprint):
    """Write DIR/state.npz (temp file renamed into place, so a crash leaves the previous one intact)."""
    os.makedirs(directory, exist_ok=True)
    arrays = {"x": x, "S": S, "Y": Y}
    if extra:
        arrays.update({f"extra_{k}": v for k, v in extra.items()})
    # the L-BFGS memory, stop-rule state and trace are small; pickling keeps every bit
    meta = pickle.dumps({"memory": memory, "cycles_done": int(cycles_done), "inner_done": int(inner_done),
                         "trace": list(trace), "stop": stop, "phases": dict(phases)})
    arrays["meta"] = np.frombuffer(meta, dtype=np.uint8)
    arrays["fingerprint"] = np.frombuffer(json.dumps(fingerprint, sort_keys=True).encode(), dtype=np.uint8)
    with atomic_output(os.path.join(directory, FILENAME), "wb") as handle:
        np.savez(handle, **arrays)


def load(directory, fingerprint: dict) -> dict:
    """Return the state saved in DIR; raise InputError when it belongs to a different run setup."""
    path = os.path.join(directory, FILENAME)
    if not os.path.exists(path):
        raise InputError(f"{path}: no checkpoint to resume from")
    with np.load(path) as data:
        saved = json.loads(data["fingerprint"].tobytes().decode())
        if saved != json.loads(json.dumps(fingerprint, sort_keys=True)):
            diff = sorted(k for k in set(saved) | set(fingerprint) if saved.get(k) != fingerprint.get(k))
            raise InputError(f"{path}: checkpoint was written for a different run (differs in {', '.join(diff)})")
        state = pickle.loads(data["meta"].tobytes())
        state.update(x=data["x"].copy(), S=data["S"].copy(), Y=data["Y"].copy())
        extra = {k[len("extra_"):]: data[k].copy() for k in data.files if k.startswith("extra_")}
        state["extra"] = extra or None
    return state
