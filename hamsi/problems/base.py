"""The interface of a partially separable objective f(x) = sum_i f_i(x_alpha_i) (thesis eq. 1.2, 3.3).

A problem owns its data (the functions f_i) and knows how a function index maps to the
parameters it touches. The optimizers only ask it for: a starting point, the gradient of one
subset of a cover (its blocks in parallel when they touch disjoint parameters), the parameter
shards every vector reduction is split into, and an evaluation. A new problem is a new module
implementing `PartiallySeparableProblem`; the optimizers do not change.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BlockLayout:
    """Where each block of a cover lies once the functions are reordered block after block.

    order[j] is the original function index stored at position j; subset k's block b is
    positions starts[k][b]:ends[k][b]. disjoint[k] says whether subset k's blocks touch disjoint
    parameters (then they may run in parallel threads).
    """

    order: np.ndarray
    starts: list
    ends: list
    disjoint: list

    @property
    def n_subsets(self) -> int:
        """K, the number of subsets."""
        return len(self.starts)

    @property
    def block_bounds(self) -> np.ndarray:
        """Return the offsets of all blocks in (subset, block) order: C + 1 monotone offsets."""
        ends = [e for subset_ends in self.ends for e in subset_ends]
        return np.concatenate([[0], np.asarray(ends, dtype=np.int64)]).astype(np.int64)


def block_layout(subsets, touches_disjoint) -> BlockLayout:
    """Return the BlockLayout of a cover subsets[k][b] (sorted function indices per block).

    touches_disjoint(list of index arrays) -> bool says whether blocks share no parameter. Blocks
    keep their index order, so a block's gradient accumulates in that order.
    """
    pieces, starts, ends, disjoint = [], [], [], []
    offset = 0
    for blocks in subsets:
        subset_starts, subset_ends = [], []
        for block in blocks:
            block = np.asarray(block, dtype=np.int64)
            pieces.append(block)
            subset_starts.append(offset)
            offset += block.size
            subset_ends.append(offset)
        starts.append(np.asarray(subset_starts, dtype=np.int64))
        ends.append(np.asarray(subset_ends, dtype=np.int64))
        disjoint.append(bool(touches_disjoint(blocks)))
    order = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return BlockLayout(order, starts, ends, disjoint)


def no_shared_entries(index_sets) -> bool:
    """Return True when no value occurs in two of the given arrays of non-negative integers.

    Counts, per value, the arrays it occurs in (np.bincount of each array's presence): linear
    in the entries and the largest value, where sorting them all was the cost of a search trial.
    """
    index_sets = [np.asarray(index, dtype=np.int64) for index in index_sets]
    index_sets = [index for index in index_sets if index.size]
    if len(index_sets) < 2:
        return True
    size = int(max(index.max() for index in index_sets)) + 1
    holders = np.zeros(size, dtype=np.int64)
    for index in index_sets:
        holders += np.bincount(index, minlength=size) > 0
    return bool(holders.max() <= 1)


def equal_bounds(length: int, n_intervals: int) -> np.ndarray:
    """Return n_intervals + 1 offsets cutting range(length) into near-equal intervals."""
    return (np.arange(n_intervals + 1, dtype=np.int64) * length) // max(n_intervals, 1)


class PartiallySeparableProblem(ABC):
    """f(x) = sum_{i < n_functions} f_i(x_alpha_i) with x a float64 vector of n_params entries."""

    n_functions: int
    n_params: int
    #: the BlockLayout set by `arrange`
    layout: BlockLayout | None = None
    #: name of the error measure reported as train/test "rmse" in traces
    metric = "rmse"

    @property
    def arranged(self) -> BlockLayout:
        """Return the BlockLayout set by `arrange`; raise RuntimeError before it was called."""
        if self.layout is None:
            raise RuntimeError(f"{type(self).__name__}.arrange(partition) must be called first")
        return self.layout

    @abstractmethod
    def arrange(self, partition) -> BlockLayout:
        """Reorder the stored functions so every block of `partition` is contiguous; return the layout.

        Called once before optimizing; later calls to add_subset_gradient refer to this layout.
        """

    @abstractmethod
    def shard_bounds(self, partition) -> np.ndarray:
        """Return the parameter shards as monotone offsets into x (first 0, last n_params).

        Every reduction over x is a sum of per-shard partials added in this order.
        """

    @abstractmethod
    def initial_point(self, rng: np.random.Generator) -> np.ndarray:
        """Return a starting point x (n_params,) drawn from rng."""

    @abstractmethod
    def add_subset_gradient(self, x: np.ndarray, g: np.ndarray, subset: int) -> None:
        """Add sum over the blocks of `subset` of grad f_{k,b} into g (thesis Alg. 3, line 10)."""

    def add_block_gradient(self, x: np.ndarray, g: np.ndarray, subset: int, block: int) -> None:
        """Add grad f_{k,b} of one block into g, in the order add_subset_gradient adds it.

        Needed to run the problem on Dask with x replicated (cluster.work.ReplicatedWork): the
        workers add their blocks' gradients, summed in block order as add_subset_gradient does.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement add_block_gradient, "
            f"which the Dask engine needs for a problem with replicated x"
        )

    @abstractmethod
    def evaluate(self, x: np.ndarray) -> tuple[float, float]:
        """Return (training error measure, objective f(x)) at x."""

    @abstractmethod
    def heldout_error(self, x: np.ndarray, data) -> float:
        """Return the error measure of x on held-out data of the problem's own kind."""

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """Return the full gradient sum_k grad f_{S_k}(x) (needs `arrange` to have been called)."""
        g = np.zeros(self.n_params)
        for k in range(self.arranged.n_subsets):
            self.add_subset_gradient(x, g, k)
        return g
