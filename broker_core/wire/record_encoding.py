"""The one RecordBatch v2 encoder: records (:func:`encode_record`) and the batch header with its
CRC (:func:`seal_batch`), in the layout :mod:`broker_core.wire.records` declares.

Used by :func:`broker_core.wire.records.build_batch` (clients, tools, tests, the Raft log) and by
the producer (:class:`consumer_client.producer_accumulator.ProducerBatch`), which encodes each
record as it arrives and seals the batch once when it is sent.

Invariants: a sealed batch's CRC-32C covers ``attributes`` to its end, its last offset delta is
``count - 1``, and the offset deltas of its records are ``0..count-1`` (the caller encodes them
so); nothing is written anywhere before every input has been checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import crc32c as _crc32c

from broker_core.wire.compression import compress
from broker_core.wire.primitives import zigzag_bytes as varint
from broker_core.wire.records import (
    AFTER_CRC,
    BEFORE_CRC,
    CONTROL_BIT,
    CRC_START,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_BIT,
    Compression,
)

# Precomputed zig-zag varints (``varint`` is wire.primitives' zigzag_bytes) for 0..N-1:
# lengths, offset deltas and small timestamp deltas hit this table instead of a Python loop
# (most of the per-record cost otherwise).
_TABLE_SIZE = 1 << 15
_ZZ: list[bytes] = [varint(i) for i in range(_TABLE_SIZE)]
_NULL = varint(-1)


def encode_record(ts_delta: int, offset_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[tuple[str, bytes | None]] | None) -> bytes:
    """One record of a v2 batch, length prefix included. Raises TypeError for a key, value or
    header value that is not bytes-like, before anything is written anywhere."""
    zz = _ZZ
    n = _TABLE_SIZE
    parts: list[Any] = [b"\x00",
                        zz[ts_delta] if 0 <= ts_delta < n else varint(ts_delta),
                        zz[offset_delta] if offset_delta < n else varint(offset_delta)]
    if key is None:
        parts.append(_NULL)
    else:
        kl = len(key)
        parts += (zz[kl] if kl < n else varint(kl), key)
    if value is None:
        parts.append(_NULL)
    else:
        vl = len(value)
        parts += (zz[vl] if vl < n else varint(vl), value)
    if not headers:
        parts.append(b"\x00")
    else:
        _append_headers(parts, headers)
    body = b"".join(parts)
    bl = len(body)
    return (zz[bl] if bl < n else varint(bl)) + body


def _append_headers(parts: list[Any], headers: Sequence[tuple[str, bytes | None]]) -> None:
    # Out of encode_record's inline path: headers are rare, so a call per header costs little.
    parts.append(varint(len(headers)))
    for hk, hv in headers:
        kb = hk.encode()
        parts += (varint(len(kb)), kb)
        parts += (_NULL,) if hv is None else (varint(len(hv)), hv)


def seal_batch(records: bytes | bytearray | memoryview, count: int, *, base_timestamp: int,
               max_timestamp: int, base_offset: int = 0, leader_epoch: int = -1,
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
               compression: Compression = Compression.NONE,
               timestamp_type: int = TIMESTAMP_CREATE_TIME, control: bool = False) -> bytes:
    """One RecordBatch v2 of ``count`` already encoded ``records`` (:func:`encode_record`'s,
    concatenated): compressed with ``compression``, under a header whose CRC covers the rest.
    ``control`` sets attributes bit 5 (a control batch, which only a log's owner writes)."""
    if count < 1:
        raise ValueError("a batch needs at least one record")
    if timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
        raise ValueError(f"timestamp_type must be 0 or 1, got {timestamp_type}")
    payload = compress(compression, bytes(records))
    attributes = (int(compression) | (TIMESTAMP_TYPE_BIT if timestamp_type else 0)
                  | (CONTROL_BIT if control else 0))
    after_crc = AFTER_CRC.pack(attributes, count - 1, base_timestamp, max_timestamp,
                               producer_id, producer_epoch, base_sequence, count) + payload
    length = len(after_crc) + (CRC_START - LOG_OVERHEAD)
    return (BEFORE_CRC.pack(base_offset, length, leader_epoch, MAGIC, _crc32c.crc32c(after_crc))
            + after_crc)
