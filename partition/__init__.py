"""Factor graphs of partially separable objectives and the partitioners that cut them into blocks.

    >>> import partition
    >>> p = partition.make("strata-b", ratings, blocks=4)   # ratings: .rows, .cols, .shape
    >>> p.validate().stats()["imbalance"]

Schemes (thesis sec. 3.3): see `partition.SCHEMES`.
"""

from partition.base import Partition
from partition.errors import PartitionError
from partition.graph import FactorGraph
from partition.registry import DEFAULT_SUBSETS, make, register, schemes

SCHEMES = schemes()

__all__ = [
    "Partition",
    "PartitionError",
    "FactorGraph",
    "make",
    "register",
    "SCHEMES",
    "DEFAULT_SUBSETS",
]
