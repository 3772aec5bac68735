"""What the consumer hands to applications, and the decoder that makes it from fetched bytes.

:class:`Message` is a small immutable tuple. :func:`decode_chunk` turns one partition's fetched
record data into messages: RecordBatch v2 with any codec Kafka clients produce (gzip, snappy
raw or xerial-framed, lz4 frame, zstd), skipping control batches, records before the fetch
offset (a compressed batch is returned whole) and a trailing partial batch (cut off by the fetch
size limit). :func:`scan_chunk` walks only batch headers (no record is decoded) to find the next
offset to fetch, so the fetcher, which runs on the reactor, never pays for decoding; the reader
decodes when it consumes (in its own thread, for the blocking API).

The record loop is written for speed: single-byte varints are read inline, messages are built
with ``tuple.__new__`` and nothing else is allocated per record beyond the key, value and
(usually empty) headers.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c as _crc32c

from broker_core.wire.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    Compression,
    CorruptRecordBatch,
    UnsupportedMagic,
    _decompress,
)

_header = struct.Struct(">qiibIhiqqqhii")
_span = struct.Struct(">qi")  # baseOffset, batchLength
_last_delta = struct.Struct(">i")
_CRC_START = 21
_COMPRESSION_MASK = 0x07
_LOG_APPEND = 0x08
_CONTROL = 0x20
_EMPTY_HEADERS: tuple = ()


class Message(NamedTuple):
    """One consumed record. ``offset`` is its offset in the partition; the position a consumer
    reports after delivering it is ``offset + 1``. ``timestamp_type`` is 0 (CreateTime) or 1
    (LogAppendTime); ``headers`` is a tuple of ``(key, value)`` pairs."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    timestamp_type: int
    headers: tuple[tuple[str, bytes | None], ...]


