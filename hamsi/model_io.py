"""The saved-model file of a fitted factorizer: one .npz, versioned, readable without pickle.

`hamsi factorize --out factors.npz` and `MatrixFactorizer.save` write the same file. Keys:
- ``format`` ("hamsi-factor-model") and ``format_version`` (FORMAT_VERSION);
- ``params`` and ``fitted``: JSON of the estimator's parameters and scalar fitted attributes;
- ``user_ids``, ``item_ids``: the raw ids (integers or strings), row a of the factors is user_ids[a];
- ``user_factors``, ``item_factors`` (and ``user_bias``, ``item_bias`` with biases);
- ``seen_indptr``, ``seen_items``: the training pairs in CSR form (for recommend's exclude_seen);
- ``trace``: the per-cycle trace rows (hamsi.trace.TRACE_COLUMNS).
Arrays are stored as they are (float64, no compression), so a load gives the saved bits back.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np

from hamsi.atomic import atomic_output
from hamsi.errors import InputError

FORMAT = "hamsi-factor-model"
FORMAT_VERSION = 1


def write_model(path, params: dict, fitted: dict, arrays: dict) -> None:
    """Write a model file atomically: JSON params / fitted scalars beside the named arrays."""
    header = {"format": np.array(FORMAT), "format_version": np.array(FORMAT_VERSION),
              "params": np.array(json.dumps(params)), "fitted": np.array(json.dumps(fitted))}
    with atomic_output(path, "wb") as handle:
        np.savez(handle, **header, **arrays)


def read_model(path) -> tuple[dict, dict, dict]:
    """Return (params, fitted scalars, arrays) of a model file; InputError names what is wrong."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            contents = {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise InputError(f"{path}: no such model file") from None
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path}: not a hamsi model file (not a readable .npz: {exc})") from None
    if "format" not in contents:
        if "user_factors" in contents:
            raise InputError(f"{path}: factors written by hamsi 0.1 without ids and parameters (no format "
                             f"version); refit with `hamsi factorize --out` or MatrixFactorizer.save")
        raise InputError(f"{path}: not a hamsi model file (no 'format' entry)")
    if str(contents.pop("format")) != FORMAT:
        raise InputError(f"{path}: not a hamsi factor model")
    version = int(contents.pop("format_version"))
    if version != FORMAT_VERSION:
        newer = "newer" if version > FORMAT_VERSION else "older"
        raise InputError(f"{path}: model format version {version} is {newer} than the one this hamsi reads "
                         f"({FORMAT_VERSION}); " + ("upgrade hamsi" if version > FORMAT_VERSION else "refit the model"))
    params = json.loads(str(contents.pop("params")))
    fitted = json.loads(str(contents.pop("fitted")))
    return params, fitted, contents
