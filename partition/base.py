"""The `Partition` result: a cover of the rating (function) indices by K subsets of blocks."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from partition.errors import PartitionError
from partition.graph import FactorGraph
from partition.plots import plot_partition


@dataclass(eq=False)
class Partition:
    """A cover S_1..S_K of the function indices, each S_k cut into blocks (thesis eq. 3.2).

    subsets[k][b] is a sorted int64 array of rating indices (positions in ratings.rows/cols);
    every rating is in exactly one block. Within a subset, blocks touch disjoint parameters
    (user rows and item columns), except for HOGWILD, which records its overlaps.

    For STRATA and STRATA-B, row_bounds and col_bounds hold the B+1 interval boundaries of each
    dimension, and block_intervals[k][b] = (p, j) says block b of subset k is the rectangle
    row interval p x column interval j, with j = (p + k) mod B.

    `graph` is the FactorGraph the partition was built from (set by `partition.make`); it lets
    `validate()` and `block_parameters()` work without passing the ratings again.
    """

    scheme: str
    shape: tuple[int, int]
    subsets: list[list[np.ndarray]]
    seed: int | None = None
    row_bounds: np.ndarray | None = None
    col_bounds: np.ndarray | None = None
    block_intervals: list[list[tuple[int, int]]] | None = None
    info: dict = field(default_factory=dict)
    graph: object | None = field(default=None, repr=False)

    @property
    def n_subsets(self) -> int:
        """K, the number of subsets in the cover."""
        return len(self.subsets)

    @property
    def n_functions(self) -> int:
        """|I|, the number of rating indices covered."""
        return int(sum(block.size for subset in self.subsets for block in subset))

    def block_sizes(self) -> list[list[int]]:
        """Return |S_{k,b}| for every subset k and block b, in schedule order."""
        return [[int(block.size) for block in subset] for subset in self.subsets]

    def _graph_or(self, ratings):
        if ratings is not None:
            return FactorGraph.from_ratings(ratings)
        if self.graph is None:
            raise PartitionError("this Partition has no factor graph attached; pass the ratings")
        return self.graph

    def block_parameters(self, k: int, b: int, ratings=None) -> np.ndarray:
        """Return alpha_{k,b}, the sorted parameter ids touched by block b of subset k (sec. 3.1).

        Ids are global: row r is r, column c is shape[0] + c.
        """
        return self._graph_or(ratings).block_parameters(self.subsets[k][b])

    def shared_parameters(self, k: int, ratings=None) -> np.ndarray:
        """Return the parameter ids of subset k touched by two or more of its blocks."""
        return self._graph_or(ratings).shared_parameters(self.subsets[k])

    def validate(self, ratings=None) -> Partition:
        """Return self after checking the cover (thesis eq. 3.2-3.3); raise PartitionError if broken.

        Checks: every function index is in exactly one block, blocks are sorted int64 arrays, and
        within each subset the blocks' parameter sets alpha_{k,b} are disjoint. For HOGWILD the
        overlaps are allowed but must equal the counts recorded in info["overlaps"].
        """
        graph = self._graph_or(ratings)
        _check_cover([block for subset in self.subsets for block in subset], graph.n_functions)
        overlaps = [int(graph.shared_parameters(subset).size) for subset in self.subsets]
        if self.scheme == "hogwild":
            recorded = list(self.info.get("overlaps", []))
            if recorded != overlaps:
                raise PartitionError(
                    f"recorded overlaps {recorded} differ from the actual {overlaps}"
                )
        elif any(overlaps):
            k = next(k for k, c in enumerate(overlaps) if c)
            raise PartitionError(
                f"subset {k} has {overlaps[k]} parameters shared between its blocks"
            )
        return self

    def stats(self) -> dict:
        """Return balance statistics: block sizes, imbalance = max/mean, colors/strata, overlaps.

        `imbalance` is sum_k max_b |S_{k,b}| / sum_k mean_b |S_{k,b}|: the time of one pass with
        one worker per block over the ideal time (1.0 = perfectly balanced blocks).
        `subset_imbalance` is max_k |S_k| / mean_k |S_k|; `block_imbalance[k]` is per subset.
        """
        sizes = self.block_sizes()
        subset_sizes = [sum(s) for s in sizes]
        largest = [max(s) if s else 0 for s in sizes]
        means = [float(np.mean(s)) if s else 0.0 for s in sizes]
        total_mean = sum(means)
        stats = {
            "scheme": self.scheme,
            "n_functions": self.n_functions,
            "n_subsets": self.n_subsets,
            "block_sizes": sizes,
            "subset_sizes": subset_sizes,
            "block_imbalance": [m / a if a else 1.0 for m, a in zip(largest, means)],
            "imbalance": sum(largest) / total_mean if total_mean else 1.0,
            "subset_imbalance": (
                max(subset_sizes) / float(np.mean(subset_sizes))
                if subset_sizes and np.mean(subset_sizes)
                else 1.0
            ),
        }
        for key in ("n_colors", "n_strata", "overlaps"):
            if key in self.info:
                stats[key] = self.info[key]
        if "color_sizes" in self.info:
            stats["largest_color"] = int(np.max(self.info["color_sizes"]))
        return stats

    def plot(self, path) -> str:
        """Write a picture of the partition to `path` (thesis Fig. 3.3 or 3.4 style); return path."""
        return plot_partition(self, path)


def _check_cover(blocks: list, n: int) -> None:
    """Raise PartitionError unless `blocks` are sorted 1-d int64 arrays holding each of 0..n-1 once."""
    for block in blocks:
        if block.dtype != np.int64 or block.ndim != 1:
            raise PartitionError(
                f"blocks must be 1-d int64 arrays; got {block.dtype} {block.shape}"
            )
        if block.size > 1 and np.any(np.diff(block) <= 0):
            raise PartitionError("a block is not sorted in strictly increasing order")
    joined = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
    if joined.size and (joined.min() < 0 or joined.max() >= n):
        raise PartitionError(
            f"block indices must lie in [0, {n}); got {joined.min()}..{joined.max()}"
        )
    times = np.bincount(joined, minlength=n)
    if np.any(times != 1):
        missing, repeated = int(np.sum(times == 0)), int(np.sum(times > 1))
        raise PartitionError(
            f"not a partition: {missing} functions in no block, {repeated} in several"
        )
