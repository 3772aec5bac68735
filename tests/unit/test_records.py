"""RecordBatch v2: header validation, CRC, offset/epoch stamping, build/decode round trips, and
decoding batches written by an independent implementation (kafka-python)."""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.wire.records import (
    HEADER_SIZE,
    BatchInfo,
    Compression,
    CorruptRecordBatch,
    InvalidRecordBatch,
    InvalidRecordCount,
    Record,
    UnsupportedMagic,
    assign_offsets,
    build_batch,
    decode_batch,
    decode_records,
    iter_batches,
    parse_batch,
    scan_valid_prefix,
)

HEADER = struct.Struct(">qiibIhiqqqhii")
FIELDS = ("base_offset", "length", "epoch", "magic", "crc", "attributes", "last_delta",
          "base_ts", "max_ts", "producer_id", "producer_epoch", "base_sequence", "count")


def records(n: int, ts: int = 1_000, value_size: int = 10) -> list[Record]:
    return [Record(b"key-%d" % i if i % 3 else None, bytes([65 + i % 26]) * value_size,
                   [("h", b"%d" % i)] if i % 2 else [], ts + i) for i in range(n)]


def restamp(batch: bytes, **changes: int) -> bytes:
    """``batch`` with header fields changed, its length fitted to its bytes and, unless ``crc``
    is given, the CRC recomputed (a well-formed lie)."""
    values = dict(zip(FIELDS, HEADER.unpack_from(batch, 0), strict=True))
    values["length"] = len(batch) - 12
    values.update(changes)
    raw = bytearray(batch)
    HEADER.pack_into(raw, 0, *(values[f] for f in FIELDS))
    if "crc" not in changes:
        struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


# -- header parsing and validation -------------------------------------------------------------


def test_parse_reads_every_header_field():
    batch = build_batch(records(5, ts=7_000), base_offset=40, leader_epoch=3, producer_id=99,
                        producer_epoch=2, base_sequence=11, compression=Compression.GZIP)
    info = parse_batch(batch)
    assert (info.position, info.size) == (0, len(batch))
    assert (info.base_offset, info.last_offset, info.last_offset_delta) == (40, 44, 4)
    assert (info.partition_leader_epoch, info.magic, info.record_count) == (3, 2, 5)
    assert (info.base_timestamp, info.max_timestamp) == (7_000, 7_004)
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (99, 2, 11)
    assert info.compression is Compression.GZIP
    assert info.timestamp_type == 0 and not info.is_transactional and not info.is_control
    assert info.crc == crc32c.crc32c(batch[21:])


def test_crc_mismatch_is_detected_and_can_be_skipped():
    batch = bytearray(build_batch(records(3)))
    batch[-1] ^= 0x01  # a record byte, inside the CRC's range
    with pytest.raises(CorruptRecordBatch, match="CRC mismatch") as e:
        list(iter_batches(batch))
    assert e.value.error_code_name == "CORRUPT_MESSAGE"
    assert [i.record_count for i in iter_batches(batch, verify_crc=False)] == [3]


@pytest.mark.parametrize("position", range(21, HEADER_SIZE))
def test_every_crc_covered_header_byte_is_protected(position):
    batch = bytearray(build_batch(records(2)))
    batch[position] ^= 0x80
    with pytest.raises(CorruptRecordBatch):
        parse_batch(batch)


def test_stamped_fields_are_outside_the_crc():
    batch = bytearray(build_batch(records(2)))
    batch[0:8] = (123).to_bytes(8, "big")
    batch[12:16] = (9).to_bytes(4, "big")
    info = parse_batch(batch)
    assert (info.base_offset, info.partition_leader_epoch) == (123, 9)


def test_every_torn_prefix_is_rejected_as_corrupt():
    batch = build_batch(records(4))
    for cut in range(1, len(batch)):
        with pytest.raises(CorruptRecordBatch):
            parse_batch(batch[:cut])


