"""A cover of ratings on the workers (`ShardedCover`), each shard arranged in its engine order.

Shared by the COLOR / COLOR-B (cluster.coloring) and HOGWILD (cluster.hogwild_blocks) covers:
step 4, `arrange`, and `collect_cover`, a check that brings the ratings to the client.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cluster.routing import ShardRatings
from hamsi.data.ratings import Ratings
from partition.base import Partition
from partition.graph import FactorGraph
from partition.grouping import group_by_key, nested_blocks


@dataclass
class ShardedCover:
    """A COLOR / COLOR-B / HOGWILD cover of ratings on the workers: shards' bounds, cover's sizes.

    row_bounds / col_bounds are the engine's equal intervals (MatrixFactorization.shard_bounds of a
    cover without strata); shard_block_sizes[p, k, b] are row shard p's ratings in block (k, b), in
    that order on its host; rounds and conflicts (ratings uncolored by the repair) measure step 1
    of a coloring (HOGWILD: no colors, 0 rounds).
    """

    scheme: str
    shape: tuple
    row_bounds: np.ndarray
    col_bounds: np.ndarray
    n_subsets: int
    n_colors: int
    color_sizes: np.ndarray
    shard_block_sizes: np.ndarray
    rounds: int
    conflicts: int
    info: dict = field(default_factory=dict)

    @property
    def block_sizes(self) -> np.ndarray:
        """|S_{k,b}| (K x B)."""
        return self.shard_block_sizes.sum(axis=0)


def arrange(data: ShardRatings, found: tuple, n_blocks: int, *blocks_per_subset) -> ShardRatings:
    """Return the shard's ratings in (subset, block, position) order: the engine's order (step 4).

    `data` is in position order (routed as one subset); its held-out ratings and sums are kept.
    """

    subset, label, _ = found
    n_subsets = len(blocks_per_subset)
    block = np.empty(subset.size, dtype=np.int64)
    for k in range(n_subsets):
        mine = subset == k
        block[mine] = blocks_per_subset[k][label[mine]]
    order, offsets = group_by_key(subset * n_blocks + block, n_subsets * n_blocks)
    moved = np.empty(order.size, dtype=np.int32)
    moved[order] = np.arange(order.size, dtype=np.int32)
    return ShardRatings(
        data.shard,
        data.row_lo,
        data.row_hi,
        data.rows[order],
        data.cols[order],
        data.vals[order],
        offsets[::n_blocks].astype(np.int64),
        data.test_rows,
        data.test_cols,
        data.test_vals,
        moved[data.position_order],
        data.value_sums,
    )


def item_of(value, key):
    """Return value[key] (a small task next to its input)."""
    return value[key]


def collect_cover(client, shards: list, cover: ShardedCover):
    """Return (Ratings in shard order, the cover as a Partition of them): a check, not part of a fit.

    It brings every rating to the client, which a fit never does: tests and benchmarks compare the
    cover and the in-process engine on it with what the workers computed.
    """

    n_blocks = cover.row_bounds.size - 1
    parts, blocks, offset = [], [[] for _ in range(cover.n_subsets * n_blocks)], 0
    for data, sizes in zip(client.gather(shards), cover.shard_block_sizes):
        order = data.position_order
        parts.append((data.rows[order] + data.row_lo, data.cols[order], data.vals[order]))
        at = np.empty(order.size, dtype=np.int64)  # engine index -> shard-order index
        at[order] = offset + np.arange(order.size)
        cuts = np.concatenate([[0], np.cumsum(sizes.ravel())])
        for g in range(cuts.size - 1):
            blocks[g].append(np.sort(at[cuts[g] : cuts[g + 1]]))
        offset += order.size
    rows, cols, vals = (np.concatenate(a) for a in zip(*parts))
    flat = [np.concatenate(b) for b in blocks]  # shards in order: each block stays sorted
    sizes = np.array([b.size for b in flat])
    partition = Partition(
        scheme=cover.scheme,
        shape=tuple(cover.shape),
        subsets=nested_blocks(
            np.concatenate(flat), np.concatenate([[0], np.cumsum(sizes)]), cover.n_subsets, n_blocks
        ),
        info=(
            {"n_colors": cover.n_colors, "color_sizes": cover.color_sizes} if cover.n_colors else {}
        ),
    )
    partition.graph = FactorGraph.from_coordinates((rows, cols), cover.shape)
    return Ratings(rows, cols, vals, cover.shape), partition
