"""Kafka RecordBatch v2 (magic 2): header parsing and validation, offset and leader-epoch stamping,
and a builder/decoder for clients and tests.

Batch header layout (61 bytes, big-endian)::

    0  baseOffset int64            | 8  batchLength int32 (bytes after this field)
    12 partitionLeaderEpoch int32  | 16 magic int8 | 17 crc uint32
    21 attributes int16            | 23 lastOffsetDelta int32 | 27 baseTimestamp int64
    35 maxTimestamp int64          | 43 producerId int64 | 51 producerEpoch int16
    53 baseSequence int32          | 57 recordCount int32 | 61 records...

The CRC-32C covers ``attributes`` to the end of the batch, so ``baseOffset`` and
``partitionLeaderEpoch`` can be stamped without recomputing it and without touching the records:
this module's part of the produce path is O(batches), and compressed batches are stored exactly
as the producer sent them. (The records themselves are checked by the log validator,
:mod:`broker_core.log.validator`.)

This module declares the layout once (:data:`BATCH_HEADER`, :data:`BEFORE_CRC`,
:data:`AFTER_CRC`, :data:`CRC_START` and the attribute bits); every encoder and decoder of
batches uses these names. The broker only uses :func:`parse_batch`, :func:`iter_batches`,
:func:`scan_valid_prefix` and :func:`assign_offsets`. :func:`build_batch` (through the one
encoder, :mod:`broker_core.wire.record_encoding`) and :func:`decode_batch` /
:func:`decode_records` are for clients, tools, the Raft log and tests: the latter are the strict
reference decoder (every batch through :func:`parse_batch`, every field bounds-checked against
its record); the clients' fast decoders are built on :mod:`broker_core.wire.record_batches`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import crc32c as _crc32c

from broker_core.wire.errors import MalformedFrame
from broker_core.wire.primitives import read_varint

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
MAGIC = 2
_MAGIC_POS = 16
CRC_START = 21  # position of attributes: the CRC covers from here to the end of the batch
_MIN_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # the smallest legal batchLength (no records)

#: The whole 61-byte header, the fields before the CRC (baseOffset .. crc) and after it
#: (attributes .. recordCount): the one declaration of the layout every encoder and decoder uses.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BEFORE_CRC = struct.Struct(">qiibI")
AFTER_CRC = struct.Struct(">hiqqqhii")
LAST_OFFSET_DELTA_POS = 23
_base_offset = struct.Struct(">q")
_leader_epoch = struct.Struct(">i")
_length = struct.Struct(">i")

#: Attribute bits of a batch.
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1


class Compression(IntEnum):
    """The codec in the low three bits of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class InvalidRecordBatch(Exception):
    """A batch the broker must refuse; ``error_code_name`` is the Kafka error to answer with."""

    error_code_name = "CORRUPT_MESSAGE"


class CorruptRecordBatch(InvalidRecordBatch):
    """Bad CRC, torn or short batch, impossible length -> CORRUPT_MESSAGE."""

    error_code_name = "CORRUPT_MESSAGE"


class UnsupportedMagic(InvalidRecordBatch):
    """A message format other than v2 -> INVALID_RECORD (Sluice stores only v2)."""

    error_code_name = "INVALID_RECORD"


class InvalidRecordCount(InvalidRecordBatch):
    """A produced batch whose record count and offset range disagree, that holds no records, or
    that a client may not send (a control batch) -> INVALID_RECORD, as Kafka answers."""

    error_code_name = "INVALID_RECORD"


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The header of one batch and where it sits in its buffer (``position``, ``size`` in bytes,
    ``size`` including the 12-byte log overhead). ``last_offset`` is ``base_offset +
    last_offset_delta``."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> Compression:
        try:
            return Compression(self.attributes & COMPRESSION_MASK)
        except ValueError:
            raise CorruptRecordBatch(
                f"unknown compression codec {self.attributes & COMPRESSION_MASK} in batch at "
                f"offset {self.base_offset}") from None

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def end(self) -> int:
        """Position just past this batch."""
        return self.position + self.size


