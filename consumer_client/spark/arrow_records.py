"""Fetched record data straight into Arrow columns, for the data source's Python workers.

The consumer's decoder (:func:`consumer_client.consumer_records.decode_chunk`) makes one
:class:`~consumer_client.consumer_records.Message` per record, because applications want
objects. A Spark task wants columns, so :func:`decode_record_batch` never makes a Python object
per record: it walks the records once in Python only to find where each starts (the one
sequential step: a record's position depends on every length before it), and then reads every
field of every record at once with numpy (varints decoded column-wise, keys and values copied
out of the batch bytes with one mask), building the Arrow arrays from buffers. Per record that
is one short loop iteration instead of a tuple, two ``bytes`` objects and their conversion to
Arrow; measured in ``docs/spark.md`` (Performance).

What it accepts and rejects is the consumer decoder's contract, because both walk the chunk with
the wire codec's decoder core (:func:`broker_core.wire.record_batches.fetched_batches`):
RecordBatch v2 with any codec, bounded by ``max_decompressed_bytes`` per batch, control batches
skipped, records before the fetch offset skipped, a trailing partial batch ignored, a bad CRC
or a record whose fields overrun it raising
:class:`~broker_core.wire.records.CorruptRecordBatch`. Records with headers,
when headers are asked for, go through the consumer's decoder (headers are rare and nested; the
row-wise path handles them) so both paths agree by construction.

Invariants of the columns: rows are in offset order, each offset in ``[fetch_offset, end)`` at
most once; the schema is :func:`arrow_schema`, exactly what PySpark checks a batch against.
"""

from __future__ import annotations

import operator
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.wire.compression import CLIENT_MAX_DECOMPRESSED_BYTES
from broker_core.wire.record_batches import (
    ZIGZAG1,
    ZIGZAG2,
    fetched_batches,
    read_record_varint,
)
from broker_core.wire.records import CorruptRecordBatch
from consumer_client.consumer_records import Message, decode_chunk

#: Appended to the record data so that a varint read column-wise (up to 10 bytes past a
#: field's start) never indexes past the buffer, even in a corrupt record.
_PAD = bytes(16)

_SCHEMAS: dict[bool, Any] = {}


def arrow_schema(include_headers: bool) -> Any:
    """The Arrow schema Spark expects for the source's schema (pyspark's ``to_arrow_schema``
    of :data:`consumer_client.spark.source.SCHEMA_DDL`): field names and types must match
    exactly, or the worker refuses the batch."""
    schema = _SCHEMAS.get(include_headers)
    if schema is None:
        fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
                  pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
                  pa.field("offset", pa.int64()),
                  pa.field("timestamp", pa.timestamp("us", tz="UTC")),
                  pa.field("timestampType", pa.int32())]
        if include_headers:
            fields.append(pa.field("headers", pa.list_(pa.field("element", pa.struct([
                pa.field("key", pa.string()), pa.field("value", pa.binary())])))))
        schema = _SCHEMAS[include_headers] = pa.schema(fields)
    return schema


# -- the column-wise decoder ---------------------------------------------------------------------


def decode_record_batch(topic: str, partition: int, data: bytes | memoryview, fetch_offset: int,
                        end: int, *, include_headers: bool = False,
                        check_crcs: bool = True,
                        max_decompressed_bytes: int = CLIENT_MAX_DECOMPRESSED_BYTES) -> Any:
    """A ``pyarrow.RecordBatch`` of the records at offsets ``[fetch_offset, end)`` in ``data``
    (one partition's record set from a Fetch response), or None when there are none."""
    buf, batches = _record_data(topic, partition, data, fetch_offset, end, check_crcs,
                                max_decompressed_bytes)
    if not batches:
        return None
    try:
        cols = _columns(buf, batches)
    except (IndexError, struct.error):
        raise CorruptRecordBatch(f"record data overruns its batch in {topic}-{partition} "
                                 f"at or after offset {batches[0][1]}") from None
    offsets, ts, ts_type, kstart, klen, vstart, vlen, hcount = cols
    keep = (offsets >= fetch_offset) & (offsets < end)
    if not keep.all():
        offsets, ts, ts_type, kstart, klen, vstart, vlen, hcount = (
            c[keep] for c in (offsets, ts, ts_type, kstart, klen, vstart, vlen, hcount))
    n = len(offsets)
    if n == 0:
        return None
    headers = None
    if include_headers:
        if hcount.any():  # some record has headers: the row-wise decoder builds them
            messages = [m for m in decode_chunk(
                topic, partition, data, fetch_offset, check_crcs=False,
                max_decompressed_bytes=max_decompressed_bytes) if m.offset < end]
            return to_record_batch(messages, True) if messages else None
        headers = pa.ListArray.from_arrays(
            pa.array(np.zeros(n + 1, np.int32)),
            pa.array([], arrow_schema(True).field("headers").type.value_type),
            type=arrow_schema(True).field("headers").type)
    buf_np = np.frombuffer(buf, np.uint8)
    cols = [
        _binary(buf_np, kstart, klen, n),
        _binary(buf_np, vstart, vlen, n),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets),
        pa.array(ts * 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array(ts_type),
    ]
    if headers is not None:
        cols.append(headers)
    return pa.RecordBatch.from_arrays(cols, schema=arrow_schema(include_headers))


