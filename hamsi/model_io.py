"""The saved-model file of a fitted factorizer: one .npz, versioned, readable without pickle.

`hamsi factorize --out factors.npz` and `MatrixFactorizer.save` write the same file. Keys:
- ``format`` ("hamsi-factor-model") and ``format_version`` (FORMAT_VERSION);
- ``params`` and ``fitted``: JSON of the estimator's parameters and scalar fitted attributes;
- ``user_ids``, ``item_ids``: the raw ids (integers or strings), row a of the factors is user_ids[a];
- ``user_factors``, ``item_factors`` (and ``user_bias``, ``item_bias`` with biases);
- ``seen_indptr``, ``seen_items``: the training pairs in CSR form (for recommend's exclude_seen);
- ``trace``: the per-cycle trace rows (hamsi.trace.TRACE_COLUMNS).
Arrays are stored as they are (float64, no compression), so a load gives the saved bits back.

Model files are shared between users, so `read_model` trusts nothing in them (a zip bomb of
a few MB can declare gigabytes of arrays). Before any array is read it checks every
member's npy header (dtype, shape: no object arrays, hence no pickle) against the zip header's
declared sizes, the shapes against the ids and the rank in ``params``, and the total against
the memory available; after reading, it checks the values (finite factors, valid CSR).
"""

from __future__ import annotations

import json
import math
import zipfile

import numpy as np

from hamsi.atomic import PRIVATE, atomic_output
from hamsi.errors import DivergenceError, InputError
from hamsi.limits import refuse_unless_fits

FORMAT = "hamsi-factor-model"
FORMAT_VERSION = 1
HEADER_ENTRIES = ("format", "format_version", "params", "fitted")
# The small JSON/string entries are read first; a real one is well under a kilobyte.
MAX_HEADER_ENTRY_BYTES = 1 << 20
# hamsi stores arrays uncompressed; deflate can reach ~1000x on zeros, real factors ~1.1x.
MAX_COMPRESSION_RATIO = 50
FACTOR_ENTRIES = ("user_factors", "item_factors", "user_bias", "item_bias")


def write_model(path, params: dict, fitted: dict, arrays: dict) -> None:
    """Write a model file atomically, owner-only (atomic.PRIVATE): JSON params / fitted scalars beside the arrays.

    A factor or bias holding NaN or inf is refused (DivergenceError): nothing is written.
    """
    for name in FACTOR_ENTRIES:
        if name in arrays and not np.all(np.isfinite(arrays[name])):
            raise DivergenceError(
                f"{path}: not written: the model's {name} hold NaN or inf (the fit diverged)"
            )
    header = {
        "format": np.array(FORMAT),
        "format_version": np.array(FORMAT_VERSION),
        "params": np.array(json.dumps(params)),
        "fitted": np.array(json.dumps(fitted)),
    }
    with atomic_output(path, "wb", permissions=PRIVATE) as handle:
        np.savez(handle, **header, **arrays)


def read_model(path) -> tuple[dict, dict, dict]:
    """Return (params, fitted scalars, arrays) of a model file; InputError names the file and entry."""
    try:
        with zipfile.ZipFile(path) as archive:
            headers = npz_member_headers(archive, path, "model")
            header = {
                name: read_npz_member(archive, headers, name)
                for name in HEADER_ENTRIES
                if name in headers
            }
            params, fitted = _check_header(path, header, headers)
            _check_declared_shapes(path, params, fitted, headers)
            arrays = {
                name: read_npz_member(archive, headers, name)
                for name in headers
                if name not in HEADER_ENTRIES
            }
    except FileNotFoundError:
        raise InputError(f"{path}: no such model file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a model file") from None
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{path}: not a hamsi model file (not a readable .npz: {exc})") from None
    _check_values(path, fitted, arrays)
    return params, fitted, arrays