def batch_size_at(data: bytes | bytearray | memoryview, position: int) -> int | None:
    """The declared total size of the batch at ``position`` (header overhead included), or None
    when fewer than 12 bytes remain. Does not validate anything: for walking a buffer cheaply."""
    if len(data) - position < LOG_OVERHEAD:
        return None
    return _length.unpack_from(data, position + 8)[0] + LOG_OVERHEAD


def parse_batch(data: bytes | bytearray | memoryview, position: int = 0, *,
                verify_crc: bool = True) -> BatchInfo:
    """Parse and validate the batch at ``position``.

    Raises :class:`UnsupportedMagic` for a magic other than 2, :class:`CorruptRecordBatch` for a
    torn batch (the buffer ends inside it), an impossible length, an inconsistent record count or
    a CRC mismatch (when ``verify_crc``).
    """
    (size, base_offset, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid, pepoch,
     base_seq, count) = _checked_header(data, position, verify_crc)
    return BatchInfo(position, size, base_offset, base_offset + last_delta, epoch, magic, crc,
                     attributes, last_delta, base_ts, max_ts, pid, pepoch, base_seq, count)


def _checked_header(data: bytes | bytearray | memoryview, position: int,
                    verify_crc: bool) -> tuple[int, ...]:
    """The checks of :func:`parse_batch`; returns the batch's size (log overhead included)
    and its header fields after the length: ``(size, base_offset, epoch, magic, crc,
    attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
    base_sequence, record_count)``, for a caller that builds its own :class:`BatchInfo`."""
    remaining = len(data) - position
    if remaining < _MAGIC_POS + 1:
        raise CorruptRecordBatch(f"torn batch at position {position}: only {remaining} bytes")
    # Magic sits at the same place in every message format, so check it first: an old-format
    # message set gets "unsupported magic", not a confusing length error.
    magic = data[position + _MAGIC_POS]
    if magic != MAGIC:
        raise UnsupportedMagic(f"record batch magic {magic} at position {position}; "
                               "only v2 (magic 2) is accepted")
    if remaining < HEADER_SIZE:
        raise CorruptRecordBatch(f"torn batch header at position {position}: {remaining} of "
                                 f"{HEADER_SIZE} bytes")
    (base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid,
     pepoch, base_seq, count) = BATCH_HEADER.unpack_from(data, position)
    if length < _MIN_LENGTH:
        raise CorruptRecordBatch(f"batch length {length} at position {position} is smaller than "
                                 f"a batch header ({_MIN_LENGTH})")
    size = length + LOG_OVERHEAD
    if size > remaining:
        raise CorruptRecordBatch(f"torn batch at position {position}: {size} bytes declared, "
                                 f"{remaining} present")
    if count < 0 or last_delta < 0 or (count > 0 and last_delta < count - 1):
        raise CorruptRecordBatch(f"inconsistent record count {count} and last offset delta "
                                 f"{last_delta} at position {position}")
    if verify_crc:
        actual = _crc32c.crc32c(memoryview(data)[position + CRC_START:position + size])
        if actual != crc:
            raise CorruptRecordBatch(f"CRC mismatch in batch at position {position}: stored "
                                     f"{crc:#010x}, computed {actual:#010x}")
    return (size, base_offset, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid,
            pepoch, base_seq, count)


def iter_batches(data: bytes | bytearray | memoryview, *,
                 verify_crc: bool = True) -> Iterator[BatchInfo]:
    """Every batch in ``data``; raises :class:`InvalidRecordBatch` at the first invalid or torn
    one (after yielding the valid ones before it)."""
    pos = 0
    end = len(data)
    while pos < end:
        info = parse_batch(data, pos, verify_crc=verify_crc)
        yield info
        pos += info.size


def scan_valid_prefix(data: bytes | bytearray | memoryview, *,
                      verify_crc: bool = True) -> tuple[int, list[BatchInfo]]:
    """The length of the longest prefix of whole, valid batches, and those batches.

    Never raises: recovery uses it to find where a torn or corrupt tail begins.
    """
    infos: list[BatchInfo] = []
    pos = 0
    end = len(data)
    while pos < end:
        try:
            info = parse_batch(data, pos, verify_crc=verify_crc)
        except InvalidRecordBatch:
            break
        infos.append(info)
        pos += info.size
    return pos, infos


