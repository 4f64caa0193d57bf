"""The typed records workers send each other: one Message per worker per exchange round, or in an
inner iteration with V shared or owned one fixed-layout partials record (the end of this module)."""

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
# bytes; nothing is ever unpickled): an int64 skeleton of the counts, keys, flags and lengths, a
# float64 array of the scalars and the shard partials' values (a few dozen numbers each, so a
# message of partials is three arrays, one frame header and three descriptors), the sender's
# address as UTF-8 bytes, then the data arrays (gradient rows, V shards) in order.
PARTIAL_FIELDS = ("pair", "new_pair_g", "gram", "wtg", "norms")
ITEM_FIELDS = ("x", "g", "s_new", "y_new", "x_start", "g_start")
WHERE_RANGE, WHERE_INDEX = 0, 1
MAX_SENDER_BYTES = 1024


def to_parts(message: Message) -> tuple[list, list, bytes, list]:
    """Return the layout of `message` (see from_arrays): (the skeleton's integers, the scalars'
    pieces in order (arrays or tuples of floats), the sender's UTF-8 bytes, the data arrays)."""
    skeleton = [
        message.step,
        int(bool(message.vote)),
        len(message.gradient),
        len(message.shards),
        len(message.evaluation),
        len(message.items),
    ]
    scalars: list = [(float(message.clock), float(message.stalled))]
    data: list[np.ndarray] = []
    for part in message.gradient:
        if isinstance(part.where, tuple):
            skeleton += [part.key, WHERE_RANGE, int(part.where[0]), int(part.where[1])]
        else:
            skeleton += [part.key, WHERE_INDEX, 0, 0]
            data.append(np.asarray(part.where))
        data.append(part.rows)
    for partials in message.shards:  # the values go with the scalars, their lengths to the skeleton
        present = [getattr(partials, name) for name in PARTIAL_FIELDS]
        skeleton += [partials.shard, sum(1 << i for i, a in enumerate(present) if a is not None)]
        skeleton += [np.size(a) for a in present if a is not None]
        scalars += [a for a in present if a is not None]
    for part in message.evaluation:
        skeleton += [part.key, len(part.sse)]
        scalars.append((float(part.norm), float(part.test), *map(float, part.sse)))
    for item in message.items:
        _put_optional(item, ITEM_FIELDS, skeleton, data)
    return skeleton, scalars, message.sender.encode(), data


def to_arrays(message: Message) -> list[np.ndarray]:
    """Return the arrays that encode `message` (to_parts as arrays; see from_arrays for the layout)."""
    skeleton, scalars, sender, data = to_parts(message)
    values = np.concatenate([np.ravel(np.asarray(p, dtype=np.float64)) for p in scalars])
    return [
        np.array(skeleton, dtype=np.int64),
        values,
        np.frombuffer(sender, dtype=np.uint8),
        *data,
    ]


def _put_optional(record, names: tuple, skeleton: list, data: list) -> None:
    """Append the record's shard and a bit mask of its fields present to skeleton, those arrays to data."""
    present = [getattr(record, name) for name in names]
    skeleton += [record.shard, sum(1 << i for i, a in enumerate(present) if a is not None)]
    data += [a for a in present if a is not None]


class MalformedMessage(ValueError):
    """The arrays received do not form a Message (a peer of another version, or a bug)."""


def from_arrays(arrays: list[np.ndarray]) -> Message:
    """Return the Message that to_arrays encoded; MalformedMessage when the arrays do not fit the layout."""
    _check_layout(arrays)
    return from_parts(
        arrays[0].reshape(-1).tolist(), arrays[1].reshape(-1), arrays[2].tobytes(), arrays[3:]
    )


