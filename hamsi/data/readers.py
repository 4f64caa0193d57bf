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

import bz2
import contextlib
import gzip
import io
import lzma
import math
import os
import zlib
from pathlib import Path

import numpy as np

from hamsi.data.ratings import Ratings
from hamsi.errors import Advice, InputError
from hamsi.limits import refuse_unless_fits

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
MOVIELENS_HEADER = ["userid", "movieid", "rating", "timestamp"]
COMPRESSION_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# Lower-cased column names recognised when the caller does not pick columns.
USER_COLUMN_NAMES = ("userid", "user_id", "user", "uid", "row", "i")
ITEM_COLUMN_NAMES = ("movieid", "movie_id", "itemid", "item_id", "item", "movie", "iid", "col", "j")
RATING_COLUMN_NAMES = ("rating", "ratings", "value", "score", "r", "v")
# Files found inside a MovieLens directory (as unzipped by `hamsi data download`).
MOVIELENS_RATING_FILES = ("u.data", "ratings.dat", "ratings.csv")
# Detection reads the first lines; a longer "line" is not rating text (a binary file, /dev/zero).
MAX_FIRST_LINE_BYTES = 1 << 20
# Ratings hold dense int32 row and column indices.
MAX_DIMENSION = np.iinfo(np.int32).max


# What to do when the format or the columns cannot be told from the file (see hamsi.errors.Advice).
SAY_THE_FORMAT = Advice(
    api="pass format= (and sep=) explicitly",
    cli="separate the user, item and rating fields by tabs, commas or '::'",
)
NAME_THE_COLUMNS = Advice(
    api="pass columns=(user, item, rating)",
    cli="name them user, item, rating in the header line, or give hamsi factorize "
    "--columns USER,ITEM,RATING",
)


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
    if _is_dataframe(source):
        return read_dataframe(source, columns=columns, duplicates=duplicates)
    if format == "dataframe":
        raise InputError(
            f"format='dataframe' needs a pandas or dask DataFrame, got {type(source).__name__}"
        )
    path = _existing_path(source)
    if format == "auto":
        path, format, header = _detect(path, header)
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
    path = _existing_path(source)
    if format == "auto" or path.is_dir():
        path, format, _ = _detect(path, None)
    layouts = {"ml-100k": ("\t", 0), "ml-dat": ("::", 0), "ml-csv": (",", 1)}
    if format not in layouts:
        return None
    sep, skip = layouts[format]
    layout = _Layout(path, sep=sep, n_fields=4, use=(0, 1, 3), skip_lines=skip, label=format)
    return _parse_layout(layout)[2].astype(np.int64)


def detect_format(source) -> str:
    """Return the format name load_ratings would use for `source`."""
    if _is_dataframe(source):
        return "dataframe"
    return _detect(_existing_path(source), None)[1]


# --------------------------------------------------------------------------- detection
def _existing_path(source) -> Path:
    """Return source as a Path after checking that it exists."""
    try:
        path = Path(os.fspath(source)).expanduser()
    except TypeError:
        raise InputError(
            f"cannot read ratings from a {type(source).__name__}; "
            "pass a path or a pandas/dask DataFrame"
        ) from None
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    refuse_special_file(path)
    return path


def refuse_special_file(path) -> None:
    """Raise InputError when an existing `path` is neither a regular file nor a directory.

    A device such as /dev/zero never ends and a pipe is gone after one read (readers read twice).
    """
    path = Path(path)
    if path.exists() and not (path.is_file() or path.is_dir()):
        raise InputError(
            f"{path}: not a regular file or directory (a device, pipe or socket); "
            "save the data to a file first"
        )


def _detect(path: Path, header: bool | None) -> tuple[Path, str, bool | None]:
    """Return (file path, format, header) guessed from the name and first non-empty line."""
    if path.is_dir():
        return _detect(_movielens_file(path), header)
    if _plain_suffix(path) in (".parquet", ".pq"):
        return path, "parquet", header
    first, second = _first_lines(path, 2)
    if first is None:
        raise InputError(f"{path}: file is empty")
    if _is_hamsi_header(first, second):
        return path, "hamsi", header
    if len(first.split("::")) > 1:
        return path, "ml-dat", header
    detected = _detect_separated(first, header)
    if detected is None:
        raise InputError(
            f"{path}:1: cannot detect the format: no '::', tab or comma separating "
            f"3 or more fields in {first!r}",
            SAY_THE_FORMAT,
        )
    return path, *detected


def _movielens_file(directory: Path) -> Path:
    """Return the first of MOVIELENS_RATING_FILES in the directory; InputError when none is there."""
    for name in MOVIELENS_RATING_FILES:
        if (directory / name).is_file():
            return directory / name
    raise InputError(f"{directory}: directory holds none of {', '.join(MOVIELENS_RATING_FILES)}")