def assign_offsets(data: bytes | bytearray | memoryview, base_offset: int,
                   leader_epoch: int) -> tuple[bytearray, list[BatchInfo]]:
    """Validate every batch of a produced record set and stamp offsets and the leader epoch.

    Each batch must be v2, whole, CRC-correct, hold at least one record and have
    ``lastOffsetDelta == recordCount - 1``; control batches are refused (only a coordinator may
    write them). ``data`` is copied once into a bytearray whose batches get consecutive base
    offsets from ``base_offset`` and ``partitionLeaderEpoch = leader_epoch``; both fields lie
    outside the CRC, so nothing else changes. Work is O(batches): records are not looked at here
    (the leader's log runs :mod:`broker_core.log.validator` on them).

    Returns the stamped copy and the batches' infos (with their new offsets and epoch).
    """
    if len(data) == 0:
        raise CorruptRecordBatch("empty record set")
    if base_offset < 0:
        raise ValueError(f"base offset must not be negative, got {base_offset}")
    buf = bytearray(data)
    infos: list[BatchInfo] = []
    next_offset = base_offset
    pos = 0
    end = len(buf)
    while pos < end:
        # parse_batch's checks, without its BatchInfo: only the stamped one is built.
        (size, _, _, magic, crc, attributes, last_delta, base_ts, max_ts, pid, pepoch, base_seq,
         count) = _checked_header(buf, pos, True)
        if count < 1:
            raise InvalidRecordCount(f"batch at position {pos} holds no records")
        if last_delta != count - 1:
            raise InvalidRecordCount(
                f"batch at position {pos} declares {count} records but "
                f"last offset delta {last_delta}")
        if attributes & CONTROL_BIT:
            raise InvalidRecordCount(f"batch at position {pos} is a control batch; "
                                     "clients may not produce those")
        _base_offset.pack_into(buf, pos, next_offset)
        _leader_epoch.pack_into(buf, pos + LOG_OVERHEAD, leader_epoch)
        infos.append(BatchInfo(
            pos, size, next_offset, next_offset + last_delta, leader_epoch, magic, crc,
            attributes, last_delta, base_ts, max_ts, pid, pepoch, base_seq, count))
        next_offset += last_delta + 1
        pos += size
    return buf, infos


# -- records: building and decoding (clients, tools and tests; the broker never does this) -------


