"""COLOR / COLOR-B covers computed where the ratings are: speculative coloring with conflict repair.

(And HOGWILD's random blocks, `hogwild_shards`: partition.hogwild's own draw, made on a worker.)

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

from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from cluster.routing import ShardRatings
from hamsi.data.ratings import Ratings
from partition.base import Partition
from partition.color import pack_first_fit, unit_parts, units_of
from partition.graph import FactorGraph
from partition.grouping import group_by_key, nested_blocks
from partition.hogwild import random_blocks
from partition.jit import cached_njit

COLOR_SCHEMES = ("color", "color-b")
# a round stops the coloring when every shard is done; this many rounds means something is wrong
MAX_ROUNDS = 10_000
_COLOR_BITS = 32


# --------------------------------------------------------------------------- kernels
@cached_njit
def _speculative_colors(
    rows, cols, n_rows, n_items, colors, ext_indptr, ext_colors, n_colors, balanced, seed
):
    """Color the ratings with colors[i] < 0 in index order; return (colors, colors used).

    Forbidden for rating i: the colors of its user's and its item's colored ratings here, and
    ext_colors[ext_indptr[j]:ext_indptr[j + 1]] for its item j (kept by other shards). The choice
    is partition.kernels.greedy_coloring's: first fit, or (balanced) a uniformly random used color
    that is free, a new one only when every used color is forbidden.
    """
    np.random.seed(seed)
    n = rows.shape[0]
    user_start = np.zeros(n_rows + 1, dtype=np.int64)
    item_start = np.zeros(n_items + 1, dtype=np.int64)
    for i in range(n):
        user_start[rows[i] + 1] += 1
        item_start[cols[i] + 1] += 1
    most = 0
    for a in range(n_rows):
        most = max(most, user_start[a + 1])
        user_start[a + 1] += user_start[a]
    most_item = 0
    for j in range(n_items):
        most_item = max(most_item, item_start[j + 1] + ext_indptr[j + 1] - ext_indptr[j])
        item_start[j + 1] += item_start[j]
    user_used = np.empty(n, dtype=np.int32)
    item_used = np.empty(n, dtype=np.int32)
    user_fill = np.zeros(n_rows, dtype=np.int64)
    item_fill = np.zeros(n_items, dtype=np.int64)
    for i in range(n):
        if colors[i] >= 0:
            user_used[user_start[rows[i]] + user_fill[rows[i]]] = colors[i]
            user_fill[rows[i]] += 1
            item_used[item_start[cols[i]] + item_fill[cols[i]]] = colors[i]
            item_fill[cols[i]] += 1
    # a new color is opened only when all used ones are forbidden: never above this bound
    marker = np.zeros(max(n_colors, most + most_item) + 2, dtype=np.int64)
    n_used = n_colors
    for i in range(n):
        if colors[i] >= 0:
            continue
        stamp = i + 1
        n_forbidden = 0
        a, j = rows[i], cols[i]
        for s in range(user_start[a], user_start[a] + user_fill[a]):
            c = user_used[s]
            if marker[c] != stamp:
                marker[c] = stamp
                n_forbidden += 1
        for s in range(item_start[j], item_start[j] + item_fill[j]):
            c = item_used[s]
            if marker[c] != stamp:
                marker[c] = stamp
                n_forbidden += 1
        for s in range(ext_indptr[j], ext_indptr[j + 1]):
            c = ext_colors[s]
            if marker[c] != stamp:
                marker[c] = stamp
                n_forbidden += 1
        if not balanced:
            chosen = 0
            while marker[chosen] == stamp:
                chosen += 1
        elif n_forbidden >= n_used:
            chosen = n_used
        else:
            chosen = -1
            for _ in range(32):
                c = np.random.randint(0, n_used)
                if marker[c] != stamp:
                    chosen = c
                    break
            if chosen < 0:  # most used colors are forbidden: pick the r-th free one directly
                r = np.random.randint(0, n_used - n_forbidden)
                for c in range(n_used):
                    if marker[c] != stamp:
                        if r == 0:
                            chosen = c
                            break
                        r -= 1
        colors[i] = chosen
        n_used = max(n_used, chosen + 1)
        user_used[user_start[a] + user_fill[a]] = chosen
        user_fill[a] += 1
        item_used[item_start[j] + item_fill[j]] = chosen
        item_fill[j] += 1
    return colors, n_used


@cached_njit
def _root(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@cached_njit
def _local_components(rows, cols, subset, n_subsets, n_rows, n_items):
    """Return (component of every rating within its subset, components per subset) on one shard.

    Node (k, user a) is k * (n_rows + n_items) + a, node (k, item j) is ... + n_rows + j; a
    component's number is its order of first appearance among the subset's ratings (index order).
    """
    n_nodes = n_rows + n_items
    parent = np.arange(n_subsets * n_nodes, dtype=np.int64)
    for i in range(rows.shape[0]):
        base = subset[i] * n_nodes
        u = _root(parent, base + rows[i])
        v = _root(parent, base + n_rows + cols[i])
        if u != v:
            parent[v] = u
    label = np.empty(rows.shape[0], dtype=np.int64)
    number = np.full(n_subsets * n_nodes, -1, dtype=np.int64)
    count = np.zeros(n_subsets, dtype=np.int64)
    for i in range(rows.shape[0]):
        k = subset[i]
        r = _root(parent, k * n_nodes + rows[i])
        if number[r] < 0:
            number[r] = count[k]
            count[k] += 1
        label[i] = number[r]
    return label, count


@cached_njit
def _largest_first(sizes, n_blocks):
    """Return the block of every component (given in order of first appearance) and the block loads.

    Largest first (ties in the given order) into the least loaded block, the first of equals:
    partition.kernels.component_blocks' rule.
    """
    block = np.empty(sizes.shape[0], dtype=np.int64)
    load = np.zeros(n_blocks, dtype=np.int64)
    for r in np.argsort(-sizes, kind="mergesort"):
        lightest = np.argmin(load)
        block[r] = lightest
        load[lightest] += sizes[r]
    return block, load


# --------------------------------------------------------------------------- worker tasks
@dataclass
class ColorState:
    """One shard's coloring between rounds: colors (-1: uncolored), which were proposed last round,
    and the (item << 32 | color) pairs other shards kept on this shard's items (sorted)."""

    colors: np.ndarray
    fresh: np.ndarray
    kept: np.ndarray


