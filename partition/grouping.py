"""Grouping function indices by an integer key in O(|I|): the counting sort behind every partitioner."""

from __future__ import annotations

import numpy as np

from partition.jit import cached_njit


@cached_njit
def _counting_sort(keys, n_keys):
    offsets = np.zeros(n_keys + 1, dtype=np.int64)
    for i in range(keys.shape[0]):
        offsets[keys[i] + 1] += 1
    for g in range(n_keys):
        offsets[g + 1] += offsets[g]
    fill = offsets[:-1].copy()
    order = np.empty(keys.shape[0], dtype=np.int64)
    # visiting i in increasing order keeps every group sorted, as Partition requires
    for i in range(keys.shape[0]):
        g = keys[i]
        order[fill[g]] = i
        fill[g] += 1
    return order, offsets


def group_by_key(keys: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (order, offsets): group g is order[offsets[g]:offsets[g+1]], each sorted ascending."""
    return _counting_sort(np.ascontiguousarray(keys), int(n_keys))


def nested_blocks(order: np.ndarray, offsets: np.ndarray, n_subsets: int, n_blocks: int):
    """Return subsets[k][b] as views of `order`, for groups numbered k * n_blocks + b."""
    return [
        [order[offsets[k * n_blocks + b] : offsets[k * n_blocks + b + 1]] for b in range(n_blocks)]
        for k in range(n_subsets)
    ]
