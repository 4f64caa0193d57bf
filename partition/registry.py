"""The scheme registry: `make(scheme, ratings, blocks=B, subsets=K, seed=0)` for every partitioner.

Input checks live here, once; the partitioner modules trust what they receive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from partition.base import Partition
from partition.errors import PartitionError
from partition.graph import FactorGraph

# Thesis sec. 3.3 experiments use K = 20 subsets for COLOR, COLOR-B and HOGWILD.
DEFAULT_SUBSETS = 20


@dataclass(frozen=True)
class Scheme:
    """A registered partitioner: its builder and whether K is tied to B (stratification)."""

    name: str
    build: Callable[..., Partition]
    subsets_equal_blocks: bool
    summary: str


_REGISTRY: dict[str, Scheme] = {}


def register(
    name: str, build: Callable[..., Partition], *, subsets_equal_blocks: bool, summary: str
):
    """Add a partitioner; build(graph, rows, cols, shape, blocks, subsets, seed) -> Partition."""
    _REGISTRY[name] = Scheme(name, build, subsets_equal_blocks, summary)


def schemes() -> tuple[str, ...]:
    """Return the registered scheme names, in registration order."""
    return tuple(_REGISTRY)


def _checked_indices(ratings) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    try:
        rows, cols, shape = np.asarray(ratings.rows), np.asarray(ratings.cols), ratings.shape
    except AttributeError as exc:
        raise PartitionError(
            f"ratings must have .rows, .cols and .shape; got {type(ratings).__name__}"
        ) from exc
    shape = tuple(int(s) for s in shape)
    if len(shape) != 2:
        raise PartitionError(f"ratings.shape must have two entries (users, items); got {shape}")
    if rows.shape != cols.shape or rows.ndim != 1:
        raise PartitionError(
            f"rows and cols must be 1-d arrays of equal length; got {rows.shape} and {cols.shape}"
        )
    if rows.size == 0:
        raise PartitionError("cannot partition empty ratings (0 entries)")
    for name, index, length in (("rows", rows, shape[0]), ("cols", cols, shape[1])):
        if not np.issubdtype(index.dtype, np.integer):
            raise PartitionError(f"ratings.{name} must hold integers; got dtype {index.dtype}")
        low, high = int(index.min()), int(index.max())
        if low < 0 or high >= length:
            raise PartitionError(
                f"ratings.{name} must lie in [0, {length}); got values {low}..{high}"
            )
    return rows, cols, shape


def make(
    scheme: str, ratings, blocks: int, subsets: int | None = None, seed: int | None = 0
) -> Partition:
    """Return the Partition of `ratings` by `scheme` with B = blocks per subset and K = subsets.

    `ratings` is any object with integer arrays `.rows`, `.cols` and a `.shape` (users, items).
    K defaults to B for the stratification schemes (where any other K is an error) and to 20
    (the thesis setting, sec. 3.3) for color, color-b and hogwild.
    """
    key = str(scheme).lower()
    if key not in _REGISTRY:
        raise PartitionError(
            f"unknown partition scheme {scheme!r}; choose one of {', '.join(_REGISTRY)}"
        )
    entry = _REGISTRY[key]
    rows, cols, shape = _checked_indices(ratings)
    if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)) or blocks < 1:
        raise PartitionError(f"blocks must be a positive integer; got {blocks!r}")
    blocks = int(blocks)
    if blocks > min(shape):
        raise PartitionError(
            f"blocks={blocks} is larger than a dimension of the {shape[0]} x {shape[1]} matrix; "
            f"blocks with disjoint rows and columns need blocks <= {min(shape)}"
        )
    if entry.subsets_equal_blocks:
        if subsets is not None and int(subsets) != blocks:
            raise PartitionError(
                f"scheme {key!r} uses K = B subsets; got subsets={subsets} with blocks={blocks}"
            )
        subsets = blocks
    else:
        subsets = DEFAULT_SUBSETS if subsets is None else subsets
        if isinstance(subsets, bool) or not isinstance(subsets, (int, np.integer)) or subsets < 1:
            raise PartitionError(f"subsets must be a positive integer; got {subsets!r}")
        subsets = int(subsets)
        if subsets > rows.size:
            raise PartitionError(
                f"subsets={subsets} is larger than the number of ratings ({rows.size})"
            )
    graph = FactorGraph.from_coordinates((rows, cols), shape)
    result = entry.build(
        graph=graph, rows=rows, cols=cols, shape=shape, blocks=blocks, subsets=subsets, seed=seed
    )
    result.graph = graph
    return result


def _build_color(graph, rows, cols, shape, blocks, subsets, seed):
    # why lazy: partition.jit loads numba (~0.4 s), which `hamsi --help` never needs
    from partition.color import color_partition

    return color_partition(graph, shape, blocks, subsets, balanced=False, seed=seed)


def _build_color_balanced(graph, rows, cols, shape, blocks, subsets, seed):
    # why lazy: partition.jit loads numba (~0.4 s), which `hamsi --help` never needs
    from partition.color import color_partition

    return color_partition(graph, shape, blocks, subsets, balanced=True, seed=seed)


def _build_hogwild(graph, rows, cols, shape, blocks, subsets, seed):
    # why lazy: partition.jit loads numba (~0.4 s), which `hamsi --help` never needs
    from partition.hogwild import hogwild

    return hogwild(graph, shape, blocks, subsets, seed)


def _build_strata(graph, rows, cols, shape, blocks, subsets, seed):
    # why lazy: partition.jit loads numba (~0.4 s), which `hamsi --help` never needs
    from partition.strata import strata

    return strata(rows, cols, shape, blocks, seed)


def _build_strata_balanced(graph, rows, cols, shape, blocks, subsets, seed):
    # why lazy: partition.jit loads numba (~0.4 s), which `hamsi --help` never needs
    from partition.strata import strata_balanced

    return strata_balanced(rows, cols, shape, blocks, seed)


register(
    "color",
    _build_color,
    subsets_equal_blocks=False,
    summary="first-fit coloring, colors packed into K subsets; blocks = packed components",
)
register(
    "color-b",
    _build_color_balanced,
    subsets_equal_blocks=False,
    summary="as color, choosing a random free used color (balanced color sets)",
)
register(
    "hogwild",
    _build_hogwild,
    subsets_equal_blocks=False,
    summary="K random near-equal subsets of B random blocks; overlaps recorded",
)
register(
    "strata",
    _build_strata,
    subsets_equal_blocks=True,
    summary="B x B grid of equal-length intervals; subset k = blocks (p, (p+k) mod B)",
)
register(
    "strata-b",
    _build_strata_balanced,
    subsets_equal_blocks=True,
    summary="as strata, intervals grown to about |I|/B ratings each (balanced)",
)
