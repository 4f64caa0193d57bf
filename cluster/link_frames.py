"""The frames of the direct links: numbers only, every declared size checked before allocating.

A frame is FRAME (magic, number of arrays), one DESCRIPTOR per array (dtype from a whitelist,
shape), then the arrays' raw bytes (cluster.messages.to_arrays / from_arrays give the typed
Message). A large array is written from its own memory and read into a fresh one (no copy in
between); the small parts travel through one buffer each way, so a small frame costs one send and
one recv, not one per array. FrameReader and FrameWriter do it piece by piece on non-blocking
sockets.
"""

from __future__ import annotations

import array
import math
import struct
from dataclasses import dataclass

import numpy as np

from cluster.messages import from_arrays, to_parts

# A frame: FRAME (magic, number of arrays), then one DESCRIPTOR per array, then the raw bytes.
FRAME = struct.Struct("!4sI")
FRAME_MAGIC = b"HMSF"
RECORD_MAGIC = (
    b"HMSR"  # a partials record (cluster.messages.partials_record): FRAME's count is its numbers
)
DESCRIPTOR = struct.Struct("!BBQQ")  # dtype code, ndim (0-2), shape (unused dimensions 0)
DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float64),
    2: np.dtype(np.int64),
    3: np.dtype(np.int32),
    4: np.dtype(np.uint8),
}
CODES = {dtype: code for code, dtype in DTYPES.items()}
INT64, FLOAT64, UINT8 = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.uint8)
MAX_ARRAYS = 1 << 16
SMALL_ARRAY = 1 << 12  # bytes: a smaller array is copied into the frame's first buffer


@dataclass(frozen=True)
class FrameLimit:
    """What a frame of one run may declare: arrays per frame, bytes per array (set by the run's sizes)."""

    max_arrays: int = MAX_ARRAYS
    max_array_bytes: int = 1 << 20


class FrameRefused(ValueError):
    """A frame declared something the run cannot need (a size, a dtype, a shape): read no further."""


