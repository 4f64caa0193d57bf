"""The state a worker keeps between chunks of cycles: hosted shards and the replicated part.

Per hosted shard (matrix factorization: a row shard U_p; lives only on its host): the shard's
vector, its L-BFGS rows S_p, Y_p, its cycle-start copies and saved iterates. Replicated on every
worker (kept identical because every worker applies the same deterministic update): the rest of
x (V, or all of x for a replicated problem), its memory rows, and the run's Stepper and
StopRules (hamsi.stepper, hamsi.stop_rules), which every worker advances with the same numbers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np


@dataclass
class ShardState:
    """Row shard `shard`: U (rows x width), S, Y (M x rows*width), cycle-start copies, saved iterates."""

    shard: int
    U: np.ndarray
    S: np.ndarray
    Y: np.ndarray
    x_start: np.ndarray
    g_start: np.ndarray
    saved: dict = field(default_factory=dict)

    def copy(self) -> ShardState:
        """Return a deep copy (chunk tasks step their states in place: a copy is what another worker may fetch)."""
        return copy.deepcopy(self)


@dataclass
class CommonState:
    """The replicated part: x_rep (V, n x width, or all of x), S, Y, starts, saved iterates, decisions.

    time_used: the agreed optimization time before the next chunk; started: row 0 is recorded.
    """

    x_rep: np.ndarray
    S: np.ndarray
    Y: np.ndarray
    x_start: np.ndarray
    g_start: np.ndarray
    stepper: object
    stop: object
    saved: dict = field(default_factory=dict)
    time_used: float = 0.0
    cycles_done: int = 0
    started: bool = False

    def copy(self) -> CommonState:
        """Return a deep copy."""
        return copy.deepcopy(self)


def zero_rows(g: np.ndarray, where) -> None:
    """Set the rows of g named by `where` ((lo, hi) or an index array) to zero."""
    if isinstance(where, tuple):
        g[where[0] : where[1]] = 0.0
    else:
        g[where] = 0.0


def rows_of(g: np.ndarray, where) -> np.ndarray:
    """Return the rows of g named by `where` ((lo, hi) -> a view; indices -> a copy)."""
    if isinstance(where, tuple):
        return g[where[0] : where[1]]
    return g[where]


def add_rows(g: np.ndarray, where, rows: np.ndarray) -> None:
    """Add a contribution into g at `where` (fixed order by the caller).

    Overlapping rows (HOGWILD, COLOR blocks spanning shards) are summed, as a serial sweep of the
    blocks would do: no update is lost. Added onto zeros, a single contribution is exact.
    """
    if isinstance(where, tuple):
        g[where[0] : where[1]] += rows
    else:  # indices are unique (placement.touched_items), so a fancy += adds each row once
        g[where] += rows
