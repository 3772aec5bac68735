"""The client decoder core (broker_core.wire.record_batches) and the one batch encoder
(broker_core.wire.record_encoding): the batch walk's good and hostile cases, the varint
primitives, sealing, and the three record decoders agreeing on the same random chunks."""

from __future__ import annotations

import random

import crc32c
import pytest

from broker_core.wire.compression import DecompressedTooLarge
from broker_core.wire.primitives import read_varint, zigzag_bytes
from broker_core.wire.record_batches import (
    ZIGZAG1,
    ZIGZAG2,
    fetched_batches,
    read_record_varint,
    scan_chunk,
)
from broker_core.wire.record_encoding import encode_record, seal_batch
from broker_core.wire.records import (
    BATCH_HEADER,
    CRC_START,
    TIMESTAMP_LOG_APPEND_TIME,
    Compression,
    CorruptRecordBatch,
    Record,
    UnsupportedMagic,
    build_batch,
    decode_batch,
    decode_records,
    parse_batch,
)
from consumer_client.consumer_records import decode_chunk
from tests.support.record_samples import varied

FIELDS = ("base_offset", "length", "epoch", "magic", "crc", "attributes", "last_delta",
          "base_ts", "max_ts", "producer_id", "producer_epoch", "base_sequence", "count")


def restamp(batch: bytes, *, fix_crc: bool = True, **changes: int) -> bytes:
    """``batch`` with header fields changed and, unless told not to, the CRC recomputed."""
    fields = dict(zip(FIELDS, BATCH_HEADER.unpack_from(batch), strict=True))
    fields.update(changes)
    out = bytearray(batch)
    BATCH_HEADER.pack_into(out, 0, *fields.values())
    if fix_crc:
        crc = crc32c.crc32c(bytes(out[CRC_START:]))
        fields["crc"] = crc
        BATCH_HEADER.pack_into(out, 0, *fields.values())
    return bytes(out)


def recs(n: int, ts: int = 1_000) -> list[Record]:
    return [Record(None, b"v%d" % i, [], ts + i) for i in range(n)]


def chunk(*batches: bytes) -> bytes:
    return b"".join(batches)


# -- the walk --------------------------------------------------------------------------------


def test_walk_yields_each_batch_with_what_a_record_decoder_needs():
    a = build_batch(recs(3), base_offset=10)
    b = build_batch(recs(2, ts=5_000), base_offset=13, compression=Compression.GZIP,
                    timestamp_type=TIMESTAMP_LOG_APPEND_TIME)
    got = list(fetched_batches(chunk(a, b), 0))
    assert [(g.base_offset, g.count, g.base_timestamp, g.append_timestamp) for g in got] == [
        (10, 3, 1_000, None), (13, 2, 5_000, 5_001)]
    assert bytes(got[0].records) == a[61:]
    # The compressed batch comes out decompressed: what the encoder put in.
    assert bytes(got[1].records) == b"".join(
        encode_record(i, i, None, b"v%d" % i, None) for i in range(2))


def test_walk_skips_control_batches_and_batches_outside_the_offset_range():
    before = build_batch(recs(2), base_offset=0)
    control = build_batch(recs(1), base_offset=2, control=True)
    inside = build_batch(recs(2), base_offset=3)
    after = build_batch(recs(2), base_offset=5)
    data = chunk(before, control, inside, after)
    assert [g.base_offset for g in fetched_batches(data, 2)] == [3, 5]
    assert [g.base_offset for g in fetched_batches(data, 1)] == [0, 3, 5]
    assert [g.base_offset for g in fetched_batches(data, 2, end_offset=5)] == [3]


def test_a_trailing_partial_batch_ends_the_walk_and_the_scan():
    a = build_batch(recs(3), base_offset=0)
    b = build_batch(recs(3), base_offset=3)
    for cut in (1, 11, 12, 60, 61, len(b) - 1):
        data = chunk(a, b[:cut])
        assert [g.base_offset for g in fetched_batches(data, 0)] == [0]
        assert scan_chunk(data, 0) == (3, len(a))
    assert scan_chunk(chunk(a, b), 0) == (6, len(a) + len(b))
    assert scan_chunk(b"", 7) == (7, 0)


