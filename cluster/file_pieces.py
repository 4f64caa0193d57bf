"""A rating file cut into pieces that separate tasks read: CSV byte ranges, Parquet row groups.

One large file read by one task would be read by one worker, at one core's speed, and held whole
in its memory; cut into pieces of about `hamsi.read-block-bytes` (dask.config, cluster.settings),
it is read by every worker as a glob of files would be. The pieces are Dask's own:

- CSV: byte ranges [offset, offset + length) moved to line ends by fsspec.utils.read_block, the
  function dask.bytes.read_bytes (and so dask.dataframe.read_csv(blocksize=...)) reads with: a line
  belongs to the range its first byte's preceding newline is in, so every line is read once. Each
  piece is parsed with the file's header line in front of it. A quoted field holding a newline
  would be cut, as dask.dataframe.read_csv cuts it.
- Parquet: consecutive row groups, about a block's bytes together (the footer's metadata, read
  once by the client: O(row groups)).

Errors name the file and the row in the whole file (0-based, header excluded), as for a file read
whole. A CSV piece knows its first row only by counting the newlines before it: that is done only
when a message needs it (`rows_before`).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import numpy as np

from cluster.settings import setting
from hamsi.errors import InputError

# a piece is never smaller than this (a setting below it is raised to it): the header of a CSV
# file and a line of ratings fit many times over
MIN_BLOCK_BYTES = 4096


@dataclass(frozen=True)
class FilePiece:
    """Piece of a rating file: a CSV byte range (offset, length; None: to the end) or Parquet row groups."""

    path: str
    kind: str  # "csv" or "parquet"
    offset: int = 0
    length: int | None = None
    row_groups: tuple = ()
    first_row: int | None = None  # known for Parquet (metadata) and a piece at the file's start

    def rows_before(self) -> int:
        """Return the data rows of the file before this piece (a CSV piece counts its newlines: error path only)."""
        if self.first_row is not None:
            return self.first_row
        with open(self.path, "rb") as handle:
            start = _piece_start(handle, self.offset)
            handle.seek(0)
            lines, left = 0, start
            while left > 0:
                chunk = handle.read(min(left, 1 << 24))
                if not chunk:
                    break
                lines += chunk.count(b"\n")
                left -= len(chunk)
        return lines - 1  # the header line


def block_bytes() -> int:
    """Return the size of a piece: dask.config's `hamsi.read-block-bytes`, at least MIN_BLOCK_BYTES."""
    value = setting("read-block-bytes")
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"hamsi.read-block-bytes must be a positive integer; got {value!r}")
    return max(int(value), MIN_BLOCK_BYTES)


def file_pieces(path: str, kind: str) -> list[FilePiece]:
    """Return the pieces of one file: one piece if it is at most one block, else byte ranges or row groups."""
    size, block = os.path.getsize(path), block_bytes()
    if size <= block:
        return [FilePiece(path, kind, first_row=0)]
    if kind == "csv":
        return [
            FilePiece(
                path, kind, offset, min(block, size - offset), first_row=0 if not offset else None
            )
            for offset in range(0, size, block)
        ]
    return _row_group_pieces(path, block)


def _row_group_pieces(path: str, block: int) -> list[FilePiece]:
    """Return the Parquet file's consecutive row groups, gathered into pieces of about `block` bytes."""
    # why lazy: pyarrow (~0.2 s of import) only when a large Parquet file is cut
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: not a readable parquet file: {exc}") from None
    pieces, groups, size, first, rows = [], [], 0, 0, 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if groups and size + group.total_byte_size > block:
            pieces.append(FilePiece(path, "parquet", row_groups=tuple(groups), first_row=first))
            groups, size, first = [], 0, rows
        groups.append(g)
        size += group.total_byte_size
        rows += group.num_rows
    pieces.append(FilePiece(path, "parquet", row_groups=tuple(groups), first_row=first))
    return pieces


def _piece_start(handle, offset: int) -> int:
    """Return where the CSV piece at `offset` starts: 0, or after the first newline at or after offset."""
    # why lazy: fsspec comes with dask, needed only when a file is cut
    from fsspec.utils import seek_delimiter

    if offset == 0:
        return 0
    handle.seek(offset)
    seek_delimiter(handle, b"\n", 1 << 16)
    return handle.tell()


def read_table(piece: FilePiece):
    """Return the pyarrow Table of one piece (a task on a worker); InputError naming the file if unreadable."""
    # why lazy: pyarrow (~0.2 s of import) is needed only by the read tasks on the workers
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    try:
        if piece.kind == "parquet":
            if not piece.row_groups:
                return pq.read_table(piece.path)
            return pq.ParquetFile(piece.path).read_row_groups(list(piece.row_groups))
        if piece.length is None:
            return pcsv.read_csv(piece.path)
        return pcsv.read_csv(io.BytesIO(_csv_bytes(piece)))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{piece.path}: not a readable {piece.kind} file: {exc}") from None


def _csv_bytes(piece: FilePiece) -> bytes:
    """Return the header line and the lines of a CSV byte range (fsspec.utils.read_block, as dask.bytes)."""
    # why lazy: fsspec comes with dask, needed only when a file is cut
    from fsspec.utils import read_block

    with open(piece.path, "rb") as handle:
        header = handle.readline()
        body = read_block(handle, piece.offset, piece.length, delimiter=b"\n")
    if piece.offset == 0:
        return body
    if body and not header.endswith(b"\n"):
        header += b"\n"
    return header + body
