"""Ratings routed to their row shards, each copied straight to its place in the engine's order.

Row shard p stores its training ratings as the engine visits them: subset k (block (p, (p + k) mod
B), partition.strata) after subset k - 1, each block in position order (the order of the
concatenated partitions), as `MatrixFactorization.arrange` stores them in process. A count pass
tells every partition how many of its ratings fall in each (shard, subset) (`block_counts`); from
these counts alone every partition's piece of shard p has a known place in the shard's arrays
(`PiecePlaces`). So a shard is allocated once at its final size on its host (`empty_shard`), each
piece is copied into its place (`fill_shard`) and dropped, and nothing is concatenated or sorted:
a host holds its shard (20 bytes per rating: 16 of ratings, 4 of position order) and the pieces
in flight, never all of its partitions or all of its pieces (cluster.dataset cuts them a window
of partitions at a time).

The fills of a shard form a chain of tasks, each writing into the array its predecessor returned.
That breaks the usual rule that a task never mutates its input, safely: the chain's array has no
other reader, and every fill writes fixed values into its own slots, so a fill that runs again
(a retry, a recomputation after a lost worker) writes the same bytes.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

import numpy as np
from dask.sizeof import sizeof

# ratings gathered per step when a reduction walks a shard in position order (bounded temporaries)
ORDER_CHUNK = 1 << 20


@dataclass
class Piece:
    """One partition's ratings of row shard p, in position order: training and held-out (local rows)."""

    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    test_rows: np.ndarray
    test_cols: np.ndarray
    test_vals: np.ndarray


