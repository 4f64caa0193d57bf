"""HOGWILD: K random subsets of almost equal size, each cut into B random blocks (thesis sec. 3.3).

Blocks are not made parameter-disjoint: parallel workers may update a shared user row or item
column at the same time, which HOGWILD accepts (Niu et al.). The number of such shared
parameters per subset is recorded in info["overlaps"] (parameters touched by two or more blocks
of that subset; rows and columns counted separately in info["overlap_rows"]/["overlap_cols"]),
so a driver can see how much of a step is racy.
"""

from __future__ import annotations

import numpy as np

from partition.base import Partition
from partition.jit import cached_njit
from partition.kernels import _arity, _param, graph_arrays


@cached_njit
def _count_shared(
    order,
    offsets,
    n_blocks,
    block_of,
    n_params,
    indptr,
    indices,
    first,
    second,
    second_offset,
    fixed_arity,
):
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


def random_blocks(n: int, n_subsets: int, n_blocks: int, seed=0):
    """Return (permutation, subset starts, block of every function, subsets[k][b] sorted).

    Consecutive chunks of one seeded random permutation: subset and block sizes differ by at most one.
    """
    rng = np.random.default_rng(seed)
    permutation = rng.permutation(n)
    subset_starts = -(-np.arange(n_subsets + 1, dtype=np.int64) * n // n_subsets)
    block_of = np.empty(n, dtype=np.int32)
    subsets = []
    for k in range(n_subsets):
        members = permutation[subset_starts[k] : subset_starts[k + 1]]
        block_starts = -(-np.arange(n_blocks + 1, dtype=np.int64) * members.size // n_blocks)
        subset = []
        for b in range(n_blocks):
            chunk = members[block_starts[b] : block_starts[b + 1]]
            block_of[chunk] = b
            subset.append(np.sort(chunk))
        subsets.append(subset)
    return permutation, subset_starts, block_of, subsets


def hogwild(graph, shape, n_blocks: int, n_subsets: int, seed=0) -> Partition:
    """Return the HOGWILD partition: a seeded random split into K x B near-equal blocks."""
    permutation, subset_starts, block_of, subsets = random_blocks(
        graph.n_functions, n_subsets, n_blocks, seed
    )
    shared = _count_shared(
        permutation, subset_starts, n_blocks, block_of, graph.n_params, *graph_arrays(graph)
    )
    del permutation, block_of
    first_col = int(graph.offsets[1]) if graph.is_matrix else graph.n_params
    info = {
        "overlaps": [int(ids.size) for ids in shared],
        "overlap_rows": [int(np.sum(ids < first_col)) for ids in shared],
        "overlap_cols": [int(np.sum(ids >= first_col)) for ids in shared],
    }
    return Partition(scheme="hogwild", shape=tuple(shape), subsets=subsets, seed=seed, info=info)