def test_a_bad_crc_is_refused_unless_crcs_are_not_checked():
    bad = restamp(build_batch(recs(2)), fix_crc=False, crc=1234)
    with pytest.raises(CorruptRecordBatch, match="CRC mismatch in the batch at offset 0 of t-0"):
        list(fetched_batches(bad, 0, where=" of t-0"))
    assert [g.count for g in fetched_batches(bad, 0, check_crcs=False)] == [2]


def test_a_wrong_magic_is_refused():
    with pytest.raises(UnsupportedMagic, match="magic 1"):
        list(fetched_batches(restamp(build_batch(recs(1)), magic=1), 0))


@pytest.mark.parametrize("length", [-12, -100, 0, 48])
def test_a_length_shorter_than_a_header_is_refused_and_never_stalls_the_walk(length):
    # A hostile length: the walk must neither stand still on it nor step backwards.
    bad = restamp(build_batch(recs(1)), length=length)
    with pytest.raises(CorruptRecordBatch, match="smaller than a batch header"):
        list(fetched_batches(bad, 0, check_crcs=False))
    with pytest.raises(CorruptRecordBatch, match="smaller than a batch header"):
        scan_chunk(bad, 0)
    # After complete batches, the scan hands those on and stops at the bad one.
    good = build_batch(recs(2))
    assert scan_chunk(good + bad, 0) == (2, len(good))


def test_an_unknown_codec_is_a_corrupt_batch_not_a_value_error():
    bad = restamp(build_batch(recs(1)), attributes=5)
    with pytest.raises(CorruptRecordBatch, match="unknown compression codec 5"):
        list(fetched_batches(bad, 0))


def test_decompression_is_bounded():
    bomb = build_batch([Record(None, bytes(200_000))], compression=Compression.ZSTD)
    assert len(bomb) < 1_000
    with pytest.raises(DecompressedTooLarge):
        list(fetched_batches(bomb, 0, max_decompressed_bytes=100_000))
    assert len(next(fetched_batches(bomb, 0, max_decompressed_bytes=300_000)).records) > 200_000


def test_an_undecompressable_payload_names_its_batch():
    good = build_batch(recs(2), compression=Compression.LZ4)
    bad = bytearray(good)
    bad[61:] = bytes(len(bad) - 61)
    with pytest.raises(CorruptRecordBatch, match="the batch at offset 0 of t-3"):
        list(fetched_batches(restamp(bytes(bad)), 0, where=" of t-3"))


def test_every_decoder_refuses_a_record_that_overruns_its_batch():
    from consumer_client.spark.arrow_records import decode_record_batch

    batch = bytearray(build_batch([Record(None, b"x" * 10)]))
    batch[61] = 0x7E  # the record's length: 63, past the end of the batch
    data = restamp(bytes(batch))
    with pytest.raises(CorruptRecordBatch):
        decode_chunk("t", 0, data, 0)
    with pytest.raises(CorruptRecordBatch):
        decode_record_batch("t", 0, data, 0, 1 << 62)
    with pytest.raises(CorruptRecordBatch):
        decode_records(data)


# -- primitives ------------------------------------------------------------------------------


def test_the_varint_tables_and_reader_agree_with_the_codec():
    rng = random.Random(3)
    values = list(range(-200, 9000)) + [rng.randrange(-(1 << 63), 1 << 63) for _ in range(500)]
    for v in values:
        raw = zigzag_bytes(v) + b"\x00"
        assert read_record_varint(raw, 0) == read_varint(raw, 0, len(raw)) == (v, len(raw) - 1)
    assert len(ZIGZAG1) == 128 and ZIGZAG1[1] == -1 and ZIGZAG2[0x80 + 128] == 64


# -- the encoder -----------------------------------------------------------------------------