def _is_hamsi_header(first: str, second: str | None) -> bool:
    """True when the first lines are the hamsi text format's: "2", then the two dimensions."""
    return (
        first.strip() == "2"
        and second is not None
        and _all_numbers(second.split())
        and len(second.split()) == 2
    )


def _detect_separated(first: str, header: bool | None) -> tuple[str, bool | None] | None:
    """Return (format, header) of a tab- or comma-separated first line of 3+ fields, else None.

    A first line that is not all numbers is a header (MovieLens's own names: ml-csv); four numeric
    tab-separated fields are MovieLens-100K's u.data.
    """
    for sep, name in (("\t", "tsv"), (",", "csv")):
        fields = first.split(sep)
        if len(fields) < 3:
            continue
        if not _all_numbers(fields):
            if [f.strip().lower() for f in fields] == MOVIELENS_HEADER and sep == ",":
                return "ml-csv", header
            return name, True if header is None else header
        if sep == "\t" and len(fields) == 4:
            return "ml-100k", header
        return name, False if header is None else header
    return None


def _plain_suffix(path: Path) -> str:
    """Return the file suffix ignoring a compression suffix (.gz, .bz2, .xz)."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSION_OPENERS:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _open_binary(path: Path):
    """Return a binary stream of the file, decompressed according to its suffix."""
    opener = COMPRESSION_OPENERS.get(path.suffix.lower(), open)
    try:
        return opener(path, "rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot open: {exc.strerror or exc}") from None


@contextlib.contextmanager
def decompression_errors(path):
    """Turn a truncated or corrupt compressed stream (or a read error) into one InputError naming `path`."""
    try:
        yield
    except FileNotFoundError:  # the callers name a missing file in their own words
        raise
    except EOFError:
        raise InputError(
            f"{path}: truncated compressed file (it ends before the end-of-stream marker)"
        ) from None
    except (
        lzma.LZMAError,
        zlib.error,
        OSError,
    ) as exc:  # gzip.BadGzipFile and bz2's errors are OSErrors
        raise InputError(
            f"{path}: corrupt or unreadable data: {getattr(exc, 'strerror', None) or exc}"
        ) from None


def _first_lines(path: Path, count: int) -> list[str | None]:
    """Return the first `count` non-empty lines of the file (None where the file ends)."""
    lines: list[str | None] = []
    with _open_binary(path) as stream, decompression_errors(path):
        for number, raw in enumerate(
            iter(lambda: stream.readline(MAX_FIRST_LINE_BYTES + 1), b""), start=1
        ):
            if len(raw) > MAX_FIRST_LINE_BYTES:
                raise InputError(
                    f"{path}:{number}: line longer than {MAX_FIRST_LINE_BYTES} bytes: "
                    "not a rating text file"
                )
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if text.strip():
                lines.append(text)
                if len(lines) == count:
                    break
    return lines + [None] * (count - len(lines))


def _all_numbers(fields) -> bool:
    try:
        [float(f) for f in fields]
    except ValueError:
        return False
    return True


def _is_dataframe(source) -> bool:
    module = type(source).__module__ or ""
    return hasattr(source, "columns") and (module.startswith("pandas") or module.startswith("dask"))


# --------------------------------------------------------------------------- delimited text
def _read_movielens(path: Path, sep: str, fmt: str, duplicates: str) -> Ratings:
    """Return ratings from a MovieLens file: 4 fields (user, item, rating, timestamp)."""
    skip = 0
    if fmt == "ml-csv":
        first = _first_lines(path, 1)[0]
        if first is None:
            raise InputError(f"{path}: file is empty")
        if [f.strip().lower() for f in first.split(",")] != MOVIELENS_HEADER:
            raise InputError(
                f"{path}:1: expected the header userId,movieId,rating,timestamp, found {first!r}"
            )
        skip = 1
    layout = _Layout(path, sep=sep, n_fields=4, use=(0, 1, 2), skip_lines=skip, label=fmt)
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
    path = _existing_path(path)
    first = _first_lines(path, 1)[0]
    if first is None:
        raise InputError(f"{path}: file is empty")
    fields = first.split(sep)
    if header is None:
        header = not _all_numbers(fields)
    names = [f.strip() for f in fields] if header else [str(k) for k in range(len(fields))]
    use = _pick_columns(names, columns, str(path))
    layout = _Layout(
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
    path = _existing_path(path)
    head = _first_lines(path, 3)
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
    layout = _Layout(
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


class _Layout:
    """How a delimited file is laid out, with the slow line scan used to explain errors."""

    def __init__(
        self,
        path: Path,
        *,
        sep: str,
        n_fields: int,
        use: tuple[int, int, int],
        skip_lines: int,
        label: str,
        any_whitespace: bool = False,
    ):
        self.path, self.sep, self.n_fields, self.use = path, sep, n_fields, tuple(use)
        self.skip_lines, self.label, self.any_whitespace = skip_lines, label, any_whitespace

    def split(self, text: str) -> list[str]:
        return text.split() if self.any_whitespace else text.split(self.sep)

    def records(self):
        """Yield (line number, text) of every non-empty data line, as the fast parser sees them."""
        with _open_binary(self.path) as stream, decompression_errors(self.path):
            skipped = 0
            for number, raw in enumerate(stream, start=1):
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if skipped < self.skip_lines:
                    skipped += bool(text.strip()) if self.any_whitespace else 1
                    continue
                if text:
                    yield number, text

    def line_of_record(self, k: int) -> str:
        """Return "file:line" of the k-th data record (0-based)."""
        for index, (number, _) in enumerate(self.records()):
            if index == k:
                return f"{self.path}:{number}"
        return f"{self.path}: record {k}"

    def first_problem(self) -> str | None:
        """Return "file:line: what is wrong: text" for the first bad line, or None."""
        user_col, item_col, rating_col = self.use
        for number, text in self.records():
            where = f"{self.path}:{number}"
            fields = self.split(text)
            if len(fields) != self.n_fields:
                sep = "whitespace" if self.any_whitespace else repr(self.sep)
                return (
                    f"{where}: expected {self.n_fields} fields separated by {sep} "
                    f"({self.label}), found {len(fields)}: {text!r}"
                )
            for col, what in ((user_col, "user id"), (item_col, "item id")):
                value = fields[col].strip()
                if not value.lstrip("-").isdigit():
                    return f"{where}: {what} is not an integer: {value!r}"
                if int(value) < 0:
                    return f"{where}: {what} is negative: {value!r}"
            try:
                rating = float(fields[rating_col])
            except ValueError:
                return f"{where}: rating is not a number: {fields[rating_col]!r}"
            if not math.isfinite(rating):
                return f"{where}: rating is not a finite number: {fields[rating_col]!r}"
        return None

    def fail(self, reason: str) -> InputError:
        """Return the InputError for a file the fast parser rejected."""
        return InputError(
            self.first_problem() or f"{self.path}: cannot parse as {self.label}: {reason}"
        )


def _parse_layout(layout: _Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (user ids int64, item ids int64, ratings float64) parsed chunk by chunk."""
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    with _open_binary(layout.path) as stream, decompression_errors(layout.path):
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
            parts.append(_parse_chunk(chunk, layout))
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


