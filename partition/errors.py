"""Errors raised for bad partitioning requests (a ValueError, so CLIs print them plainly)."""


class PartitionError(ValueError):
    """A partitioning request that cannot be honoured; the message names the offending value."""