def npz_member_headers(archive: zipfile.ZipFile, path, kind: str) -> dict:
    """Return {entry: (shape, dtype, ZipInfo)} from the npy headers, checked before any data is read.

    The limits of every .npz hamsi reads from users (models, checkpoints: `kind` names it in the
    messages): no object arrays, each member exactly the bytes its shape declares, at most
    MAX_COMPRESSION_RATIO expansion (a zip bomb is refused from its headers, before it is
    inflated), and the total within the memory available.
    """
    headers = {}
    total = 0
    for info in archive.infolist():
        name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        with archive.open(info) as stream:
            version = np.lib.format.read_magic(stream)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read_header(stream)
            offset = stream.tell()
        if dtype.hasobject:
            raise InputError(
                f"{path}: entry {name!r} holds Python objects (pickle); {kind} files hold "
                f"numbers and strings only"
            )
        data_bytes = math.prod(shape) * dtype.itemsize
        if info.file_size != offset + data_bytes:
            raise InputError(
                f"{path}: entry {name!r} declares shape {shape} ({data_bytes} bytes) but its zip "
                f"member holds {info.file_size - offset} bytes"
            )
        if info.file_size > MAX_COMPRESSION_RATIO * max(info.compress_size, 1024):
            raise InputError(
                f"{path}: entry {name!r} expands {info.file_size / max(info.compress_size, 1):.0f}x "
                f"({info.file_size} bytes from {info.compress_size}); hamsi writes {kind}s "
                f"uncompressed: refusing a possible zip bomb"
            )
        headers[name] = (shape, dtype, info)
        total += data_bytes
    refuse_unless_fits(f"{path}: the {kind}", total)
    return headers


def read_npz_member(archive: zipfile.ZipFile, headers: dict, name: str) -> np.ndarray:
    """Return one entry's array (its header already checked: no objects, consistent size)."""
    with archive.open(headers[name][2]) as stream:
        return np.lib.format.read_array(stream, allow_pickle=False)


def _check_header(path, header: dict, headers: dict) -> tuple[dict, dict]:
    """Return (params, fitted) after checking format, version and the two JSON entries."""
    _check_format_version(path, header, headers)
    params, fitted = (_json_object_entry(path, header, name) for name in ("params", "fitted"))
    _check_param_entries(path, params)
    return params, fitted


def _check_format_version(path, header: dict, headers: dict) -> None:
    """Raise InputError unless the header entries are short values naming this format and version."""
    if "format" not in header:
        if "user_factors" in headers:
            raise InputError(
                f"{path}: factors written by hamsi 0.1 without ids and parameters (no format "
                f"version); refit with `hamsi factorize --out` or MatrixFactorizer.save"
            )
        raise InputError(f"{path}: not a hamsi model file (no 'format' entry)")
    for name in HEADER_ENTRIES:
        if name not in header:
            raise InputError(f"{path}: malformed model: no {name!r} entry")
        if header[name].shape != () or header[name].nbytes > MAX_HEADER_ENTRY_BYTES:
            raise InputError(f"{path}: malformed model: entry {name!r} is not one short value")
    if str(header["format"]) != FORMAT:
        raise InputError(f"{path}: not a hamsi factor model")
    if header["format_version"].dtype.kind not in "iu":
        raise InputError(f"{path}: malformed model: entry 'format_version' is not an integer")
    version = int(header["format_version"])
    if version != FORMAT_VERSION:
        newer = "newer" if version > FORMAT_VERSION else "older"
        raise InputError(
            f"{path}: model format version {version} is {newer} than the one this hamsi reads "
            f"({FORMAT_VERSION}); "
            + ("upgrade hamsi" if version > FORMAT_VERSION else "refit the model")
        )


def _json_object_entry(path, header: dict, name: str) -> dict:
    """Return the header entry `name` decoded from JSON; InputError unless it is a JSON object."""
    try:
        value = json.loads(str(header[name]))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: malformed model: entry {name!r} is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: malformed model: entry {name!r} is not a JSON object")
    return value


def _check_param_entries(path, params: dict) -> None:
    """Raise InputError unless every params key is a public name with a scalar or null value."""
    for key, value in params.items():  # the estimator validates the values (load)
        if not key.isidentifier() or key.startswith("_"):
            raise InputError(
                f"{path}: malformed model: params entry {key[:40]!r} is not a parameter"
            )
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise InputError(
                f"{path}: malformed model: params entry {key!r} is a {type(value).__name__}, "
                f"not a number, string or null"
            )


