"""COLOR / COLOR-B on the workers, step 1: speculative coloring rounds with conflict repair by referees.

Gebremedhin & Manne (2000), as cluster.coloring's module text describes: each round every shard
colors its uncolored ratings greedily (`color_round`), proposes its (item, color) pairs to the
referee of their item interval (`proposals`, `referee`), and learns which it kept (`settle`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.routing import ShardRatings
from cluster.sharded_cover import item_of
from partition.jit import cached_njit

# a round stops the coloring when every shard is done; this many rounds means something is wrong
MAX_ROUNDS = 10_000
_COLOR_BITS = 32


@cached_njit(inline="always")
def _slots(rows, cols, n_rows, n_items, ext_indptr):
    """Return (user_start, item_start, room for colors): where each user's and item's colors go.

    Slots by counting sort of the shard's ratings; the room for colors is the most forbidden
    colors one rating can have (its user's and its item's ratings, its item's kept colors) + 2:
    a new color is opened only when all used ones are forbidden, so never above it.
    """
    n = rows.shape[0]
    user_start = np.zeros(n_rows + 1, dtype=np.int64)
    item_start = np.zeros(n_items + 1, dtype=np.int64)
    for i in range(n):
        user_start[rows[i] + 1] += 1
        item_start[cols[i] + 1] += 1
    most = 0
    for a in range(n_rows):
        most = max(most, user_start[a + 1])
        user_start[a + 1] += user_start[a]
    most_item = 0
    for j in range(n_items):
        most_item = max(most_item, item_start[j + 1] + ext_indptr[j + 1] - ext_indptr[j])
        item_start[j + 1] += item_start[j]
    return user_start, item_start, most + most_item + 2


@cached_njit(inline="always")
def _forbid(marker, stamp, used, lo, hi):
    """Mark used[lo:hi] forbidden for this rating (marker[c] == stamp); return how many were new."""
    n_new = 0
    for s in range(lo, hi):
        c = used[s]
        if marker[c] != stamp:
            marker[c] = stamp
            n_new += 1
    return n_new


@cached_njit(inline="always")
def _random_free(marker, stamp, n_forbidden, n_used):
    """Return a uniformly random used color that is free (n_forbidden < n_used of them are not)."""
    for _ in range(32):
        c = np.random.randint(0, n_used)
        if marker[c] != stamp:
            return c
    # most used colors are forbidden: pick the r-th free one directly
    r = np.random.randint(0, n_used - n_forbidden)
    for c in range(n_used):
        if marker[c] != stamp:
            if r == 0:
                return c
            r -= 1
    return -1


@cached_njit(inline="always")
def _choose(marker, stamp, n_forbidden, n_used, balanced):
    """Return partition.kernels.greedy_coloring's choice: first fit, or (balanced) a random free used color."""
    if not balanced:
        chosen = 0
        while marker[chosen] == stamp:
            chosen += 1
        return chosen
    if n_forbidden >= n_used:
        return n_used
    return _random_free(marker, stamp, n_forbidden, n_used)


@cached_njit
def _speculative_colors(
    rows, cols, n_rows, n_items, colors, ext_indptr, ext_colors, n_colors, balanced, seed
):
    """Color the ratings with colors[i] < 0 in index order; return (colors, colors used).

    Forbidden for rating i: the colors of its user's and its item's colored ratings here, and
    ext_colors[ext_indptr[j]:ext_indptr[j + 1]] for its item j (kept by other shards). The choice
    is partition.kernels.greedy_coloring's: first fit, or (balanced) a uniformly random used color
    that is free, a new one only when every used color is forbidden.
    """
    np.random.seed(seed)
    n = rows.shape[0]
    user_start, item_start, room = _slots(rows, cols, n_rows, n_items, ext_indptr)
    user_used = np.empty(n, dtype=np.int32)
    item_used = np.empty(n, dtype=np.int32)
    user_fill = np.zeros(n_rows, dtype=np.int64)
    item_fill = np.zeros(n_items, dtype=np.int64)
    for i in range(n):
        if colors[i] >= 0:
            user_used[user_start[rows[i]] + user_fill[rows[i]]] = colors[i]
            user_fill[rows[i]] += 1
            item_used[item_start[cols[i]] + item_fill[cols[i]]] = colors[i]
            item_fill[cols[i]] += 1
    marker = np.zeros(max(n_colors + 2, room), dtype=np.int64)
    n_used = n_colors
    for i in range(n):
        if colors[i] >= 0:
            continue
        stamp = i + 1
        a, j = rows[i], cols[i]
        n_forbidden = _forbid(marker, stamp, user_used, user_start[a], user_start[a] + user_fill[a])
        n_forbidden += _forbid(
            marker, stamp, item_used, item_start[j], item_start[j] + item_fill[j]
        )
        n_forbidden += _forbid(marker, stamp, ext_colors, ext_indptr[j], ext_indptr[j + 1])
        chosen = _choose(marker, stamp, n_forbidden, n_used, balanced)
        colors[i] = chosen
        n_used = max(n_used, chosen + 1)
        user_used[user_start[a] + user_fill[a]] = chosen
        user_fill[a] += 1
        item_used[item_start[j] + item_fill[j]] = chosen
        item_fill[j] += 1
    return colors, n_used


@dataclass
class ColorState:
    """One shard's coloring between rounds: colors (-1: uncolored), which were proposed last round,
    and the (item << 32 | color) pairs other shards kept on this shard's items (sorted)."""

    colors: np.ndarray
    fresh: np.ndarray
    kept: np.ndarray


def _keys(cols, colors) -> np.ndarray:
    return (cols.astype(np.int64) << _COLOR_BITS) | colors.astype(np.int64)


def start_state(data: ShardRatings) -> ColorState:
    """Return the state before round 0: nothing colored, nothing kept elsewhere."""
    n = data.vals.size
    return ColorState(np.full(n, -1, dtype=np.int32), np.zeros(n, bool), np.zeros(0, np.int64))


def color_round(
    data: ShardRatings, state: ColorState, n_items: int, n_colors: int, balanced: bool, seed: int
) -> ColorState:
    """Return the state after this shard's speculative coloring of its uncolored ratings (step 1)."""
    items = state.kept >> _COLOR_BITS
    indptr = np.searchsorted(items, np.arange(n_items + 1)).astype(np.int64)
    ext = (state.kept & ((1 << _COLOR_BITS) - 1)).astype(np.int32)
    uncolored = state.colors < 0
    colors, _ = _speculative_colors(
        data.rows,
        data.cols,
        data.row_hi - data.row_lo,
        n_items,
        state.colors.copy(),
        indptr,
        ext,
        n_colors,
        balanced,
        seed,
    )
    return ColorState(colors, uncolored, state.kept)


def proposals(data: ShardRatings, state: ColorState, col_bounds) -> list:
    """Return this round's (item, color) keys, sorted, one array per referee (item interval)."""
    fresh = np.flatnonzero(state.fresh)
    keys = _keys(data.cols[fresh], state.colors[fresh])
    referee = np.searchsorted(col_bounds, data.cols[fresh], side="right") - 1
    return [np.sort(keys[referee == r]) for r in range(col_bounds.size - 1)]


def referee(round_: int, *proposed) -> list:
    """Return, per shard, (its keys that lost, the keys other shards kept) of one item interval."""
    n = len(proposed)
    keys = np.concatenate(proposed)
    shard = np.repeat(np.arange(n), [p.size for p in proposed])
    turn = (shard - ((keys >> _COLOR_BITS) + round_)) % n
    order = np.lexsort((turn, keys))
    first = np.ones(keys.size, dtype=bool)
    first[1:] = keys[order][1:] != keys[order][:-1]
    won = np.zeros(keys.size, dtype=bool)
    won[order[first]] = True
    return [(keys[(shard == p) & ~won], np.sort(keys[(shard != p) & won])) for p in range(n)]


def settle(data: ShardRatings, state: ColorState, *verdicts) -> ColorState:
    """Return the state with this shard's lost proposals uncolored and the pairs kept elsewhere added."""
    colors = state.colors.copy()
    lost = np.concatenate([v[0] for v in verdicts])
    if lost.size:
        fresh = np.flatnonzero(state.fresh)
        colors[fresh[np.isin(_keys(data.cols[fresh], colors[fresh]), lost)]] = -1
    # referees hold ascending item intervals and sort their keys: the concatenation is sorted
    kept = np.concatenate([v[1] for v in verdicts])
    items = kept >> _COLOR_BITS
    rated = np.zeros(int(max(items.max(initial=-1), data.cols.max(initial=-1))) + 1, dtype=bool)
    rated[data.cols] = True
    # two sorted runs of distinct keys (a kept pair is forbidden to every later proposer): a
    # stable sort merges them in linear time
    merged = np.concatenate([state.kept, kept[rated[items]]])
    return ColorState(colors, np.zeros(colors.size, bool), np.sort(merged, kind="stable"))


def progress(state: ColorState) -> tuple:
    """Return (uncolored ratings, colors used + 1 at most) of a shard: two numbers for the client."""
    return int(np.count_nonzero(state.colors < 0)), int(state.colors.max(initial=-1)) + 1


def _coloring_round(client, shards, states, here, col_bounds, n_items, n_colors, balanced, key):
    """Return the futures of the states after one round: color, propose, referee, settle."""
    n_shards = len(shards)
    seeds = np.random.SeedSequence([int(k) % 2**63 for k in key]).generate_state(n_shards)
    states = [
        client.submit(
            color_round, shards[p], states[p], n_items, n_colors, balanced, int(seeds[p]), **here[p]
        )
        for p in range(n_shards)
    ]
    proposed = [
        client.submit(proposals, shards[p], states[p], col_bounds, **here[p])
        for p in range(n_shards)
    ]
    verdicts = [
        client.submit(
            referee,
            key[1],
            *[client.submit(item_of, proposed[p], r, pure=False) for p in range(n_shards)],
            pure=False,
        )
        for r in range(col_bounds.size - 1)
    ]
    return [
        client.submit(
            settle,
            shards[p],
            states[p],
            *[client.submit(item_of, v, p, pure=False) for v in verdicts],
            **here[p],
        )
        for p in range(n_shards)
    ]


def speculative_coloring(client, shards, here, col_bounds, n_items, balanced, seed) -> tuple:
    """Return (futures of the shards' final ColorStates, colors, rounds, conflicts) (module step 1).

    Rounds until no shard has an uncolored rating; `conflicts` counts the ratings the repair
    uncolored over all rounds. `here[p]`: the submit keywords that keep shard p's tasks on its host.
    """
    states = [client.submit(start_state, shards[p], **here[p]) for p in range(len(shards))]
    n_colors, rounds, conflicts = 0, 0, 0
    while True:
        states = _coloring_round(
            client, shards, states, here, col_bounds, n_items, n_colors, balanced, (seed, rounds)
        )
        status = client.gather(client.map(progress, states, pure=False))
        rounds += 1
        n_colors = max([n_colors] + [s[1] for s in status])
        left = sum(s[0] for s in status)
        conflicts += left
        if left == 0:
            return states, n_colors, rounds, conflicts
        if rounds >= MAX_ROUNDS:
            raise RuntimeError(f"the coloring has {left} ratings uncolored after {rounds} rounds")
