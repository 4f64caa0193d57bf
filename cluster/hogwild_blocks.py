"""HOGWILD's random blocks drawn on the workers: partition.hogwild's own draw, on the ratings in shard order."""

from __future__ import annotations

import numpy as np

from cluster.sharded_cover import ShardedCover, arrange, item_of
from partition.hogwild import random_blocks


def hogwild_labels(n: int, n_subsets: int, n_blocks: int, seed) -> tuple:
    """Return (subset, block) of every rating in shard order: partition.hogwild's random blocks.

    The same seeded permutation of the n function indices as in process (one task: 8 bytes per
    rating on one worker while it runs).
    """

    permutation, starts, block, _ = random_blocks(n, n_subsets, n_blocks, seed)
    subset = np.empty(n, dtype=np.int64)
    for k in range(n_subsets):
        subset[permutation[starts[k] : starts[k + 1]]] = k
    return subset, block.astype(np.int64)


def labels_of_shard(labels: tuple, lo: int, hi: int, n_subsets: int, n_blocks: int) -> tuple:
    """Return one shard's (subset, block, None) and its ratings per (subset, block)."""
    subset, block = labels[0][lo:hi].copy(), labels[1][lo:hi].copy()
    counts = np.bincount(subset * n_blocks + block, minlength=n_subsets * n_blocks)
    return (subset, block, None), counts.reshape(n_subsets, n_blocks)


def hogwild_shards(client, shards, owner, shape, row_bounds, col_bounds, sizes, *, n_subsets, seed):
    """Return (futures of the shards in the HOGWILD cover's engine order, the ShardedCover).

    The blocks are partition.hogwild's on the ratings in shard order, so the cover is the one
    `partition.make("hogwild", ...)` gives those ratings with the same seed.
    """
    n_shards = len(shards)
    labels = client.submit(hogwild_labels, int(sum(sizes)), n_subsets, n_shards, seed, pure=False)
    cuts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    found = [
        client.submit(
            labels_of_shard, labels, int(cuts[p]), int(cuts[p + 1]), n_subsets, n_shards, pure=False
        )
        for p in range(n_shards)
    ]
    counts = client.gather([client.submit(item_of, f, 1, pure=False) for f in found])
    identity = np.arange(n_shards)
    arranged = [
        client.submit(
            arrange,
            shards[p],
            client.submit(item_of, found[p], 0, pure=False),
            n_shards,
            *[identity] * n_subsets,
            workers=[owner[p]],
            allow_other_workers=True,
            pure=False,
        )
        for p in range(n_shards)
    ]
    cover = ShardedCover(
        "hogwild",
        tuple(shape),
        np.asarray(row_bounds, dtype=np.int64),
        np.asarray(col_bounds, dtype=np.int64),
        int(n_subsets),
        0,
        np.zeros(0, dtype=np.int64),
        np.stack(counts),
        0,
        0,
    )
    return arranged, cover
