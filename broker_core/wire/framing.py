"""Kafka framing: a 4-byte big-endian size, then the message. Sans-IO."""

from __future__ import annotations

import struct

from broker_core.wire.errors import FrameTooLarge, MalformedFrame

MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka socket.request.max.bytes default

_size = struct.Struct(">i")


class FrameDecoder:
    """Splits a byte stream into frames (without their size prefix).

    Invariant: ``_buf`` never holds a complete frame after ``feed`` returns. A size above
    ``max_frame_bytes`` raises :class:`FrameTooLarge` as soon as the prefix arrives, before the
    body is buffered.
    """

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        frames = []
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            size = _size.unpack_from(buf, pos)[0]
            if size < 0:
                raise MalformedFrame(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            if n - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


def frame(chunks: list[bytes]) -> list[bytes]:
    """Prepend the size prefix to a message given as chunks."""
    return [_size.pack(sum(len(c) for c in chunks)), *chunks]
