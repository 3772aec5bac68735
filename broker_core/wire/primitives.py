"""Kafka's primitive types: a bounds-checked ``Reader`` and a chunk-collecting ``Writer``.

Reads never raise anything but :class:`~broker_core.wire.errors.MalformedFrame`. Byte fields
are returned as ``bytes`` copies of their slice (one copy, no per-record work); the writer keeps
large payloads as separate chunks so a fetch response's record data is not copied before the
transport's ``writeSequence``.
"""

from __future__ import annotations

import struct
import uuid as _uuid

from broker_core.wire.errors import MalformedFrame

_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_u16 = struct.Struct(">H")
_i32 = struct.Struct(">i")
_u32 = struct.Struct(">I")
_i64 = struct.Struct(">q")
_f64 = struct.Struct(">d")

ZERO_UUID = _uuid.UUID(int=0)


class Reader:
    """A cursor over one frame; every read checks bounds."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = data if isinstance(data, bytes) else bytes(data)
        self.pos = pos
        self.end = len(self.data)

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, s: struct.Struct) -> int:
        p = self.pos
        if p + s.size > self.end:
            raise MalformedFrame(f"truncated: need {s.size} bytes at offset {p}")
        self.pos = p + s.size
        return s.unpack_from(self.data, p)[0]

    def int8(self) -> int:
        return self._take(_i8)

    def int16(self) -> int:
        return self._take(_i16)

    def uint16(self) -> int:
        return self._take(_u16)

    def int32(self) -> int:
        return self._take(_i32)

    def uint32(self) -> int:
        return self._take(_u32)

    def int64(self) -> int:
        return self._take(_i64)

    def float64(self) -> float:
        return self._take(_f64)

    def bool(self) -> bool:
        return self._take(_i8) != 0

    def uvarint(self) -> int:
        shift = 0
        result = 0
        data, p, end = self.data, self.pos, self.end
        while True:
            if p >= end:
                raise MalformedFrame("truncated varint")
            b = data[p]
            p += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise MalformedFrame("varint too long")
        self.pos = p
        return result

    def varint(self) -> int:
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise MalformedFrame(f"truncated: need {n} bytes at offset {self.pos}")
        p = self.pos
        self.pos = p + n
        return self.data[p:p + n]

    def _str(self, n: int) -> str:
        try:
            return self.raw(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedFrame(f"invalid UTF-8 in string: {e}") from None

    def string(self, nullable: bool, compact: bool) -> str | None:
        n = self.uvarint() - 1 if compact else self.int16()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise MalformedFrame("null or negative length for a non-nullable string")
        return self._str(n)

    def bytes_(self, nullable: bool, compact: bool) -> bytes | None:
        n = self.uvarint() - 1 if compact else self.int32()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise MalformedFrame("null or negative length for non-nullable bytes")
        return self.raw(n)

    def array_len(self, nullable: bool, compact: bool) -> int | None:
        n = self.uvarint() - 1 if compact else self.int32()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise MalformedFrame("null or negative array length")
        if n > self.remaining():
            # Every element takes at least one byte: a longer count is a lie.
            raise MalformedFrame(f"array of {n} elements cannot fit in {self.remaining()} bytes")
        return n

    def uuid(self) -> _uuid.UUID:
        return _uuid.UUID(bytes=self.raw(16))

    def skip_tagged_fields(self) -> dict[int, bytes]:
        """Read a tagged-field section; returns ``{tag: raw bytes}`` of the tags present."""
        n = self.uvarint()
        if n > self.remaining():
            raise MalformedFrame("tagged field count too large")
        out = {}
        last = -1
        for _ in range(n):
            tag = self.uvarint()
            if tag <= last:
                raise MalformedFrame("tagged fields out of order")
            last = tag
            out[tag] = self.raw(self.uvarint())
        return out


class Writer:
    """Collects encoded bytes as a list of chunks (see the module docstring)."""

    __slots__ = ("chunks", "_buf")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self._buf = bytearray()

    def int8(self, v: int) -> None:
        self._buf += _i8.pack(v)

    def int16(self, v: int) -> None:
        self._buf += _i16.pack(v)

    def uint16(self, v: int) -> None:
        self._buf += _u16.pack(v)

    def int32(self, v: int) -> None:
        self._buf += _i32.pack(v)

    def uint32(self, v: int) -> None:
        self._buf += _u32.pack(v)

    def int64(self, v: int) -> None:
        self._buf += _i64.pack(v)

    def float64(self, v: float) -> None:
        self._buf += _f64.pack(v)

    def bool(self, v: bool) -> None:
        self._buf.append(1 if v else 0)

    def uvarint(self, v: int) -> None:
        if v < 0:
            raise ValueError("unsigned varint cannot be negative")
        buf = self._buf
        while v >= 0x80:
            buf.append((v & 0x7F) | 0x80)
            v >>= 7
        buf.append(v)

    def varint(self, v: int) -> None:
        self.uvarint((v << 1) ^ (v >> 63))

    def raw(self, b: bytes | bytearray | memoryview) -> None:
        if len(b) > 4096:
            # Big payloads (record batches) stay separate chunks: no copy here.
            self._flush()
            self.chunks.append(b if isinstance(b, bytes) else bytes(b))
        else:
            self._buf += b

    def _flush(self) -> None:
        if self._buf:
            self.chunks.append(bytes(self._buf))
            self._buf = bytearray()

    def string(self, v: str | None, compact: bool) -> None:
        if v is None:
            self.uvarint(0) if compact else self.int16(-1)
            return
        b = v.encode("utf-8")
        self.uvarint(len(b) + 1) if compact else self.int16(len(b))
        self._buf += b

    def bytes_(self, v: bytes | None, compact: bool) -> None:
        if v is None:
            self.uvarint(0) if compact else self.int32(-1)
            return
        self.uvarint(len(v) + 1) if compact else self.int32(len(v))
        self.raw(v)

    def array_len(self, n: int | None, compact: bool) -> None:
        if n is None:
            self.uvarint(0) if compact else self.int32(-1)
        else:
            self.uvarint(n + 1) if compact else self.int32(n)

    def uuid(self, v: _uuid.UUID | None) -> None:
        self._buf += (v or ZERO_UUID).bytes

    def getvalue(self) -> list[bytes]:
        self._flush()
        return self.chunks