def encode(message) -> list:
    """Return the frame of a Message as buffers (the bytes of cluster.messages.to_arrays' arrays).

    The header, the descriptors, the three small arrays that open every message (skeleton,
    scalars, sender) and the data arrays before the first of SMALL_ARRAY bytes or more are one
    bytes object, built without a numpy array (a message of partials is one buffer, one write);
    a large array is sent from its own memory.
    """
    skeleton, scalars, sender, data = to_parts(message)
    values = b"".join([_float64_bytes(p) for p in scalars])
    data = [np.ascontiguousarray(a) for a in data]
    head = [
        FRAME.pack(FRAME_MAGIC, 3 + len(data)),
        DESCRIPTOR.pack(CODES[INT64], 1, len(skeleton), 0),
        DESCRIPTOR.pack(CODES[FLOAT64], 1, len(values) // FLOAT64.itemsize, 0),
        DESCRIPTOR.pack(CODES[UINT8], 1, len(sender), 0),
    ]
    for a in data:
        code = CODES.get(a.dtype)
        if code is None or a.ndim > 2:
            raise TypeError(
                f"links carry 0-2 dimensional arrays of {sorted(map(str, CODES))}, not {a.dtype} x {a.ndim}"
            )
        head.append(DESCRIPTOR.pack(code, a.ndim, *a.shape, *(0,) * (2 - a.ndim)))
    head += [array.array("q", skeleton).tobytes(), values, sender]
    large = next((i for i, a in enumerate(data) if a.nbytes >= SMALL_ARRAY), len(data))
    head += [a.tobytes() for a in data[:large]]
    return [b"".join(head), *(a for a in data[large:] if a.nbytes)]


def encode_record(record: np.ndarray) -> bytes:
    """Return the frame of a partials record: RECORD_MAGIC and its length, then its float64 bytes."""
    return FRAME.pack(RECORD_MAGIC, record.size) + record.tobytes()


def _float64_bytes(piece) -> bytes:
    """Return a piece of the scalars (an array or a tuple of floats) as float64 bytes, in C order."""
    if isinstance(piece, tuple):
        return array.array("d", piece).tobytes()
    piece = np.asarray(piece)
    return (piece if piece.dtype == FLOAT64 else piece.astype(FLOAT64)).tobytes()


def addressed_frames(message, peers: list[str]) -> dict:
    """Return {peer: frame}: one Message for all, or {peer: Message}; each distinct Message encoded once."""
    if not isinstance(message, dict):
        message = dict.fromkeys(peers, message)
    encoded: dict[int, list] = {}
    out = {}
    for p in peers:
        m = message[p]
        if id(m) not in encoded:
            encoded[id(m)] = encode(m)
        out[p] = encoded[id(m)]
    return out


def frame_nbytes(frame: list) -> int:
    """Return the bytes a frame puts on the wire (header, descriptors, arrays)."""
    return sum(memoryview(b).nbytes for b in frame)


class FrameReader:
    """Reads the frames of one link from a non-blocking socket, into freshly allocated arrays.

    Every declared size is checked against the run's FrameLimit before anything is allocated.
    Small parts (header, descriptors, small arrays) come from one recv of up to CHUNK bytes,
    not one recv each; an array of CHUNK bytes or more is read straight into its memory. Bytes
    read past a frame's end (a peer already one round ahead) are kept for the link's next frame:
    one reader serves a link for a whole run (`next` after each `value`).
    """

    CHUNK = 1 << 16
    LAYOUTS, LAYOUT_ARRAYS = 16, 16  # checked layouts kept per link, of frames of at most 16 arrays

    def __init__(self, limit: FrameLimit):
        self.limit = limit
        self._layouts: dict[bytes, tuple[list, int]] = {}
        self._held = bytearray()  # bytes read and not yet consumed
        self._scratch = memoryview(bytearray(self.CHUNK))
        self.next()

    def next(self) -> None:
        """Start reading the link's next frame (bytes read ahead stay)."""
        self.stage = "header"
        self.arrays: list[np.ndarray] = []
        self._body: list[memoryview] = []
        self._count = 0
        self.filled = 0  # bytes of a record's row filled so far (feed_record)
        self.done = False

    def feed_record(self, sock, row: memoryview) -> None:
        """Read the link's next frame, a record of row.nbytes bytes, into `row` (bytes read ahead first).

        Sets `done` when the row is full; the round checks the header of every row at once
        (cluster.link_round.record_round). Call `next` before reading the frame after it.
        """
        at = self.filled
        held = self._held
        if held:
            take = min(len(held), row.nbytes - at)
            row[at : at + take] = held[:take]
            del held[:take]
            at += take
        while at < row.nbytes:
            try:
                n = sock.recv_into(row[at:])
            except BlockingIOError:
                break
            if n == 0:
                raise ConnectionResetError("the peer closed the connection")
            at += n
        self.filled = at
        self.done = at == row.nbytes

    def feed(self, sock) -> None:
        """Read what is available; raise ConnectionResetError when the peer closed its end."""
        while not self.done:
            if self._advance():
                continue
            large = self.stage == "body" and self._body[0].nbytes >= self.CHUNK
            target = self._body[0] if large else self._scratch
            try:
                n = sock.recv_into(target)
            except BlockingIOError:
                return
            if n == 0:
                raise ConnectionResetError("the peer closed the connection")
            if not large:
                self._held += target[:n]
            elif n < target.nbytes:
                self._body[0] = target[n:]
            else:
                self._body.pop(0)

    def _advance(self) -> bool:
        """Consume what the held bytes allow; return whether anything moved on."""
        if self.stage == "header":
            return self._header()
        if self.stage == "descriptors":
            return self._descriptors()
        return self._fill()

    def _header(self) -> bool:
        held = self._held
        if len(held) < FRAME.size:
            return False
        magic, count = FRAME.unpack_from(held)
        if magic != FRAME_MAGIC or count > self.limit.max_arrays:
            raise FrameRefused(
                f"a frame of {count} arrays (magic {magic!r}); this run sends at most "
                f"{self.limit.max_arrays}"
            )
        del held[: FRAME.size]
        self.stage, self._count = "descriptors", count
        return True

    def _descriptors(self) -> bool:
        held = self._held
        size = DESCRIPTOR.size * self._count
        if len(held) < size:
            return False
        layout, total = self._layout(bytes(held[:size]))
        self.stage = "body"
        if len(held) >= size + total:  # the whole frame is in: one copy, the arrays its views
            body = held[size : size + total]
            del held[: size + total]
            self.arrays = [
                np.frombuffer(body, dtype, count, offset)
                if shape is None
                else np.frombuffer(body, dtype, count, offset).reshape(shape)
                for dtype, shape, count, offset in layout
            ]
            self.done = True
            return True
        del held[:size]
        self.arrays = [
            np.empty(count if shape is None else shape, dtype) for dtype, shape, count, _ in layout
        ]
        self._body = [a.data.cast("B") for a in self.arrays if a.nbytes]
        return True

    def _layout(self, descriptors: bytes) -> tuple[list, int]:
        """Return ([(dtype, shape or None when 1-D, items, offset)], bytes) of a frame's descriptors.

        Every declared array is checked (`_checked`) the first time; a link sends the same
        descriptors round after round (a message of partials has one layout), so the checked
        layouts of the last few distinct small ones are kept (a few kilobytes per link at most).
        """
        known = self._layouts.get(descriptors)
        if known is not None:
            return known
        layout, offset = [], 0
        for code, ndim, rows, cols in DESCRIPTOR.iter_unpack(descriptors):
            dtype, shape, nbytes = self._checked(code, ndim, rows, cols)
            count = nbytes // dtype.itemsize
            layout.append((dtype, None if len(shape) == 1 else shape, count, offset))
            offset += nbytes
        if len(layout) <= self.LAYOUT_ARRAYS:
            if len(self._layouts) >= self.LAYOUTS:
                self._layouts.clear()
            self._layouts[descriptors] = layout, offset
        return layout, offset

    def _fill(self) -> bool:
        """Copy held bytes into the next array still to fill (or finish the frame)."""
        if not self._body:
            self.done = True
            return True
        held, head = self._held, self._body[0]
        take = min(len(held), head.nbytes)
        if not take:
            return False
        head[:take] = held[:take]
        del held[:take]
        if take == head.nbytes:
            self._body.pop(0)
        else:
            self._body[0] = head[take:]
        return True

    def _checked(self, code: int, ndim: int, rows: int, cols: int) -> tuple[np.dtype, tuple, int]:
        """Return (dtype, shape, bytes) of a declared array; FrameRefused when the run cannot need it."""
        dtype, shape = DTYPES.get(code), (rows, cols)[:ndim]
        if dtype is None or ndim > 2 or any((rows, cols)[ndim:]):  # unused dimensions are 0
            raise FrameRefused(
                f"an array of dtype code {code}, {ndim} dimensions, shape ({rows}, {cols})"
            )
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > self.limit.max_array_bytes:
            raise FrameRefused(
                f"an array of {rows} x {cols} {dtype} ({nbytes} bytes); this run sends at most "
                f"{self.limit.max_array_bytes} bytes per array"
            )
        return dtype, shape, nbytes

    def value(self):
        return from_arrays(self.arrays)


class FrameWriter:
    """Writes one frame to a non-blocking socket, as far as the socket takes it."""

    def __init__(self, frame: list):
        self.views = [memoryview(b).cast("B") for b in frame if len(b)]
        self.nbytes = sum(v.nbytes for v in self.views)

    @property
    def done(self) -> bool:
        return not self.views

    def push(self, sock) -> None:
        while self.views:
            try:
                sent = sock.sendmsg(self.views[:64])
            except BlockingIOError:
                return
            while sent:
                head = self.views[0]
                if sent >= head.nbytes:
                    sent -= head.nbytes
                    self.views.pop(0)
                else:
                    self.views[0] = head[sent:]
                    sent = 0
