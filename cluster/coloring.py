"""COLOR / COLOR-B covers computed where the ratings are: speculative coloring with conflict repair.

Step 1 is cluster.color_rounds, steps 2-3 cluster.color_blocks, step 4 and the cover
cluster.sharded_cover; this module runs them (`color_shards`). HOGWILD's random blocks are drawn on
the workers by cluster.hogwild_blocks.

cluster.dataset first routes the ratings to B row shards of equal user intervals (the in-process
engine's row shards for a cover without strata), each in position order. Then, by tasks on the
shards' hosts (thesis sec. 3.3, steps of partition.color):

1. color   speculative coloring (Gebremedhin & Manne 2000). Round r: every shard colors its
           uncolored ratings greedily in position order, as partition.kernels.greedy_coloring does
           (first fit for COLOR, a random used-and-free color for COLOR-B), forbidding the colors of
           its user's ratings (all on this shard), of its item's ratings on this shard, and those
           other shards kept on its item in earlier rounds. A user's ratings live on one shard, so
           the only possible conflict is two shards giving one item the same color in one round.
   repair  every shard sends the round's (item, color) proposals to B referee tasks (item
           intervals). A pair proposed by several shards is kept by one, the first proposer at or
           after shard (item + r) mod B (no shard always loses); the others' ratings are uncolored
           for round r + 1. Each shard learns the pairs other shards kept on its items. Every
           proposed pair is kept once, so each round colors at least one rating: the rounds end.
2. pack    the color sizes, summed on the client (O(colors) numbers), are split into >= K units and
           packed first fit into K subsets (partition.color.unit_parts, pack_first_fit: the
           in-process decisions on the same numbers).
3. blocks  each shard finds, per subset, the connected components of its ratings (its users and
           the items they rate); K merge tasks join the pieces that share an item and pack the
           components, largest first and ties in order of first appearance, into the lightest of B
           blocks (partition.kernels.component_blocks' rule).
4. arrange each shard reorders its ratings to (subset, block, position): the engine's order.

The function index of this cover is "shard order": row shard, then position. Steps 2-4 take the
in-process decisions of partition.color (its packing functions, component_blocks' rule) on that
order. `collect_cover` (a check: it brings the ratings to the client) returns the ratings in shard
order and the cover as a Partition: the Dask run of those ratings from memory on it gives the
worker run's iterates bit for bit, the in-process engine equal to rounding (cluster/README.md).
The coloring itself differs from the sequential one (its rounds see other shards' choices late):
docs/benchmarks.md compares the colors and imbalance.
"""

from __future__ import annotations

import numpy as np

from cluster.color_blocks import (  # noqa: F401 (some re-exported: callers import them from here)
    _block_of,
    color_counts,
    components,
    merge_components,
    unit_counts,
)
from cluster.color_rounds import (  # noqa: F401 (some re-exported: callers import them from here)
    MAX_ROUNDS,
    ColorState,
    color_round,
    progress,
    proposals,
    referee,
    settle,
    speculative_coloring,
    start_state,
)
from cluster.hogwild_blocks import (  # noqa: F401 (re-exported: callers import them from here)
    hogwild_labels,
    hogwild_shards,
    labels_of_shard,
)
from cluster.sharded_cover import (  # noqa: F401 (some re-exported: callers import them from here)
    ShardedCover,
    arrange,
    collect_cover,
    item_of,
)
from partition.color import pack_first_fit, unit_parts

COLOR_SCHEMES = ("color", "color-b")


def color_shards(
    client,
    shards: list,
    owner: dict,
    shape: tuple,
    row_bounds,
    col_bounds,
    *,
    scheme: str,
    n_subsets: int,
    seed: int,
):
    """Return (futures of the shards in the cover's engine order, the ShardedCover) (module steps 1-4).

    `shards`: futures of the row shards' ShardRatings in position order (routed as one subset).
    """
    balanced = scheme == "color-b"
    n_shards, n_items = len(shards), int(shape[1])
    here = [dict(workers=[owner[p]], allow_other_workers=True, pure=False) for p in range(n_shards)]
    states, n_colors, rounds, conflicts = speculative_coloring(
        client, shards, here, col_bounds, n_items, balanced, seed
    )
    color_sizes, units, subset_of_unit = _packed_units(client, states, here, n_colors, n_subsets)
    found, merged, counts = _component_blocks(
        client, shards, here, units, subset_of_unit, n_subsets, n_items
    )
    arranged = _arranged(client, shards, here, found, merged)
    cover = ShardedCover(
        scheme,
        tuple(shape),
        np.asarray(row_bounds, dtype=np.int64),
        np.asarray(col_bounds, dtype=np.int64),
        int(n_subsets),
        int(n_colors),
        color_sizes,
        np.array([[counts[k][p] for k in range(n_subsets)] for p in range(n_shards)]),
        rounds,
        conflicts,
        info={"colors_per_subset": np.bincount(subset_of_unit, minlength=n_subsets).tolist()},
    )
    return arranged, cover


def _packed_units(client, states: list, here: list, n_colors: int, n_subsets: int) -> tuple:
    """Return (the color sizes, futures of the shards' unit counts, each unit's subset) (module step 2).

    here: each shard's task placement (its host). The color sizes are summed on the client, split
    into units and packed into K subsets as partition.color decides in process.
    """
    per_shard = client.gather(
        [client.submit(color_counts, s, n_colors, pure=False) for s in states]
    )
    color_sizes = np.sum(per_shard, axis=0)
    parts = unit_parts(color_sizes, n_subsets)
    n_units = int(parts.sum())
    # ratings of each color on earlier shards: a rating's rank in its color follows shard order
    before = np.cumsum([np.zeros(n_colors, np.int64)] + per_shard[:-1], axis=0)
    units = [
        client.submit(unit_counts, states[p], color_sizes, parts, before[p], n_units, **here[p])
        for p in range(len(here))
    ]
    unit_sizes = np.sum(
        client.gather([client.submit(item_of, u, 1, pure=False) for u in units]), axis=0
    )
    return color_sizes, units, pack_first_fit(unit_sizes, n_subsets)


def _component_blocks(
    client, shards: list, here: list, units: list, subset_of_unit, n_subsets: int, n_items: int
) -> tuple:
    """Return futures of (each shard's components, each subset's merged blocks), and the block sizes.

    Module step 3: every shard finds its components per subset; K merge tasks join the pieces
    that share an item and pack them into B blocks (partition.kernels.component_blocks' rule).
    """
    n_shards = len(shards)
    found = [
        client.submit(
            components,
            shards[p],
            client.submit(item_of, units[p], 0, pure=False),
            subset_of_unit,
            n_subsets,
            n_items,
            **here[p],
        )
        for p in range(n_shards)
    ]
    pieces = [client.submit(item_of, f, 2, pure=False) for f in found]
    merged = [
        client.submit(
            merge_components,
            n_shards,
            n_items,
            *[client.submit(item_of, pieces[p], k, pure=False) for p in range(n_shards)],
            pure=False,
        )
        for k in range(n_subsets)
    ]
    counts = client.gather([client.submit(item_of, m, 1, pure=False) for m in merged])
    return found, merged, counts


def _arranged(client, shards: list, here: list, found: list, merged: list) -> list:
    """Return futures of the shards reordered to (subset, block, position): module step 4."""
    n_shards = len(shards)
    return [
        client.submit(
            arrange,
            shards[p],
            found[p],
            n_shards,
            *[client.submit(_block_of, merged[k], p, pure=False) for k in range(len(merged))],
            **here[p],
        )
        for p in range(n_shards)
    ]