def test_seal_batch_writes_every_header_field_under_a_valid_crc():
    body = b"".join(encode_record(i, i, b"k", b"v", [("h", None)]) for i in range(3))
    data = seal_batch(body, 3, base_timestamp=10, max_timestamp=12, base_offset=40,
                      leader_epoch=7, producer_id=9, producer_epoch=2, base_sequence=5,
                      compression=Compression.SNAPPY, timestamp_type=TIMESTAMP_LOG_APPEND_TIME,
                      control=True)
    info = parse_batch(data)
    assert (info.base_offset, info.last_offset_delta, info.record_count, info.base_timestamp,
            info.max_timestamp, info.partition_leader_epoch, info.producer_id,
            info.producer_epoch, info.base_sequence, info.compression, info.timestamp_type,
            info.is_control) == (40, 2, 3, 10, 12, 7, 9, 2, 5, Compression.SNAPPY, 1, True)
    assert [r.offset for r in decode_batch(data)] == [40, 41, 42]
    assert data == build_batch([Record(b"k", b"v", [("h", None)], 10 + i) for i in range(3)],
                               base_offset=40, leader_epoch=7, producer_id=9, producer_epoch=2,
                               base_sequence=5, compression=Compression.SNAPPY,
                               timestamp_type=TIMESTAMP_LOG_APPEND_TIME, control=True)


def test_seal_batch_refuses_what_it_cannot_write():
    with pytest.raises(ValueError):
        seal_batch(b"", 0, base_timestamp=0, max_timestamp=0)
    with pytest.raises(ValueError):
        seal_batch(encode_record(0, 0, None, b"v", None), 1, base_timestamp=0, max_timestamp=0,
                   timestamp_type=2)


# -- the three decoders agree ----------------------------------------------------------------


def random_chunk(rng: random.Random) -> tuple[bytes, list[Record]]:
    """Batches of varied records at consecutive offsets, in every codec and timestamp type,
    with control batches among them; returns the chunk and its data records."""
    out = bytearray()
    expected: list[Record] = []
    offset = rng.randrange(0, 1 << 40)
    for _ in range(rng.randint(1, 6)):
        batch_recs = varied(rng.randint(1, 300), rng.randrange(1 << 30))
        control = rng.random() < 0.15
        append = rng.random() < 0.2
        out += build_batch(batch_recs, base_offset=offset,
                           compression=rng.choice(list(Compression)), control=control,
                           timestamp_type=TIMESTAMP_LOG_APPEND_TIME if append else 0)
        if not control:
            for i, r in enumerate(batch_recs):
                ts = max(x.timestamp for x in batch_recs) if append else r.timestamp
                expected.append(Record(r.key, r.value, list(r.headers), ts, offset + i))
        offset += len(batch_recs)
    return bytes(out), expected


@pytest.mark.parametrize("seed", range(12))
def test_the_three_record_decoders_agree_on_random_chunks(seed):
    from consumer_client.spark.arrow_records import decode_record_batch

    rng = random.Random(seed)
    data, expected = random_chunk(rng)
    if expected and rng.random() < 0.7:
        fetch = expected[rng.randrange(len(expected))].offset
    else:
        fetch = 0
    tail = build_batch(recs(5), base_offset=1 << 50)
    cut = rng.choice([0, 0, rng.randint(1, len(tail) - 1)])  # a trailing partial batch
    data += tail[:cut]
    want = [(r.offset, r.key, r.value, r.timestamp, tuple(r.headers)) for r in expected
            if r.offset >= fetch]

    strict = [(r.offset, r.key, r.value, r.timestamp, tuple(r.headers))
              for r in decode_records(data) if r.offset >= fetch]
    rows = [(m.offset, m.key, m.value, m.timestamp, m.headers)
            for m in decode_chunk("t", 0, data, fetch)]
    table = decode_record_batch("t", 0, data, fetch, 1 << 62, include_headers=True)
    cols = [] if table is None else [
        (row["offset"], row["key"], row["value"],
         int(row["timestamp"].timestamp() * 1000 + 0.5),
         tuple((h["key"], h["value"]) for h in row["headers"]))
        for row in table.to_pylist()]
    assert strict == want
    assert rows == want
    assert cols == want