def from_parts(skeleton: list, values: np.ndarray, sender: bytes, data: list) -> Message:
    """Return the Message of to_parts' layout: the skeleton's integers, the scalars as one float64
    array (the partials come back as views of it), the sender's UTF-8 bytes and the data arrays.

    MalformedMessage when they do not fit: a count, length or mask that runs past the skeleton,
    the values or the data, or entries left over. Every peer sends one in every inner
    iteration, so the partials are taken with plain list and slice arithmetic.
    """
    if len(skeleton) < 6 or values.size < 2:
        raise MalformedMessage("the message ends before its header")
    step, vote, n_gradient, n_shards, n_evaluation, n_items = skeleton[:6]
    message = Message(
        step, _sender(sender), vote=bool(vote), clock=float(values[0]), stalled=float(values[1])
    )
    cursor, at = _Cursor(skeleton, 6), 2
    data = iter(data)
    for _ in range(n_gradient):
        message.gradient.append(_take_gradient_part(cursor, data))
    for _ in range(n_shards):
        partials, at = _take_partials(cursor, values, at)
        message.shards.append(partials)
    for _ in range(n_evaluation):
        part, at = _take_evaluation_part(cursor, values, at)
        message.evaluation.append(part)
    for _ in range(n_items):
        message.items.append(_take_optional(ItemShard, ITEM_FIELDS, "item shard", cursor, data))
    if cursor.left() or next(data, None) is not None or at != values.size:
        raise MalformedMessage("the message has more entries than its counts say")
    return message


class _Cursor:
    """The skeleton's integers, taken in order."""

    def __init__(self, entries: list, at: int = 0):
        self.entries, self.at = entries, at

    def take(self, n: int, what: str) -> list:
        if n < 0 or self.at + n > len(self.entries):
            raise MalformedMessage(f"the message ends before its {what}")
        self.at += n
        return self.entries[self.at - n : self.at]

    def left(self) -> bool:
        return self.at < len(self.entries)


def _check_layout(arrays: list[np.ndarray]) -> None:
    """Raise MalformedMessage unless the arrays start with the skeleton, scalars and sender."""
    if (
        len(arrays) < 3
        or arrays[0].dtype != np.int64
        or arrays[1].dtype != np.float64
        or arrays[2].dtype != np.uint8
    ):
        raise MalformedMessage(
            "a message starts with its int64 skeleton, float64 scalars and uint8 sender"
        )


def _sender(raw: bytes) -> str:
    """Return the sender's address from its UTF-8 bytes."""
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise MalformedMessage(f"the sender is not UTF-8: {exc}") from None


def _take_data(data, what: str) -> np.ndarray:
    """Return the next data array; MalformedMessage naming `what` when there is none."""
    try:
        return next(data)
    except StopIteration:
        raise MalformedMessage(f"the message ends before its {what}") from None


def _take_gradient_part(cursor: _Cursor, data) -> GradientPart:
    key, kind, lo, hi = cursor.take(4, "gradient part")
    where = (lo, hi) if kind == WHERE_RANGE else _take_data(data, "gradient index")
    return GradientPart(key, where, _take_data(data, "gradient rows"))


def _take_optional(cls, names: tuple, what: str, cursor: _Cursor, data):
    """Return cls(shard, **fields present): the inverse of _put_optional."""
    shard, mask = cursor.take(2, what)
    fields = {name: _take_data(data, name) for i, name in enumerate(names) if mask >> i & 1}
    return cls(shard, **fields)


_PARTIAL_NAMES = [
    tuple(name for i, name in enumerate(PARTIAL_FIELDS) if mask >> i & 1)
    for mask in range(1 << len(PARTIAL_FIELDS))
]


def _take_partials(cursor: _Cursor, values: np.ndarray, at: int) -> tuple[ShardPartials, int]:
    """Return (a ShardPartials, the values' next offset): its shard, field mask and lengths from
    the skeleton, its values as views of the scalars from offset `at` (every peer's every inner
    iteration decodes two of these: list arithmetic, no call per field)."""
    entries, i = cursor.entries, cursor.at
    if i + 2 > len(entries):
        raise MalformedMessage("the message ends before its shard")
    shard, mask = entries[i], entries[i + 1]
    names = _PARTIAL_NAMES[mask % len(_PARTIAL_NAMES)]
    cursor.at = j = i + 2 + len(names)
    if j > len(entries):
        raise MalformedMessage("the message ends before its partial lengths")
    sizes = entries[i + 2 : j]
    if names and min(sizes) < 0:
        raise MalformedMessage(f"shard {shard}'s partials have a negative length")
    if at + sum(sizes) > values.size:
        raise MalformedMessage("the message ends before its partials")
    out = ShardPartials(shard)
    for name, k in zip(names, sizes):
        setattr(out, name, values[at : at + k])
        at += k
    return out, at


