"""COLOR / COLOR-B on the workers, steps 2-3: ratings per color and unit, the subsets' connected components.

The units (partition.color.units_of) follow each rating's rank in its color in shard order;
every shard finds its components per subset, and one merge task per subset joins the pieces that
share an item and packs them into blocks by partition.kernels.component_blocks' rule.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from cluster.color_rounds import ColorState
from cluster.routing import ShardRatings
from partition.color import units_of
from partition.grouping import group_by_key
from partition.jit import cached_njit


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


def _block_of(merged, shard):
    """Return one shard's block of each local component from a `merge_components` result."""
    return merged[0][shard]