def scan_chunk(data: bytes | memoryview, fetch_offset: int) -> tuple[int, int]:
    """``(next_offset, complete_bytes)`` for one partition's fetched data: the offset after the
    last complete batch (``fetch_offset`` when there is none) and how many bytes the complete
    batches take. Reads 12 bytes per batch plus its last-offset delta; decodes nothing."""
    pos = 0
    end = len(data)
    nxt = fetch_offset
    while end - pos >= HEADER_SIZE:
        base, length = _span.unpack_from(data, pos)
        size = length + LOG_OVERHEAD
        if pos + size > end:
            break
        last = base + _last_delta.unpack_from(data, pos + 23)[0]
        if last + 1 > nxt:
            nxt = last + 1
        pos += size
    return nxt, pos


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = raw[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordBatch("varint longer than 10 bytes in a record")


def decode_chunk(topic: str, partition: int, data: bytes | memoryview, fetch_offset: int,
                 *, check_crcs: bool = True) -> list[Message]:
    """The messages at or after ``fetch_offset`` in ``data`` (one partition's record set from a
    Fetch response). Raises :class:`~broker_core.wire.records.CorruptRecordBatch` for a bad
    CRC, an undecodable payload or an inconsistent record."""
    out: list[Message] = []
    pos = 0
    end = len(data)
    mv = memoryview(data)
    while end - pos >= HEADER_SIZE:
        (base, length, _epoch, magic, crc, attrs, last_delta, base_ts, max_ts, _pid, _pe, _seq,
         count) = _header.unpack_from(data, pos)
        size = length + LOG_OVERHEAD
        if pos + size > end:
            break  # a partial batch cut off by the fetch size limit
        if magic != MAGIC:
            raise UnsupportedMagic(f"record batch magic {magic} at offset {base}")
        batch_end = pos + size
        if base + last_delta < fetch_offset or attrs & _CONTROL:
            pos = batch_end
            continue
        if check_crcs and _crc32c.crc32c(mv[pos + _CRC_START:batch_end]) != crc:
            raise CorruptRecordBatch(f"CRC mismatch in the batch at offset {base} of "
                                     f"{topic}-{partition}")
        codec = attrs & _COMPRESSION_MASK
        payload = bytes(mv[pos + HEADER_SIZE:batch_end])
        raw = payload if codec == 0 else _decompress(Compression(codec), payload)
        try:
            _records(raw, count, base, base_ts, max_ts if attrs & _LOG_APPEND else None,
                     topic, partition, fetch_offset, out)
        except IndexError:
            raise CorruptRecordBatch(f"record data overruns the batch at offset {base} of "
                                     f"{topic}-{partition}") from None
        pos = batch_end
    return out


def _uvarint(raw: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint of three bytes or more (the record loop reads shorter ones inline)."""
    shift = result = 0
    while True:
        b = raw[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptRecordBatch("varint longer than 10 bytes in a record")


def _records(raw: bytes, count: int, base: int, base_ts: int, append_ts: int | None,
             topic: str, partition: int, start: int, out: list[Message]) -> None:
    # Each varint below is read inline for one and two bytes (lengths and deltas under 8 KiB,
    # i.e. nearly all), with a call only for longer ones; v is the zig-zag encoded value.
    new = tuple.__new__
    cls = Message
    ts_type = 0 if append_ts is None else 1
    append = out.append
    uvarint = _uvarint
    pos = 0
    for _ in range(count):
        v = raw[pos]
        if v < 0x80:
            pos += 1
        else:
            b = raw[pos + 1]
            if b < 0x80:
                v = (v & 0x7F) | (b << 7)
                pos += 2
            else:
                v, pos = uvarint(raw, pos)
        end = pos + ((v >> 1) ^ -(v & 1))
        pos += 1  # record attributes (unused in v2)
        v = raw[pos]
        if v < 0x80:
            pos += 1
        else:
            b = raw[pos + 1]
            if b < 0x80:
                v = (v & 0x7F) | (b << 7)
                pos += 2
            else:
                v, pos = uvarint(raw, pos)
        ts_delta = (v >> 1) ^ -(v & 1)
        v = raw[pos]
        if v < 0x80:
            pos += 1
        else:
            b = raw[pos + 1]
            if b < 0x80:
                v = (v & 0x7F) | (b << 7)
                pos += 2
            else:
                v, pos = uvarint(raw, pos)
        offset = base + ((v >> 1) ^ -(v & 1))
        v = raw[pos]
        if v == 1:  # zig-zag -1: a null key, the common case
            key = None
            pos += 1
        else:
            if v < 0x80:
                pos += 1
            else:
                b = raw[pos + 1]
                if b < 0x80:
                    v = (v & 0x7F) | (b << 7)
                    pos += 2
                else:
                    v, pos = uvarint(raw, pos)
            n = (v >> 1) ^ -(v & 1)
            if n < 0:
                key = None
            else:
                key = raw[pos:pos + n]
                pos += n
        v = raw[pos]
        if v < 0x80:
            pos += 1
        else:
            b = raw[pos + 1]
            if b < 0x80:
                v = (v & 0x7F) | (b << 7)
                pos += 2
            else:
                v, pos = uvarint(raw, pos)
        n = (v >> 1) ^ -(v & 1)
        if n < 0:
            value = None
        else:
            value = raw[pos:pos + n]
            pos += n
        if raw[pos] == 0:  # no headers, the common case
            headers = _EMPTY_HEADERS
            pos += 1
        else:
            headers, pos = _headers(raw, pos)
        if pos != end:
            raise CorruptRecordBatch(f"record length does not match its fields at offset "
                                     f"{offset}")
        if offset >= start:
            append(new(cls, (topic, partition, offset, key, value,
                             base_ts + ts_delta if append_ts is None else append_ts, ts_type,
                             headers)))
    if pos != len(raw):
        raise CorruptRecordBatch(f"{len(raw) - pos} bytes left over after {count} records in "
                                 f"the batch at offset {base}")


def _headers(raw: bytes, pos: int) -> tuple[tuple, int]:
    nh, pos = _varint(raw, pos)
    if nh < 0:
        raise CorruptRecordBatch(f"negative header count {nh} in a record")
    out = []
    for _ in range(nh):
        n, pos = _varint(raw, pos)
        if n < 0:
            raise CorruptRecordBatch("null header key in a record")
        hk = raw[pos:pos + n]
        pos += n
        n, pos = _varint(raw, pos)
        if n < 0:
            hv = None
        else:
            hv = raw[pos:pos + n]
            pos += n
        try:
            out.append((hk.decode(), hv))
        except UnicodeDecodeError:
            raise CorruptRecordBatch("header key is not UTF-8") from None
    return tuple(out), pos