def _take_evaluation_part(
    cursor: _Cursor, values: np.ndarray, at: int
) -> tuple[EvaluationPart, int]:
    key, n_sse = cursor.take(2, "evaluation")
    if n_sse < 0 or at + 2 + n_sse > values.size:
        raise MalformedMessage("the message ends before its evaluation sums")
    norm, test, *sse = values[at : at + 2 + n_sse].tolist()
    return EvaluationPart(key, sse, norm, test), at + 2 + n_sse


# ---------------------------------------------------------------------------- partials records
# An inner iteration's partials travel as one fixed-layout float64 record per worker when every
# worker forms as many shards' partials with the same fields (STRATA/-B with V shared or owned):
# RECORD_HEAD numbers (step, vote, stalled, items_follow), the k shard ids, then each shard's
# fields present (PARTIAL_FIELDS order) one after the other. Every peer's record of a round has
# the receiver's own layout, so records land in the rows of one (peers x length) array and are
# checked and stacked column-wise, with no object per peer (cluster.link_round.record_round).
RECORD_HEAD = 4
RECORD_STEP, RECORD_VOTE, RECORD_STALLED, RECORD_ITEMS = range(RECORD_HEAD)


@dataclass(frozen=True)
class RecordLayout:
    """Where a record keeps its shards' partials: k shards, each the fields `names` of `sizes` numbers."""

    shards: int
    names: tuple
    sizes: tuple

    @property
    def width(self) -> int:
        """Numbers per shard."""
        return sum(self.sizes)

    @property
    def length(self) -> int:
        """Numbers per record."""
        return RECORD_HEAD + self.shards * (1 + self.width)


def record_layout(partials: list) -> RecordLayout | None:
    """Return the layout of a record of `partials`, or None when their shards' fields differ."""
    first = [(n, np.size(getattr(partials[0], n))) for n in PARTIAL_FIELDS] if partials else []
    present = tuple((n, s) for n, s in first if getattr(partials[0], n) is not None)
    for p in partials[1:]:
        if tuple((n, np.size(a)) for n in PARTIAL_FIELDS if (a := getattr(p, n)) is not None) != (
            present
        ):
            return None
    return RecordLayout(len(partials), tuple(n for n, _ in present), tuple(s for _, s in present))


def partials_record(
    layout: RecordLayout, step: int, vote: bool, stalled: float, partials: list
) -> np.ndarray:
    """Return the record of `partials` (items_follow 0; the round sets it per peer)."""
    head = np.array([step, float(bool(vote)), stalled, 0.0], dtype=np.float64)
    ids = np.array([p.shard for p in partials], dtype=np.float64)
    fields = [np.ravel(getattr(p, n)) for p in partials for n in layout.names]
    return np.concatenate([head, ids, *fields]).astype(np.float64, copy=False)


def stacked_fields(layout: RecordLayout, records: np.ndarray) -> tuple[np.ndarray, dict]:
    """Return (shard ids, {field: (shards, size) rows}) of stacked records, rows in shard order.

    records: (n, layout.length), one record per row. A stable sort of the ids puts the rows in
    shard order; each field's rows are copies of the numbers sent, bit for bit.
    """
    k = layout.shards
    ids = records[:, RECORD_HEAD : RECORD_HEAD + k].reshape(-1)
    order = np.argsort(ids, kind="stable")
    body = records[:, RECORD_HEAD + k :].reshape(ids.size, layout.width)[order]
    out, at = {}, 0
    for name, size in zip(layout.names, layout.sizes):
        out[name] = np.ascontiguousarray(body[:, at : at + size])
        at += size
    return ids[order], out
