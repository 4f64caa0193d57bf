"""Opening a rating file and telling its format from its name and first lines.

Compressed files (.gz, .bz2, .xz) are opened transparently; a device, pipe or socket is refused,
as is a first "line" too long for rating text. Detection: a MovieLens directory, a Parquet
suffix, the HAMSI text header, '::' (MovieLens 1M/10M), tab- or comma-separated fields.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import os
import zlib
from pathlib import Path

from hamsi.errors import Advice, InputError

COMPRESSION_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


MOVIELENS_HEADER = ["userid", "movieid", "rating", "timestamp"]


# Files found inside a MovieLens directory (as unzipped by `hamsi data download`).
MOVIELENS_RATING_FILES = ("u.data", "ratings.dat", "ratings.csv")


# Detection reads the first lines; a longer "line" is not rating text (a binary file, /dev/zero).
MAX_FIRST_LINE_BYTES = 1 << 20


# What to do when the format or the columns cannot be told from the file (see hamsi.errors.Advice).
SAY_THE_FORMAT = Advice(
    api="pass format= (and sep=) explicitly",
    cli="separate the user, item and rating fields by tabs, commas or '::'",
)


def existing_path(source) -> Path:
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


def detect(path: Path, header: bool | None) -> tuple[Path, str, bool | None]:
    """Return (file path, format, header) guessed from the name and first non-empty line."""
    if path.is_dir():
        return detect(_movielens_file(path), header)
    if _plain_suffix(path) in (".parquet", ".pq"):
        return path, "parquet", header
    first, second = first_lines(path, 2)
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
        and all_numbers(second.split())
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
        if not all_numbers(fields):
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


def open_binary(path: Path):
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


def first_lines(path: Path, count: int) -> list[str | None]:
    """Return the first `count` non-empty lines of the file (None where the file ends)."""
    lines: list[str | None] = []
    with open_binary(path) as stream, decompression_errors(path):
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


def all_numbers(fields) -> bool:
    try:
        [float(f) for f in fields]
    except ValueError:
        return False
    return True


def is_dataframe(source) -> bool:
    module = type(source).__module__ or ""
    return hasattr(source, "columns") and (module.startswith("pandas") or module.startswith("dask"))
