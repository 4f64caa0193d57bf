"""The frames of the direct links: numbers only, every declared size checked before allocating.

A frame is FRAME (magic, number of arrays), one DESCRIPTOR per array (dtype from a whitelist,
shape), then the arrays' raw bytes (cluster.messages.to_arrays / from_arrays give the typed
Message). An array is written from its own memory and read into a fresh one, with no copy in
between; FrameReader and FrameWriter do it piece by piece on non-blocking sockets.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from cluster.messages import from_arrays, to_arrays

# A frame: FRAME (magic, number of arrays), then one DESCRIPTOR per array, then the raw bytes.
FRAME = struct.Struct("!4sI")
FRAME_MAGIC = b"HMSF"
DESCRIPTOR = struct.Struct("!BBQQ")  # dtype code, ndim (0-2), shape (unused dimensions 0)
DTYPES = {
    1: np.dtype(np.float64),
    2: np.dtype(np.int64),
    3: np.dtype(np.int32),
    4: np.dtype(np.uint8),
}
CODES = {dtype: code for code, dtype in DTYPES.items()}
MAX_ARRAYS = 1 << 16


@dataclass(frozen=True)
class FrameLimit:
    """What a frame of one run may declare: arrays per frame, bytes per array (set by the run's sizes)."""

    max_arrays: int = MAX_ARRAYS
    max_array_bytes: int = 1 << 20


class FrameRefused(ValueError):
    """A frame declared something the run cannot need (a size, a dtype, a shape): read no further."""


def encode(message) -> list:
    """Return the frame of a Message as buffers: frame header + descriptors, then each array's bytes."""
    arrays = [np.ascontiguousarray(a) for a in to_arrays(message)]
    parts = [FRAME.pack(FRAME_MAGIC, len(arrays))]
    for a in arrays:
        if a.dtype not in CODES or a.ndim > 2:
            raise TypeError(
                f"links carry 0-2 dimensional arrays of {sorted(map(str, CODES))}, not {a.dtype} x {a.ndim}"
            )
        shape = tuple(a.shape) + (0,) * (2 - a.ndim)
        parts.append(DESCRIPTOR.pack(CODES[a.dtype], a.ndim, *shape))
    return [b"".join(parts), *(a for a in arrays if a.nbytes)]


def addressed_frames(message, peers: list[str]) -> dict:
    """Return {peer: frame}: one Message encoded once for all, or {peer: Message} encoded per peer."""
    if isinstance(message, dict):
        return {p: encode(message[p]) for p in peers}
    frame = encode(message)
    return dict.fromkeys(peers, frame)


def frame_nbytes(frame: list) -> int:
    """Return the bytes a frame puts on the wire (header, descriptors, arrays)."""
    return sum(memoryview(b).nbytes for b in frame)


class FrameReader:
    """Reads one frame from a non-blocking socket, piece by piece, into freshly allocated arrays.

    Every declared size is checked against the run's FrameLimit before anything is allocated.
    """

    def __init__(self, limit: FrameLimit):
        self.limit = limit
        self.header = bytearray(FRAME.size)
        self.targets = [memoryview(self.header)]
        self.stage = "header"
        self.arrays: list[np.ndarray] = []
        self.done = False

    def feed(self, sock) -> None:
        """Read what is available; raise ConnectionResetError when the peer closed its end."""
        while self.targets:
            target = self.targets[0]
            try:
                n = sock.recv_into(target)
            except BlockingIOError:
                return
            if n == 0:
                raise ConnectionResetError("the peer closed the connection")
            if n < target.nbytes:
                self.targets[0] = target[n:]
                continue
            self.targets.pop(0)
            if not self.targets:
                self._next_stage()

    def _next_stage(self) -> None:
        if self.stage == "header":
            magic, count = FRAME.unpack(self.header)
            if magic != FRAME_MAGIC or count > self.limit.max_arrays:
                raise FrameRefused(
                    f"a frame of {count} arrays (magic {magic!r}); this run sends at most "
                    f"{self.limit.max_arrays}"
                )
            self.descriptors = bytearray(DESCRIPTOR.size * count)
            self.stage = "descriptors"
            self.targets = [memoryview(self.descriptors)] if count else []
            if not count:
                self._next_stage()
        elif self.stage == "descriptors":
            self.arrays = [
                self._allocate(*DESCRIPTOR.unpack_from(self.descriptors, DESCRIPTOR.size * i))
                for i in range(len(self.descriptors) // DESCRIPTOR.size)
            ]
            self.stage = "body"
            self.targets = [memoryview(a).cast("B") for a in self.arrays if a.nbytes]
            if not self.targets:
                self._next_stage()
        else:
            self.done = True

    def _allocate(self, code: int, ndim: int, rows: int, cols: int) -> np.ndarray:
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
        return np.empty(shape, dtype=dtype)

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
