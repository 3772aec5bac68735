"""What a leader applies to a produced batch for its topic before storing it:
``message.timestamp.before.max.ms``, ``message.timestamp.after.max.ms`` and
``message.timestamp.difference.max.ms`` (checks), ``message.timestamp.type`` and
``compression.type`` (changes), as Kafka's ``LogValidator`` does.

:func:`check_timestamps` refuses a batch (INVALID_TIMESTAMP, naming the record and the bound)
when, with CreateTime, a record's timestamp lies outside ``[now - before, now + after]``, where
each side is the tighter of its own key and ``message.timestamp.difference.max.ms`` (a record
without a timestamp, -1, is not checked). A batch is decoded, within the same decompression
bound as the validator, only when the past is bounded or the batch's ``maxTimestamp`` (which
the validator has proved is its records' largest) breaks the future bound: the default bounds
(the past unbounded, the future one hour) cost a header read per batch.

:func:`as_create_time` comes first on a CreateTime topic: Kafka's validator stores every batch
with the topic's timestamp type, so a batch a producer marked LogAppendTime has the bit cleared
and ``maxTimestamp`` set to its records' largest timestamp (CRC recomputed). Without it the
records' own timestamps would be hidden behind a ``maxTimestamp`` the producer chose, from the
timestamp bounds and from every consumer.

:func:`rewrite_for_topic` takes a record set whose batches were already checked (offsets
stamped, every record validated by :mod:`broker_core.log.validator`) and returns the bytes to
store:

- ``LogAppendTime``: each batch gets the timestamp-type bit and ``maxTimestamp = now`` (the
  records keep their deltas; a reader of a LogAppendTime batch takes every record's timestamp
  from ``maxTimestamp``, as Kafka's clients do). The CRC is recomputed; nothing else moves.
- ``compression.type`` other than ``producer`` (``uncompressed`` meaning none): a batch with
  another codec has its records decompressed and compressed again with the topic's codec; its
  header (offsets, producer id, epoch, sequence, transactional bit, timestamps) is kept.

Bounds (a hostile batch must not make the leader allocate without limit): every batch
decompresses through :func:`broker_core.wire.compression.decompress` bounded by
``max_batch_bytes`` (``max.message.bytes``), exactly the bound the validator applies, and
each decompressed copy is dropped before the next batch is read (at most one batch's
decompressed records are held at a time); a rewritten batch larger than ``max_batch_bytes`` is
refused with :class:`BatchTooLargeAfterRewrite`, and so is a rewritten set larger than
``len(records) + max_batch_bytes``: without it many tiny compressed batches stored
``uncompressed`` (or with a codec of a poorer ratio) would make the leader build a record set
thousands of times the request (Kafka, which rewrites a set into one batch, allows only
``max_batch_bytes``). These two depend on the stored size, which is the topic codec's to
decide. The decompression bound is per batch, never shared across the set: whether a record
set decompresses within bounds must not depend on the topic's ``compression.type`` (a set the
validator accepts decompresses here within the same bound). A refusal changes nothing. Pure
functions on bytes: no I/O, no clock (``now_ms`` is given).
"""

from __future__ import annotations

import struct

import crc32c

from broker_core.log.config import NEVER
from broker_core.log.validator import InvalidRecords, largest_timestamp
from broker_core.wire.compression import compress, decompress
from broker_core.wire.records import (
    COMPRESSION_MASK,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_BIT,
    BatchInfo,
    Compression,
    InvalidRecordBatch,
    decode_batch,
    iter_batches,
)

_CRC_POS = 17  # baseOffset(8) + batchLength(4) + partitionLeaderEpoch(4) + magic(1)
_MAX_TIMESTAMP_POS = 35  # attributes(2) + lastOffsetDelta(4) + baseTimestamp(8) after 21
_LENGTH_POS = 8
_int16 = struct.Struct(">h")
_int32 = struct.Struct(">i")
_uint32 = struct.Struct(">I")
_int64 = struct.Struct(">q")


class BatchTooLargeAfterRewrite(InvalidRecordBatch):
    """A batch the topic's codec makes larger than ``max.message.bytes``, or a record set larger
    than its own size plus ``max.message.bytes`` -> MESSAGE_TOO_LARGE."""

    error_code_name = "MESSAGE_TOO_LARGE"


_NO_TIMESTAMP = -1


def check_timestamps(data: bytes | bytearray, infos: list[BatchInfo], *, timestamp_type: str,
                     now_ms: int, max_batch_bytes: int, before_max_ms: int = NEVER,
                     after_max_ms: int = NEVER, max_difference_ms: int = NEVER) -> None:
    """Refuse (:class:`~broker_core.log.validator.InvalidRecords`, INVALID_TIMESTAMP) the first
    batch with a record whose timestamp is more than the past bound before ``now_ms`` or more
    than the future bound after it (see the module docstring); nothing to check with
    LogAppendTime or without bounds (``NEVER`` everywhere)."""
    if timestamp_type != "CreateTime":
        return
    before_key, before = ("message.timestamp.before.max.ms", before_max_ms)
    if max_difference_ms < before:
        before_key, before = ("message.timestamp.difference.max.ms", max_difference_ms)
    after_key, after = ("message.timestamp.after.max.ms", after_max_ms)
    if max_difference_ms < after:
        after_key, after = ("message.timestamp.difference.max.ms", max_difference_ms)
    if before >= NEVER and after >= NEVER:
        return
    for info in infos:
        if (before >= NEVER and info.timestamp_type == TIMESTAMP_CREATE_TIME
                and info.max_timestamp - now_ms <= after):
            continue  # no record is later than the (validated) maxTimestamp
        for index, record in enumerate(decode_batch(data, info,
                                                    max_decompressed_bytes=max_batch_bytes)):
            ts = record.timestamp
            if ts == _NO_TIMESTAMP:
                continue
            if now_ms - ts > before:
                what = (f"timestamp {ts} is {now_ms - ts} ms before the leader's clock; "
                        f"{before_key} is {before}")
            elif ts - now_ms > after:
                what = (f"timestamp {ts} is {ts - now_ms} ms after the leader's clock; "
                        f"{after_key} is {after}")
            else:
                continue
            raise InvalidRecords(
                f"record {index} of the batch at offset {info.base_offset}: {what}",
                record_index=index, record_message=what, error_code_name="INVALID_TIMESTAMP")