def _record_data(topic: str, partition: int, data: bytes | memoryview, fetch_offset: int,
                 end: int, check_crcs: bool,
                 max_decompressed_bytes: int) -> tuple[bytes, list[tuple]]:
    """The record data of every batch that may hold offsets in ``[fetch_offset, end)``,
    decompressed and concatenated (then padded), and per batch ``(count, base_offset,
    base_timestamp, log_append_timestamp or None, data_end)`` with ``data_end`` the position
    in the concatenation where its records end."""
    pieces: list[Any] = []
    batches: list[tuple] = []
    at = 0
    for base, count, base_ts, append_ts, records in fetched_batches(
            data, fetch_offset, end_offset=end, check_crcs=check_crcs,
            max_decompressed_bytes=max_decompressed_bytes, where=f" of {topic}-{partition}"):
        if count <= 0:
            continue
        pieces.append(records)
        at += len(records)
        batches.append((count, base, base_ts, append_ts, at))
    pieces.append(_PAD)
    return b"".join(pieces), batches


def _record_ends(buf: bytes, batches: list[tuple]) -> list[int]:
    """Where each record ends in ``buf``. The only per-record Python loop (a record's position
    depends on every length before it), kept to one table lookup and one append per record:
    a record's length is a zig-zag varint of one or two bytes for records under 8 KiB (read
    with the decoder core's tables), longer ones are read generically. Where each record's
    fields start is worked out afterwards, column-wise (:func:`_columns`)."""
    z1 = ZIGZAG1
    z2 = ZIGZAG2
    ends: list[int] = []
    add_end = ends.append
    pos = 0
    for count, base, _ts, _append, data_end in batches:
        for _ in range(count):
            a = buf[pos]
            if a < 0x80:
                pos += z1[a] + 1
            else:
                b = buf[pos + 1]
                if b < 0x80:
                    pos += z2[a + 128 * b] + 2
                else:
                    size, pos = read_record_varint(buf, pos)
                    pos += size
            add_end(pos)
        if pos != data_end:
            raise CorruptRecordBatch(f"the records of the batch at offset {base} do not fill "
                                     f"it ({data_end - pos} bytes differ)")
    return ends


def _varints(buf: Any, at: Any) -> tuple[Any, Any]:
    """Zig-zag varints at positions ``at`` of ``buf`` (uint8 array): ``(values, positions
    after them)``. Column-wise: one pass per byte of the longest varint. A different algorithm
    from the codec's scalar :func:`~broker_core.wire.primitives.read_varint` (numpy, one
    vectorized step per byte position for every record at once), kept for that reason."""
    b = buf[at]
    more = b >= 0x80
    if not more.any():
        v = b.astype(np.int64)
        return (v >> 1) ^ -(v & 1), at + 1
    u = (b & 0x7F).astype(np.uint64)
    length = np.ones(len(at), np.int64)
    idx = np.flatnonzero(more)
    shift = 7
    while len(idx):
        if shift > 63:
            raise CorruptRecordBatch("varint longer than 10 bytes in a record")
        bk = buf[at[idx] + length[idx]]
        u[idx] |= (bk & 0x7F).astype(np.uint64) << np.uint64(shift)
        length[idx] += 1
        idx = idx[bk >= 0x80]
        shift += 7
    v = (u >> np.uint64(1)).astype(np.int64) ^ -(u & np.uint64(1)).astype(np.int64)
    return v, at + length


