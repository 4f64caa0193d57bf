"""HOGWILD: K random subsets of almost equal size, each cut into B random blocks (thesis sec. 3.3).

Blocks are not made parameter-disjoint: parallel workers may update a shared user row or item
column at the same time, which HOGWILD accepts (Niu et al.). The number of such shared
parameters per subset is recorded in info["overlaps"] (parameters touched by two or more blocks
of that subset; rows and columns counted separately in info["overlap_rows"]/["overlap_cols"]),
so a driver can see how much of a step is racy.
"""

from __future__ import annotations

import numba
import numpy as np

from partition.base import Partition
from partition.grouping import group_by_key, nested_blocks
from partition.kernels import _arity, _param, graph_arrays


@numba.njit(cache=True)
def _count_shared(order, offsets, n_blocks, block_of, n_params, indptr, indices, first, second,
                  second_offset, fixed_arity):
    """Return, per subset, an array of parameter ids touched by two or more blocks of that subset."""
    owner = np.full(n_params, -1, dtype=np.int64)  # first block seen touching the parameter
    shared = np.zeros(n_params, dtype=np.bool_)
    result = []
    for k in range(offsets.shape[0] - 1):
        found = []
        for s in range(offsets[k], offsets[k + 1]):
            i = order[s]
            for t in range(_arity(i, indptr, fixed_arity)):
                p = _param(i, t, indptr, indices, first, second, second_offset, fixed_arity)
                if owner[p] < 0:
                    owner[p] = block_of[i]
                elif owner[p] != block_of[i] and not shared[p]:
                    shared[p] = True
                    found.append(p)
        for s in range(offsets[k], offsets[k + 1]):
            i = order[s]
            for t in range(_arity(i, indptr, fixed_arity)):
                p = _param(i, t, indptr, indices, first, second, second_offset, fixed_arity)
                owner[p] = -1
                shared[p] = False
        out = np.empty(len(found), dtype=np.int64)
        for j in range(len(found)):
            out[j] = found[j]
        result.append(out)
    return result


def hogwild(graph, shape, n_blocks: int, n_subsets: int, seed=0) -> Partition:
    """Return the HOGWILD partition: a seeded random split into K x B near-equal blocks."""
    n = graph.n_functions
    rng = np.random.default_rng(seed)
    # position in a random permutation decides subset and block: sizes differ by at most one
    slot = np.empty(n, dtype=np.int64)
    slot[rng.permutation(n)] = np.arange(n, dtype=np.int64)
    subset_of = slot * n_subsets // n
    start_of_subset = -(-np.arange(n_subsets + 1, dtype=np.int64) * n // n_subsets)
    subset_sizes = np.diff(start_of_subset)
    rank = slot - start_of_subset[subset_of]
    block_of = (rank * n_blocks // subset_sizes[subset_of]).astype(np.int32)
    del slot, rank
    order, offsets = group_by_key(subset_of, n_subsets)
    shared = _count_shared(order, offsets, n_blocks, block_of, graph.n_params, *graph_arrays(graph))
    keys = subset_of * n_blocks + block_of
    del order, subset_of, block_of
    order, offsets = group_by_key(keys, n_subsets * n_blocks)
    first_col = int(graph.offsets[1]) if graph.is_matrix else graph.n_params
    info = {
        "overlaps": [int(ids.size) for ids in shared],
        "overlap_rows": [int(np.sum(ids < first_col)) for ids in shared],
        "overlap_cols": [int(np.sum(ids >= first_col)) for ids in shared],
    }
    return Partition(scheme="hogwild", shape=tuple(shape), subsets=nested_blocks(order, offsets, n_subsets, n_blocks),
                     seed=seed, info=info)
