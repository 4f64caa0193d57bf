"""The typed records workers send each other: one Message per worker per exchange round."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ShardPartials:
    """One parameter shard's partials of an inner iteration (see hamsi.exchange.Reductions)."""

    shard: int
    pair: np.ndarray | None = None
    new_pair_g: np.ndarray | None = None
    gram: np.ndarray | None = None
    wtg: np.ndarray | None = None
    norms: np.ndarray | None = None


@dataclass
class GradientPart:
    """A contribution to the replicated part of g: `rows` added at `where` in the order of `key`.

    where: (lo, hi) for a slice of rows, or an index array (matrix factorization: item rows of
    gV); key orders the contributions the way the in-process gradient adds them.
    """

    key: int
    where: object
    rows: np.ndarray


@dataclass
class EvaluationPart:
    """A worker's share of a trace row: per-subset train sums, a norm term, a held-out sum."""

    key: int
    sse: list
    norm: float
    test: float


@dataclass
class Message:
    """What one worker sends its peers in one round (an inner iteration or a cycle's evaluation).

    vote: the sender's clock reached max_time; clock: its optimization time so far.
    """

    step: int
    sender: str
    vote: bool = False
    clock: float = 0.0
    gradient: list = field(default_factory=list)  # GradientPart
    shards: list = field(default_factory=list)  # ShardPartials
    evaluation: list = field(default_factory=list)  # EvaluationPart