@dataclass
class ShardRatings:
    """Row shard p's ratings on its host: training ratings in engine order, held-out ones by position.

    rows are local (global row - row_lo); subset_cuts[k]:subset_cuts[k+1] is subset k's block. The
    reductions that must agree with the in-process engine run in position order (the caller's
    order of the ratings, `user_sums`); position_order[i] is the engine index of the i-th training
    rating in position order (4 bytes per rating).
    """

    shard: int
    row_lo: int
    row_hi: int
    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    subset_cuts: np.ndarray
    test_rows: np.ndarray
    test_cols: np.ndarray
    test_vals: np.ndarray
    position_order: np.ndarray
    value_sums: np.ndarray | None = None  # per local user, in position order (hamsi.data.moments)

    def in_position_order(self) -> tuple:
        """Return (rows, cols, vals) of the training ratings in position order (temporaries)."""
        order = self.position_order
        return self.rows[order], self.cols[order], self.vals[order]

    def user_sums(self, transform=None) -> np.ndarray:
        """Return sum_i transform(v_i) per local user, each user's terms added in position order.

        np.add.at adds one term after the other, as np.bincount does over the position-ordered
        arrays (hamsi.data.moments.user_sums): the same bits, with temporaries of ORDER_CHUNK ratings.
        """
        out = np.zeros(self.row_hi - self.row_lo)
        for start in range(0, self.position_order.size, ORDER_CHUNK):
            engine = self.position_order[start : start + ORDER_CHUNK]
            vals = self.vals[engine]
            np.add.at(out, self.rows[engine], vals if transform is None else transform(vals))
        return out

    def positions_of(self, engine: np.ndarray) -> np.ndarray:
        """Return the position-order indices of the training ratings at engine indices `engine`, ascending."""
        return np.flatnonzero(np.isin(self.position_order, engine))

    def subsets(self, name: str) -> list:
        """Return the array `name` (rows, cols, vals) cut into the K subsets' blocks (views)."""
        array = getattr(self, name)
        return [
            array[self.subset_cuts[k] : self.subset_cuts[k + 1]]
            for k in range(self.subset_cuts.size - 1)
        ]

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (what Dask's memory accounting should count)."""
        return sum(
            a.nbytes
            for a in (
                self.rows,
                self.cols,
                self.vals,
                self.test_rows,
                self.test_cols,
                self.test_vals,
                self.position_order,
            )
        )


# Dask's size of a shard: what its memory accounting shows, and what makes moving a fill (and
# the shard it writes into) to another worker look as costly as it is to the work stealer.
sizeof.register(ShardRatings)(lambda data: data.nbytes)


class DuplicatePair(Exception):
    """A (user, item) pair that occurs twice: its raw ids and the partitions of both occurrences."""

    def __init__(self, user, item, partitions):
        super().__init__(user, item, partitions)
        self.user, self.item, self.partitions = user, item, partitions


def subset_of(cols: np.ndarray, col_bounds: np.ndarray, shard) -> np.ndarray:
    """Return each rating's subset k in row shard `shard`: (its item shard - shard) mod B."""
    n_blocks = col_bounds.size - 1
    return (np.searchsorted(col_bounds, cols, side="right") - 1 - shard) % n_blocks


def block_counts(rows, cols, held, row_bounds, col_bounds) -> np.ndarray:
    """Return the (B, B + 1) counts of one partition: [p, k] training ratings of shard p in subset k, [p, B] held out."""
    n_blocks = row_bounds.size - 1
    shard = np.searchsorted(row_bounds, rows, side="right") - 1
    train = ~held
    out = np.zeros((n_blocks, n_blocks + 1), dtype=np.int64)
    out[:, :n_blocks] = np.bincount(
        shard[train] * n_blocks + subset_of(cols[train], col_bounds, shard[train]),
        minlength=n_blocks * n_blocks,
    ).reshape(n_blocks, n_blocks)
    out[:, n_blocks] = np.bincount(shard[held], minlength=n_blocks)
    return out


def cut_pieces(rows, cols, vals, held, row_bounds) -> list:
    """Return one partition's Piece of every row shard (a task next to the partition)."""
    shard = np.searchsorted(row_bounds, rows, side="right") - 1
    pieces = []
    for p in range(row_bounds.size - 1):
        mine = shard == p
        train, test = mine & ~held, mine & held
        lo = np.int32(row_bounds[p])
        pieces.append(
            Piece(
                rows[train] - lo, cols[train], vals[train], rows[test] - lo, cols[test], vals[test]
            )
        )
    return pieces


@dataclass
class PiecePlaces:
    """Where partition f's piece of shard p goes, from every partition's `block_counts` (client side, small).

    subset_cuts[p]: shard p's subset boundaries; subset_starts[f, p, k]: where f's subset-k ratings
    start in shard p's arrays (after those of partitions 0..f-1); train_starts[f, p] / test_starts[f, p]:
    where they start in position order (F + 1 rows: the last is the shard's total).
    """

    subset_cuts: np.ndarray
    subset_starts: np.ndarray
    train_starts: np.ndarray
    test_starts: np.ndarray

    @classmethod
    def of(cls, counts: list) -> PiecePlaces:
        """Return the places of pieces with per-partition counts `counts` (list of (B, B + 1) arrays)."""
        counts = np.stack(counts)
        n_blocks = counts.shape[1]
        train, test = counts[:, :, :n_blocks], counts[:, :, n_blocks]

        def before(c):  # exclusive prefix sums over the partitions, with the total as the last row
            return np.concatenate(
                [np.zeros((1,) + c.shape[1:], dtype=np.int64), np.cumsum(c, axis=0)]
            )

        totals = train.sum(axis=0)
        subset_cuts = np.concatenate(
            [np.zeros((n_blocks, 1), dtype=np.int64), np.cumsum(totals, axis=1)], axis=1
        )
        return cls(
            subset_cuts,
            before(train)[:-1] + subset_cuts[None, :, :-1],
            before(train.sum(axis=2)),
            before(test),
        )


def empty_shard(
    shard: int, row_lo: int, row_hi: int, subset_cuts: np.ndarray, n_test: int
) -> ShardRatings:
    """Return shard `shard`'s ShardRatings at its final size, to be filled by `fill_shard`."""
    n = int(subset_cuts[-1])
    return ShardRatings(
        shard,
        int(row_lo),
        int(row_hi),
        np.empty(n, dtype=np.int32),
        np.empty(n, dtype=np.int32),
        np.empty(n),
        np.asarray(subset_cuts, dtype=np.int64),
        np.empty(n_test, dtype=np.int32),
        np.empty(n_test, dtype=np.int32),
        np.empty(n_test),
        np.empty(n, dtype=np.int32),
    )


def fill_shard(
    data: ShardRatings, piece: Piece, subset_starts, train_start: int, test_start: int, col_bounds
) -> ShardRatings:
    """Copy one partition's piece into its places in `data` (PiecePlaces) and return `data` (module docstring)."""
    subset = subset_of(piece.cols, col_bounds, data.shard)
    for k in range(data.subset_cuts.size - 1):
        mine = np.flatnonzero(subset == k)
        at = int(subset_starts[k])
        data.rows[at : at + mine.size] = piece.rows[mine]
        data.cols[at : at + mine.size] = piece.cols[mine]
        data.vals[at : at + mine.size] = piece.vals[mine]
        data.position_order[train_start + mine] = np.arange(at, at + mine.size, dtype=np.int32)
    end = test_start + piece.test_vals.size
    data.test_rows[test_start:end], data.test_cols[test_start:end] = (
        piece.test_rows,
        piece.test_cols,
    )
    data.test_vals[test_start:end] = piece.test_vals
    return data


def finish_shard(data: ShardRatings, user_ids, item_ids, train_starts, test_starts) -> ShardRatings:
    """Return `data` with its per-user value sums; DuplicatePair if a (user, item) pair occurs twice.

    A repeated pair has one item, so one subset: each block is checked on its own (sorted keys, 4
    or 8 bytes per rating of the block); the held-out ratings apart (the split keeps pairs together).
    """
    blocks = (
        (data.rows, data.cols, data.subset_cuts, train_starts, data.positions_of),
        (data.test_rows, data.test_cols, np.array([0, data.test_rows.size]), test_starts, np.sort),
    )
    for rows, cols, cuts, starts, positions_of in blocks:
        for k in range(cuts.size - 1):
            pair = _repeated_pair(
                rows[cuts[k] : cuts[k + 1]], cols[cuts[k] : cuts[k + 1]], item_ids.size
            )
            if pair is not None:
                both = np.flatnonzero((rows == pair[0]) & (cols == pair[1]))[:2]
                partitions = np.searchsorted(starts, positions_of(both), side="right") - 1
                raise DuplicatePair(
                    int(user_ids[data.row_lo + pair[0]]),
                    int(item_ids[pair[1]]),
                    [int(f) for f in partitions],
                )
    data.value_sums = data.user_sums()
    return data


def _repeated_pair(rows: np.ndarray, cols: np.ndarray, n_items: int):
    """Return (row, col) of a pair that occurs twice in the block, or None (keys of 4 bytes when they fit)."""
    if rows.size < 2:
        return None
    dtype = np.uint32 if (int(rows.max()) + 1) * n_items <= 1 << 32 else np.int64
    keys = rows.astype(dtype)
    keys *= dtype(n_items)
    keys += cols.view(np.uint32) if dtype is np.uint32 else cols  # cols >= 0: the same bits
    keys.sort()
    same = keys[1:] == keys[:-1]
    if not same.any():
        return None
    key = int(keys[int(np.argmax(same))])
    return key // n_items, key % n_items


def release_freed_memory() -> None:
    """Give the memory the routing freed back to the OS: pyarrow's pool, then glibc's free pages.

    Both allocators keep freed pages for reuse, so a worker's RSS stays at the routing's peak
    while the fit's state grows on top of it; Dask's documentation trims glibc the same way
    (worker-memory, "Manually trim memory"). A no-op where there is no glibc.
    """
    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
