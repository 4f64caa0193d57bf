"""Compiled loops over functions and their parameter sets alpha_i, shared by coloring and blocking.

Every kernel reads alpha_i through `_param`/`_arity`, so one compiled loop serves both storage
forms of a FactorGraph: the matrix fast path (first = rows, second = cols, second_offset = m;
no copy of the ratings) and the general CSR form (indptr, indices). Unused arrays are empty.
"""

from __future__ import annotations

import numpy as np

from partition.jit import cached_njit


@cached_njit(inline="always")
def _arity(i, indptr, fixed_arity):
    if fixed_arity > 0:
        return fixed_arity
    return indptr[i + 1] - indptr[i]


@cached_njit(inline="always")
def _param(i, t, indptr, indices, first, second, second_offset, fixed_arity):
    if fixed_arity > 0:
        if t == 0:
            return np.int64(first[i])
        return np.int64(second[i]) + second_offset
    return np.int64(indices[indptr[i] + t])


def graph_arrays(graph) -> tuple:
    """Return (indptr, indices, first, second, second_offset, fixed_arity) for the kernels."""
    empty = np.zeros(0, dtype=np.int64)
    if graph.is_matrix:
        rows, cols = graph.coords
        return (
            empty,
            empty,
            np.ascontiguousarray(rows),
            np.ascontiguousarray(cols),
            int(graph.offsets[1]),
            2,
        )
    indptr, indices = graph.csr()
    return indptr, indices, empty, empty, 0, 0


@cached_njit
def parameter_degrees(
    n_functions, n_params, indptr, indices, first, second, second_offset, fixed_arity
):
    """Return the number of functions touching each parameter node."""
    degree = np.zeros(n_params, dtype=np.int64)
    for i in range(n_functions):
        for t in range(_arity(i, indptr, fixed_arity)):
            degree[_param(i, t, indptr, indices, first, second, second_offset, fixed_arity)] += 1
    return degree


@cached_njit
def _color_bound(n_functions, degree, indptr, indices, first, second, second_offset, fixed_arity):
    """Return 1 + the most colors a function can find forbidden: max_i (1 + sum_p (degree[p] - 1))."""
    max_colors = 1
    for i in range(n_functions):
        seen = 1
        for t in range(_arity(i, indptr, fixed_arity)):
            seen += (
                degree[_param(i, t, indptr, indices, first, second, second_offset, fixed_arity)] - 1
            )
        max_colors = max(max_colors, seen)
    return max_colors


@cached_njit(inline="always")
def _first_free_color(marker, stamp):
    """Return the smallest color whose marker is not `stamp` (first fit, COLOR)."""
    chosen = 0
    while marker[chosen] == stamp:
        chosen += 1
    return chosen


@cached_njit(inline="always")
def _random_free_color(marker, stamp, n_colors, n_forbidden):
    """Return a uniformly random color below n_colors whose marker is not `stamp` (COLOR-B).

    Rejection sampling, with a scan for the r-th free color when 32 draws all hit forbidden ones.
    Draws from numba's generator, seeded by greedy_coloring.
    """
    for _ in range(32):
        c = np.random.randint(0, n_colors)
        if marker[c] != stamp:
            return c
    r = np.random.randint(0, n_colors - n_forbidden)
    for c in range(n_colors):
        if marker[c] != stamp:
            if r == 0:
                return c
            r -= 1
    return -1


@cached_njit
def greedy_coloring(
    n_functions,
    n_params,
    indptr,
    indices,
    first,
    second,
    second_offset,
    fixed_arity,
    balanced,
    seed,
):
    """Return (color per function, number of colors) of a valid coloring (thesis sec. 3.3).

    Functions are visited in index order. Each parameter keeps the list of colors already used
    by its functions (in a slot range sized by its degree, so memory is O(sum |alpha_i|)).
    Visiting function i stamps those colors as forbidden in a color-indexed marker array with
    stamp i + 1, so no clearing is needed between functions.
    first fit (COLOR): the smallest color without the stamp.
    balanced (COLOR-B): a uniformly random used color without the stamp, by rejection sampling
    with a scan as fallback when few are free; a new color only when every used one is forbidden.
    """
    np.random.seed(seed)
    degree = parameter_degrees(
        n_functions, n_params, indptr, indices, first, second, second_offset, fixed_arity
    )
    slot_start = np.zeros(n_params + 1, dtype=np.int64)
    for p in range(n_params):
        slot_start[p + 1] = slot_start[p] + degree[p]
    max_colors = _color_bound(
        n_functions, degree, indptr, indices, first, second, second_offset, fixed_arity
    )
    used_colors = np.empty(slot_start[n_params], dtype=np.int32)
    filled = np.zeros(n_params, dtype=np.int64)
    marker = np.zeros(max_colors + 1, dtype=np.int64)
    colors = np.empty(n_functions, dtype=np.int32)
    n_colors = 0
    for i in range(n_functions):
        stamp = i + 1
        n_forbidden = 0
        arity = _arity(i, indptr, fixed_arity)
        for t in range(arity):
            p = _param(i, t, indptr, indices, first, second, second_offset, fixed_arity)
            for s in range(slot_start[p], slot_start[p] + filled[p]):
                c = used_colors[s]
                if marker[c] != stamp:
                    marker[c] = stamp
                    n_forbidden += 1
        if not balanced:
            chosen = _first_free_color(marker, stamp)
        elif n_forbidden >= n_colors:
            chosen = n_colors
        else:
            chosen = _random_free_color(marker, stamp, n_colors, n_forbidden)
        colors[i] = chosen
        if chosen >= n_colors:
            n_colors = chosen + 1
        for t in range(arity):
            p = _param(i, t, indptr, indices, first, second, second_offset, fixed_arity)
            used_colors[slot_start[p] + filled[p]] = chosen
            filled[p] += 1
    return colors, n_colors


