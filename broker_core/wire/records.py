"""Kafka RecordBatch v2 (magic 2): header parsing and validation, offset and leader-epoch stamping,
and a builder/decoder for clients and tests.

Batch header layout (61 bytes)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...

The CRC-32C covers ``attributes`` to the end of the batch, so ``baseOffset`` and
``partitionLeaderEpoch`` can be stamped without recomputing it and without touching the records:
the broker's produce path is O(batches), never O(records), and compressed batches are stored as
they came.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import crc32c as _crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes before batchLength counts from
_CRC_START = 21  # offset of attributes (CRC covers from here)
_header = struct.Struct(">qiibIhiqqqhii")
_base_offset = struct.Struct(">q")
_leader_epoch = struct.Struct(">i")


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class InvalidRecordBatch(Exception):
    """A batch the broker must refuse; ``error_code_name`` is the Kafka error to answer with."""

    error_code_name = "CORRUPT_MESSAGE"


class CorruptRecordBatch(InvalidRecordBatch):
    """Bad CRC, torn or short batch, impossible length → CORRUPT_MESSAGE."""

    error_code_name = "CORRUPT_MESSAGE"


class UnsupportedMagic(InvalidRecordBatch):
    """A message format other than v2 → INVALID_RECORD (Sluice stores only v2)."""

    error_code_name = "INVALID_RECORD"


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The header of one batch and where it sits in its buffer."""

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
        return Compression(self.attributes & 0x07)

    @property
    def timestamp_type(self) -> int:
        return (self.attributes >> 3) & 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)


def _parse(data: bytes | memoryview, pos: int, verify_crc: bool) -> BatchInfo:
    end = len(data)
    if end - pos < HEADER_SIZE:
        raise CorruptRecordBatch(f"torn batch header at position {pos}")
    (base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid, pepoch,
     base_seq, count) = _header.unpack_from(data, pos)
    if magic != 2:
        raise UnsupportedMagic(f"record batch magic {magic} at position {pos}; only v2 is accepted")
    size = length + LOG_OVERHEAD
    if length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordBatch(f"batch length {length} smaller than a header at {pos}")
    if pos + size > end:
        raise CorruptRecordBatch(f"torn batch at position {pos}: {size} bytes declared, "
                                 f"{end - pos} present")
    if count < 0 or last_delta < 0 or (count > 0 and last_delta < count - 1):
        raise CorruptRecordBatch(f"inconsistent record count {count} / last offset delta "
                                 f"{last_delta} at {pos}")
    if verify_crc:
        actual = _crc32c.crc32c(memoryview(data)[pos + _CRC_START:pos + size])
        if actual != crc:
            raise CorruptRecordBatch(f"CRC mismatch at position {pos}: stored {crc:#010x}, "
                                     f"computed {actual:#010x}")
    return BatchInfo(pos, size, base_offset, base_offset + last_delta, epoch, magic, crc,
                     attributes, last_delta, base_ts, max_ts, pid, pepoch, base_seq, count)


def iter_batches(data: bytes | memoryview, *, verify_crc: bool = True) -> Iterator[BatchInfo]:
    """Every batch in ``data``; raises :class:`InvalidRecordBatch` at the first bad one."""
    pos = 0
    end = len(data)
    while pos < end:
        info = _parse(data, pos, verify_crc)
        yield info
        pos += info.size


def scan_valid_prefix(data: bytes | memoryview, *, verify_crc: bool = True
                      ) -> tuple[int, list[BatchInfo]]:
    """The length of the longest prefix of whole, valid batches, and those batches. Never raises:
    used by recovery to find where a torn or corrupt tail begins."""
    infos = []
    pos = 0
    end = len(data)
    while pos < end:
        try:
            info = _parse(data, pos, verify_crc)
        except InvalidRecordBatch:
            break
        infos.append(info)
        pos += info.size
    return pos, infos


def assign_offsets(data: bytes | memoryview, base_offset: int, leader_epoch: int
                   ) -> tuple[bytearray, list[BatchInfo]]:
    """Validate every batch and stamp consecutive base offsets and the leader epoch.

    Returns a copy of ``data`` with the stamps applied and the batches' infos (with their new
    offsets). Raises :class:`InvalidRecordBatch` for an empty set, a non-v2 batch, a bad CRC, or
    a batch with no records.
    """
    if len(data) == 0:
        raise CorruptRecordBatch("empty record set")
    buf = bytearray(data)
    infos = []
    next_offset = base_offset
    for info in iter_batches(buf):
        if info.record_count == 0:
            raise CorruptRecordBatch(f"batch at position {info.position} holds no records")
        _base_offset.pack_into(buf, info.position, next_offset)
        _leader_epoch.pack_into(buf, info.position + LOG_OVERHEAD, leader_epoch)
        infos.append(BatchInfo(
            info.position, info.size, next_offset, next_offset + info.last_offset_delta,
            leader_epoch, info.magic, info.crc, info.attributes, info.last_offset_delta,
            info.base_timestamp, info.max_timestamp, info.producer_id, info.producer_epoch,
            info.base_sequence, info.record_count))
        next_offset += info.last_offset_delta + 1
    return buf, infos