def _parse_chunk(chunk: bytes, layout: _Layout):
    """Return the three used columns of one chunk of whole lines."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    sep = layout.sep
    if sep == "::":
        # pyarrow takes one-byte delimiters only; a tab never occurs in a valid ratings.dat line.
        chunk, sep = chunk.replace(b"::", b"\t"), "\t"
    names = [f"f{k}" for k in range(layout.n_fields)]
    used = [names[k] for k in layout.use]
    types = {used[0]: pa.int64(), used[1]: pa.int64(), used[2]: pa.float64()}
    try:
        table = pacsv.read_csv(
            _arrow_owned_reader(chunk),
            read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(delimiter=sep),
            convert_options=pacsv.ConvertOptions(column_types=types, include_columns=used),
        )
    except pa.ArrowInvalid as exc:
        if layout.any_whitespace:
            return _parse_chunk_whitespace(chunk, layout, exc)
        raise layout.fail(str(exc)) from None
    if any(table.column(name).null_count for name in used):
        raise layout.fail("empty or 'nan' field")
    return tuple(table.column(name).to_numpy() for name in used)


def _arrow_owned_reader(chunk: bytes):
    """Return an Arrow reader over a copy of `chunk` in Arrow's own memory.

    Arrow's threaded CSV reader drops its input on a worker thread, possibly after read_csv has
    returned. Input that refers to a Python object (an io.BytesIO, or pa.py_buffer(bytes)) then
    takes the GIL in its destructor; when the interpreter is already exiting (right after an
    InputError), Python ends that thread inside C++ and the process aborts with "terminate called
    without an active exception", exit 134 (both kinds of input do it). A copy
    owned by Arrow needs no GIL to free.
    """
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    sink.write(chunk)
    return pa.BufferReader(sink.getvalue())


def _parse_chunk_whitespace(chunk: bytes, layout: _Layout, first_error: Exception):
    """Return the three columns of a chunk separated by runs of any whitespace (HAMSI text)."""
    import pandas as pd

    try:
        frame = pd.read_csv(
            io.BytesIO(chunk),
            sep=r"\s+",
            header=None,
            engine="c",
            names=["u", "i", "r"],
            dtype={"u": np.int64, "i": np.int64, "r": np.float64},
        )
    except (ValueError, pd.errors.ParserError):
        raise layout.fail(str(first_error)) from None
    if frame["r"].isna().any():
        raise layout.fail("empty or 'nan' field")
    return frame["u"].to_numpy(), frame["i"].to_numpy(), frame["r"].to_numpy()


def _pick_columns(names: list[str], columns, source: str) -> tuple[int, int, int]:
    """Return the positions of the (user, item, rating) columns among `names`."""
    if columns is None:
        return _guess_columns(names, source)
    if len(columns) != 3:
        raise InputError(
            f"{source}: columns must name 3 columns (user, item, rating), got {columns!r}"
        )
    positions = []
    for column in columns:
        if isinstance(column, (int, np.integer)) and 0 <= column < len(names):
            positions.append(int(column))
        elif str(column) in names:
            positions.append(names.index(str(column)))
        else:
            raise InputError(f"{source}: no column {column!r}; columns are {names}")
    return tuple(positions)


def _guess_columns(names: list[str], source: str) -> tuple[int, int, int]:
    """Return the (user, item, rating) positions by the usual names, or 0, 1, 2 for unnamed columns."""
    lowered = [n.lower() for n in names]
    picked = [
        next((lowered.index(c) for c in candidates if c in lowered), None)
        for candidates in (USER_COLUMN_NAMES, ITEM_COLUMN_NAMES, RATING_COLUMN_NAMES)
    ]
    if None not in picked:
        return tuple(picked)
    if len(names) < 3:
        raise InputError(f"{source}: need 3 columns (user, item, rating), found {names}")
    if any(p is not None for p in picked) or not all(n.isdigit() for n in names):
        raise InputError(
            f"{source}: cannot tell the user, item and rating columns among {names}",
            NAME_THE_COLUMNS,
        )
    return (0, 1, 2)


# --------------------------------------------------------------------------- parquet, frames
def read_parquet(path, *, columns=None, duplicates: str = "error") -> Ratings:
    """Return ratings from a Parquet file, read batch by batch (columns picked as in CSV)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = _existing_path(path)
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file: {str(exc).strip()}") from None
    names = parquet.schema_arrow.names
    use = [names[k] for k in _pick_columns(names, columns, str(path))]
    parts = [[], [], []]
    try:  # a damaged data page shows only here, e.g. "Corrupt snappy compressed data"
        for batch in parquet.iter_batches(columns=use, batch_size=1 << 20):
            for k, name in enumerate(use):
                column = batch.column(name)
                if column.null_count:
                    parts[k].append(column.to_numpy(zero_copy_only=False).astype(np.float64))
                else:
                    parts[k].append(column.to_numpy(zero_copy_only=False))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: corrupt Parquet data: {str(exc).strip()}") from None
    if not parts[0] or sum(len(p) for p in parts[0]) == 0:
        raise InputError(f"{path}: Parquet file holds no ratings")
    users, items, values = (np.concatenate(p) for p in parts)
    return Ratings.from_ids(
        users,
        items,
        values.astype(np.float64),
        source=str(path),
        duplicates=duplicates,
        locate=lambda k: f"{path}: row {k}",
    )


def read_dataframe(frame, *, columns=None, duplicates: str = "error") -> Ratings:
    """Return ratings from a pandas or dask DataFrame (dask partitions are computed one by one)."""
    names = [str(c) for c in frame.columns]
    use = [frame.columns[k] for k in _pick_columns(names, columns, "DataFrame")]
    module = type(frame).__module__ or ""
    if module.startswith("dask"):
        parts = [part.compute() for part in frame[use].to_delayed()]
        pieces = [[p[c].to_numpy() for p in parts] for c in use]
        users, items, values = (np.concatenate(p) if p else np.zeros(0) for p in pieces)
        label = "dask DataFrame"
    else:
        users, items, values = (frame[c].to_numpy() for c in use)
        label = "DataFrame"
    if len(users) == 0:
        raise InputError(f"{label} holds no ratings")
    index = frame.index if not module.startswith("dask") else None

    def locate(k: int) -> str:
        return f"{label} row {index[k]}" if index is not None else f"{label} row {k}"

    return Ratings.from_ids(
        users,
        items,
        np.asarray(values, dtype=np.float64),
        source=label,
        duplicates=duplicates,
        locate=locate,
    )