def _keys(cols, colors) -> np.ndarray:
    return (cols.astype(np.int64) << _COLOR_BITS) | colors.astype(np.int64)


def start_state(data: ShardRatings) -> ColorState:
    """Return the state before round 0: nothing colored, nothing kept elsewhere."""
    n = data.vals.size
    return ColorState(np.full(n, -1, dtype=np.int32), np.zeros(n, bool), np.zeros(0, np.int64))


def color_round(
    data: ShardRatings, state: ColorState, n_items: int, n_colors: int, balanced: bool, seed: int
) -> ColorState:
    """Return the state after this shard's speculative coloring of its uncolored ratings (step 1)."""
    items = state.kept >> _COLOR_BITS
    indptr = np.searchsorted(items, np.arange(n_items + 1)).astype(np.int64)
    ext = (state.kept & ((1 << _COLOR_BITS) - 1)).astype(np.int32)
    uncolored = state.colors < 0
    colors, _ = _speculative_colors(
        data.rows,
        data.cols,
        data.row_hi - data.row_lo,
        n_items,
        state.colors.copy(),
        indptr,
        ext,
        n_colors,
        balanced,
        seed,
    )
    return ColorState(colors, uncolored, state.kept)


def proposals(data: ShardRatings, state: ColorState, col_bounds) -> list:
    """Return this round's (item, color) keys, sorted, one array per referee (item interval)."""
    fresh = np.flatnonzero(state.fresh)
    keys = _keys(data.cols[fresh], state.colors[fresh])
    referee = np.searchsorted(col_bounds, data.cols[fresh], side="right") - 1
    return [np.sort(keys[referee == r]) for r in range(col_bounds.size - 1)]


def referee(round_: int, *proposed) -> list:
    """Return, per shard, (its keys that lost, the keys other shards kept) of one item interval."""
    n = len(proposed)
    keys = np.concatenate(proposed)
    shard = np.repeat(np.arange(n), [p.size for p in proposed])
    turn = (shard - ((keys >> _COLOR_BITS) + round_)) % n
    order = np.lexsort((turn, keys))
    first = np.ones(keys.size, dtype=bool)
    first[1:] = keys[order][1:] != keys[order][:-1]
    won = np.zeros(keys.size, dtype=bool)
    won[order[first]] = True
    return [(keys[(shard == p) & ~won], np.sort(keys[(shard != p) & won])) for p in range(n)]


