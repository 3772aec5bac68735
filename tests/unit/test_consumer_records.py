"""The consumer's record decoder (consumer_client/consumer_records.py): every codec Kafka
clients produce, batches as kafka-python builds them, the Java client's xerial snappy framing,
partial and control batches, and the header-only scan the fetcher uses."""

from __future__ import annotations

import struct
import sys

import cramjam
import crc32c
import lz4.frame
import pytest

from broker_core.wire.records import (
    Compression,
    CorruptRecordBatch,
    Record,
    build_batch,
)
from consumer_client import consumer_records
from consumer_client.consumer_records import Message, decode_chunk, scan_chunk
from tests.support.record_samples import RECORDS, varied


def _expected(base: int, start: int = 0) -> list[Message]:
    return [Message("t", 3, base + i, r.key, r.value, r.timestamp, 0, tuple(r.headers))
            for i, r in enumerate(RECORDS) if base + i >= start]


@pytest.mark.parametrize("codec", list(Compression))
def test_every_codec_decodes(codec):
    data = build_batch(RECORDS, base_offset=100, compression=codec)
    assert decode_chunk("t", 3, data, 100) == _expected(100)


def _rebatch(batch: bytes, codec: int, payload: bytes) -> bytes:
    """``batch`` with its records replaced by ``payload`` under ``codec`` (CRC recomputed)."""
    head = bytearray(batch[:61])
    head[21:23] = struct.pack(">h", (struct.unpack(">h", head[21:23])[0] & ~7) | codec)
    body = bytes(head[21:]) + payload
    struct.pack_into(">i", head, 8, len(body) + 9)
    struct.pack_into(">I", head, 17, crc32c.crc32c(body))
    return bytes(head[:21]) + body


def _raw_records(batch_without_compression: bytes) -> bytes:
    return batch_without_compression[61:]


def test_java_xerial_snappy_and_streaming_frames():
    plain = build_batch(RECORDS, base_offset=7)
    raw = _raw_records(plain)
    # Java's snappy-java framing: magic, version, compat version, then length-prefixed blocks
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(raw), 32768):
        block = bytes(cramjam.snappy.compress_raw(raw[i:i + 32768]))
        xerial += struct.pack(">i", len(block)) + block
    # zstd-jni / librdkafka streaming frames carry no content size
    z = cramjam.zstd.Compressor()
    z.compress(raw)
    zstd_stream = bytes(z.finish())
    # Java's KafkaLZ4BlockOutputStream: linked blocks, no stored size
    lz4_linked = lz4.frame.compress(raw, block_linked=True, store_size=False)
    for codec, payload in ((2, xerial), (4, zstd_stream), (3, lz4_linked)):
        assert decode_chunk("t", 3, _rebatch(plain, codec, payload), 7) == _expected(7), codec


@pytest.mark.parametrize("codec", [1, 3])
def test_batches_built_by_kafka_python(codec):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 22)
    for i, r in enumerate(RECORDS):
        b.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=r.headers)
    data = bytes(b.build())
    assert decode_chunk("t", 3, data, 0) == _expected(0)


def test_skips_records_before_the_fetch_offset_and_a_partial_tail():
    first = build_batch(RECORDS[:10], base_offset=0, compression=Compression.LZ4)
    second = build_batch(RECORDS[10:20], base_offset=10)
    third = build_batch(RECORDS[20:], base_offset=20)
    data = first + second + third[:-5]
    got = decode_chunk("t", 3, data, 4)
    assert [m.offset for m in got] == list(range(4, 20))
    assert scan_chunk(data, 4) == (20, len(first) + len(second))
    assert scan_chunk(third[:30], 20) == (20, 0)  # not even a header
    assert scan_chunk(b"", 5) == (5, 0)


def test_control_batches_are_skipped_but_counted_by_the_scan():
    control = bytearray(build_batch([Record(b"\x00\x00\x00\x00", b"", [], 0)], base_offset=5))
    attrs = struct.unpack_from(">h", control, 21)[0] | 0x20
    control = _rebatch(bytes(control), 0, bytes(control[61:]))
    control = bytearray(control)
    struct.pack_into(">h", control, 21, attrs)
    struct.pack_into(">I", control, 17, crc32c.crc32c(bytes(control[21:])))
    data = build_batch(RECORDS[:5], base_offset=0) + bytes(control)
    assert [m.offset for m in decode_chunk("t", 3, data, 0)] == [0, 1, 2, 3, 4]
    assert scan_chunk(data, 0)[0] == 6


def test_log_append_time_applies_to_every_record():
    data = build_batch(RECORDS[:3], base_offset=0, timestamp_type=1)
    got = decode_chunk("t", 3, data, 0)
    assert {m.timestamp_type for m in got} == {1}
    assert {m.timestamp for m in got} == {max(r.timestamp for r in RECORDS[:3])}


