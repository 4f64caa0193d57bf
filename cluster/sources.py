"""Where ratings on the workers come from: a Dask DataFrame, or Parquet / CSV files read by tasks.

Step 1 of cluster.dataset: every partition (one per file, or per piece of a file larger than a
read block: cluster.file_pieces) is read and checked (integer ids,
numeric finite ratings) by a task on a worker; a bad value is an InputError naming the file (or
partition), row and column. `partition_readers` only describes the reads: every pass over the
ratings (`over_partitions`) reads them again inside its own graph.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dask
import numpy as np

from cluster.file_pieces import FilePiece, block_bytes, file_pieces, read_table
from hamsi.data.ratings import as_integer_ids
from hamsi.data.readers import _pick_columns
from hamsi.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

FILE_KINDS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


@dataclass(frozen=True)
class TestSplit:
    """Ratings on the workers (`source`) of which a test split is held out: a hash of the pairs.

    The pairs whose hamsi.data.ratings.heldout_mask u falls below `fraction` on the TEST_STREAM
    (an independent hash of the one the validation split takes) are the test ratings: never trained
    or validated on, kept and scored on the workers (cluster.kept). Which pairs they are depends
    only on the raw ids and `seed`, never on the partitioning. The in-memory `Ratings.split` draws
    its test ratings at random instead; `Ratings.split_by_hash(fraction, seed, stream=TEST_STREAM)`
    holds out these same pairs in process.
    """

    __test__ = False  # a name pytest would collect where a test module imports it

    source: object
    fraction: float
    seed: int | None = None

    def __post_init__(self):
        if not (isinstance(self.fraction, (int, float)) and 0.0 < float(self.fraction) < 1.0):
            raise InputError(f"the test fraction must be in (0, 1); got {self.fraction!r}")
        if isinstance(self.source, TestSplit) or not is_distributed_source(self.source):
            raise InputError(
                "a test split on the workers needs a Dask DataFrame or Parquet/CSV files; got "
                f"{type(self.source).__name__}"
            )


def is_distributed_source(source) -> bool:
    """True for a Dask DataFrame, a glob or a directory of Parquet/CSV files, or one larger than a read block.

    A single file of at most `hamsi.read-block-bytes` would be one piece read by one task: it is
    read in process instead, where the search and every duplicates policy apply (hamsi.load_ratings).
    A MovieLens directory is not a source of the workers.
    """
    if isinstance(source, TestSplit):
        return True
    if (type(source).__module__ or "").startswith("dask") and hasattr(source, "columns"):
        return True
    if not isinstance(source, (str, os.PathLike)):
        return False
    text = os.fspath(source)
    if glob.has_magic(text):
        return True
    if os.path.isfile(text):  # one file: on the workers when it is cut into several pieces
        return FILE_KINDS.get(os.path.splitext(text)[1].lower()) is not None and (
            os.path.getsize(text) > block_bytes()
        )
    return os.path.isdir(text) and bool(_files_in(text))


def _files_in(directory: str) -> list:
    """Return the Parquet (else CSV) files of a directory, sorted by name."""
    names = sorted(os.listdir(directory))
    for kind in ("parquet", "csv"):
        found = [
            os.path.join(directory, f)
            for f in names
            if FILE_KINDS.get(os.path.splitext(f)[1].lower()) == kind
        ]
        if found:
            return found
    return []


def source_files(source) -> tuple[list, str]:
    """Return (files sorted by name, "parquet" or "csv") of a path, directory or glob; InputError if none."""
    text = os.fspath(source)
    if os.path.isdir(text):
        files = _files_in(text)
    elif glob.has_magic(text):
        files = sorted(f for f in glob.glob(text) if os.path.isfile(f))
    else:
        files = [text] if os.path.isfile(text) else []
    if not files:
        raise InputError(f"{text}: matches no Parquet or CSV file")
    kinds = {FILE_KINDS.get(os.path.splitext(f)[1].lower()) for f in files}
    if len(kinds) != 1 or None in kinds:
        raise InputError(
            f"{text}: the files must all be .parquet or all .csv; got {sorted(map(str, kinds))}"
        )
    return files, kinds.pop()


def read_rating_file(path: str, kind: str, columns) -> pd.DataFrame:
    """Return the checked (user, item, rating) frame of one Parquet or CSV file (a task on a worker)."""
    return read_piece(FilePiece(path, kind, first_row=0), columns)


def read_piece(piece: FilePiece, columns) -> pd.DataFrame:
    """Return the checked (user, item, rating) frame of a piece of a file (a task on a worker).

    A bad value names the file and its row in the whole file (cluster.file_pieces).
    """
    return checked_frame(read_table(piece).to_pandas(), columns, piece.path, piece.rows_before)


def checked_frame(frame, columns, label: str, rows_before=0):
    """Return frame's (user, item, rating) columns as int64, int64, float64; InputError naming label, row, column.

    rows_before: the rows of the file before the frame (an int, or a function called only when
    a message needs it): the rows named are the file's.
    """
    # why lazy: pandas (~0.8 s of import) is needed only by the read tasks on the workers
    import pandas as pd

    def row(k) -> str:
        return f"{label}: row {k + (rows_before() if callable(rows_before) else rows_before)}"

    names = [str(c) for c in frame.columns]
    use = [frame.columns[k] for k in _pick_columns(names, columns, label)]
    out = {}
    for key, name in zip(("user", "item"), use[:2]):
        out[key] = as_integer_ids(frame[name].to_numpy(), f"{key} id (column {name!r})", row)
    raw = frame[use[2]]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        k = int(np.argmax(bad))
        raise InputError(
            f"{row(k)}: rating {raw.iloc[k]!r} in column {use[2]!r} is not a finite number"
        )
    out["rating"] = values
    return pd.DataFrame(out)


def _pick_names(names, columns) -> list:
    """Return the (user, item, rating) column names of a Dask DataFrame (metadata only)."""
    return [names[k] for k in _pick_columns([str(n) for n in names], columns, "Dask DataFrame")]


def partition_readers(source, columns=None) -> tuple[list, list]:
    """Return (a Delayed per partition giving its checked frame, a label per partition: file or partition number).

    Nothing is read here: every pass over the ratings (`over_partitions`) computes the readers again
    inside its own graph, so a worker holds a partition only while one task of that pass uses it.
    """
    if isinstance(source, (str, os.PathLike)):
        pieces = source_pieces(source)
        read = dask.delayed(read_piece, pure=False)
        return [read(piece, columns) for piece in pieces], [piece.path for piece in pieces]
    use = _pick_names(list(source.columns), columns)
    raw = source[use].to_delayed()
    labels = [f"Dask DataFrame partition {i}" for i in range(len(raw))]
    check = dask.delayed(checked_frame, pure=False)
    return [check(part, [0, 1, 2], label) for part, label in zip(raw, labels)], labels


def source_pieces(source) -> list[FilePiece]:
    """Return the pieces of a path, directory or glob's files, in file order (cluster.file_pieces)."""
    files, kind = source_files(source)
    return [piece for f in files for piece in file_pieces(str(f), kind)]


def rows_before(client, source, partitions: list) -> dict:
    """Return {partition: rows of its file before it} (a task per CSV piece; 0 for a Dask DataFrame)."""
    if not isinstance(source, (str, os.PathLike)):
        return {f: 0 for f in partitions}
    pieces = source_pieces(source)
    counts = client.gather([client.submit(pieces[f].rows_before, pure=False) for f in partitions])
    return dict(zip(partitions, counts))


def over_partitions(client, readers: list, task, **kwargs) -> list:
    """Return futures of task(frame, **kwargs) for each reader's frame, read and used in one graph.

    One graph per pass: dask.order runs each partition's task right after its read, so the frame
    is released at once (a separate graph would read every partition before the first task).
    """
    apply = dask.delayed(task, pure=False)
    return client.compute([apply(reader, **kwargs) for reader in readers])