def settle(data: ShardRatings, state: ColorState, *verdicts) -> ColorState:
    """Return the state with this shard's lost proposals uncolored and the pairs kept elsewhere added."""
    colors = state.colors.copy()
    lost = np.concatenate([v[0] for v in verdicts])
    if lost.size:
        fresh = np.flatnonzero(state.fresh)
        colors[fresh[np.isin(_keys(data.cols[fresh], colors[fresh]), lost)]] = -1
    # referees hold ascending item intervals and sort their keys: the concatenation is sorted
    kept = np.concatenate([v[1] for v in verdicts])
    items = kept >> _COLOR_BITS
    rated = np.zeros(int(max(items.max(initial=-1), data.cols.max(initial=-1))) + 1, dtype=bool)
    rated[data.cols] = True
    # two sorted runs of distinct keys (a kept pair is forbidden to every later proposer): a
    # stable sort merges them in linear time
    merged = np.concatenate([state.kept, kept[rated[items]]])
    return ColorState(colors, np.zeros(colors.size, bool), np.sort(merged, kind="stable"))


def progress(state: ColorState) -> tuple:
    """Return (uncolored ratings, colors used + 1 at most) of a shard: two numbers for the client."""
    return int(np.count_nonzero(state.colors < 0)), int(state.colors.max(initial=-1)) + 1


def color_counts(state: ColorState, n_colors: int) -> np.ndarray:
    """Return the shard's ratings per color."""
    return np.bincount(state.colors, minlength=n_colors)


def unit_counts(state: ColorState, color_sizes, parts, before, n_units: int) -> tuple:
    """Return (the unit of every rating, ratings per unit) on a shard (partition.color.units_of).

    before[c]: ratings of color c on earlier shards, so a rating's rank in its color follows
    shard order.
    """

    colors = state.colors
    order, offsets = group_by_key(colors, color_sizes.size)
    rank = np.empty(colors.size, dtype=np.int64)
    rank[order] = np.arange(colors.size) - np.repeat(offsets[:-1], np.diff(offsets))
    units = units_of(colors, rank + before[colors], color_sizes, parts)
    return units, np.bincount(units, minlength=n_units)


