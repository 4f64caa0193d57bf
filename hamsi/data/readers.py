"""Rating readers with format detection: MovieLens files, HAMSI text, CSV/TSV, Parquet, data frames.

Text files are read in chunks of about CHUNK_BYTES with pyarrow's multi-threaded CSV parser, so a
20M-rating file is parsed in seconds and never held in memory as text more than a chunk at a time.
When the fast parser rejects a file or a value is bad, a second, slow line-by-line scan runs (only
on that error path) to name the file, the line number and the offending text.

Formats (the `format` argument; "auto" detects from the name and the first line):

- "ml-100k"  MovieLens 100K ``u.data``: ``user<TAB>item<TAB>rating<TAB>timestamp``
- "ml-dat"   MovieLens 1M / 10M ``ratings.dat``: ``user::item::rating::timestamp``
- "ml-csv"   MovieLens 20M / 25M / latest ``ratings.csv`` with header ``userId,movieId,rating,timestamp``
- "hamsi"    HAMSI text: ``2`` / ``rows cols`` / ``nnz`` / then ``i j value`` lines, 1-based
- "csv", "tsv"  generic delimited text; pick columns with ``columns=(user, item, rating)``
- "parquet"  Parquet file, columns picked by name like the generic formats
- a pandas or dask DataFrame (format "auto" or "dataframe")
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hamsi.data.columnar import (
    ITEM_COLUMN_NAMES,
    NAME_THE_COLUMNS,
    RATING_COLUMN_NAMES,
    USER_COLUMN_NAMES,
    pick_columns,
    read_dataframe,
    read_parquet,
)
from hamsi.data.file_format import (
    COMPRESSION_OPENERS,
    MAX_FIRST_LINE_BYTES,
    MOVIELENS_HEADER,
    MOVIELENS_RATING_FILES,
    SAY_THE_FORMAT,
    all_numbers,
    decompression_errors,
    detect,
    existing_path,
    first_lines,
    is_dataframe,
    open_binary,
    refuse_special_file,
)
from hamsi.data.ratings import Ratings
from hamsi.data.text_layout import TextLayout, parse_chunk
from hamsi.errors import InputError
from hamsi.limits import refuse_unless_fits

# The names callers import from here, wherever they are defined now.
__all__ = [
    "CHUNK_BYTES",
    "COMPRESSION_OPENERS",
    "FORMATS",
    "FORMAT_ALIASES",
    "ITEM_COLUMN_NAMES",
    "MAX_DIMENSION",
    "MAX_FIRST_LINE_BYTES",
    "MOVIELENS_HEADER",
    "MOVIELENS_RATING_FILES",
    "NAME_THE_COLUMNS",
    "RATING_COLUMN_NAMES",
    "SAY_THE_FORMAT",
    "USER_COLUMN_NAMES",
    "decompression_errors",
    "detect_format",
    "load_ratings",
    "read_dataframe",
    "read_delimited",
    "read_hamsi_text",
    "read_parquet",
    "read_timestamps",
    "refuse_special_file",
]
_pick_columns = pick_columns  # cluster.dataset's import path

CHUNK_BYTES = 64 << 20
FORMATS = ("ml-100k", "ml-dat", "ml-csv", "hamsi", "csv", "tsv", "parquet", "dataframe")
FORMAT_ALIASES = {
    "u.data": "ml-100k",
    "movielens-100k": "ml-100k",
    "ml-1m": "ml-dat",
    "ml-10m": "ml-dat",
    "movielens-1m": "ml-dat",
    "movielens-10m": "ml-dat",
    "ml-20m": "ml-csv",
    "ml-25m": "ml-csv",
    "ml-latest": "ml-csv",
    "movielens-20m": "ml-csv",
    "movielens-25m": "ml-csv",
    "txt": "hamsi",
}
# Ratings hold dense int32 row and column indices.
MAX_DIMENSION = np.iinfo(np.int32).max


def load_ratings(
    source,
    format: str = "auto",
    *,
    duplicates: str = "error",
    sep: str | None = None,
    columns=None,
    header: bool | None = None,
) -> Ratings:
    """Return the Ratings read from a file, a MovieLens directory or a pandas/dask DataFrame.

    Parameters
    ----------
    source : path-like or DataFrame
        A rating file (optionally .gz/.bz2/.xz compressed), a directory holding ``u.data``,
        ``ratings.dat`` or ``ratings.csv``, or a pandas or dask DataFrame.
    format : str
        One of FORMATS (or an alias such as "ml-1m"); "auto" detects it.
    duplicates : {"error", "keep-last", "mean"}
        Policy for a repeated (user, item) pair; merged pairs are counted in ``summary()``.
    sep, columns, header
        For "csv"/"tsv": the delimiter, the (user, item, rating) columns as names or 0-based
        positions, and whether the first line is a header (detected when None). `columns`
        also applies to Parquet and data frames.

    Raises
    ------
    InputError
        Missing or empty file, undetectable format, malformed line, non-integer or negative id,
        NaN/inf rating, duplicate pair: the message names the file, line and value.
    """
    format = FORMAT_ALIASES.get(format, format)
    if format != "auto" and format not in FORMATS:
        raise InputError(f"unknown format {format!r}; expected one of {('auto',) + FORMATS}")
    if is_dataframe(source):
        return read_dataframe(source, columns=columns, duplicates=duplicates)
    if format == "dataframe":
        raise InputError(
            f"format='dataframe' needs a pandas or dask DataFrame, got {type(source).__name__}"
        )
    path = existing_path(source)
    if format == "auto":
        path, format, header = detect(path, header)
    readers = {
        "ml-100k": lambda: _read_movielens(path, "\t", "ml-100k", duplicates),
        "ml-dat": lambda: _read_movielens(path, "::", "ml-dat", duplicates),
        "ml-csv": lambda: _read_movielens(path, ",", "ml-csv", duplicates),
        "hamsi": lambda: read_hamsi_text(path, duplicates=duplicates),
        "csv": lambda: read_delimited(
            path, sep=sep or ",", columns=columns, header=header, duplicates=duplicates
        ),
        "tsv": lambda: read_delimited(
            path, sep=sep or "\t", columns=columns, header=header, duplicates=duplicates
        ),
        "parquet": lambda: read_parquet(path, columns=columns, duplicates=duplicates),
    }
    return readers[format]()


def read_timestamps(source, format: str = "auto") -> np.ndarray | None:
    """Return the int64 timestamp column of a MovieLens file, in file order (None for other formats).

    A second pass over the file, paid only by callers that keep the times (`hamsi data convert`);
    load_ratings itself reads the three columns a factorization needs.
    """
    format = FORMAT_ALIASES.get(format, format)
    path = existing_path(source)
    if format == "auto" or path.is_dir():
        path, format, _ = detect(path, None)
    layouts = {"ml-100k": ("\t", 0), "ml-dat": ("::", 0), "ml-csv": (",", 1)}
    if format not in layouts:
        return None
    sep, skip = layouts[format]
    layout = TextLayout(path, sep=sep, n_fields=4, use=(0, 1, 3), skip_lines=skip, label=format)
    return _parse_layout(layout)[2].astype(np.int64)


def detect_format(source) -> str:
    """Return the format name load_ratings would use for `source`."""
    if is_dataframe(source):
        return "dataframe"
    return detect(existing_path(source), None)[1]


# --------------------------------------------------------------------------- delimited text
def _read_movielens(path: Path, sep: str, fmt: str, duplicates: str) -> Ratings:
    """Return ratings from a MovieLens file: 4 fields (user, item, rating, timestamp)."""
    skip = 0
    if fmt == "ml-csv":
        first = first_lines(path, 1)[0]
        if first is None:
            raise InputError(f"{path}: file is empty")
        if [f.strip().lower() for f in first.split(",")] != MOVIELENS_HEADER:
            raise InputError(
                f"{path}:1: expected the header userId,movieId,rating,timestamp, found {first!r}"
            )
        skip = 1
    layout = TextLayout(path, sep=sep, n_fields=4, use=(0, 1, 2), skip_lines=skip, label=fmt)
    users, items, values = _parse_layout(layout)
    return Ratings.from_ids(
        users, items, values, source=str(path), duplicates=duplicates, locate=layout.line_of_record
    )


def read_delimited(
    path, *, sep: str = ",", columns=None, header: bool | None = None, duplicates: str = "error"
) -> Ratings:
    """Return ratings from delimited text with the (user, item, rating) `columns` chosen.

    `columns` holds names (when there is a header) or 0-based positions; by default the
    columns are found by name (userId/user/..., movieId/item/..., rating/value/...) or are
    the first three.
    """
    path = existing_path(path)
    first = first_lines(path, 1)[0]
    if first is None:
        raise InputError(f"{path}: file is empty")
    fields = first.split(sep)
    if header is None:
        header = not all_numbers(fields)
    names = [f.strip() for f in fields] if header else [str(k) for k in range(len(fields))]
    use = pick_columns(names, columns, str(path))
    layout = TextLayout(
        path,
        sep=sep,
        n_fields=len(fields),
        use=use,
        skip_lines=1 if header else 0,
        label=f"{'tsv' if sep == chr(9) else 'csv'} with {len(fields)} fields",
    )
    users, items, values = _parse_layout(layout)
    return Ratings.from_ids(
        users, items, values, source=str(path), duplicates=duplicates, locate=layout.line_of_record
    )


def read_hamsi_text(path, *, duplicates: str = "error") -> Ratings:
    """Return ratings from the HAMSI text format (``2``, ``rows cols``, ``nnz``, ``i j v`` lines).

    Indices are 1-based and bounded by the header; the shape is the header's, and user_ids
    and item_ids are 1..rows and 1..cols.
    """
    path = existing_path(path)
    head = first_lines(path, 3)
    if head[0] is None:
        raise InputError(f"{path}: file is empty")
    try:
        order = int(head[0])
        n_rows, n_cols = (int(v) for v in (head[1] or "").split())
        nnz = int(head[2] or "")
    except ValueError:
        raise InputError(
            f"{path}:1: expected the HAMSI header '2' / 'rows cols' / 'nnz', found {head!r}"
        ) from None
    if order != 2 or n_rows < 0 or n_cols < 0 or nnz < 0:
        raise InputError(
            f"{path}:1: HAMSI header must be '2' / 'rows cols' / 'nnz' with "
            f"non-negative sizes, found {head!r}"
        )
    if max(n_rows, n_cols) > MAX_DIMENSION:
        raise InputError(
            f"{path}:2: header declares a {n_rows} x {n_cols} matrix; at most {MAX_DIMENSION} "
            "rows and columns are supported"
        )
    # the ids 1..rows and 1..cols are materialised (int64 each, and again as the model's ids)
    refuse_unless_fits(f"{path}:2: the header's {n_rows} x {n_cols} matrix", 16 * (n_rows + n_cols))
    layout = TextLayout(
        path, sep=" ", n_fields=3, use=(0, 1, 2), skip_lines=3, label="hamsi", any_whitespace=True
    )
    users, items, values = _parse_layout(layout)
    if users.size != nnz:
        raise InputError(f"{path}: header announces {nnz} entries but the file holds {users.size}")
    for ids, bound, what in ((users, n_rows, "row"), (items, n_cols, "column")):
        outside = (ids < 1) | (ids > bound)
        if outside.any():
            k = int(np.argmax(outside))
            raise InputError(
                f"{layout.line_of_record(k)}: {what} index {int(ids[k])} is outside "
                f"1..{bound} declared in the header"
            )
    return Ratings.from_indices(
        users - 1,
        items - 1,
        values,
        (n_rows, n_cols),
        user_ids=np.arange(1, n_rows + 1),
        item_ids=np.arange(1, n_cols + 1),
        source=str(path),
        duplicates=duplicates,
        locate=layout.line_of_record,
    )


def _parse_layout(layout: TextLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (user ids int64, item ids int64, ratings float64) parsed chunk by chunk."""
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    with open_binary(layout.path) as stream, decompression_errors(layout.path):
        skipped = 0
        while skipped < layout.skip_lines:
            line = stream.readline()
            if not line:
                break
            if line.strip() or not layout.any_whitespace:
                skipped += 1
        while True:
            chunk = stream.read(CHUNK_BYTES)
            if not chunk:
                break
            chunk += stream.readline()  # finish the last line so no record spans two chunks
            parts.append(parse_chunk(chunk, layout))
    if not parts:
        raise InputError(
            f"{layout.path}: no ratings after the header"
            if layout.skip_lines
            else f"{layout.path}: file is empty"
        )
    columns = [
        np.concatenate([p[k] for p in parts]) if len(parts) > 1 else parts[0][k] for k in range(3)
    ]
    return columns[0], columns[1], columns[2]
