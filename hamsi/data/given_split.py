"""A train/test split given with the data: a column of a CSV file that marks the test rows.

Real benchmark files often ship their split (e.g. the Monti et al. Douban set's training and test
masks); `hamsi factorize DATA --split-column NAME` reads it instead of drawing one.
"""

from __future__ import annotations

import numpy as np

from hamsi.errors import InputError

# the accepted spellings of the two sides, compared lower-case and stripped
TRAIN_MARKS = ("train", "0", "false", "0.0")
TEST_MARKS = ("test", "1", "true", "1.0")


def read_split_column(path, column: str, *, columns=None, duplicates: str = "error"):
    """Return (training Ratings, test Ratings) of the CSV file at `path`, split by `column`.

    The file needs a header naming `column`; its values are train/test, 0/1 or false/true (any
    case). An unknown value is refused naming its line and value; nothing is read partly.
    """
    # why lazy: pandas, only for a file with its split in a column
    import pandas as pd

    from hamsi.data.readers import load_ratings

    try:
        frame = pd.read_csv(path, sep=None, engine="python", dtype={column: str})
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(f"{path}: cannot read it as a CSV file with a header: {exc}") from None
    if column not in frame.columns:
        raise InputError(
            f"{path}: no column {column!r} for --split-column; the header has "
            f"{', '.join(map(str, frame.columns))}"
        )
    marks = frame[column].astype(str).str.strip().str.lower()
    is_test = marks.isin(TEST_MARKS).to_numpy()
    unknown = ~(is_test | marks.isin(TRAIN_MARKS).to_numpy())
    if unknown.any():
        first = int(np.flatnonzero(unknown)[0])
        raise InputError(
            f"{path}, line {first + 2}: --split-column {column!r} value "
            f"{frame[column].iloc[first]!r} is neither train/0/false nor test/1/true "
            f"({int(unknown.sum())} such rows)"
        )
    if not is_test.any() or is_test.all():
        side = "test" if not is_test.any() else "training"
        raise InputError(f"{path}: --split-column {column!r} marks no {side} rows")
    rest = frame.drop(columns=[column])
    try:  # a DataFrame row k is line k + 2 of the file (the header is line 1)
        train = load_ratings(rest[~is_test], columns=columns, duplicates=duplicates)
        test = load_ratings(rest[is_test], columns=columns, duplicates=duplicates)
    except InputError as exc:
        raise InputError(f"{path}: {exc} (DataFrame row k is line k + 2)") from None
    return _named(train, path, "train"), _named(test, path, "test")


def _named(ratings, path, side: str):
    ratings.source = f"{path} ({side} rows)"
    return ratings
