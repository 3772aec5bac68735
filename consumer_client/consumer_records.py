"""What the consumer hands to applications, and the decoder that makes it from fetched bytes.

:class:`Message` is a small immutable tuple. :func:`decode_chunk` turns one partition's fetched
record data into messages: RecordBatch v2 with any codec Kafka clients produce (gzip, snappy
raw or xerial-framed, lz4 frame, zstd), skipping control batches, records before the fetch
offset and a trailing partial batch (cut off by the fetch size limit). :func:`scan_chunk` walks
only batch headers (no record is decoded) to find the next offset to fetch, so the fetcher,
which runs on the reactor, never pays for decoding; the reader decodes when it consumes (in its
own thread, for the blocking API).

Decoding is the consumer's main cost, so the record loop is written for CPython's cost model
(see :func:`_records`): one struct call and table lookups per record instead of byte indexing
and bit operations, and Message tuples built in C (``map``/``zip``). :func:`decode_chunk` pauses
the cyclic garbage collector while it runs (see there). Measured in ``docs/benchmarks.md``
(Consumer).
"""

from __future__ import annotations

import bisect
import gc
import struct
from itertools import repeat
from operator import add
from typing import Any, NamedTuple

import crc32c as _crc32c

from broker_core.wire.compression import CLIENT_MAX_DECOMPRESSED_BYTES, decompress
from broker_core.wire.errors import MalformedFrame
from broker_core.wire.primitives import read_varint
from broker_core.wire.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    Compression,
    CorruptRecordBatch,
    UnsupportedMagic,
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
    """The zig-zag varint at ``pos`` of a batch's record data (padded with :data:`_PAD`).
    Varints of one and two bytes, the common case, are read here by table for speed (a call to
    :func:`~broker_core.wire.primitives.read_varint` costs a header-heavy fetch ~10%); longer
    ones there."""
    a = raw[pos]
    if a < 0x80:
        return _Z1[a], pos + 1
    b = raw[pos + 1]
    if b < 0x80:
        return _Z2[a + 128 * b], pos + 2
    return read_varint(raw, pos, len(raw), 10, "varint in a record")


def decode_chunk(topic: str, partition: int, data: bytes | memoryview, fetch_offset: int,
                 *, check_crcs: bool = True,
                 max_decompressed_bytes: int = CLIENT_MAX_DECOMPRESSED_BYTES) -> list[Message]:
    """The messages at or after ``fetch_offset`` in ``data`` (one partition's record set from a
    Fetch response). Raises :class:`~broker_core.wire.records.CorruptRecordBatch` for a bad
    CRC, an undecodable payload or an inconsistent record, and its subclass
    :class:`~broker_core.wire.compression.DecompressedTooLarge` for a compressed batch whose
    records would take more than ``max_decompressed_bytes`` (a compression bomb): no more than
    that is ever allocated for one batch.

    The cyclic garbage collector is paused meanwhile (unless it was off already). Message is
    a tuple subclass, which the collector never untracks, so the thousands a chunk makes
    would set off several young collections each, promote every message and bring full
    collections of the whole heap ever closer, costing about a tenth of the decoding time;
    the objects made here hold no reference cycles, so there is nothing for it to find. The
    switch is process-wide: other threads' allocations are not collected for those few
    milliseconds either, and a gc.disable() another thread makes meanwhile is undone."""
    if not gc.isenabled():
        return _decode(topic, partition, data, fetch_offset, check_crcs, max_decompressed_bytes)
    gc.disable()
    try:
        return _decode(topic, partition, data, fetch_offset, check_crcs, max_decompressed_bytes)
    finally:
        gc.enable()