def test_corruption_is_reported():
    data = bytearray(build_batch(RECORDS[:3]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordBatch, match="CRC"):
        decode_chunk("t", 3, bytes(data), 0)
    # unchecked, the broken record itself is caught (its header count became -128)
    with pytest.raises(CorruptRecordBatch):
        decode_chunk("t", 3, bytes(data), 0, check_crcs=False)
    short = bytearray(build_batch(RECORDS[:3]))
    struct.pack_into(">i", short, 57, 4)  # claims four records, holds three
    body = bytes(short[21:])
    struct.pack_into(">I", short, 17, crc32c.crc32c(body))
    with pytest.raises(CorruptRecordBatch):
        decode_chunk("t", 3, bytes(short), 0)


def test_message_is_an_immutable_tuple():
    m = decode_chunk("t", 3, build_batch(RECORDS[:1], base_offset=9), 0)[0]
    assert (m.topic, m.partition, m.offset, m.value) == ("t", 3, 9, RECORDS[0].value)
    with pytest.raises(AttributeError):
        m.offset = 1  # type: ignore[misc]
    assert m._replace(offset=1).offset == 1




@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_every_record_shape_matches_the_reference_decoder(seed, codec):
    from broker_core.wire.records import decode_records

    records = varied(9000, seed)
    data = build_batch(records, base_offset=5000, compression=codec) + build_batch(
        records[:300], base_offset=14000)
    expected = [Message("t", 1, r.offset, r.key, r.value, r.timestamp, 0, tuple(r.headers))
                for r in decode_records(data)]
    assert [m.offset for m in expected] == list(range(5000, 14000)) + list(range(14000, 14300))
    assert decode_chunk("t", 1, data, 0) == expected
    # a fetch offset inside the first batch: the rest of it, then the whole second one
    assert decode_chunk("t", 1, data, 13000) == expected[8000:]
    assert decode_chunk("t", 1, data, 14150) == expected[9150:]
    # LogAppendTime: every record carries the batch's max timestamp
    appended = decode_chunk("t", 1, build_batch(records[:500], timestamp_type=1), 0)
    assert {(m.timestamp, m.timestamp_type) for m in appended} == {
        (max(r.timestamp for r in records[:500]), 1)}


def test_a_record_longer_or_shorter_than_its_fields_is_corrupt():
    import struct as _struct

    good = bytearray(build_batch([Record(None, b"x" * 100, [], 0)] * 3))
    # first record's length varint (2 bytes, zig-zag) one more than its fields
    length = (good[61] & 0x7F) | (good[62] << 7)
    good[61] = ((length + 2) & 0x7F) | 0x80
    body = bytes(good[21:])
    _struct.pack_into(">I", good, 17, crc32c.crc32c(body))
    with pytest.raises(CorruptRecordBatch):
        decode_chunk("t", 0, bytes(good), 0)


# The compiled record loop (consumer_records_c, built when a C compiler is at hand) against
# the pure-Python one: identical messages and identical errors, whatever the bytes.

def test_the_compiled_record_loop_is_built():
    # The install builds it (setup.py, scripts/bootstrap.sh); the tests below compare it with
    # the pure-Python loop, so a build that silently left it out must fail here, not skip.
    if sys.version_info >= (3, 14):  # left out there by setup.py (it says why)
        assert not consumer_records.COMPILED
        return
    assert consumer_records.COMPILED, (
        "the compiled record loop (consumer_client/consumer_records_c.pyx) is not built: run "
        "scripts/bootstrap.sh, or .venv/bin/python setup.py build_ext --inplace")


def _outcome(data: bytes, fetch_offset: int, compiled_loop: object) -> tuple:
    try:
        return ("ok", consumer_records._decode("t", 1, data, fetch_offset, False, 1 << 24,
                                               compiled_loop))
    except CorruptRecordBatch as e:
        return ("error", type(e), str(e))


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
@pytest.mark.parametrize("timestamp_type", [0, 1])
def test_the_compiled_loop_decodes_every_record_shape_as_the_python_one(seed, codec,
                                                                      timestamp_type):
    records = varied(9000, seed) + [Record(b"", b"", [("\u00e9t\u00e9", None)] * 3, 0)]
    # the last batch: a timestamp delta of 10 bytes, which the compiled loop declines
    odd = [Record(None, b"x", [], 0), Record(None, b"y", [], 2 ** 62)]
    data = (build_batch(records, base_offset=5000, compression=codec,
                        timestamp_type=timestamp_type)
            + build_batch(records[:300], base_offset=14001) + build_batch(odd, base_offset=14301))
    for start in (0, 5000, 13001, 14001, 14150, 14302, 99999):
        got = _outcome(data, start, consumer_records._compiled_records)
        assert got == _outcome(data, start, None)
    assert got == ("ok", [])


def test_the_compiled_loop_leaves_offsets_beyond_64_bits_to_the_python_one():
    # base offset + delta past 2**63 - 1, and fetch offset - base offset below -2**63
    data = build_batch(RECORDS[:5], base_offset=2 ** 63 - 3)
    for start in (0, 2 ** 63 - 1, -(2 ** 63)):
        got = _outcome(data, start, consumer_records._compiled_records)
        assert got == _outcome(data, start, None)
    assert [m.offset for m in got[1]] == [2 ** 63 - 3 + i for i in range(5)]


def test_the_compiled_loop_fails_as_the_python_one_on_any_corruption():
    import random

    rng = random.Random(7)
    good = build_batch(varied(40, 3), base_offset=10)
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.choice([1, 1, 2, 5])):
            i = rng.randrange(61, len(data))  # record data: the CRC check is off
            data[i] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        if rng.random() < 0.2:
            data = data[:61] + data[61:][:rng.randrange(len(data) - 61)]
            struct.pack_into(">i", data, 8, len(data) - 12)  # a consistent batch length
        data = bytes(data)
        assert (_outcome(data, 12, consumer_records._compiled_records)
                == _outcome(data, 12, None))


def test_the_python_loop_alone_decodes_every_record_shape():
    # what an install without a C compiler runs
    records = varied(3000, 5)
    data = build_batch(records, base_offset=0)
    assert _outcome(data, 0, None) == ("ok", decode_chunk("t", 1, data, 0))
