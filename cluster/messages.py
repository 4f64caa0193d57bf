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
class ItemShard:
    """Vectors of item shard V_j handed to a worker that reads them next (owned V: cluster.work.OwnedFactorWork).

    x, g: V_j and its gradient, to its home in the cycle's next subset (which steps it); at the
    cycle's end x (the stepped V_j) and s_new, y_new (the pair rows, when a pair was stored) to
    every peer; at the chunk's end x_start, g_start (the cycle-start copies) to every peer.
    """

    shard: int
    x: np.ndarray | None = None
    g: np.ndarray | None = None
    s_new: np.ndarray | None = None
    y_new: np.ndarray | None = None
    x_start: np.ndarray | None = None
    g_start: np.ndarray | None = None


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

    vote: the sender's clock reached max_time; clock: its optimization time so far; stalled:
    the seconds the sender was stopped in this chunk's timed phases (no optimization time).
    """

    step: int
    sender: str
    vote: bool = False
    clock: float = 0.0
    stalled: float = 0.0
    gradient: list = field(default_factory=list)  # GradientPart
    shards: list = field(default_factory=list)  # ShardPartials
    evaluation: list = field(default_factory=list)  # EvaluationPart
    items: list = field(default_factory=list)  # ItemShard


# ---------------------------------------------------------------------------- binary form
# A Message travels as a list of plain arrays (cluster.links writes their dtype, shape and raw
# bytes; nothing is ever unpickled): an int64 skeleton of the counts, keys and flags, a float64
# array of the scalars, the sender's address as UTF-8 bytes, then the data arrays in order.
PARTIAL_FIELDS = ("pair", "new_pair_g", "gram", "wtg", "norms")
ITEM_FIELDS = ("x", "g", "s_new", "y_new", "x_start", "g_start")
WHERE_RANGE, WHERE_INDEX = 0, 1
MAX_SENDER_BYTES = 1024


def to_arrays(message: Message) -> list[np.ndarray]:
    """Return the arrays that encode `message` (see from_arrays for the layout)."""
    skeleton = [
        message.step,
        int(bool(message.vote)),
        len(message.gradient),
        len(message.shards),
        len(message.evaluation),
        len(message.items),
    ]
    scalars = [float(message.clock), float(message.stalled)]
    data = []
    for part in message.gradient:
        if isinstance(part.where, tuple):
            skeleton += [part.key, WHERE_RANGE, int(part.where[0]), int(part.where[1])]
        else:
            skeleton += [part.key, WHERE_INDEX, 0, 0]
            data.append(np.asarray(part.where))
        data.append(part.rows)
    for partials in message.shards:
        present = [getattr(partials, name) for name in PARTIAL_FIELDS]
        skeleton += [partials.shard, sum(1 << i for i, a in enumerate(present) if a is not None)]
        data += [a for a in present if a is not None]
    for part in message.evaluation:
        skeleton += [part.key, len(part.sse)]
        scalars += [float(part.norm), float(part.test), *map(float, part.sse)]
    for item in message.items:
        present = [getattr(item, name) for name in ITEM_FIELDS]
        skeleton += [item.shard, sum(1 << i for i, a in enumerate(present) if a is not None)]
        data += [a for a in present if a is not None]
    sender = np.frombuffer(message.sender.encode(), dtype=np.uint8)
    return [np.array(skeleton, dtype=np.int64), np.array(scalars, dtype=np.float64), sender, *data]


class MalformedMessage(ValueError):
    """The arrays received do not form a Message (a peer of another version, or a bug)."""


def from_arrays(arrays: list[np.ndarray]) -> Message:
    """Return the Message that to_arrays encoded; MalformedMessage when the arrays do not fit the layout."""
    if (
        len(arrays) < 3
        or arrays[0].dtype != np.int64
        or arrays[1].dtype != np.float64
        or arrays[2].dtype != np.uint8
    ):
        raise MalformedMessage(
            "a message starts with its int64 skeleton, float64 scalars and uint8 sender"
        )
    skeleton, scalars = (
        [int(v) for v in arrays[0].reshape(-1)],
        [float(v) for v in arrays[1].reshape(-1)],
    )
    data = iter(arrays[3:])
    cursor = iter(skeleton)

    def take(source, what):
        try:
            return next(source)
        except StopIteration:
            raise MalformedMessage(f"the message ends before its {what}") from None

    step, vote, n_gradient, n_shards, n_evaluation, n_items = (
        take(cursor, "header") for _ in range(6)
    )
    try:
        sender = arrays[2].tobytes().decode()
    except UnicodeDecodeError as exc:
        raise MalformedMessage(f"the sender is not UTF-8: {exc}") from None
    values = iter(scalars)
    message = Message(
        step, sender, vote=bool(vote), clock=take(values, "clock"), stalled=take(values, "stall")
    )
    for _ in range(n_gradient):
        key, kind, lo, hi = (take(cursor, "gradient part") for _ in range(4))
        where = (lo, hi) if kind == WHERE_RANGE else take(data, "gradient index")
        message.gradient.append(GradientPart(key, where, take(data, "gradient rows")))
    for _ in range(n_shards):
        shard, mask = take(cursor, "shard"), take(cursor, "shard fields")
        fields = {name: take(data, name) for i, name in enumerate(PARTIAL_FIELDS) if mask >> i & 1}
        message.shards.append(ShardPartials(shard, **fields))
    for _ in range(n_evaluation):
        key, n_sse = take(cursor, "evaluation"), take(cursor, "evaluation size")
        norm, test = take(values, "norm"), take(values, "test sum")
        message.evaluation.append(
            EvaluationPart(key, [take(values, "sse") for _ in range(n_sse)], norm, test)
        )
    for _ in range(n_items):
        shard, mask = take(cursor, "item shard"), take(cursor, "item shard fields")
        fields = {name: take(data, name) for i, name in enumerate(ITEM_FIELDS) if mask >> i & 1}
        message.items.append(ItemShard(shard, **fields))
    if next(cursor, None) is not None or next(data, None) is not None:
        raise MalformedMessage("the message has more entries than its counts say")
    return message
