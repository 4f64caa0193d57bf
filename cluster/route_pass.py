"""The routing pass of cluster.dataset (its module step 5): the ratings copied to their row shards.

A pass counts every partition's ratings per (row shard, subset k = block (p, (p + k) mod B)); from
these counts the client knows where every piece goes. Each shard is allocated at its final size on
its host, then the partitions are cut by row shard a window at a time and every piece is copied
into its place: subset k, then position, the order in which `MatrixFactorization.arrange` stores
block (p, k) in process (cluster.routing runs the pieces on the workers).
"""

from __future__ import annotations

from distributed import wait

from cluster.indexing import cut_by_shard, piece_of_shard, shard_block_counts
from cluster.routing import PiecePlaces, empty_shard, fill_shard, finish_shard
from cluster.sources import over_partitions

# partitions cut per window of the routing, per worker (cluster.routing: at most two windows in flight)
ROUTE_WINDOW = 2


def route_shards(
    client, readers: list, where: dict, cover, owner: dict, user_ids, item_ids
) -> list:
    """Return futures of the row shards' ShardRatings, built on their hosts (module step 5, cluster.routing).

    A pass counts every partition's ratings per (shard, subset); then the partitions are cut a
    window at a time and each piece is copied into its place in its shard. A window is submitted
    once the one before the last is in its shards: a worker holds the pieces of two windows at most.
    """
    rb, cb = cover.row_bounds, cover.col_bounds
    places = PiecePlaces.of(
        client.gather(
            over_partitions(
                client, readers, shard_block_counts, row_bounds=rb, col_bounds=cb, **where
            )
        )
    )
    pinned = dict(allow_other_workers=True, pure=False)
    shards = [
        client.submit(
            empty_shard,
            p,
            rb[p],
            rb[p + 1],
            places.subset_cuts[p],
            int(places.test_starts[-1, p]),
            workers=[owner[p]],
            **pinned,
        )
        for p in range(rb.size - 1)
    ]
    window = ROUTE_WINDOW * len(set(owner.values()))
    earlier = []
    for first in range(0, len(readers), window):
        batch = range(first, min(first + window, len(readers)))
        cuts = over_partitions(
            client, [readers[f] for f in batch], cut_by_shard, row_bounds=rb, **where
        )
        for f, cut in zip(batch, cuts):
            for p, shard in enumerate(shards):
                train, test = (
                    places.train_starts[f : f + 2, p],
                    places.test_starts[f : f + 2, p],
                )
                if train[1] == train[0] and test[1] == test[0]:
                    continue
                piece = client.submit(piece_of_shard, cut, p, pure=False)
                shards[p] = client.submit(
                    fill_shard,
                    shard,
                    piece,
                    places.subset_starts[f, p],
                    int(train[0]),
                    int(test[0]),
                    cb,
                    workers=[owner[p]],
                    **pinned,
                )
        with client.as_current():  # distributed.wait asks for the current client
            wait(earlier)
        earlier = list(shards)
    return [
        client.submit(
            finish_shard,
            shards[p],
            user_ids,
            item_ids,
            places.train_starts[:, p],
            places.test_starts[:, p],
            workers=[owner[p]],
            **pinned,
        )
        for p in range(rb.size - 1)
    ]
