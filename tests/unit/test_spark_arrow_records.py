"""The data source's column-wise decoder (consumer_client/spark/arrow_records.py) gives exactly
the rows the consumer's decoder gives, for every codec, record shape and fetch window, and
rejects what it rejects."""

from __future__ import annotations

import struct

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

import crc32c  # noqa: E402

from broker_core.wire.records import Compression, CorruptRecordBatch, Record, build_batch  # noqa: E402
from consumer_client.consumer_records import decode_chunk  # noqa: E402
from consumer_client.spark.arrow_records import (  # noqa: E402
    arrow_schema,
    decode_record_batch,
    to_record_batch,
)
from tests.support.record_samples import RECORDS, varied  # noqa: E402

NO_HEADERS = [Record(r.key, r.value, [], r.timestamp) for r in RECORDS]


def _expected(data, start, end, include_headers):
    msgs = [m for m in decode_chunk("t", 3, data, start) if m.offset < end]
    return to_record_batch(msgs, include_headers).to_pydict() if msgs else None


def _check(data, start=0, end=1 << 62, include_headers=False):
    got = decode_record_batch("t", 3, data, start, end, include_headers=include_headers)
    want = _expected(data, start, end, include_headers)
    if want is None:
        assert got is None
        return
    assert got.schema.equals(arrow_schema(include_headers))
    assert got.to_pydict() == want
    got.validate(full=True)


@pytest.mark.parametrize("codec", list(Compression))
def test_every_codec_matches_the_consumer_decoder(codec):
    _check(build_batch(NO_HEADERS, base_offset=100, compression=codec))


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_every_record_shape_and_fetch_window(seed, codec):
    # keys absent, empty and long; values null, empty and 20 KB; three-byte offset deltas;
    # timestamps going back and forth; headers (dropped unless asked for)
    records = varied(9000, seed)
    data = build_batch(records, base_offset=5000, compression=codec) + build_batch(
        records[:300], base_offset=14000)
    _check(data)
    _check(data, start=13000)
    _check(data, start=14150)
    _check(data, start=5000, end=5001)
    _check(data, start=6000, end=14100)
    _check(data, start=14300)  # nothing left
    _check(data, include_headers=True)  # some records have headers: the row-wise path
    headerless = [Record(r.key, r.value, [], r.timestamp) for r in records[:2000]]
    _check(build_batch(headerless, compression=codec), include_headers=True)


def test_nulls_only_empty_values_and_log_append_time():
    _check(build_batch([Record(None, None, [], 5)] * 3))
    _check(build_batch([Record(b"", b"", [], 5)] * 3))
    data = build_batch(NO_HEADERS[:3], timestamp_type=1) + build_batch(NO_HEADERS[3:6],
                                                                       base_offset=3)
    got = decode_record_batch("t", 3, data, 0, 100)
    assert got.column("timestampType").to_pylist() == [1, 1, 1, 0, 0, 0]
    _check(data)


def test_partial_tail_and_control_batches_are_skipped():
    first = build_batch(NO_HEADERS[:10], base_offset=0, compression=Compression.LZ4)
    second = build_batch(NO_HEADERS[10:20], base_offset=10)
    third = build_batch(NO_HEADERS[20:], base_offset=20)
    data = first + second + third[:-5]
    assert decode_record_batch("t", 3, data, 4, 100).column("offset").to_pylist() == list(
        range(4, 20))
    _check(data, start=4)
    control = bytearray(build_batch([Record(b"\x00\x00\x00\x00", b"", [], 0)], base_offset=20))
    struct.pack_into(">h", control, 21, struct.unpack_from(">h", control, 21)[0] | 0x20)
    struct.pack_into(">I", control, 17, crc32c.crc32c(bytes(control[21:])))
    data = first + bytes(control)
    assert decode_record_batch("t", 3, data, 0, 100).num_rows == 10
    assert decode_record_batch("t", 3, bytes(control), 0, 100) is None
    assert decode_record_batch("t", 3, b"", 0, 100) is None


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_corruption_is_reported():
    data = bytearray(build_batch(NO_HEADERS[:3]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordBatch, match="CRC"):
        decode_record_batch("t", 3, bytes(data), 0, 100)
    with pytest.raises(CorruptRecordBatch):  # unchecked, the record itself no longer adds up
        decode_record_batch("t", 3, bytes(data), 0, 100, check_crcs=False)
    short = bytearray(build_batch(NO_HEADERS[:3]))
    struct.pack_into(">i", short, 57, 4)  # claims four records, holds three
    with pytest.raises(CorruptRecordBatch):
        decode_record_batch("t", 3, _recrc(short), 0, 100)
    long = bytearray(build_batch([Record(None, b"x" * 100, [], 0)] * 3))
    length = (long[61] & 0x7F) | (long[62] << 7)  # the first record's length, two bytes
    long[61] = ((length + 2) & 0x7F) | 0x80  # one more than its fields
    with pytest.raises(CorruptRecordBatch):
        decode_record_batch("t", 3, _recrc(long), 0, 100)
    # a value length pointing far past the record (and past the whole chunk)
    huge = bytearray(build_batch([Record(None, b"x" * 100, [], 0)]))
    huge[61 + 2 + 4] = 0xFE  # the value length (after length, attributes, deltas, key length)
    with pytest.raises(CorruptRecordBatch):
        decode_record_batch("t", 3, _recrc(huge), 0, 100)
