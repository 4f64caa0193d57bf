"""Factor graphs of partially separable objectives and the partitioners that cut them into blocks."""

from partition.base import Partition

__all__ = ["Partition"]
