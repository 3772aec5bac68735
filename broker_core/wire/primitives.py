"""Kafka's primitive wire types: a bounds-checked :class:`Reader` and a chunking :class:`Writer`.

Reading
    :class:`Reader` walks a ``memoryview`` with an offset cursor. Every read checks the bounds
    first, so a short or lying frame raises :class:`~broker_core.wire.errors.MalformedFrame`,
    never ``IndexError``, ``struct.error`` or ``UnicodeDecodeError``.

    Byte fields come back in two shapes, on purpose:

    - ``bytes``/``nullable_bytes``/``compact_bytes`` return ``bytes`` (a copy): these are small
      metadata blobs that outlive the frame.
    - ``records`` returns a zero-copy ``memoryview`` slice of the frame. Record data is the bulk of
      Produce and Fetch traffic and is handled as an opaque blob, so it is never copied or walked
      record by record here. The slice keeps the frame alive while it is referenced.

Writing
    :class:`Writer` appends small values to a ``bytearray`` and keeps large ``bytes`` payloads
    (record batches) as separate chunks, so a fetch response made of log slices is not copied
    before the transport writes it (``transport.writeSequence``). ``chunks()`` returns the list.

Lengths follow Kafka: classic strings have an int16 length, classic bytes and arrays an int32
length, ``-1`` meaning null; compact types (flexible versions) store ``length + 1`` as an unsigned
varint, ``0`` meaning null.
"""

from __future__ import annotations

import struct
import uuid as _uuid
from collections.abc import Iterable

from broker_core.wire.errors import EncodeError, MalformedFrame

MAX_STRING_BYTES = 0x7FFF
"""Kafka strings carry an int16 length; compact strings are held to the same limit."""

ZERO_COPY_MIN_BYTES = 1024
"""Byte payloads at least this long become their own chunk instead of being copied into the
writer's buffer; below it one copy is cheaper than another chunk."""

ZERO_UUID = _uuid.UUID(int=0)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")

_MAX_U32 = 0xFFFFFFFF
_MAX_U64 = 0xFFFFFFFFFFFFFFFF


# -- varints: the codec's one implementation ------------------------------------------------------
#
# Unsigned varints (protobuf's): 7 bits a byte, least significant first, the high bit set on
# every byte but the last. Zig-zag varints (Kafka's varint/varlong, protobuf's sint64) map
# 0, -1, 1, -2, ... to 0, 1, 2, 3, ... first, so small negative numbers (-1 = null) stay one
# byte. The Reader and Writer below, the record codecs (wire.records, the log validator, the
# client's record decoder and encoder) all read and write them here. Hot loops that decode a
# one- or two-byte varint inline, or by table, do so for speed and say so where they do.


def read_varint(buf: bytes | bytearray | memoryview, pos: int, end: int, max_bytes: int = 10,
                what: str = "varint", zigzag: bool = True) -> tuple[int, int]:
    """The varint at ``buf[pos:end]``, at most ``max_bytes`` long (5 for an int32, 10 for an
    int64), and the position after it: zig-zag decoded unless ``zigzag`` is false. Raises
    :class:`MalformedFrame` ("truncated ``what``" when ``end`` comes first, "``what`` is longer
    than ``max_bytes`` bytes" otherwise); never reads at or past ``end``. One loop for both
    kinds: a second call layer would cost the record decoders measurably."""
    result = shift = 0
    stop = pos + max_bytes
    if stop > end:
        stop = end
    while pos < stop:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if zigzag:
                return (result >> 1) ^ -(result & 1), pos
            return result, pos
        shift += 7
    if pos >= end:
        raise MalformedFrame(f"truncated {what}")
    raise MalformedFrame(f"{what} is longer than {max_bytes} bytes")


def append_uvarint(out: bytearray, v: int) -> None:
    """Append ``v`` (``0 <= v``; the caller checks its type's range) as an unsigned varint."""
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def append_zigzag(out: bytearray, v: int) -> None:
    """Append ``v`` (an int64; the caller checks the range) as a zig-zag varint. An int32 comes
    out as Kafka's varint, the same bytes as its 32-bit zig-zag."""
    append_uvarint(out, (v << 1) ^ (v >> 63))


def zigzag_bytes(v: int) -> bytes:
    """``v`` (an int64) as a zig-zag varint."""
    out = bytearray()
    append_uvarint(out, (v << 1) ^ (v >> 63))
    return bytes(out)