def _decode(topic: str, partition: int, data: bytes | memoryview, fetch_offset: int,
            check_crcs: bool, max_decompressed_bytes: int) -> list[Message]:
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
        if codec == 0:
            raw = b"".join((mv[pos + HEADER_SIZE:batch_end], _PAD))
        else:
            try:
                raw = decompress(Compression(codec), mv[pos + HEADER_SIZE:batch_end],
                                 max_bytes=max_decompressed_bytes) + _PAD
            except CorruptRecordBatch as e:
                e.args = (f"{e} (the batch at offset {base} of {topic}-{partition})",)
                raise
        try:
            _records(raw, count, base, base_ts, max_ts if attrs & _LOG_APPEND else None,
                     topic, partition, fetch_offset, out)
        except (IndexError, struct.error):
            raise CorruptRecordBatch(f"record data overruns the batch at offset {base} of "
                                     f"{topic}-{partition}") from None
        except MalformedFrame as e:  # a varint longer than 10 bytes
            raise CorruptRecordBatch(f"{e} (the batch at offset {base} of "
                                     f"{topic}-{partition})") from None
        pos = batch_end
    return out


def _zigzag(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


#: Zig-zag varints of one byte, by that byte; of two bytes ``a, b`` (``a >= 0x80 > b``), by
#: ``a + 128 * b``. Tuple indexing and int addition are cheap bytecodes; the shifts and masks
#: they replace are not (CPython 3.11 does not specialise bitwise operators).
_Z1 = tuple(_zigzag(v) for v in range(128))
_Z2 = tuple(_zigzag((i & 0x7F) | ((i >> 7) - 1) << 7) if i >= 0x80 else 0
            for i in range(0x100 + 0x80 * 0x7F))
_HEAD_BYTES = 12
#: A record's first bytes as small ints, in one call: enough for every field up to the
#: value's length when a null key and no varint longer than the common case come first.
_head = struct.Struct(f"{_HEAD_BYTES}B").unpack_from
#: Appended to a batch's record data so that the first bytes of every record unpack.
_PAD = bytes(_HEAD_BYTES)


def _records(raw: bytes, count: int, base: int, base_ts: int, append_ts: int | None,
             topic: str, partition: int, start: int, out: list[Message]) -> None:
    # Deliberately one long function: this is the consumer's per-record decode loop, and
    # splitting it would add a Python call per record, the overhead the loop exists to avoid.
    # ``raw`` is the batch's record data followed by _PAD. A record's first bytes come out of
    # one struct call as small ints; its length, timestamp and offset deltas, key length and
    # value length (one- or two-byte varints in the common case, three for offset deltas past
    # 8,191) are read from them with table lookups. Whatever else turns up (a longer varint)
    # goes to _record, which reads any record. ``i`` counts bytes from the record's start and
    # stays a small int, like the deltas (ints up to 256 are cached objects, and the tables
    # hold theirs), so the loop allocates no int of its own but two positions per record. It
    # only collects offset deltas, values and timestamps (plus the rare keys and headers by
    # index); offsets and Message tuples are made afterwards by map/zip, in C. A timestamp is
    # shared with the previous record when their deltas match (records of one millisecond).
    # A record whose fields disagree with its length is corrupt.
    head = _head
    z1 = _Z1
    z2 = _Z2
    deltas: list[int] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    extra: dict[int, tuple] = {}  # index -> (key, headers) when either is not empty
    add_delta = deltas.append
    add_value = values.append
    add_stamp = stamps.append
    create = append_ts is None
    last_delta = 0
    stamp = base_ts
    pos = 0
    for _ in range(count):
        t = head(raw, pos)
        a = t[0]
        if a < 0x80:
            size = z1[a] + 1
            i = 2  # the timestamp delta, after the attributes byte
        else:
            b = t[1]
            if b > 0x7F:
                pos = _record(raw, pos, base_ts, deltas, values, stamps, extra)
                continue
            size = z2[a + 128 * b] + 2
            i = 3
        a = t[i]
        if a < 0x80:
            ts_delta = z1[a]
            i += 1
        else:
            b = t[i + 1]
            if b > 0x7F:
                pos = _record(raw, pos, base_ts, deltas, values, stamps, extra)
                continue
            ts_delta = z2[a + 128 * b]
            i += 2
        a = t[i]
        if a < 0x80:
            delta = z1[a]
            i += 1
        else:
            b = t[i + 1]
            if b < 0x80:
                delta = z2[a + 128 * b]
                i += 2
            else:
                c = t[i + 2]
                if c > 0x7F:
                    pos = _record(raw, pos, base_ts, deltas, values, stamps, extra)
                    continue
                v = a + 128 * b + 16384 * c - 16512
                delta = (v >> 1) ^ -(v & 1)
                i += 3
        a = t[i]
        if a == 1:  # zig-zag -1: a null key, the common case
            key = None
            a = t[i + 1]
            if a < 0x80:
                n = z1[a]
                i += 2
            else:
                b = t[i + 2]
                if b > 0x7F:
                    pos = _record(raw, pos, base_ts, deltas, values, stamps, extra)
                    continue
                n = z2[a + 128 * b]
                i += 3
        else:
            if a < 0x80:
                n = z1[a]
                i += 1
            else:
                b = t[i + 1]
                if b > 0x7F:
                    pos = _record(raw, pos, base_ts, deltas, values, stamps, extra)
                    continue
                n = z2[a + 128 * b]
                i += 2
            if n < 0:
                key = None
            else:
                ks = pos + i
                key = raw[ks:ks + n]
                i += n
            t = head(raw, pos + i)  # the value's length is past the key
            a = t[0]
            if a < 0x80:
                n = z1[a]
                i += 1
            else:
                b = t[1]
                if b > 0x7F:
                    pos = _record(raw, pos, base_ts, deltas, values, stamps, extra)
                    continue
                n = z2[a + 128 * b]
                i += 2
        vs = pos + i
        if n < 0:
            add_value(None)
            he = vs
        else:
            he = vs + n
            add_value(raw[vs:he])
            i += n
        if raw[he] == 0:  # no headers, the common case
            i += 1
            if key is not None:
                extra[len(deltas)] = (key, _EMPTY_HEADERS)
        else:
            headers, he = _headers(raw, he)
            i = he - pos
            extra[len(deltas)] = (key, headers)
        if i != size:
            raise CorruptRecordBatch(f"record length does not match its fields at offset "
                                     f"{base + delta}")
        pos += size
        add_delta(delta)
        if create:
            if ts_delta != last_delta:
                last_delta = ts_delta
                stamp = base_ts + ts_delta
            add_stamp(stamp)
    if pos != len(raw) - _HEAD_BYTES:
        raise CorruptRecordBatch(f"{len(raw) - _HEAD_BYTES - pos} bytes left over after {count} "
                                 f"records in the batch at offset {base}")
    first = 0
    if deltas and deltas[0] < start - base:  # only a chunk's first batch starts before it
        first = bisect.bisect_left(deltas, start - base)
        deltas = deltas[first:]
        values = values[first:]
        stamps = stamps[first:]
    n = len(deltas)
    keys: Any = repeat(None, n)
    headers: Any = repeat(_EMPTY_HEADERS, n)
    if extra:
        keys = [None] * n
        headers = [_EMPTY_HEADERS] * n
        for i, (k, h) in extra.items():
            if i >= first:
                keys[i - first] = k
                headers[i - first] = h
    out.extend(map(tuple.__new__, repeat(Message), zip(
        repeat(topic), repeat(partition), map(add, repeat(base), deltas), keys, values,
        stamps if create else repeat(append_ts), repeat(0 if create else 1), headers)))


def _record(raw: bytes, pos: int, base_ts: int, deltas: list[int], values: list[bytes | None],
            stamps: list[int], extra: dict[int, tuple]) -> int:
    """Decode the record at ``pos`` field by field (any varint length), add it to the
    lists as :func:`_records` does, and return the position after it."""
    length, p = _varint(raw, pos)
    end = p + length
    p += 1  # record attributes (unused in v2)
    ts_delta, p = _varint(raw, p)
    delta, p = _varint(raw, p)
    n, p = _varint(raw, p)
    if n < 0:
        key = None
    else:
        key = raw[p:p + n]
        p += n
    n, p = _varint(raw, p)
    if n < 0:
        value = None
    else:
        value = raw[p:p + n]
        p += n
    headers, p = _headers(raw, p)
    if p != end or length < 0:
        raise CorruptRecordBatch(f"record length does not match its fields (offset delta "
                                 f"{delta})")
    if key is not None or headers:
        extra[len(deltas)] = (key, headers)
    deltas.append(delta)
    values.append(value)
    stamps.append(base_ts + ts_delta)
    return end


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