def _check_declared_shapes(path, params: dict, fitted: dict, headers: dict) -> None:
    """Raise InputError unless every array's declared shape and dtype fit the ids and the fitted rank.

    The rank is fitted['rank_'] (params['rank'] may be "auto"); a model fitted on ratings kept on
    Dask workers has `item_known` in place of the `seen_items` list.
    """
    rank = fitted.get("rank_", params.get("rank"))
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        entry = "fitted 'rank_'" if "rank_" in fitted else "params 'rank'"
        raise InputError(f"{path}: malformed model: {entry} is {rank!r}, not an integer >= 1")
    _check_required_entries(path, headers, biases=params.get("biases", True))
    users, items = (
        headers[name][0][0] if len(headers[name][0]) == 1 else -1
        for name in ("user_ids", "item_ids")
    )
    expected = {
        "user_ids": ((users,), "iuU"),
        "item_ids": ((items,), "iuU"),
        "user_factors": ((users, rank), "f"),
        "item_factors": ((items, rank), "f"),
        "user_bias": ((users,), "f"),
        "item_bias": ((items,), "f"),
        "seen_indptr": ((users + 1,), "iu"),
        "seen_items": (None, "iu"),
        "trace": (None, "f"),
        "item_known": ((items,), "b"),
    }
    for name, (shape, kinds) in expected.items():
        if name not in headers:
            continue
        declared, dtype = headers[name][0], headers[name][1]
        if not _declared_shape_fits(name, declared, shape) or dtype.kind not in kinds:
            want = shape if shape else ("(nnz,)" if name == "seen_items" else "(cycles, 6)")
            raise InputError(
                f"{path}: malformed model: entry {name!r} is {dtype} of shape {declared}; "
                f"expected shape {want} ({users} users, {items} items, rank {rank})"
            )


def _check_required_entries(path, headers: dict, biases: bool) -> None:
    """Raise InputError naming the array entries a model with or without biases needs and lacks."""
    required = ["user_ids", "item_ids", "user_factors", "item_factors", "seen_indptr", "trace"]
    required += ["user_bias", "item_bias"] if biases else []
    required += [] if "item_known" in headers else ["seen_items"]
    missing = [name for name in required if name not in headers]
    if missing:
        raise InputError(
            f"{path}: malformed model: missing entr{'y' if len(missing) == 1 else 'ies'} "
            f"{', '.join(map(repr, missing))}"
        )


def _declared_shape_fits(name: str, declared: tuple, shape: tuple | None) -> bool:
    """Return whether an entry's declared shape is `shape` (no empty axis), or for shape None the
    free-length layout of its kind: (nnz,) for seen_items, (cycles, 6) for the trace."""
    if shape:
        return declared == shape and min(shape) >= 1
    if name == "seen_items":
        return len(declared) == 1
    return len(declared) == 2 and declared[1] == 6


def _check_values(path, fitted: dict, arrays: dict) -> None:
    """Raise InputError on non-finite factors or scalars, repeated ids or an invalid CSR of seen pairs."""
    _check_finite_fitted(path, fitted, arrays)
    for name in ("user_ids", "item_ids"):
        if np.unique(arrays[name]).size != arrays[name].size:
            raise InputError(f"{path}: malformed model: entry {name!r} repeats an id")
    if "seen_items" in arrays:  # a model of ratings kept on the workers has item_known instead
        _check_seen_csr(path, arrays)


def _check_finite_fitted(path, fitted: dict, arrays: dict) -> None:
    """Raise InputError on non-finite factors or fitted scalars, or rating_min_ > rating_max_."""
    for name in FACTOR_ENTRIES:
        if name in arrays and not np.all(np.isfinite(arrays[name])):
            raise InputError(f"{path}: malformed model: entry {name!r} holds NaN or inf")
    for name in ("global_mean_", "rating_min_", "rating_max_"):
        value = fitted.get(name)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise InputError(
                f"{path}: malformed model: fitted {name!r} is {value!r}, not a finite number"
            )
    if fitted["rating_min_"] > fitted["rating_max_"]:
        raise InputError(
            f"{path}: malformed model: rating_min_ {fitted['rating_min_']} > rating_max_ "
            f"{fitted['rating_max_']}"
        )


def _check_seen_csr(path, arrays: dict) -> None:
    """Raise InputError unless seen_indptr / seen_items form a CSR index of known item indices."""
    indptr, seen = arrays["seen_indptr"], arrays["seen_items"]
    if indptr[0] != 0 or indptr[-1] != seen.size or np.any(np.diff(indptr) < 0):
        raise InputError(
            f"{path}: malformed model: entry 'seen_indptr' is not a CSR index of the "
            f"{seen.size} entries of 'seen_items'"
        )
    if seen.size and (seen.min() < 0 or seen.max() >= arrays["item_ids"].size):
        raise InputError(
            f"{path}: malformed model: entry 'seen_items' holds an item index outside "
            f"0..{arrays['item_ids'].size - 1}"
        )
