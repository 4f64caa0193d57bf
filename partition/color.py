"""COLOR and COLOR-B: coloring of the factor graph, colors packed into K subsets (thesis sec. 3.3, Fig. 3.3).

1. Color the function nodes so that two functions sharing a parameter get different colors
   (first fit for COLOR; a random used-and-free color for COLOR-B). Each color class is a set
   of pairwise parameter-disjoint functions.
2. Pack the color classes, in color order, into K bins of about |I|/K functions with a first-fit
   policy; bin k is the subset S_k. When there are fewer colors than K, the largest classes are
   split first (any part of a color class is still parameter-disjoint).
3. Cut each subset into B blocks. The thesis treats every function as its own block; here blocks
   are the connected components of the subset's factor graph packed into B bins (largest first
   into the lightest). Components share no parameter, so blocks of a subset touch disjoint
   parameters (validate() holds) and can run in parallel. A subset made of one color class has
   singleton components and is split evenly. A subset mixing many classes (the usual case: a
   few thousand colors in K = 20 subsets) is mostly one giant component on real data, which then
   fills one block: the blocks stay exact but give little parallelism (stats()["imbalance"] near
   B; info["largest_component"] per subset). The thesis's parallelism for COLOR is across the
   functions of one color; info["colors"] keeps every function's color for drivers that run a
   subset color class by color class.
"""

from __future__ import annotations

import numpy as np

from partition.base import Partition
from partition.grouping import group_by_key, nested_blocks
from partition.kernels import component_blocks, graph_arrays, greedy_coloring


def color_functions(graph, balanced: bool, seed: int | None = 0) -> tuple[np.ndarray, int]:
    """Return (color of every function, number of colors): first fit, or COLOR-B's random fit."""
    seed = 0 if seed is None else int(seed) % (2**32)
    return greedy_coloring(
        graph.n_functions, graph.n_params, *graph_arrays(graph), bool(balanced), seed
    )


def unit_parts(color_sizes: np.ndarray, n_subsets: int) -> np.ndarray:
    """Return how many units each color class is cut into: the largest split until >= K units."""
    parts = np.ones(color_sizes.shape[0], dtype=np.int64)
    while parts.sum() < n_subsets:  # at most K rounds
        share = np.where(parts < color_sizes, color_sizes / parts, 0.0)
        parts[int(np.argmax(share))] += 1
    return parts


def units_of(colors, rank_in_color, color_sizes, parts) -> np.ndarray:
    """Return the unit of every function: part rank * parts // size of its color (color order)."""
    first_unit = np.concatenate([[0], np.cumsum(parts)[:-1]])
    return (first_unit[colors] + rank_in_color * parts[colors] // color_sizes[colors]).astype(
        np.int32
    )


def split_into_units(
    colors: np.ndarray, color_sizes: np.ndarray, n_subsets: int
) -> tuple[np.ndarray, np.ndarray]:
    """Return (unit of every function, unit sizes): color classes, the largest split until >= K units.

    Unit ids follow color order; a split class keeps its functions' index order across parts.
    """
    parts = unit_parts(color_sizes, n_subsets)
    if np.all(parts == 1):
        return colors, color_sizes.astype(np.int64)
    order, offsets = group_by_key(colors, color_sizes.shape[0])
    rank_in_color = np.empty(colors.shape[0], dtype=np.int64)
    rank_in_color[order] = np.arange(colors.shape[0]) - np.repeat(offsets[:-1], color_sizes)
    units = units_of(colors, rank_in_color, color_sizes, parts)
    return units, np.bincount(units, minlength=int(parts.sum()))


def pack_first_fit(unit_sizes: np.ndarray, n_bins: int) -> np.ndarray:
    """Return the bin of every unit: first bin with room under |I|/K, else the lightest (sec. 3.3).

    Units are visited in color order, as in the thesis ("the new color is put into the bin
    which has less than |I|/K functions"). A final pass moves units into bins left empty, so every
    subset is non-empty whenever there are at least K units.
    """
    capacity = unit_sizes.sum() / n_bins
    load = np.zeros(n_bins, dtype=np.int64)
    bin_of = np.empty(unit_sizes.shape[0], dtype=np.int64)
    # O(#colors * K) on a few thousand colors: cheap next to the coloring itself
    for unit, size in enumerate(unit_sizes):
        fits = np.flatnonzero(load + size <= capacity)
        chosen = int(fits[0]) if fits.size else int(np.argmin(load))
        bin_of[unit] = chosen
        load[chosen] += size
    units_per_bin = np.bincount(bin_of, minlength=n_bins)
    for empty in np.flatnonzero(units_per_bin == 0):
        donor = int(np.argmax(np.where(units_per_bin > 1, load, -1)))
        moved = int(np.flatnonzero(bin_of == donor)[-1])
        bin_of[moved] = empty
        load[donor] -= unit_sizes[moved]
        load[empty] += unit_sizes[moved]
        units_per_bin[donor] -= 1
        units_per_bin[empty] += 1
    return bin_of


def color_partition(
    graph, shape, n_blocks: int, n_subsets: int, balanced: bool, seed=0
) -> Partition:
    """Return the COLOR (balanced=False) or COLOR-B (balanced=True) partition of a factor graph."""
    colors, n_colors = color_functions(graph, balanced, seed)
    color_sizes = np.bincount(colors, minlength=n_colors)
    units, unit_sizes = split_into_units(colors, color_sizes, n_subsets)
    subset_of_unit = pack_first_fit(unit_sizes, n_subsets)
    subset_of = subset_of_unit.astype(np.int32)[units]
    del units
    order, offsets = group_by_key(subset_of, n_subsets)
    block_of, largest = component_blocks(
        order, offsets, n_blocks, graph.n_params, *graph_arrays(graph)
    )
    # int32 keys: K * B is small, and this array is |I| long
    keys = subset_of * np.int32(n_blocks) + block_of
    del subset_of, block_of, order
    order, offsets = group_by_key(keys, n_subsets * n_blocks)
    info = {
        "n_colors": int(n_colors),
        # the parallel groups of the thesis: functions of one color inside a subset are pairwise
        # parameter-disjoint, so a driver may run a subset color by color with full parallelism
        "colors": colors,
        "color_sizes": color_sizes,
        # color classes (or parts of split classes) packed into each subset
        "colors_per_subset": np.bincount(subset_of_unit, minlength=n_subsets).tolist(),
        "largest_component": largest.tolist(),
    }
    return Partition(
        scheme="color-b" if balanced else "color",
        shape=tuple(shape),
        subsets=nested_blocks(order, offsets, n_subsets, n_blocks),
        seed=seed,
        info=info,
    )
