"""Subset orders: HAMSI's K + 1 subsets per cycle and mb-GD's K per epoch (thesis sec. 3.4, SETSCHEDULE).

Subsets are numbered 0..K-1 here; the thesis table numbers them 1..K. For K = 5:

    cycle t      det  [3, 4, 5, 1, 2, 3]     stoc  [3, 1, 4, 5, 2, 3]   (1-based, thesis table)
    cycle t + 1  det  [4, 5, 1, 2, 3, 4]     stoc  a fresh shuffle, first repeated last

`det` starts cycle t (1-based) at subset (t - 1) mod K and shifts left by one each cycle, which is
Alg. 3's [K, 1, ..., K] shifted once per cycle. The thesis table's third det row ends in 1; its
text and Alg. 3 say first and last are the same subset, which we follow (so does the reference).
"""

from __future__ import annotations

import numpy as np

SCHEDULES = ("det", "stoc")


def hamsi_cycle(kind: str, n_subsets: int, cycle: int, rng: np.random.Generator) -> np.ndarray:
    """Return the K + 1 subset indices of HAMSI cycle `cycle` (1-based); first == last (Alg. 3, line 6)."""
    order = mbgd_epoch(kind, n_subsets, cycle, rng)
    return np.append(order, order[0])


def mbgd_epoch(kind: str, n_subsets: int, epoch: int, rng: np.random.Generator) -> np.ndarray:
    """Return the K subset indices of epoch `epoch` (1-based): cyclic shift (det) or a shuffle (stoc)."""
    if kind == "det":
        return (epoch - 1 + np.arange(n_subsets)) % n_subsets
    if kind == "stoc":
        return rng.permutation(n_subsets)
    raise ValueError(f"unknown schedule {kind!r}; choose one of {', '.join(SCHEDULES)}")
