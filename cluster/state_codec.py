"""The JSON form of a checkpoint's small state, and the checked way back from it.

StateEncoder turns the run's small state (stepper, stop rules, trace) into JSON-ready values and a
list of plain arrays; StateDecoder rebuilds it into a fixed list of classes by setting only the
fields _state_fields allows, each of its type and range, never calling anything the file names.
"""

from __future__ import annotations

import math

import numpy as np

from hamsi.errors import InputError

META = "meta"
META_ARRAY = "meta_array_"  # prefix of the arrays the JSON state refers to
# The random generators a stepper may hold (their state is a dict of integers).
BIT_GENERATORS = {"PCG64": np.random.PCG64}


def _state_classes() -> dict:
    """Return {name: class} of the objects a checkpoint's state may contain (and nothing else)."""
    # why lazy: these load numba's kernels, only when a checkpoint is read or written
    from hamsi.exchange import Evaluation
    from hamsi.lbfgs import LBFGSMemory
    from hamsi.stepper import Stepper
    from hamsi.stop_rules import StopRules

    return {cls.__name__: cls for cls in (Stepper, StopRules, LBFGSMemory, Evaluation)}


# ------------------------------------------------------------------ what a checkpoint may hold
# The run state nests about six levels (meta -> stepper -> lbfgs -> arrays); JSON nested deeper is
# refused before Python's recursion limit could turn it into a RecursionError traceback.
MAX_STATE_DEPTH = 32


def integer_check(low: int = 0, high: float = math.inf):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            bound = f">= {low}" if high == math.inf else f"in [{low}, {high}]"
            return f"{value!r:.40}, not an integer {bound}"

    return check


def number_check(low: float = -math.inf, finite: bool = True, nan: bool = False):
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


def instance_check(kind):
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
    if not (
        isinstance(value, tuple) and len(value) == 2 and not any(integer_check()(v) for v in value)
    ):
        return f"{value!r:.40}, not a pair of counts"


def _state_fields() -> dict:
    """Return {class name: {field: checker}}: every field an object in a checkpoint must have, checked.

    A checker returns None for a good value, else what is wrong with it. Stepper's cleared_pairs
    may be missing (checkpoints written before it: the class default).
    """
    # why lazy: these load numba's kernels, only when a checkpoint is read
    from hamsi.exchange import Evaluation
    from hamsi.lbfgs import LBFGSMemory
    from hamsi.schedules import SCHEDULES
    from hamsi.stepper import METHODS

    count, real = integer_check(), number_check(nan=True)
    return {
        "Stepper": {
            "method": _one_of(*METHODS),
            "n_subsets": integer_check(1),
            "n_params": integer_check(1),
            "schedule": _one_of(*SCHEDULES),
            "eta": number_check(0.0),
            "gamma": number_check(0.0),
            "eta_gd": number_check(0.0),
            "safeguard": instance_check(bool),
            "memory_size": integer_check(1),
            "lbfgs": instance_check(LBFGSMemory),
            "schedule_rng": instance_check(np.random.Generator),
            "inner": count,
            "have_start": instance_check(bool),
            "gram": _matrix,
            "step_scale": number_check(0.0),
            "fallbacks": count,
            "cleared_pairs": _pair_of_counts,
            "best_objective": number_check(finite=False),
            "good": _optional(instance_check(Evaluation)),
        },
        "LBFGSMemory": {
            "memory": integer_check(1),
            "sigma": number_check(0.0),
            "threshold": number_check(0.0),
            "n_accepted": count,
            "n_rejected": count,
            "sy": _matrix,
            "yy": _matrix,
            "_scaled_n": _optional(_matrix),
        },
        "StopRules": {
            "max_epochs": _optional(count),
            "max_time": _optional(number_check(0.0, finite=False)),
            "tol": number_check(0.0),
            "target": _optional(number_check()),
            "patience": _optional(integer_check(1)),
            "has_heldout": instance_check(bool),
            "eta": number_check(0.0),
            "safeguard": instance_check(bool),
            "metric": instance_check(str),
            "best_heldout": number_check(finite=False),
            "best_epoch": _optional(count),
            "new_best": instance_check(bool),
            "without_gain": count,
            "previous_objective": _optional(number_check(finite=False, nan=True)),
        },
        "Evaluation": {
            "train": real,
            "objective": real,
            "heldout": real,
            "time_s": number_check(0.0),
            "seconds": number_check(0.0),
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


class StateEncoder:
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
        return self._composite(obj)

    def _composite(self, obj):
        """Return the tagged JSON form of a container, array, generator or state object."""
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


class StateDecoder:
    """Rebuilds what StateEncoder wrote; anything else in the file is refused naming it.

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
        return self._tagged(obj, where, depth)

    def _tagged(self, obj: dict, where: str, depth: int):
        """Return what a tagged value ({"tuple": ...}, {"array": i}, {"object": ...}, ...) stands for."""
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
            return self.state_object(obj, where, depth)
        self.refuse(f"{where} is an unexpected {str(obj)[:60]!r}")

    def state_object(self, obj: dict, where: str, depth: int):
        """Return an instance of a STATE_FIELDS class with the checked fields set (no constructor runs)."""
        cls = self.classes.get(obj["object"])
        if cls is None:
            self.refuse(f"{where} is an unknown object {str(obj['object'])[:40]!r}")
        fields = {k: self.value(v, f"{where}.{k}", depth + 1) for k, v in obj["fields"].items()}
        _check_fields(self, cls, fields, where)
        instance = object.__new__(cls)
        instance.__dict__.update(fields)
        return instance

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
