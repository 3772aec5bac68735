"""What the consumer hands to applications, and the decoder that makes it from fetched bytes.

:class:`Message` is a small immutable tuple. :func:`decode_chunk` turns one partition's fetched
record data into messages: RecordBatch v2 with any codec Kafka clients produce (gzip, snappy
raw or xerial-framed, lz4 frame, zstd), skipping control batches, records before the fetch
offset and a trailing partial batch (cut off by the fetch size limit). :func:`scan_chunk` walks
only batch headers (no record is decoded) to find the next offset to fetch, so the fetcher,
which runs on the reactor, never pays for decoding; the reader decodes when it consumes (in its
own thread, for the blocking API).

The batch walk (what is skipped, CRC, bounded decompression) and :func:`scan_chunk` are the wire
codec's decoder core, :mod:`broker_core.wire.record_batches`; this module owns the per-record
loop. Decoding is the consumer's main cost, so that loop comes in two forms giving identical
messages and errors: :mod:`consumer_client.consumer_records_c`, compiled with Cython when the
package is installed with a C compiler at hand (about five times faster), chosen at import when
it is there; and :func:`_records`, the pure-Python loop, which runs without it and decodes
whatever batch the compiled one declines (corrupt or unusual ones). The pure-Python loop is
written for CPython's cost model: one struct call and table lookups (the core's varint tables)
per record instead of byte indexing and bit operations, and Message tuples built in C
(``map``/``zip``). :func:`decode_chunk` pauses the cyclic garbage collector while it runs (see
there). Measured in ``docs/benchmarks.md`` (Consumer).
"""

from __future__ import annotations

import bisect
import gc
import struct
from itertools import repeat
from operator import add
from typing import Any, NamedTuple

from broker_core.wire.compression import CLIENT_MAX_DECOMPRESSED_BYTES
from broker_core.wire.errors import MalformedFrame
from broker_core.wire.record_batches import (
    ZIGZAG1,
    ZIGZAG2,
    fetched_batches,
    read_record_varint,
    scan_chunk,
)
from broker_core.wire.records import CorruptRecordBatch

try:
    from consumer_client.consumer_records_c import decode_records as _compiled_records
except ImportError:  # not built (no C compiler or Cython at install): the pure-Python loop
    _compiled_records = None

__all__ = ["COMPILED", "Message", "decode_chunk", "scan_chunk"]

#: Whether the compiled record loop is in use (see the module docstring).
COMPILED: bool = _compiled_records is not None

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
        return _decode(topic, partition, data, fetch_offset, check_crcs, max_decompressed_bytes,
                       _compiled_records)
    gc.disable()
    try:
        return _decode(topic, partition, data, fetch_offset, check_crcs, max_decompressed_bytes,
                       _compiled_records)
    finally:
        gc.enable()


def _decode(topic: str, partition: int, data: bytes | memoryview, fetch_offset: int,
            check_crcs: bool, max_decompressed_bytes: int, compiled: Any) -> list[Message]:
    # The batch walk (skips, CRC, decompression) is the shared core's; the per-record loop
    # stays here: the compiled one when given (None: pure Python only, as the tests compare),
    # and :func:`_records` for what it declines.
    out: list[Message] = []
    pad = _PAD
    for base, count, base_ts, append_ts, records in fetched_batches(
            data, fetch_offset, check_crcs=check_crcs,
            max_decompressed_bytes=max_decompressed_bytes, where=f" of {topic}-{partition}"):
        if compiled is not None and compiled(records, count, base, base_ts, append_ts, topic,
                                             partition, fetch_offset, out, Message,
                                             _EMPTY_HEADERS):
            continue
        try:
            _records(b"".join((records, pad)), count, base, base_ts, append_ts, topic,
                     partition, fetch_offset, out)
        except (IndexError, struct.error):
            raise CorruptRecordBatch(f"record data overruns the batch at offset {base} of "
                                     f"{topic}-{partition}") from None
        except MalformedFrame as e:  # a varint longer than 10 bytes
            raise CorruptRecordBatch(f"{e} (the batch at offset {base} of "
                                     f"{topic}-{partition})") from None
    return out


_HEAD_BYTES = 12
#: A record's first bytes as small ints, in one call: enough for every field up to the
#: value's length when a null key and no varint longer than the common case come first.
_head = struct.Struct(f"{_HEAD_BYTES}B").unpack_from
#: Appended to a batch's record data so that the first bytes of every record unpack.
_PAD = bytes(_HEAD_BYTES)


def _records(raw: bytes, count: int, base: int, base_ts: int, append_ts: int | None,
             topic: str, partition: int, start: int, out: list[Message]) -> None:
    # Deliberately one long function, kept here rather than in the shared decoder core: this is
    # the consumer's per-record decode loop, and splitting it (or sharing its varint steps as
    # calls) would add Python calls per record, the overhead the loop exists to avoid; its
    # unrolled varint reads repeat for that reason.
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
    z1 = ZIGZAG1
    z2 = ZIGZAG2
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
    length, p = read_record_varint(raw, pos)
    end = p + length
    p += 1  # record attributes (unused in v2)
    ts_delta, p = read_record_varint(raw, p)
    delta, p = read_record_varint(raw, p)
    n, p = read_record_varint(raw, p)
    if n < 0:
        key = None
    else:
        key = raw[p:p + n]
        p += n
    n, p = read_record_varint(raw, p)
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
    nh, pos = read_record_varint(raw, pos)
    if nh < 0:
        raise CorruptRecordBatch(f"negative header count {nh} in a record")
    out = []
    for _ in range(nh):
        n, pos = read_record_varint(raw, pos)
        if n < 0:
            raise CorruptRecordBatch("null header key in a record")
        hk = raw[pos:pos + n]
        pos += n
        n, pos = read_record_varint(raw, pos)
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