@dataclass
class Record:
    """One record as an application sees it. ``offset`` is -1 until the record is read back from
    a log (decoding fills it in)."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = 0
    offset: int = -1


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    leader_epoch: int = -1,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    control: bool = False,
) -> bytes:
    """Encode ``records`` as one RecordBatch v2; offset deltas are 0..n-1 and timestamps are
    stored relative to the first record's. ``control`` sets attributes bit 5 (a control batch,
    which only a log's owner writes: the metadata quorum's LeaderChange and voter records)."""
    if not records:
        raise ValueError("a batch needs at least one record")
    if timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
        raise ValueError(f"timestamp_type must be 0 or 1, got {timestamp_type}")
    # Imported here: the encoder imports this module's layout (as the codecs do).
    from broker_core.wire.record_encoding import encode_record, seal_batch

    compression = Compression(compression)
    base_ts = records[0].timestamp
    body = b"".join([encode_record(r.timestamp - base_ts, i, r.key, r.value, r.headers)
                     for i, r in enumerate(records)])
    return seal_batch(body, len(records), base_timestamp=base_ts,
                      max_timestamp=max(r.timestamp for r in records), base_offset=base_offset,
                      leader_epoch=leader_epoch, producer_id=producer_id,
                      producer_epoch=producer_epoch, base_sequence=base_sequence,
                      compression=compression, timestamp_type=timestamp_type, control=control)


def _take(raw: bytes, pos: int, n: int, limit: int, what: str) -> tuple[bytes | None, int]:
    if n == -1:
        return None, pos
    if n < -1 or pos + n > limit:
        raise CorruptRecordBatch(f"record {what} length {n} overruns its record")
    return raw[pos:pos + n], pos + n


def decode_batch(data: bytes | bytearray | memoryview,
                 info: BatchInfo | None = None, *,
                 max_decompressed_bytes: int | None = None) -> list[Record]:
    """The records of one batch (the first in ``data``, or the one ``info`` describes),
    decompressed, with absolute offsets filled in. Raises :class:`InvalidRecordBatch` on a bad
    header, CRC or payload, and for a payload that decompresses to more than
    ``max_decompressed_bytes`` (default
    :data:`~broker_core.wire.compression.CLIENT_MAX_DECOMPRESSED_BYTES`)."""
    from broker_core.wire.compression import CLIENT_MAX_DECOMPRESSED_BYTES, decompress

    if info is None:
        info = parse_batch(data, 0)
    payload = memoryview(data)[info.position + HEADER_SIZE:info.end]
    if max_decompressed_bytes is None:
        max_decompressed_bytes = max(CLIENT_MAX_DECOMPRESSED_BYTES, len(payload))
    raw = decompress(info.compression, payload, max_bytes=max_decompressed_bytes)
    try:
        return _decode_records(raw, info)
    except MalformedFrame as e:  # a bad varint
        raise CorruptRecordBatch(f"{e} in a record (the batch at offset "
                                 f"{info.base_offset})") from None


def _decode_records(raw: bytes, info: BatchInfo) -> list[Record]:
    """The records of the (decompressed) payload ``raw`` of the batch ``info``. Its varints
    (lengths, deltas and counts are int32s, the timestamp delta an int64) are all read as
    int64s, 10 bytes at most, as Kafka's own clients read them."""
    log_append = info.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    out: list[Record] = []
    pos = 0
    total = len(raw)
    for _ in range(info.record_count):
        length, pos = read_varint(raw, pos, total)
        end = pos + length
        if length < 1 or end > total:
            raise CorruptRecordBatch(f"record length {length} overruns the batch at offset "
                                     f"{info.base_offset}")
        pos += 1  # record attributes
        ts_delta, pos = read_varint(raw, pos, end)
        off_delta, pos = read_varint(raw, pos, end)
        n, pos = read_varint(raw, pos, end)
        key, pos = _take(raw, pos, n, end, "key")
        n, pos = read_varint(raw, pos, end)
        value, pos = _take(raw, pos, n, end, "value")
        nh, pos = read_varint(raw, pos, end)
        if nh < 0:
            raise CorruptRecordBatch(f"negative header count {nh} in a record")
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(nh):
            n, pos = read_varint(raw, pos, end)
            hk, pos = _take(raw, pos, n, end, "header key")
            if hk is None:
                raise CorruptRecordBatch("null header key in a record")
            n, pos = read_varint(raw, pos, end)
            hv, pos = _take(raw, pos, n, end, "header value")
            try:
                headers.append((hk.decode(), hv))
            except UnicodeDecodeError:
                raise CorruptRecordBatch("header key is not UTF-8") from None
        if pos != end:
            raise CorruptRecordBatch("record length does not match its fields")
        # With LogAppendTime the broker's maxTimestamp is every record's timestamp.
        ts = info.max_timestamp if log_append else info.base_timestamp + ts_delta
        out.append(Record(key, value, headers, ts, info.base_offset + off_delta))
    if pos != total:
        raise CorruptRecordBatch(f"{total - pos} bytes left over after {info.record_count} "
                                 f"records in the batch at offset {info.base_offset}")
    return out


def decode_records(data: bytes | bytearray | memoryview) -> list[Record]:
    """All records of every batch in ``data``, skipping control batches and ignoring a trailing
    partial batch (a fetch response may end with one). A corrupt batch before the end raises."""
    out: list[Record] = []
    pos = 0
    end = len(data)
    while pos < end:
        size = batch_size_at(data, pos)
        if size is None or (size >= HEADER_SIZE and pos + size > end):
            break  # a partial batch cut off by the fetch size limit
        info = parse_batch(data, pos)
        if not info.is_control:
            out.extend(decode_batch(data, info))
        pos += info.size
    return out