def as_create_time(data: bytes | bytearray, infos: list[BatchInfo], *, max_batch_bytes: int
                   ) -> tuple[bytes | bytearray, list[BatchInfo]]:
    """The record set with every batch marked LogAppendTime turned into the CreateTime batch
    Kafka stores on a CreateTime topic (see the module docstring); ``data`` itself when no
    batch is marked. The batches were validated (:mod:`broker_core.log.validator`)."""
    marked = [i for i in infos if i.timestamp_type == TIMESTAMP_LOG_APPEND_TIME]
    if not marked:
        return data, infos
    out = bytearray(data)
    for info in marked:
        largest = largest_timestamp(data, info, max_decompressed_bytes=max_batch_bytes)
        at = info.position
        attributes = _int16.unpack_from(out, at + CRC_START)[0]
        _int16.pack_into(out, at + CRC_START, attributes & ~TIMESTAMP_TYPE_BIT)
        _int64.pack_into(out, at + _MAX_TIMESTAMP_POS, largest)
        _uint32.pack_into(out, at + _CRC_POS,
                          crc32c.crc32c(memoryview(out)[at + CRC_START:info.end]))
    return out, list(iter_batches(out))


def target_codec(compression_type: str, produced: Compression) -> Compression:
    """The codec a batch produced with ``produced`` is stored with under ``compression_type``
    (a value of :data:`broker_core.config.topic_keys.COMPRESSION_TYPES`)."""
    if compression_type == "producer":
        return produced
    if compression_type == "uncompressed":
        return Compression.NONE
    return Compression[compression_type.upper()]


def needs_rewrite(infos: list[BatchInfo], *, compression_type: str, timestamp_type: str) -> bool:
    """Whether :func:`rewrite_for_topic` would change any batch (cheap: headers only)."""
    if timestamp_type == "LogAppendTime":
        return True
    return any(target_codec(compression_type, i.compression) is not i.compression
               for i in infos)


def rewrite_for_topic(data: bytes | bytearray, infos: list[BatchInfo], *, compression_type: str,
                      timestamp_type: str, now_ms: int, max_batch_bytes: int
                      ) -> tuple[bytes | bytearray, list[BatchInfo]]:
    """The record set to store and its batches' infos; ``data`` itself when nothing changes.

    Raises :class:`~broker_core.wire.compression.DecompressedTooLarge` (a batch decompresses
    to more than ``max_batch_bytes``) or :class:`BatchTooLargeAfterRewrite` (a batch or the
    set too large once rewritten); ``data`` is not modified either way.
    """
    if not needs_rewrite(infos, compression_type=compression_type,
                         timestamp_type=timestamp_type):
        return data, infos
    append_time = now_ms if timestamp_type == "LogAppendTime" else None
    out = bytearray()
    max_out = len(data) + max_batch_bytes
    for info in infos:
        batch = bytes(data[info.position:info.end])
        codec = target_codec(compression_type, info.compression)
        if codec is not info.compression:
            payload = batch[HEADER_SIZE:]
            # Per batch, as the validator: the copy is dropped before the next batch.
            raw = decompress(info.compression, payload, max_bytes=max_batch_bytes)
            batch = _with_payload(batch, codec, compress(codec, raw))
            if len(batch) > max_batch_bytes:
                raise BatchTooLargeAfterRewrite(
                    f"batch at offset {info.base_offset} is {len(batch)} bytes once stored as "
                    f"{codec.name} (compression.type={compression_type}); the topic's "
                    f"max.message.bytes is {max_batch_bytes}")
        if append_time is not None:
            batch = _stamped(batch, append_time)
        if len(out) + len(batch) > max_out:
            raise BatchTooLargeAfterRewrite(
                f"the record set would be more than {max_out} bytes once stored with "
                f"compression.type={compression_type} (its size, {len(data)} bytes, plus the "
                f"topic's max.message.bytes); send fewer batches per request")
        out += batch
    return out, list(iter_batches(out))


def _with_payload(batch: bytes, codec: Compression, payload: bytes) -> bytes:
    """``batch`` with a new payload and codec; length and CRC follow."""
    out = bytearray(batch[:HEADER_SIZE])
    out += payload
    _int32.pack_into(out, _LENGTH_POS, len(out) - LOG_OVERHEAD)
    attributes = _int16.unpack_from(out, CRC_START)[0]
    _int16.pack_into(out, CRC_START, (attributes & ~COMPRESSION_MASK) | int(codec))
    _uint32.pack_into(out, _CRC_POS, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def _stamped(batch: bytes, now_ms: int) -> bytes:
    """``batch`` marked LogAppendTime with ``maxTimestamp = now_ms``; CRC recomputed."""
    out = bytearray(batch)
    attributes = _int16.unpack_from(out, CRC_START)[0]
    _int16.pack_into(out, CRC_START, attributes | TIMESTAMP_TYPE_BIT)
    _int64.pack_into(out, _MAX_TIMESTAMP_POS, now_ms)
    _uint32.pack_into(out, _CRC_POS, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