class Reader:
    """A cursor over ``buf[pos:end]``.

    Invariant: ``pos <= end <= len(buf)``; a read either advances ``pos`` by exactly the bytes it
    consumed or raises :class:`MalformedFrame` (the cursor is then unspecified).
    """

    __slots__ = ("buf", "pos", "end")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0,
                 end: int | None = None) -> None:
        buf = data if isinstance(data, memoryview) else memoryview(data)
        if buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        n = len(buf)
        if end is None:
            end = n
        if not 0 <= pos <= end <= n:
            raise ValueError(f"reader bounds {pos}:{end} outside a buffer of {n} bytes")
        self.buf = buf
        self.pos = pos
        self.end = end

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int, what: str) -> int:
        """Reserve ``n`` bytes and return where they start."""
        pos = self.pos
        if n > self.end - pos:
            raise MalformedFrame(f"{what} needs {n} bytes, only {self.end - pos} left")
        self.pos = pos + n
        return pos

    # -- fixed-width integers -----------------------------------------------------------------

    def fixed(self, st: struct.Struct) -> tuple:
        """Several fixed-width values at once (the schema layer merges runs of them)."""
        pos = self._take(st.size, "fixed-width fields")
        return st.unpack_from(self.buf, pos)

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self._take(1, "int8"))[0]

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._take(2, "int16"))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._take(4, "int32"))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self._take(8, "int64"))[0]

    def uint16(self) -> int:
        return _U16.unpack_from(self.buf, self._take(2, "uint16"))[0]

    def uint32(self) -> int:
        return _U32.unpack_from(self.buf, self._take(4, "uint32"))[0]

    def float64(self) -> float:
        return _F64.unpack_from(self.buf, self._take(8, "float64"))[0]

    def boolean(self) -> bool:
        # Kafka reads any non-zero byte as true.
        return self.buf[self._take(1, "bool")] != 0

    # -- varints ------------------------------------------------------------------------------

    def _uvar(self, max_bytes: int, limit: int, what: str) -> int:
        pos = self.pos
        if pos < self.end:
            b = self.buf[pos]
            if b < 0x80:  # the common case, inline for speed: a one-byte length or tag
                self.pos = pos + 1
                return b
        result, self.pos = read_varint(self.buf, pos, self.end, max_bytes, what, False)
        if result > limit:
            raise MalformedFrame(f"{what} {result} out of range")
        return result

    def uvarint(self) -> int:
        """Unsigned 32-bit varint (at most 5 bytes)."""
        return self._uvar(5, _MAX_U32, "unsigned varint")

    def varint(self) -> int:
        """Signed zigzag 32-bit varint."""
        n = self._uvar(5, _MAX_U32, "varint")
        return (n >> 1) ^ -(n & 1)

    def varlong(self) -> int:
        """Signed zigzag 64-bit varint (at most 10 bytes)."""
        n = self._uvar(10, _MAX_U64, "varlong")
        return (n >> 1) ^ -(n & 1)

    # -- strings ------------------------------------------------------------------------------

    def _utf8(self, n: int) -> str:
        pos = self._take(n, "string")
        try:
            return str(self.buf[pos:pos + n], "utf-8")
        except UnicodeDecodeError as e:
            raise MalformedFrame(f"string is not valid UTF-8 ({e.reason})") from None

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise MalformedFrame(f"non-nullable string has length {n}")
        return self._utf8(n)

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            if n == -1:
                return None
            raise MalformedFrame(f"string has invalid length {n}")
        return self._utf8(n)

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise MalformedFrame("non-nullable compact string is null")
        if n > MAX_STRING_BYTES:
            raise MalformedFrame(f"compact string length {n} exceeds {MAX_STRING_BYTES}")
        return self._utf8(n)

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        if n > MAX_STRING_BYTES:
            raise MalformedFrame(f"compact string length {n} exceeds {MAX_STRING_BYTES}")
        return self._utf8(n)

    # -- bytes and records ----------------------------------------------------------------------

    def _slice(self, n: int, what: str) -> memoryview:
        pos = self._take(n, what)
        return self.buf[pos:pos + n]

    def _bytes_len(self) -> int | None:
        n = self.int32()
        if n < 0:
            if n == -1:
                return None
            raise MalformedFrame(f"bytes field has invalid length {n}")
        return n

    def _compact_len(self) -> int | None:
        n = self.uvarint() - 1
        return None if n < 0 else n

    def bytes_(self) -> bytes:
        n = self._bytes_len()
        if n is None:
            raise MalformedFrame("non-nullable bytes field is null")
        return bytes(self._slice(n, "bytes"))

    def nullable_bytes(self) -> bytes | None:
        n = self._bytes_len()
        return None if n is None else bytes(self._slice(n, "bytes"))

    def compact_bytes(self) -> bytes:
        n = self._compact_len()
        if n is None:
            raise MalformedFrame("non-nullable compact bytes field is null")
        return bytes(self._slice(n, "bytes"))

    def compact_nullable_bytes(self) -> bytes | None:
        n = self._compact_len()
        return None if n is None else bytes(self._slice(n, "bytes"))

    def records(self) -> memoryview | None:
        """Record data (int32 length, nullable) as a zero-copy slice of the frame."""
        n = self._bytes_len()
        return None if n is None else self._slice(n, "records")

    def compact_records(self) -> memoryview | None:
        n = self._compact_len()
        return None if n is None else self._slice(n, "records")

    # -- uuid, arrays, tagged fields ------------------------------------------------------------

    def uuid(self) -> _uuid.UUID:
        return _uuid.UUID(bytes=bytes(self._slice(16, "uuid")))

    def array_length(self, min_element_bytes: int = 1) -> int | None:
        """An int32 array count (``None`` for a null array).

        The count is checked against the bytes left, so a lying count cannot make the decoder
        loop or allocate far beyond the frame's size.
        """
        n = self.int32()
        if n < 0:
            if n == -1:
                return None
            raise MalformedFrame(f"array has invalid length {n}")
        self._check_count(n, min_element_bytes)
        return n

    def compact_array_length(self, min_element_bytes: int = 1) -> int | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        self._check_count(n, min_element_bytes)
        return n

    def _check_count(self, n: int, min_element_bytes: int) -> None:
        if n * min_element_bytes > self.end - self.pos:
            raise MalformedFrame(
                f"array of {n} elements cannot fit in the {self.end - self.pos} bytes left")

    def tagged_field_header(self) -> tuple[int, int]:
        """One tagged field's ``(tag, size)``; the caller consumes ``size`` bytes next."""
        tag = self.uvarint()
        size = self.uvarint()
        if size > self.end - self.pos:
            raise MalformedFrame(
                f"tagged field {tag} of {size} bytes exceeds the {self.end - self.pos} left")
        return tag, size

    def tagged_fields(self) -> dict[int, memoryview]:
        """A whole tagged-field section as ``{tag: raw value}`` (used for headers and tests)."""
        out: dict[int, memoryview] = {}
        for _ in range(self.uvarint()):
            tag, size = self.tagged_field_header()
            out[tag] = self._slice(size, "tagged field")
        return out

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            _, size = self.tagged_field_header()
            self.pos += size


