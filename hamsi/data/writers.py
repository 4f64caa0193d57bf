"""Writing Ratings to any format the readers load, atomically (temporary file + rename)."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np

from hamsi.atomic import atomic_path
from hamsi.data.ratings import Ratings
from hamsi.errors import Advice, InputError

WRITE_FORMATS = ("ml-100k", "ml-dat", "ml-csv", "hamsi", "parquet")
SUFFIX_FORMATS = {
    ".csv": "ml-csv",
    ".dat": "ml-dat",
    ".data": "ml-100k",
    ".tsv": "ml-100k",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".txt": "hamsi",
    ".hamsi": "hamsi",
}
ROWS_PER_CHUNK = 1 << 20
# Synthetic ratings carry no time; a fixed start (1997-09-20, the first day of MovieLens 100K)
# plus one second per rating keeps the timestamp column plausible and well compressible.
SYNTHETIC_TIME_START = 874_724_710


def format_for_path(path) -> str:
    """Return the write format implied by the file extension (a trailing .gz is allowed)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    fmt = SUFFIX_FORMATS.get(suffixes[-1] if suffixes else "")
    if fmt is None:
        extensions = f"{', '.join(sorted(SUFFIX_FORMATS))} (optionally + .gz)"
        raise InputError(
            f"{path}: cannot tell the format from the extension",
            Advice(api=f"use one of {extensions} or pass format=", cli=f"use one of {extensions}"),
        )
    return fmt


def write_ratings(ratings: Ratings, path, format: str = "auto", timestamps=None) -> Path:
    """Return the path written: `ratings` saved in `format` (by extension when "auto").

    Text formats store the original ids (user_ids/item_ids), except "hamsi", which stores
    1-based dense indices and the shape. MovieLens formats write `timestamps` (one per rating,
    e.g. the source's, hamsi.data.readers.read_timestamps) or, without them, synthetic ones
    (SYNTHETIC_TIME_START + k). A ".gz" suffix compresses. The data go to a temporary
    file in the same directory that is renamed over `path` only when complete, so an
    interrupted write never leaves a half-written file.
    """
    path = Path(path)
    fmt = format_for_path(path) if format == "auto" else format
    if fmt not in WRITE_FORMATS:
        raise InputError(f"unknown write format {fmt!r}; expected one of {WRITE_FORMATS}")
    if timestamps is not None and len(timestamps) != ratings.nnz:
        raise InputError(f"{path}: {len(timestamps)} timestamps for {ratings.nnz} ratings")
    if fmt == "parquet" and path.suffix.lower() == ".gz":
        raise InputError(f"{path}: Parquet is compressed internally; drop the .gz suffix")
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{path}: directory {directory} does not exist")
    with atomic_path(path) as temporary:
        if fmt == "parquet":
            _write_parquet(ratings, temporary)
        else:
            opener = gzip.open if path.suffix.lower() == ".gz" else open
            with opener(temporary, "wb") as stream:
                _write_text(ratings, stream, fmt, timestamps)
    return path


def _write_text(ratings: Ratings, stream, fmt: str, timestamps=None) -> None:
    """Write the rating lines of `fmt` to a binary stream, a chunk of rows at a time."""
    # why lazy: pyarrow loads only for CSV and Parquet output
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if fmt == "hamsi":
        stream.write(f"2\n{ratings.shape[0]} {ratings.shape[1]}\n{ratings.nnz}\n".encode())
    elif fmt == "ml-csv":
        stream.write(b"userId,movieId,rating,timestamp\n")
    delimiter = {"hamsi": " ", "ml-csv": ","}.get(fmt, "\t")
    options = pacsv.WriteOptions(include_header=False, delimiter=delimiter)
    for start in range(0, ratings.nnz, ROWS_PER_CHUNK):
        stop = min(start + ROWS_PER_CHUNK, ratings.nnz)
        rows, cols = ratings.rows[start:stop], ratings.cols[start:stop]
        if fmt == "hamsi":
            columns = {"i": rows.astype(np.int64) + 1, "j": cols.astype(np.int64) + 1}
        else:
            columns = {"user": ratings.user_ids[rows], "item": ratings.item_ids[cols]}
        columns["rating"] = ratings.values[start:stop]
        if fmt != "hamsi":
            columns["timestamp"] = (
                np.asarray(timestamps[start:stop], dtype=np.int64)
                if timestamps is not None
                else np.arange(start, stop, dtype=np.int64) + SYNTHETIC_TIME_START
            )
        buffer = io.BytesIO()
        pacsv.write_csv(pa.table(columns), buffer, write_options=options)
        text = buffer.getvalue()
        if fmt == "ml-dat":
            text = text.replace(b"\t", b"::")
        stream.write(text)


def _write_parquet(ratings: Ratings, path: str) -> None:
    # why lazy: pyarrow loads only for CSV and Parquet output
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "userId": ratings.user_ids[ratings.rows],
            "movieId": ratings.item_ids[ratings.cols],
            "rating": ratings.values,
        }
    )
    pq.write_table(table, path)