@cached_njit
def _find(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]  # path halving keeps trees shallow
        x = parent[x]
    return x


@cached_njit
def component_blocks(
    order, offsets, n_blocks, n_params, indptr, indices, first, second, second_offset, fixed_arity
):
    """Return the block id of every function: each subset's connected components packed into blocks.

    Subset k is order[offsets[k]:offsets[k+1]]. Functions sharing a parameter are in one
    component, so distinct components touch disjoint parameters; components go, largest first,
    to the least-loaded of the n_blocks blocks (LPT rule). Also returns the size of the largest
    component of each subset.
    """
    n_subsets = offsets.shape[0] - 1
    parent = np.arange(n_params, dtype=np.int64)
    component_size = np.zeros(n_params, dtype=np.int64)
    component_block = np.full(n_params, -1, dtype=np.int64)
    block_of = np.empty(order.shape[0], dtype=np.int32)
    largest = np.zeros(n_subsets, dtype=np.int64)
    load = np.zeros(n_blocks, dtype=np.int64)
    for k in range(n_subsets):
        lo, hi = offsets[k], offsets[k + 1]
        _union_parameters(
            order[lo:hi], parent, indptr, indices, first, second, second_offset, fixed_arity
        )
        roots = _component_roots(
            order[lo:hi],
            parent,
            component_size,
            indptr,
            indices,
            first,
            second,
            second_offset,
            fixed_arity,
        )
        n_roots = roots.shape[0]
        sizes = np.empty(n_roots, dtype=np.int64)
        for r in range(n_roots):
            sizes[r] = component_size[roots[r]]
        by_size = np.argsort(-sizes, kind="mergesort")
        load[:] = 0
        for r in by_size:
            lightest = np.argmin(load)
            component_block[roots[r]] = lightest
            load[lightest] += sizes[r]
            if sizes[r] > largest[k]:
                largest[k] = sizes[r]
        for s in range(lo, hi):
            i = order[s]
            if _arity(i, indptr, fixed_arity) == 0:  # touches nothing: any block is safe
                lightest = np.argmin(load)
                block_of[i] = lightest
                load[lightest] += 1
            else:
                root = _find(
                    parent, _param(i, 0, indptr, indices, first, second, second_offset, fixed_arity)
                )
                block_of[i] = component_block[root]
        # undo only what this subset touched, keeping the pass O(sum |alpha_i|)
        for s in range(lo, hi):
            i = order[s]
            for t in range(_arity(i, indptr, fixed_arity)):
                p = _param(i, t, indptr, indices, first, second, second_offset, fixed_arity)
                parent[p] = p
                component_size[p] = 0
                component_block[p] = -1
    return block_of, largest


@cached_njit
def _union_parameters(
    functions, parent, indptr, indices, first, second, second_offset, fixed_arity
):
    """Join, in the union-find `parent`, the parameters of each of `functions`."""
    for i in functions:
        arity = _arity(i, indptr, fixed_arity)
        if arity == 0:
            continue
        root = _find(
            parent, _param(i, 0, indptr, indices, first, second, second_offset, fixed_arity)
        )
        for t in range(1, arity):
            other = _find(
                parent, _param(i, t, indptr, indices, first, second, second_offset, fixed_arity)
            )
            if other != root:
                parent[other] = root


@cached_njit
def _component_roots(
    functions, parent, component_size, indptr, indices, first, second, second_offset, fixed_arity
):
    """Return the roots of the components of `functions` in first-seen order, counting each
    component's functions into component_size[root]. Functions touching nothing have none."""
    n_roots = 0
    roots = np.empty(functions.shape[0], dtype=np.int64)
    for i in functions:
        if _arity(i, indptr, fixed_arity) == 0:
            continue
        root = _find(
            parent, _param(i, 0, indptr, indices, first, second, second_offset, fixed_arity)
        )
        if component_size[root] == 0:
            roots[n_roots] = root
            n_roots += 1
        component_size[root] += 1
    return roots[:n_roots]