def test_impossible_length_is_corrupt():
    batch = build_batch(records(1))
    short = bytearray(batch)
    short[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(CorruptRecordBatch, match="smaller than a batch header"):
        parse_batch(short)
    huge = bytearray(batch)
    huge[8:12] = (1 << 30).to_bytes(4, "big")
    with pytest.raises(CorruptRecordBatch, match="torn batch"):
        parse_batch(huge)


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_other_magic_is_invalid_record(magic):
    batch = bytearray(build_batch(records(1)))
    batch[16] = magic
    with pytest.raises(UnsupportedMagic) as e:
        parse_batch(batch)
    assert e.value.error_code_name == "INVALID_RECORD"
    # an old-format message set shorter than a v2 header still reports the magic
    with pytest.raises(UnsupportedMagic):
        parse_batch(bytes(batch[:30]))


def test_inconsistent_count_is_corrupt_when_parsing():
    batch = restamp(build_batch(records(3)), count=5)  # 5 records, last delta 2
    with pytest.raises(CorruptRecordBatch, match="inconsistent record count"):
        parse_batch(batch)


def test_scan_valid_prefix_stops_at_the_first_bad_batch():
    good = [build_batch(records(i + 1)) for i in range(3)]
    data = b"".join(good)
    for tail in (b"\x00" * 70, good[0][:40], restamp(good[1], crc=0)):
        valid, infos = scan_valid_prefix(data + tail)
        assert valid == len(data)
        assert [i.record_count for i in infos] == [1, 2, 3]
        assert [i.position for i in infos] == [0, len(good[0]), len(good[0]) + len(good[1])]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_scan_valid_prefix_never_raises(garbage):
    valid, infos = scan_valid_prefix(garbage)
    assert 0 <= valid <= len(garbage)
    assert sum(i.size for i in infos) == valid


# -- assign_offsets ----------------------------------------------------------------------------


def test_assign_offsets_stamps_consecutive_offsets_and_the_epoch():
    batches = [build_batch(records(n)) for n in (3, 1, 5)]
    data = b"".join(batches)
    buf, infos = assign_offsets(data, 100, 7)
    assert [(i.base_offset, i.last_offset) for i in infos] == [(100, 102), (103, 103),
                                                                (104, 108)]
    assert all(i.partition_leader_epoch == 7 for i in infos)
    reparsed = list(iter_batches(buf))  # CRCs still valid
    assert [(i.base_offset, i.partition_leader_epoch) for i in reparsed] == [
        (100, 7), (103, 7), (104, 7)]
    assert data == b"".join(batches)  # the input was copied, not modified
    offsets = [r.offset for r in decode_records(buf)]
    assert offsets == list(range(100, 109))


@pytest.mark.parametrize("codec", list(Compression))
def test_assign_offsets_changes_only_the_two_stamped_fields(codec):
    batches = [build_batch(records(4, value_size=200), compression=codec) for _ in range(3)]
    data = b"".join(batches)
    buf, infos = assign_offsets(data, 5_000, 12)
    assert len(buf) == len(data)
    for info in infos:
        p = info.position
        assert buf[p + 8:p + 12] == data[p + 8:p + 12]
        assert buf[p + 16:info.end] == data[p + 16:info.end]  # CRC and records untouched
        assert struct.unpack_from(">q", buf, p)[0] == info.base_offset
        assert struct.unpack_from(">i", buf, p + 12)[0] == 12
    assert [r.offset for r in decode_records(buf)] == list(range(5_000, 5_012))


def test_assign_offsets_infos_are_what_parsing_the_stamped_bytes_gives():
    # assign_offsets builds its infos itself (no parse_batch): every field must agree with it.
    data = b"".join([build_batch(records(3), compression=Compression.GZIP),
                     build_batch(records(1)),
                     build_batch(records(2), producer_id=77, producer_epoch=3,
                                 base_sequence=9)])
    buf, infos = assign_offsets(data, 40, 6)
    assert infos == list(iter_batches(buf))


def test_assign_offsets_rejects_bad_input_without_partial_results():
    good = build_batch(records(2))
    cases = [
        (b"", CorruptRecordBatch, "empty record set"),
        (good + restamp(good, crc=1), CorruptRecordBatch, "CRC mismatch"),
        (good + good[:-3], CorruptRecordBatch, "torn batch"),
        (restamp(good, count=0, last_delta=0), InvalidRecordCount, "holds no records"),
        (restamp(good, last_delta=5), InvalidRecordCount, "last offset delta 5"),
        (restamp(good, attributes=0x20), InvalidRecordCount, "control batch"),
    ]
    for data, error, message in cases:
        with pytest.raises(error, match=message):
            assign_offsets(data, 0, 1)
    magic1 = bytearray(good)
    magic1[16] = 1
    with pytest.raises(UnsupportedMagic):
        assign_offsets(good + bytes(magic1), 0, 1)


def test_invalid_record_count_answers_invalid_record():
    with pytest.raises(InvalidRecordBatch) as e:
        assign_offsets(restamp(build_batch(records(2)), last_delta=3), 0, 0)
    assert e.value.error_code_name == "INVALID_RECORD"


# -- build and decode --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Compression))
def test_build_decode_round_trip(codec):
    original = records(20, ts=1_700_000_000_000)
    original.append(Record(None, None, [("null-value", None)], 1_700_000_000_005))
    batch = build_batch(original, base_offset=300, compression=codec, leader_epoch=4)
    info = parse_batch(batch)
    assert info.compression is codec
    decoded = decode_batch(batch)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in decoded] == [
        (r.key, r.value, r.headers, r.timestamp) for r in original]
    assert [r.offset for r in decoded] == list(range(300, 321))


