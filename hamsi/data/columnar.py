"""Picking the (user, item, rating) columns by name or position; Parquet files and data frames.

Without `columns`, the usual names (userId/user/..., movieId/item/..., rating/value/...) are
recognised, or unnamed columns are taken as the first three.
"""

from __future__ import annotations

import numpy as np

from hamsi.data.file_format import existing_path
from hamsi.data.ratings import Ratings
from hamsi.errors import Advice, InputError

# Lower-cased column names recognised when the caller does not pick columns.
USER_COLUMN_NAMES = ("userid", "user_id", "user", "uid", "row", "i")


ITEM_COLUMN_NAMES = ("movieid", "movie_id", "itemid", "item_id", "item", "movie", "iid", "col", "j")


RATING_COLUMN_NAMES = ("rating", "ratings", "value", "score", "r", "v")


NAME_THE_COLUMNS = Advice(
    api="pass columns=(user, item, rating)",
    cli="name them user, item, rating in the header line, or give hamsi factorize "
    "--columns USER,ITEM,RATING",
)


def pick_columns(names: list[str], columns, source: str) -> tuple[int, int, int]:
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


def read_parquet(path, *, columns=None, duplicates: str = "error") -> Ratings:
    """Return ratings from a Parquet file, read batch by batch (columns picked as in CSV)."""
    # why lazy: pyarrow, only for a Parquet file
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = existing_path(path)
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file: {str(exc).strip()}") from None
    names = parquet.schema_arrow.names
    use = [names[k] for k in pick_columns(names, columns, str(path))]
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
    use = [frame.columns[k] for k in pick_columns(names, columns, "DataFrame")]
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
