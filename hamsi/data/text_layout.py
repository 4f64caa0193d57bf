"""Chunks of delimited rating text parsed by pyarrow, and the slow line scan that names a bad line.

The fast parser reads whole-line chunks with one-byte delimiters ('::' becomes a tab); HAMSI
text (runs of any whitespace) falls back to pandas. When a chunk is rejected, TextLayout scans
the file line by line, only on that error path, to name the file, line and offending text.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from hamsi.data.file_format import decompression_errors, open_binary
from hamsi.errors import InputError


class TextLayout:
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
        with open_binary(self.path) as stream, decompression_errors(self.path):
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


def parse_chunk(chunk: bytes, layout: TextLayout):
    """Return the three used columns of one chunk of whole lines."""
    # why lazy: pyarrow, only when a text file is parsed
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
    # why lazy: pyarrow, only when a text file is parsed
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    sink.write(chunk)
    return pa.BufferReader(sink.getvalue())


def _parse_chunk_whitespace(chunk: bytes, layout: TextLayout, first_error: Exception):
    """Return the three columns of a chunk separated by runs of any whitespace (HAMSI text)."""
    # why lazy: pandas, only for whitespace-separated text
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