def test_compression_actually_compresses():
    plain = build_batch(records(50, value_size=500))
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        assert len(build_batch(records(50, value_size=500), compression=codec)) < len(plain) / 4


def test_log_append_time_gives_every_record_the_batch_max_timestamp():
    batch = restamp(build_batch(records(3, ts=10), timestamp_type=1), max_ts=99_999)
    assert parse_batch(batch).timestamp_type == 1
    assert [r.timestamp for r in decode_batch(batch)] == [99_999] * 3


def test_decode_xerial_framed_snappy():
    import cramjam

    raw_batch = build_batch(records(6))
    body = raw_batch[HEADER_SIZE:]
    half = len(body) // 2
    blocks = [bytes(cramjam.snappy.compress_raw(part)) for part in (body[:half], body[half:])]
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(
        struct.pack(">i", len(b)) + b for b in blocks)
    batch = restamp(raw_batch[:HEADER_SIZE] + framed, attributes=int(Compression.SNAPPY))
    assert [r.value for r in decode_batch(batch)] == [r.value for r in records(6)]


def test_undecompressable_payload_is_corrupt():
    batch = build_batch(records(3))
    bad = restamp(batch[:HEADER_SIZE] + b"not gzip at all", attributes=int(Compression.GZIP))
    with pytest.raises(CorruptRecordBatch, match="GZIP payload does not decompress"):
        decode_batch(bad)


def test_record_overrunning_its_batch_is_corrupt():
    batch = restamp(build_batch(records(2)), count=3, last_delta=2)
    with pytest.raises(CorruptRecordBatch):
        decode_batch(batch)


def test_decode_records_skips_control_batches_and_a_trailing_partial_batch():
    data = build_batch(records(2)) + restamp(build_batch(records(1)), attributes=0x20) + \
        build_batch(records(3))
    partial = build_batch(records(4))[:50]
    assert len(decode_records(data + partial)) == 5


def test_unknown_codec_is_reported():
    batch = restamp(build_batch(records(1)), attributes=6)
    with pytest.raises(CorruptRecordBatch, match="unknown compression codec 6"):
        decode_batch(batch)


def test_build_refuses_nonsense():
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])
    with pytest.raises(ValueError, match="timestamp_type"):
        build_batch(records(1), timestamp_type=2)


def test_batch_info_compression_property():
    info = parse_batch(build_batch(records(1), compression=Compression.ZSTD))
    assert isinstance(info, BatchInfo) and info.compression is Compression.ZSTD


# -- interop with kafka-python -----------------------------------------------------------------

default_records = pytest.importorskip("kafka.record.default_records")
kafka_codec = pytest.importorskip("kafka.codec")
# kafka-python's attribute codes are Kafka's; it can write a codec only if its library is here.
KP_CODECS = [Compression.NONE, Compression.GZIP] + [
    c for c, have in ((Compression.SNAPPY, kafka_codec.has_snappy()),
                      (Compression.LZ4, kafka_codec.has_lz4()),
                      (Compression.ZSTD, kafka_codec.has_zstd())) if have]


@pytest.mark.parametrize("codec", KP_CODECS)
def test_decode_a_batch_built_by_kafka_python(codec):
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(10):
        builder.append(i, timestamp=5_000 + i, key=None if i == 3 else b"k%d" % i,
                       value=b"value-%d" % i, headers=[("trace", b"t%d" % i)])
    batch = bytes(builder.build())
    stamped, infos = assign_offsets(batch, 1_000, 2)
    assert infos[0].compression is codec and infos[0].record_count == 10
    decoded = decode_batch(stamped)
    assert [r.offset for r in decoded] == list(range(1_000, 1_010))
    assert decoded[3].key is None and decoded[4].key == b"k4"
    assert [r.value for r in decoded] == [b"value-%d" % i for i in range(10)]
    assert decoded[9].headers == [("trace", b"t9")] and decoded[9].timestamp == 5_009


@pytest.mark.parametrize("codec", KP_CODECS)
def test_kafka_python_decodes_our_batches(codec):
    batch = build_batch(records(7, ts=42), base_offset=10, compression=codec)
    theirs = default_records.DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    got = [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in theirs]
    assert got == [(10 + i, r.key, r.value, r.timestamp, r.headers)
                   for i, r in enumerate(records(7, ts=42))]


def test_gzip_payload_is_a_gzip_stream():
    batch = build_batch(records(3), compression=Compression.GZIP)
    assert zlib.decompress(batch[HEADER_SIZE:], wbits=31)