class Writer:
    """Accumulates an encoded message as a list of ``bytes`` chunks.

    Invariant: ``b"".join(self.chunks())`` is everything written so far, in order. Small values
    go to ``_buf``; a large ``bytes`` payload becomes its own chunk after ``_buf`` is flushed, so
    it is never copied here.
    """

    __slots__ = ("_chunks", "_buf", "_size")

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._buf = bytearray()
        self._size = 0  # bytes in _chunks

    def __len__(self) -> int:
        return self._size + len(self._buf)

    def chunks(self) -> list[bytes]:
        """The encoded message so far. The Writer may keep being used afterwards."""
        if self._buf:
            self._flush()
        return list(self._chunks)

    getvalue = chunks

    def tobytes(self) -> bytes:
        return b"".join(self.chunks())

    def _flush(self) -> None:
        data = bytes(self._buf)
        self._chunks.append(data)
        self._size += len(data)
        self._buf.clear()

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes as they are: a big ``bytes`` object is kept as its own chunk."""
        if len(data) >= ZERO_COPY_MIN_BYTES:
            if self._buf:
                self._flush()
            chunk = data if isinstance(data, bytes) else bytes(data)
            self._chunks.append(chunk)
            self._size += len(chunk)
        else:
            self._buf += data

    # -- fixed-width --------------------------------------------------------------------------

    def fixed(self, st: struct.Struct, values: Iterable) -> None:
        self._buf += st.pack(*values)

    def prefixed(self, prefix: bytes, st: struct.Struct, values: Iterable) -> None:
        """``prefix`` (a length already encoded) followed by ``values`` packed with ``st``."""
        buf = self._buf
        buf += prefix
        buf += st.pack(*values)

    def pack(self, fmt: str, values: Iterable) -> None:
        """Like :meth:`fixed` for a one-off format (``struct`` caches compiled formats)."""
        self._buf += struct.pack(fmt, *values)

    def int8(self, v: int) -> None:
        self._buf += _I8.pack(v)

    def int16(self, v: int) -> None:
        self._buf += _I16.pack(v)

    def int32(self, v: int) -> None:
        self._buf += _I32.pack(v)

    def int64(self, v: int) -> None:
        self._buf += _I64.pack(v)

    def uint16(self, v: int) -> None:
        self._buf += _U16.pack(v)

    def uint32(self, v: int) -> None:
        self._buf += _U32.pack(v)

    def float64(self, v: float) -> None:
        self._buf += _F64.pack(v)

    def boolean(self, v: bool) -> None:
        self._buf.append(1 if v else 0)

    # -- varints ------------------------------------------------------------------------------

    def uvarint(self, v: int) -> None:
        if 0 <= v < 0x80:
            self._buf.append(v)
            return
        if not 0 <= v <= _MAX_U32:
            raise EncodeError(f"unsigned varint {v} out of range")
        append_uvarint(self._buf, v)

    def varint(self, v: int) -> None:
        if not -0x80000000 <= v <= 0x7FFFFFFF:
            raise EncodeError(f"varint {v} out of the int32 range")
        append_zigzag(self._buf, v)

    def varlong(self, v: int) -> None:
        if not -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
            raise EncodeError(f"varlong {v} out of the int64 range")
        append_zigzag(self._buf, v)

    # -- strings ------------------------------------------------------------------------------

    @staticmethod
    def _utf8(v: str) -> bytes:
        if not isinstance(v, str):
            raise EncodeError(f"expected a string, got {type(v).__name__}")
        data = v.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise EncodeError(f"string of {len(data)} bytes exceeds {MAX_STRING_BYTES}")
        return data

    def string(self, v: str) -> None:
        data = self._utf8(v)
        self._buf += _I16.pack(len(data))
        self._buf += data

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self._buf += b"\xff\xff"
        else:
            self.string(v)

    def compact_string(self, v: str) -> None:
        data = self._utf8(v)
        self.uvarint(len(data) + 1)
        self._buf += data

    def compact_nullable_string(self, v: str | None) -> None:
        if v is None:
            self._buf.append(0)
        else:
            self.compact_string(v)

    # -- bytes and records ----------------------------------------------------------------------

    def bytes_(self, v: bytes | bytearray | memoryview) -> None:
        self._buf += _I32.pack(len(v))
        self.raw(v)

    def nullable_bytes(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self._buf += b"\xff\xff\xff\xff"
        else:
            self.bytes_(v)

    def compact_bytes(self, v: bytes | bytearray | memoryview) -> None:
        self.uvarint(len(v) + 1)
        self.raw(v)

    def compact_nullable_bytes(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self._buf.append(0)
        else:
            self.compact_bytes(v)

    def records(self, v: RecordsLike | None, compact: bool = False) -> None:
        """Record data: ``None``, one bytes-like object, or a list/tuple of them (e.g. several
        log slices) written back to back under one length prefix without being joined."""
        if v is None:
            if compact:
                self._buf.append(0)
            else:
                self._buf += b"\xff\xff\xff\xff"
            return
        if isinstance(v, list | tuple):
            size = sum(len(c) for c in v)
            if compact:
                self.uvarint(size + 1)
            else:
                self._buf += _I32.pack(size)
            for c in v:
                self.raw(c)
            return
        if compact:
            self.uvarint(len(v) + 1)
        else:
            self._buf += _I32.pack(len(v))
        self.raw(v)

    # -- uuid, arrays, tagged fields ------------------------------------------------------------

    def uuid(self, v: _uuid.UUID | bytes | None) -> None:
        if v is None:
            v = ZERO_UUID
        if isinstance(v, _uuid.UUID):
            self._buf += v.bytes
        elif isinstance(v, bytes | bytearray | memoryview) and len(v) == 16:
            self._buf += v
        else:
            raise EncodeError(f"expected a UUID or 16 bytes, got {v!r}")

    def array_length(self, n: int | None) -> None:
        self._buf += _I32.pack(-1 if n is None else n)

    def compact_array_length(self, n: int | None) -> None:
        self.uvarint(0 if n is None else n + 1)

    def tagged_fields(self, fields: dict[int, bytes] | None = None) -> None:
        """A tagged-field section from already-encoded values, written in tag order."""
        if not fields:
            self._buf.append(0)
            return
        self.uvarint(len(fields))
        for tag in sorted(fields):
            value = fields[tag]
            self.uvarint(tag)
            self.uvarint(len(value))
            self.raw(value)


RecordsLike = bytes | bytearray | memoryview | list | tuple
