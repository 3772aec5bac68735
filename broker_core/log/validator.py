"""The log validator: every record of a batch parsed before the batch may be stored.

:func:`~broker_core.wire.records.parse_batch` checks a batch's frame (magic, lengths, CRC); a
CRC only proves the bytes are the ones the producer meant, not that they are records. This
module reads every record of a batch, decompressing a compressed one with a hard bound (at most
``max_decompressed_bytes``, see :func:`broker_core.wire.compression.decompress`), as Kafka's log
validator does, and refuses the batch at the first record that is not well formed.

What a valid batch satisfies (a record set is valid when each of its batches is):

- the payload decompresses, to at most ``max_decompressed_bytes``
  (else :class:`~broker_core.wire.compression.DecompressedTooLarge`: MESSAGE_TOO_LARGE);
- it holds exactly ``recordCount`` records, each exactly as long as its length prefix says, and
  nothing after the last one; every varint is at most as long as its type allows (5 bytes for
  an int32 field, 10 for the timestamp delta); key, value and header lengths are -1 or fit in
  the record; the header count is not negative (else :class:`InvalidRecords` with
  CORRUPT_MESSAGE);
- the records' offset deltas are 0, 1, ..., ``recordCount - 1`` in order; with CreateTime the
  batch's ``maxTimestamp`` is its records' largest timestamp; header keys are not null and are
  UTF-8 (else :class:`InvalidRecords` with INVALID_RECORD).

A refusal names the record (its index in the batch, Kafka's ``batch_index``) and the batch's
position in the record set; the caller appends nothing of a record set with an invalid batch.
Pure functions on bytes: no I/O, no state, usable by the produce path and by log recovery.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable

from broker_core.wire.compression import decompress
from broker_core.wire.errors import MalformedFrame
from broker_core.wire.primitives import read_varint
from broker_core.wire.records import (
    HEADER_SIZE,
    TIMESTAMP_CREATE_TIME,
    BatchInfo,
    Compression,
    CorruptRecordBatch,
)

# The longest varint of each field: zig-zag int32 fields take at most 5 bytes, the timestamp
# delta (an int64) at most 10. Anything longer is corrupt (an 11-byte 0xff run, say).
_INT_BYTES = 5


class InvalidRecords(CorruptRecordBatch):
    """A batch with a malformed record. ``record_index`` is the record's index in its batch
    (Kafka's ``batch_index`` in a ProduceResponse's ``record_errors``), ``record_message`` what
    is wrong with it; ``error_code_name`` is CORRUPT_MESSAGE for a record that cannot be read
    and INVALID_RECORD for one that reads but breaks a rule."""

    def __init__(self, message: str, *, record_index: int, record_message: str,
                 error_code_name: str = "CORRUPT_MESSAGE") -> None:
        super().__init__(message)
        self.record_index = record_index
        self.record_message = record_message
        self.error_code_name = error_code_name

    @property
    def record_errors(self) -> list[tuple[int, str]]:
        """``[(batch_index, message)]`` for a ProduceResponse (v8+)."""
        return [(self.record_index, self.record_message)]


class _Bad(Exception):
    """Internal: record ``index`` failed; ``message`` says how, ``code`` is the error name."""

    def __init__(self, index: int, message: str, code: str = "CORRUPT_MESSAGE") -> None:
        super().__init__(message)
        self.index = index
        self.message = message
        self.code = code


def validate_records(data: bytes | bytearray | memoryview, infos: Iterable[BatchInfo], *,
                     max_decompressed_bytes: int) -> None:
    """Validate every record of each batch in ``infos`` (batches of ``data`` already parsed by
    :func:`~broker_core.wire.records.parse_batch`, CRC checked). Raises at the first invalid
    batch: :class:`InvalidRecords`, or
    :class:`~broker_core.wire.compression.DecompressedTooLarge` /
    :class:`~broker_core.wire.records.CorruptRecordBatch` for a payload that decompresses to too
    much or not at all."""
    for info in infos:
        validate_batch(data, info, max_decompressed_bytes=max_decompressed_bytes)


def validate_batch(data: bytes | bytearray | memoryview, info: BatchInfo, *,
                   max_decompressed_bytes: int) -> None:
    """Validate every record of the batch ``info`` describes (see the module docstring)."""
    payload = memoryview(data)[info.position + HEADER_SIZE:info.end]
    codec = info.compression
    if codec is Compression.NONE:
        raw = bytes(payload)
    else:
        try:
            raw = decompress(codec, payload, max_bytes=max_decompressed_bytes)
        except CorruptRecordBatch as e:
            e.args = (f"{e} (batch at position {info.position})",)
            raise
    create_time = info.timestamp_type == TIMESTAMP_CREATE_TIME
    try:
        index, largest = _walk(raw, info.record_count)
    except _Bad as e:
        raise _refusal(info, e.index, e.message, e.code) from None
    if create_time and info.record_count > 0:
        largest_ts = info.base_timestamp + largest
        if largest_ts != info.max_timestamp:
            raise InvalidRecords(
                f"batch at position {info.position}: maxTimestamp {info.max_timestamp} but its "
                f"records' largest timestamp is {largest_ts}",
                record_index=index, record_message="batch maxTimestamp disagrees with the records",
                error_code_name="INVALID_RECORD")


def largest_timestamp(data: bytes | bytearray | memoryview, info: BatchInfo, *,
                      max_decompressed_bytes: int) -> int:
    """The largest of the records' own timestamps (``baseTimestamp`` plus the largest delta),
    whatever the batch's timestamp-type bit says, of a batch :func:`validate_batch` accepted
    (decompressed again within the same bound)."""
    payload = memoryview(data)[info.position + HEADER_SIZE:info.end]
    codec = info.compression
    raw = bytes(payload) if codec is Compression.NONE else decompress(
        codec, payload, max_bytes=max_decompressed_bytes)
    try:
        _, largest = _walk(raw, info.record_count)
    except _Bad as e:
        raise _refusal(info, e.index, e.message, e.code) from None
    return info.base_timestamp + largest


def _refusal(info: BatchInfo, index: int, what: str, code: str) -> InvalidRecords:
    return InvalidRecords(
        f"record {index} of the batch at position {info.position} ({info.record_count} records "
        f"declared): {what}", record_index=index, record_message=what, error_code_name=code)


def _walk(raw: bytes, count: int) -> tuple[int, int]:
    """Parse ``count`` records filling ``raw`` exactly; returns ``(count - 1, largest timestamp
    delta)``. Raises :class:`_Bad` at the first bad record.

    Producers write records of one shape: same size, null key, no headers, a timestamp delta of
    one or two bytes. So after parsing a record field by field (:func:`_record`), the walk
    checks whole runs of the following records at once with C-speed strided slices
    (:func:`_run`), which prove each of them parses exactly like the first. A run that fails
    the check proves nothing; the walk then backs off and reads the next records with
    :func:`_plain` (a lean loop for the common forms), and any record that is not of a common
    form with :func:`_record`, which names what is wrong with a bad one.

    A batch of at most :data:`SMALL_BATCH` records (a ``linger.ms=0`` producer sends one) is
    read with :func:`_plain` from its first record: a run could prove little there, and
    parsing the first record field by field for its shape costs more than the lean loop."""
    total = len(raw)
    pos = 0
    largest = None
    i = 0
    attempt = _FIRST_RUN
    # Records to read without trying a run: after a run that failed, or all of a small batch.
    skip = count if count <= SMALL_BATCH else 0
    failures = 0
    while i < count:
        if pos >= total:
            raise _Bad(i, f"the batch ends after {i} of {count} declared records (the record "
                       "count disagrees with the records)")
        if skip:
            stop = min(count, i + skip)
            j, pos, lean_largest = _plain(raw, pos, total, i, stop)
            if lean_largest is not None and (largest is None or lean_largest > largest):
                largest = lean_largest
            skip -= j - i
            i = j
            if i == stop or pos >= total:
                continue
        try:
            end, ts, shape = _record(raw, pos, total, i)
        except MalformedFrame as e:  # a varint too long, or cut off by the record's end
            raise _Bad(i, e.message) from None
        if largest is None or ts > largest:
            largest = ts
        i += 1
        pos = end
        if skip:
            skip -= 1
            continue
        if shape is None or i >= count:
            continue
        run = _run(raw, pos, total, i, count, shape, attempt)
        if run is None:
            # Records of varied shapes: back off, so failed run checks cost little.
            attempt = _FIRST_RUN
            failures += 1
            skip = min(1 << failures, _MAX_SKIP)
            continue
        failures = 0
        n, run_largest = run
        if run_largest > largest:
            largest = run_largest
        i += n
        pos += n * shape[0]
        attempt *= 2
    if pos != total:
        raise _Bad(max(count - 1, 0), f"{total - pos} bytes after the last of {count} declared "
                   "records (the record count disagrees with the records)")
    return count - 1, 0 if largest is None else largest


def _plain(raw: bytes, pos: int, total: int, i: int, stop: int) -> tuple[int, int, int | None]:
    """Read records ``i .. stop - 1`` from ``pos`` while they have a common form: varints of one
    or two bytes (one for the key length and the header count), every check passing. Returns
    ``(index, position, largest timestamp delta or None)`` of the first record it did not read
    (``stop`` when it read them all); it never raises: a record it stops at is left to
    :func:`_record`, which reads any form and names what is wrong."""
    # Deliberately one long function: this is the per-record hot loop of produce validation,
    # and splitting it into helpers would add a Python call per record (the cost it avoids).
    largest = None
    try:
        while i < stop:
            b = raw[pos]
            if b < 0x80:
                p = pos + 1
            else:
                c = raw[pos + 1]
                if c >= 0x80:
                    break
                b = (b & 0x7F) | c << 7
                p = pos + 2
            length = (b >> 1) ^ -(b & 1)
            end = p + length
            if length < 6 or end > total:
                break
            b = raw[p + 1]  # after the attributes: the timestamp delta
            if b < 0x80:
                p += 2
            else:
                c = raw[p + 2]
                if c >= 0x80:
                    break
                b = (b & 0x7F) | c << 7
                p += 3
            ts = (b >> 1) ^ -(b & 1)
            b = raw[p]  # the offset delta
            if b < 0x80:
                q = p + 1
            else:
                c = raw[p + 1]
                if c >= 0x80:
                    break
                b = (b & 0x7F) | c << 7
                q = p + 2
            if (b >> 1) ^ -(b & 1) != i:
                break
            b = raw[q]  # the key length
            if b == 1:  # null
                q += 1
            elif b < 0x80 and not b & 1:
                q += 1 + (b >> 1)
            else:
                break
            if q >= end:
                break
            b = raw[q]  # the value length
            if b < 0x80:
                q += 1
            else:
                c = raw[q + 1]
                if c >= 0x80:
                    break
                b = (b & 0x7F) | c << 7
                q += 2
            if b != 1:  # not null
                if b & 1:
                    break
                q += b >> 1
            if q >= end:
                break
            b = raw[q]  # the header count
            if b == 0:
                q += 1
            elif b < 0x80 and not b & 1:
                q = _plain_headers(raw, q + 1, end, b >> 1)
            else:
                break
            if q != end:
                break
            if largest is None or ts > largest:
                largest = ts
            pos = end
            i += 1
    except IndexError:
        pass
    return i, pos, largest


def _plain_headers(raw: bytes, q: int, end: int, count: int) -> int:
    """The position after ``count`` headers at ``q`` of the common form (one-byte key length,
    UTF-8 key, value length of one or two bytes, all within ``end``), or -1 at anything else."""
    for _ in range(count):
        b = raw[q]
        if b >= 0x80 or b & 1:
            return -1
        k = q + 1
        q = k + (b >> 1)
        if q >= end:
            return -1
        try:
            raw[k:q].decode()
        except UnicodeDecodeError:
            return -1
        b = raw[q]
        if b < 0x80:
            q += 1
        else:
            c = raw[q + 1]
            if c >= 0x80:
                return -1
            b = (b & 0x7F) | c << 7
            q += 2
        if b != 1:  # not null
            if b & 1:
                return -1
            q += b >> 1
    return q if q <= end else -1


# -- runs of same-shaped records ------------------------------------------------------------------

#: Batches of at most this many records skip the runs (see :func:`_walk`). Measured on records
#: of 100 bytes: the lean loop is faster up to about ten records (one: 2.3 -> 1.6 µs a batch,
#: five: 5.3 -> 3.4 µs), the runs from sixteen on (sixteen: 5.5 against 8.4 µs).
SMALL_BATCH = 8
_FIRST_RUN = 16
_MAX_SKIP = 64
#: Offset deltas whose zig-zag varint takes 1, 2 and 3 bytes start at these values; the tables
#: hold each byte of the encodings of deltas 0 .. _DELTA_LIMIT - 1, by byte position.
_DELTA_CLASSES = ((0, 64, 1), (64, 8192, 2), (8192, 1 << 20, 3))
_DELTA_LIMIT = 1 << 16


def _delta_tables() -> tuple[bytes, bytes, bytes]:
    cols: list[bytearray] = [bytearray(_DELTA_LIMIT) for _ in range(3)]
    for d in range(_DELTA_LIMIT):
        v = d << 1
        k = 0
        while v >= 0x80:
            cols[k][d] = (v & 0x7F) | 0x80
            v >>= 7
            k += 1
        cols[k][d] = v
    return bytes(cols[0]), bytes(cols[1]), bytes(cols[2])


_DELTA_BYTES = _delta_tables()
#: One-byte zig-zag timestamp deltas mapped to their order (-64 -> 0 ... 63 -> 127), and for each
#: order ``r`` the bytes below it, to drop with ``bytes.translate``.
_TS_ORDER = bytes(((b >> 1) ^ -(b & 1)) + 64 for b in range(128)) + bytes(128)
_BELOW = tuple(bytes(range(r)) for r in range(129))
_MULTI_BYTE = bytes(range(0x80, 0x100))
_LOW7 = bytes(b & 0x7F for b in range(256))


def _run(raw: bytes, pos: int, total: int, i: int, count: int, shape: tuple,
         attempt: int) -> tuple[int, int] | None:
    """Check records ``i, i+1, ...`` at ``pos`` (up to ``attempt`` of them) against ``shape``,
    the layout of the record just parsed: ``(size, timestamp position, timestamp length, offset
    delta position, positions of the bytes that must match)``, positions relative to a record's start. Returns
    ``(records checked, largest timestamp delta among them)``, or None when they do not all
    match (nothing is proved then)."""
    size, ts_at, ts_len, delta_at, fixed = shape
    if i >= _DELTA_LIMIT:
        return None
    first_cls = next(c for c in _DELTA_CLASSES if c[0] <= i - 1 < c[1])
    n = min(attempt, count - i, (total - pos) // size, first_cls[1] - i, _DELTA_LIMIT - i)
    if n < 2:
        return None
    stop = pos + n * size
    prev = pos - size  # the record just parsed: the template
    for at in fixed:
        if raw[pos + at:stop:size] != raw[prev + at:prev + at + 1] * n:
            return None
    for k in range(first_cls[2]):
        if raw[pos + delta_at + k:stop:size] != _DELTA_BYTES[k][i:i + n]:
            return None
    if ts_len == 1:
        stamps = raw[pos + ts_at:stop:size]
        if stamps.translate(None, _MULTI_BYTE) != stamps:
            return None
        return n, _largest_one_byte(stamps)
    # Two-byte timestamp deltas (a batch spanning 64 ms to 8 s): the first byte of each must
    # have its continuation bit and the second must not.
    low = raw[pos + ts_at:stop:size]
    high = raw[pos + ts_at + 1:stop:size]
    if low.translate(None, _MULTI_BYTE) or high.translate(None, _MULTI_BYTE) != high:
        return None
    return n, _largest_two_byte(low, high)


def _largest_one_byte(stamps: bytes) -> int:
    """The largest of one-byte zig-zag varints, by a binary search over C-speed deletions."""
    order = stamps.translate(_TS_ORDER)
    lo, hi = 0, 127  # the largest order present is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if order.translate(None, _BELOW[mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo - 64


def _largest_two_byte(low: bytes, high: bytes) -> int:
    """The largest of two-byte zig-zag varints given their first and second bytes."""
    pairs = bytearray(2 * len(low))
    pairs[0::2] = high
    pairs[1::2] = low.translate(_LOW7)
    values = array("H")
    values.frombytes(pairs)
    if sys.byteorder == "little":
        values.byteswap()
    # values[k] = high * 256 + (low & 0x7F): ordered as the varint's value, same parity.
    evens = [v for v in values if not v & 1]
    if evens:
        v = max(evens)
        return ((v >> 8) << 7 | (v & 0x7F)) >> 1
    v = min(values)
    return -((((v >> 8) << 7 | (v & 0x7F)) + 1) >> 1)


def _record(raw: bytes, pos: int, total: int, i: int) -> tuple[int, int, tuple | None]:
    """Parse record ``i`` at ``pos``, field by field. Returns ``(end, timestamp delta, shape)``,
    ``shape`` for :func:`_run` when the record has the common form (a timestamp delta of one or
    two bytes, no headers), else None. One-byte varints, the common case, are decoded inline
    for speed; longer ones by :func:`~broker_core.wire.primitives.read_varint`."""
    # Deliberately one long function: it runs once per record that _plain leaves, and a helper
    # per field would add a Python call per field of every such record (the overhead it avoids).
    start = pos
    b = raw[pos]
    if b < 0x80:
        length = (b >> 1) ^ -(b & 1)
        pos += 1
    else:
        length, pos = read_varint(raw, pos, total, _INT_BYTES, "record length varint")
    fixed = list(range(pos - start))
    end = pos + length
    if length < 6 or end > total:
        raise _Bad(i, f"record length {length} does not fit the batch ({total - pos} bytes "
                   "left)")
    # attributes (unused in v2), timestamp delta, offset delta
    ts_at = pos + 1 - start
    b = raw[pos + 1]
    if b < 0x80:
        ts = (b >> 1) ^ -(b & 1)
        pos += 2
    else:
        ts, pos = read_varint(raw, pos + 1, end, _INT_BYTES * 2, "timestamp delta varint")
    ts_len = pos - start - ts_at
    if pos >= end:
        raise _Bad(i, "record ends inside its offset delta")
    delta_at = pos - start
    b = raw[pos]
    if b < 0x80:
        delta = (b >> 1) ^ -(b & 1)
        pos += 1
    else:
        delta, pos = read_varint(raw, pos, end, _INT_BYTES, "offset delta varint")
    if delta != i:
        raise _Bad(i, f"offset delta {delta}, expected {i} (deltas must be 0, 1, ... in order)",
                   "INVALID_RECORD")
    for what in ("key", "value"):
        if pos >= end:
            raise _Bad(i, f"record ends inside its {what} length")
        b = raw[pos]
        if b < 0x80:
            fixed.append(pos - start)
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            at = pos
            n, pos = read_varint(raw, pos, end, _INT_BYTES, f"{what} length varint")
            fixed.extend(range(at - start, pos - start))
        if n >= 0:
            pos += n
            if pos > end:
                raise _Bad(i, f"{what} of {n} bytes overruns the record")
        elif n != -1:
            raise _Bad(i, f"{what} length {n}")
    if pos >= end:
        raise _Bad(i, "record ends inside its header count")
    fixed.append(pos - start)
    if raw[pos] == 0:
        nh = 0
        pos += 1
    else:
        nh, pos = read_varint(raw, pos, end, _INT_BYTES, "header count varint")
    if nh < 0:
        raise _Bad(i, f"header count {nh}")
    for h in range(nh):
        n, pos = read_varint(raw, pos, end, _INT_BYTES, f"header {h} key length varint")
        if n < 0:
            raise _Bad(i, f"header {h} has a null key", "INVALID_RECORD")
        key_at = pos
        pos += n
        if pos > end:
            raise _Bad(i, f"header {h} key overruns the record")
        try:
            raw[key_at:pos].decode()
        except UnicodeDecodeError:
            # Header keys are strings; a consumer could not decode this record.
            raise _Bad(i, f"header {h} key is not UTF-8", "INVALID_RECORD") from None
        n, pos = read_varint(raw, pos, end, _INT_BYTES, f"header {h} value length varint")
        if n >= 0:
            pos += n
            if pos > end:
                raise _Bad(i, f"header {h} value overruns the record")
        elif n != -1:
            raise _Bad(i, f"header {h} value length {n}")
    if pos != end:
        raise _Bad(i, f"record length {length} but its fields take {length + pos - end} bytes")
    shape = (end - start, ts_at, ts_len, delta_at, tuple(fixed)) if ts_len <= 2 and nh == 0 \
        else None
    return end, ts, shape