# -- records: building and decoding (clients and tests; the broker never does this) ---------------


@dataclass
class Record:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = 0
    offset: int = -1


def _uvarint(v: int, out: bytearray) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _varint(v: int, out: bytearray) -> None:
    _uvarint((v << 1) ^ (v >> 63), out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise CorruptRecordBatch("truncated varint in record")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordBatch("varint too long in record")
    return (result >> 1) ^ -(result & 1), pos


def _compress(codec: Compression, raw: bytes) -> bytes:
    if codec is Compression.NONE:
        return raw
    if codec is Compression.GZIP:
        c = zlib.compressobj(wbits=31)
        return c.compress(raw) + c.flush()
    import cramjam

    if codec is Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(raw))
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.compress(raw))
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(raw))
    raise ValueError(f"unknown compression {codec}")


_XERIAL = b"\x82SNAPPY\x00"


def _decompress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return zlib.decompress(data, wbits=47)
    import cramjam

    if codec is Compression.SNAPPY:
        if data.startswith(_XERIAL):
            # Java clients frame snappy xerial-style: 16-byte header, then (size, block) pairs.
            out = bytearray()
            pos = 16
            while pos < len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out += bytes(cramjam.snappy.decompress_raw(data[pos:pos + n]))
                pos += n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise CorruptRecordBatch(f"unknown compression codec {int(codec)}")


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    leader_epoch: int = -1,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Encode ``records`` as one RecordBatch v2 (offsets relative to the first)."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base_ts = records[0].timestamp
    max_ts = max(r.timestamp for r in records)
    body = bytearray()
    for i, r in enumerate(records):
        rec = bytearray()
        rec.append(0)  # record attributes
        _varint(r.timestamp - base_ts, rec)
        _varint(i, rec)
        for part in (r.key, r.value):
            if part is None:
                _varint(-1, rec)
            else:
                _varint(len(part), rec)
                rec += part
        _varint(len(r.headers), rec)
        for hk, hv in r.headers:
            kb = hk.encode()
            _varint(len(kb), rec)
            rec += kb
            if hv is None:
                _varint(-1, rec)
            else:
                _varint(len(hv), rec)
                rec += hv
        _varint(len(rec), body)
        body += rec
    payload = _compress(compression, bytes(body))
    attributes = int(compression) | (timestamp_type << 3)
    after_crc = struct.pack(">hiqqqhii", attributes, len(records) - 1, base_ts, max_ts,
                            producer_id, producer_epoch, base_sequence, len(records)) + payload
    crc = _crc32c.crc32c(after_crc)
    length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, length, leader_epoch, 2, crc) + after_crc


def decode_batch(data: bytes | memoryview, info: BatchInfo | None = None) -> list[Record]:
    """The records of one batch (decompressed), with absolute offsets filled in."""
    data = bytes(data)
    if info is None:
        info = _parse(data, 0, True)
        start = 0
    else:
        start = info.position
    payload = data[start + HEADER_SIZE:start + info.size]
    raw = _decompress(info.compression, payload)
    out = []
    pos = 0
    for _ in range(info.record_count):
        length, pos = _read_varint(raw, pos)
        end = pos + length
        pos += 1  # attributes
        ts_delta, pos = _read_varint(raw, pos)
        off_delta, pos = _read_varint(raw, pos)
        parts: list[bytes | None] = []
        for _k in range(2):
            n, pos = _read_varint(raw, pos)
            if n < 0:
                parts.append(None)
            else:
                parts.append(raw[pos:pos + n])
                pos += n
        nh, pos = _read_varint(raw, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(nh):
            n, pos = _read_varint(raw, pos)
            hk = raw[pos:pos + n].decode()
            pos += n
            n, pos = _read_varint(raw, pos)
            if n < 0:
                headers.append((hk, None))
            else:
                headers.append((hk, raw[pos:pos + n]))
                pos += n
        if pos != end:
            raise CorruptRecordBatch("record length does not match its fields")
        out.append(Record(parts[0], parts[1], headers, info.base_timestamp + ts_delta,
                          info.base_offset + off_delta))
    return out


def decode_records(data: bytes | memoryview) -> list[Record]:
    """All records of every batch in ``data``, skipping control batches and ignoring a trailing
    partial batch (a fetch response may end with one)."""
    data = bytes(data)
    valid, infos = scan_valid_prefix(data)
    out = []
    for info in infos:
        if not info.is_control:
            out.extend(decode_batch(data, info))
    return out