def _columns(buf: bytes, batches: list[tuple]) -> tuple:
    """Per record (all batches): offset, timestamp (ms), timestamp type, key start and length,
    value start and length (-1: null), header count. Checks that each record's fields end
    inside it."""
    e = np.array(_record_ends(buf, batches), np.int64)
    buf_np = np.frombuffer(buf, np.uint8)
    # Batches' record data are contiguous in ``buf``, so each record starts where the one
    # before it ended, with its length.
    prev = np.zeros(len(e), np.int64)
    prev[1:] = e[:-1]
    s = _varints(buf_np, prev)[1]
    counts = [b[0] for b in batches]
    ts_delta, q = _varints(buf_np, s + 1)  # past the attributes byte
    off_delta, q = _varints(buf_np, q)
    klen, kstart = _varints(buf_np, q)
    vlen, vstart = _varints(buf_np, kstart + np.maximum(klen, 0))
    hcount, hpos = _varints(buf_np, vstart + np.maximum(vlen, 0))
    bad = ((e - s < 1) | (klen < -1) | (vlen < -1) | (hcount < 0) | (hpos > e)
           | ((hcount == 0) & (hpos != e)))
    if bad.any():
        first = int(np.argmax(bad))
        raise CorruptRecordBatch(f"record {first} of the fetched data does not match its "
                                 f"length (batch at offset {batches[0][1]} or later)")
    base = np.repeat(np.array([b[1] for b in batches], np.int64), counts)
    offsets = base + off_delta
    if all(b[3] is None for b in batches):
        ts = np.repeat(np.array([b[2] for b in batches], np.int64), counts) + ts_delta
        ts_type = np.zeros(len(s), np.int32)
    else:
        create = np.repeat(np.array([b[3] is None for b in batches]), counts)
        ts = np.where(create,
                      np.repeat(np.array([b[2] for b in batches], np.int64), counts) + ts_delta,
                      np.repeat(np.array([b[2] if b[3] is None else b[3] for b in batches],
                                         np.int64), counts))
        ts_type = (~create).astype(np.int32)
    return offsets, ts, ts_type, kstart, klen, vstart, vlen, hcount


def _binary(buf: Any, start: Any, length: Any, n: int) -> Any:
    """A binary Arrow array of the byte ranges ``[start, start + length)`` of ``buf``; a
    negative length is null. The ranges are in order and never overlap (each lies inside its
    own record), so the bytes are gathered with one boolean mask over ``buf``, made by
    repeating "skip"/"take" by the gap before each range and its length: numpy's work is per
    byte of the chunk, Python's per call."""
    valid = length >= 0
    if not valid.any():
        return pa.nulls(n, pa.binary())
    lens = np.where(valid, length, 0)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    if offsets[-1]:
        runs = np.empty(2 * n + 1, np.int64)
        runs[0] = start[0]
        runs[1:-1:2] = lens
        runs[2:-1:2] = start[1:] - (start[:-1] + lens[:-1])
        runs[-1] = len(buf) - (start[-1] + lens[-1])
        take = np.zeros(2 * n + 1, np.bool_)
        take[1::2] = True
        values = buf[np.repeat(take, runs)]
    else:
        values = np.zeros(0, np.uint8)
    null_count = n - int(np.count_nonzero(valid))
    validity = None if null_count == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets),
                                                  pa.py_buffer(values)], null_count=null_count)


# -- the row-wise builder (records with headers) ---------------------------------------------------

_KEY, _VALUE, _OFFSET, _TS, _TS_TYPE, _HEADERS = (operator.itemgetter(i) for i in (3, 4, 2, 5, 6, 7))


def to_record_batch(messages: list[Message], include_headers: bool) -> Any:
    """One ``pyarrow.RecordBatch`` of ``messages`` (all of one partition, in offset order),
    built column by column, each column converted in C: what :func:`decode_record_batch` falls
    back to for records with headers."""
    schema = arrow_schema(include_headers)
    first = messages[0]
    n = len(messages)
    if messages[-1].offset - first.offset == n - 1:
        offsets = pa.array(np.arange(first.offset, first.offset + n, dtype=np.int64))
    else:  # gaps (compacted topic, transaction markers)
        offsets = pa.array(map(_OFFSET, messages), pa.int64(), size=n)
    ts_types = set(map(_TS_TYPE, messages))
    cols = [
        pa.array(map(_KEY, messages), pa.binary(), size=n),
        pa.array(map(_VALUE, messages), pa.binary(), size=n),
        pa.repeat(pa.scalar(first.topic, pa.string()), n),
        pa.repeat(pa.scalar(first.partition, pa.int32()), n),
        offsets,
        pc.multiply(pa.array(map(_TS, messages), pa.int64(), size=n), 1000)
        .cast(pa.timestamp("us", tz="UTC")),
        pa.repeat(pa.scalar(first.timestamp_type, pa.int32()), n) if len(ts_types) == 1
        else pa.array(map(_TS_TYPE, messages), pa.int32(), size=n),
    ]
    if include_headers:
        cols.append(pa.array([[{"key": k, "value": v} for k, v in h]
                              for h in map(_HEADERS, messages)],
                             schema.field("headers").type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)