def components(data: ShardRatings, units, subset_of_unit, n_subsets: int, n_items: int) -> tuple:
    """Return (subset, component of every rating, per subset: (items, components, sizes)) (step 3)."""
    subset = np.asarray(subset_of_unit, dtype=np.int64)[units]
    label, count = _local_components(
        data.rows, data.cols, subset, n_subsets, data.row_hi - data.row_lo, n_items
    )
    pieces = []
    for k in range(n_subsets):
        mine = subset == k
        width = max(int(count[k]), 1)
        links = np.unique(data.cols[mine].astype(np.int64) * width + label[mine])
        pieces.append((links // width, links % width, np.bincount(label[mine], minlength=width)))
    return subset, label, pieces


def merge_components(n_blocks: int, n_items: int, *pieces) -> tuple:
    """Return (per shard: the block of each local component, and its ratings per block) of one subset.

    Pieces sharing an item are one component; components are ordered by first appearance in
    shard order (the smallest shard, then its own order) and packed by `_largest_first`.
    """

    offsets = np.concatenate([[0], np.cumsum([p[2].size for p in pieces])]).astype(np.int64)
    n_local = int(offsets[-1])
    heads = np.concatenate([p[1] + offsets[s] for s, p in enumerate(pieces)])
    tails = n_local + np.concatenate([p[0] for p in pieces])
    graph = coo_matrix(
        (np.ones(heads.size, dtype=np.int8), (heads, tails)),
        shape=(n_local + n_items, n_local + n_items),
    )
    _, label = connected_components(graph, directed=False)
    label = label[:n_local]
    sizes = np.concatenate([p[2] for p in pieces])
    # number the components by their first local piece (local pieces are in appearance order)
    first = np.full(label.max(initial=-1) + 1, n_local, dtype=np.int64)
    np.minimum.at(first, label, np.arange(n_local))
    present = np.flatnonzero(first < n_local)
    order = present[np.argsort(first[present], kind="stable")]
    number = np.empty(label.max(initial=-1) + 1, dtype=np.int64)
    number[order] = np.arange(order.size)
    total = np.bincount(number[label], weights=sizes, minlength=order.size).astype(np.int64)
    block, _ = _largest_first(total, n_blocks)
    of_piece = block[number[label]]
    mine = [slice(offsets[s], offsets[s + 1]) for s in range(len(pieces))]
    return [of_piece[m] for m in mine], [
        np.bincount(of_piece[m], weights=sizes[m], minlength=n_blocks).astype(np.int64)
        for m in mine
    ]


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


# --------------------------------------------------------------------------- the client side
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
    states = [client.submit(start_state, shards[p], **here[p]) for p in range(n_shards)]
    n_colors, rounds, conflicts = 0, 0, 0
    while True:
        states = _coloring_round(
            client, shards, states, here, col_bounds, n_items, n_colors, balanced, (seed, rounds)
        )
        status = client.gather(client.map(progress, states, pure=False))
        rounds += 1
        n_colors = max([n_colors] + [s[1] for s in status])
        left = sum(s[0] for s in status)
        conflicts += left
        if left == 0:
            break
        if rounds >= MAX_ROUNDS:
            raise RuntimeError(f"the coloring has {left} ratings uncolored after {rounds} rounds")
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
        for p in range(n_shards)
    ]
    unit_sizes = np.sum(
        client.gather([client.submit(_item, u, 1, pure=False) for u in units]), axis=0
    )
    subset_of_unit = pack_first_fit(unit_sizes, n_subsets)
    found = [
        client.submit(
            components,
            shards[p],
            client.submit(_item, units[p], 0, pure=False),
            subset_of_unit,
            n_subsets,
            n_items,
            **here[p],
        )
        for p in range(n_shards)
    ]
    pieces = [client.submit(_item, f, 2, pure=False) for f in found]
    merged = [
        client.submit(
            merge_components,
            n_shards,
            n_items,
            *[client.submit(_item, pieces[p], k, pure=False) for p in range(n_shards)],
            pure=False,
        )
        for k in range(n_subsets)
    ]
    counts = client.gather([client.submit(_item, m, 1, pure=False) for m in merged])
    arranged = [
        client.submit(
            arrange,
            shards[p],
            found[p],
            n_shards,
            *[client.submit(_block_of, merged[k], p, pure=False) for k in range(n_subsets)],
            **here[p],
        )
        for p in range(n_shards)
    ]
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


def _coloring_round(client, shards, states, here, col_bounds, n_items, n_colors, balanced, key):
    """Return the futures of the states after one round: color, propose, referee, settle."""
    n_shards = len(shards)
    seeds = np.random.SeedSequence([int(k) % 2**63 for k in key]).generate_state(n_shards)
    states = [
        client.submit(
            color_round, shards[p], states[p], n_items, n_colors, balanced, int(seeds[p]), **here[p]
        )
        for p in range(n_shards)
    ]
    proposed = [
        client.submit(proposals, shards[p], states[p], col_bounds, **here[p])
        for p in range(n_shards)
    ]
    verdicts = [
        client.submit(
            referee,
            key[1],
            *[client.submit(_item, proposed[p], r, pure=False) for p in range(n_shards)],
            pure=False,
        )
        for r in range(col_bounds.size - 1)
    ]
    return [
        client.submit(
            settle,
            shards[p],
            states[p],
            *[client.submit(_item, v, p, pure=False) for v in verdicts],
            **here[p],
        )
        for p in range(n_shards)
    ]


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
    counts = client.gather([client.submit(_item, f, 1, pure=False) for f in found])
    identity = np.arange(n_shards)
    arranged = [
        client.submit(
            arrange,
            shards[p],
            client.submit(_item, found[p], 0, pure=False),
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


def _item(value, key):
    """Return value[key] (a small task next to its input)."""
    return value[key]


def _block_of(merged, shard):
    """Return one shard's block of each local component from a `merge_components` result."""
    return merged[0][shard]


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
