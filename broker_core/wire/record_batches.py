"""The client-side decoder core for fetched record data: the batch walk and the record-field
primitives that every client record decoder is built on.

It owns:

- :func:`fetched_batches`: the walk over one partition's fetched chunk (RecordBatch v2, laid
  out by :mod:`broker_core.wire.records`): a trailing partial batch (cut off by the fetch size
  limit) ends the walk, a magic other than 2 raises :class:`UnsupportedMagic`, an impossible
  batch length, an unknown codec or a CRC mismatch raise :class:`CorruptRecordBatch`, control
  batches and batches wholly before the fetch offset (or at or after an end offset) are
  skipped, and a compressed batch is decompressed to at most ``max_decompressed_bytes``
  (:class:`~broker_core.wire.compression.DecompressedTooLarge` beyond). It yields, per batch,
  what a record decoder needs (:class:`FetchedBatch`) and decodes no record;
- :func:`scan_chunk`: the same walk reading headers only, to find the next fetch offset;
- the record-field primitives: :data:`ZIGZAG1` / :data:`ZIGZAG2` (zig-zag varints of one and
  two bytes by table) and :func:`read_record_varint`, the fast varint reader built on them.

Invariant: the walk always moves forward (a batch length shorter than a header is refused), so
no chunk a peer sends can make it loop; nothing it allocates exceeds the chunk plus one bounded
decompression at a time.

The record decoders built on it: :func:`consumer_client.consumer_records.decode_chunk` (rows,
tuned for CPython) and :func:`consumer_client.spark.arrow_records.decode_record_batch`
(columns, with numpy). :func:`broker_core.wire.records.decode_batch` is the strict decoder of
one validated batch (the broker's and the Raft log's), and shares the layout and the bounded
decompressor but not this walk, whose job is skipping what a fetch may hold.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c as _crc32c

from broker_core.wire.compression import CLIENT_MAX_DECOMPRESSED_BYTES, decompress
from broker_core.wire.primitives import read_varint
from broker_core.wire.records import (
    BATCH_HEADER,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_START,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_POS,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    Compression,
    CorruptRecordBatch,
    UnsupportedMagic,
)

_header = BATCH_HEADER.unpack_from
_span = struct.Struct(">qi").unpack_from  # baseOffset, batchLength: all scan_chunk needs ...
_last_delta = struct.Struct(">i").unpack_from  # ... but the last offset delta
_CODECS = tuple(Compression)


def _zigzag(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


#: Zig-zag varints of one byte, by that byte; of two bytes ``a, b`` (``a >= 0x80 > b``), by
#: ``a + 128 * b``. Tuple indexing and int addition are cheap bytecodes; the shifts and masks
#: they replace are not (CPython 3.11 does not specialise bitwise operators).
ZIGZAG1: tuple[int, ...] = tuple(_zigzag(v) for v in range(128))
ZIGZAG2: tuple[int, ...] = tuple(
    _zigzag((i & 0x7F) | ((i >> 7) - 1) << 7) if i >= 0x80 else 0
    for i in range(0x100 + 0x80 * 0x7F))


def read_record_varint(raw: bytes, pos: int) -> tuple[int, int]:
    """``(value, position after it)`` of the zig-zag varint at ``pos`` of record data. Varints
    of one and two bytes, the common case, are read by table for speed (a call to
    :func:`~broker_core.wire.primitives.read_varint` costs a header-heavy fetch ~10%); longer
    ones there (at most 10 bytes, else :class:`~broker_core.wire.errors.MalformedFrame`).
    ``raw`` must be padded so that reading one byte past a truncated varint stays inside it
    (the decoders pad record data with zeros); an :class:`IndexError` means it ran out."""
    a = raw[pos]
    if a < 0x80:
        return ZIGZAG1[a], pos + 1
    b = raw[pos + 1]
    if b < 0x80:
        return ZIGZAG2[a + 128 * b], pos + 2
    return read_varint(raw, pos, len(raw), 10, "varint in a record")


class FetchedBatch(NamedTuple):
    """One batch of a fetched chunk, as a record decoder needs it. ``records`` is the record
    data (decompressed; a view of the chunk when uncompressed); ``append_timestamp`` is the
    batch's max timestamp when it uses LogAppendTime (every record's timestamp then), None for
    CreateTime."""

    base_offset: int
    count: int
    base_timestamp: int
    append_timestamp: int | None
    records: bytes | memoryview


def scan_chunk(data: bytes | memoryview, fetch_offset: int) -> tuple[int, int]:
    """``(next_offset, complete_bytes)`` for one partition's fetched data: the offset after the
    last complete batch (``fetch_offset`` when there is none) and how many bytes the complete
    batches take. Reads one header per batch; decodes nothing else (the decoder validates the
    records when they are consumed). A length shorter than a header, which no batch can have,
    ends the scan there after complete batches (they are handed on; the next fetch starts at the
    bad one) and raises :class:`CorruptRecordBatch` when it is the first batch: treated as a
    partial batch, it would have the fetcher ask for ever more bytes of it."""
    pos = 0
    end = len(data)
    nxt = fetch_offset
    while end - pos >= HEADER_SIZE:
        base, length = _span(data, pos)
        size = length + LOG_OVERHEAD
        if size < HEADER_SIZE:
            if pos == 0:
                raise CorruptRecordBatch(
                    f"batch length {length} at offset {base} is smaller than a batch header")
            break
        if pos + size > end:
            break
        last = base + _last_delta(data, pos + LAST_OFFSET_DELTA_POS)[0]
        if last + 1 > nxt:
            nxt = last + 1
        pos += size
    return nxt, pos


def fetched_batches(data: bytes | memoryview, fetch_offset: int, *,
                    end_offset: int | None = None, check_crcs: bool = True,
                    max_decompressed_bytes: int = CLIENT_MAX_DECOMPRESSED_BYTES,
                    where: str = "") -> Iterator[FetchedBatch]:
    """The batches of ``data`` (one partition's record set from a Fetch response) that may
    hold records at or after ``fetch_offset`` (and before ``end_offset``, when given), in
    order; see the module docstring for what is skipped and refused. ``where`` is appended to
    error messages after the batch's offset (e.g. ``" of topic-0"``)."""
    pos = 0
    end = len(data)
    mv = memoryview(data)
    while end - pos >= HEADER_SIZE:
        (base, length, _epoch, magic, crc, attrs, last_delta, base_ts, max_ts, _pid, _pe, _seq,
         count) = _header(data, pos)
        size = length + LOG_OVERHEAD
        batch_end = pos + size
        if batch_end > end:
            break  # a partial batch cut off by the fetch size limit
        if magic != MAGIC:
            raise UnsupportedMagic(f"record batch magic {magic} at offset {base}")
        if size < HEADER_SIZE:
            # Refused, not skipped: the walk would otherwise stand still or go backwards.
            raise CorruptRecordBatch(f"batch length {length} at offset {base}{where} is "
                                     f"smaller than a batch header")
        if (base + last_delta < fetch_offset or attrs & CONTROL_BIT
                or (end_offset is not None and base >= end_offset)):
            pos = batch_end
            continue
        if check_crcs and _crc32c.crc32c(mv[pos + CRC_START:batch_end]) != crc:
            raise CorruptRecordBatch(f"CRC mismatch in the batch at offset {base}{where}")
        codec = attrs & COMPRESSION_MASK
        records: bytes | memoryview = mv[pos + HEADER_SIZE:batch_end]
        if codec:
            if codec >= len(_CODECS):
                raise CorruptRecordBatch(f"unknown compression codec {codec} in the batch at "
                                         f"offset {base}{where}")
            try:
                records = decompress(_CODECS[codec], records, max_bytes=max_decompressed_bytes)
            except CorruptRecordBatch as e:
                e.args = (f"{e} (the batch at offset {base}{where})",)
                raise
        yield FetchedBatch(base, count, base_ts, max_ts if attrs & TIMESTAMP_TYPE_BIT else None,
                           records)
        pos = batch_end
