"""The log validator (broker_core.log.validator) and the leader's append path: every record of a
produced batch is parsed; a batch with a valid CRC but garbage records, a record count that
lies, out-of-order offset deltas, a wrong maxTimestamp or a compression bomb is refused with
the right error, naming the record, and the log does not change."""

from __future__ import annotations

import random

import pytest

from broker_core.log.config import LogConfig
from broker_core.log.log import Log
from broker_core.log.validator import InvalidRecords, validate_batch, validate_records
from broker_core.wire.compression import DecompressedTooLarge
from broker_core.wire.records import (
    HEADER_SIZE,
    TIMESTAMP_LOG_APPEND_TIME,
    Compression,
    CorruptRecordBatch,
    InvalidRecordBatch,
    Record,
    build_batch,
    decode_batch,
    iter_batches,
    parse_batch,
)
from tests.support import bad_batches as bb
from tests.support.memory import peak_rss_mib, reset_peak_rss_mib

MiB = 1 << 20


def check(data: bytes, max_bytes: int = MiB) -> None:
    validate_records(data, list(iter_batches(data)), max_decompressed_bytes=max_bytes)


def refused(data: bytes, max_bytes: int = MiB) -> InvalidRecordBatch:
    with pytest.raises(InvalidRecordBatch) as e:
        check(data, max_bytes)
    return e.value



# -- what is accepted ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("n", [1, 63, 64, 65, 200, 8191, 8193, 10000])
def test_well_formed_batches_of_every_codec_and_size_pass(codec, n):
    # Sizes cross the offset delta's varint lengths (1 byte to 63, 2 to 8191, 3 beyond).
    recs = [Record(None, b"x" * 100, [], 1_700_000_000_000 + (i * 7) % 40) for i in range(n)]
    check(build_batch(recs, compression=codec), max_bytes=8 * MiB)


def test_records_of_every_shape_pass():
    rnd = random.Random(7)
    recs = []
    for i in range(3000):
        key = None if rnd.random() < 0.5 else bytes(rnd.randrange(300))
        value = None if rnd.random() < 0.05 else bytes(rnd.randrange(20000 if i % 100 == 0
                                                                    else 300))
        headers = [(f"h{j}", None if j == 1 else b"v" * j) for j in range(rnd.randrange(4))]
        recs.append(Record(key, value, headers, 1_000_000 + rnd.randrange(-5000, 5000)))
    for codec in Compression:
        check(build_batch(recs, compression=codec), max_bytes=32 * MiB)


@pytest.mark.parametrize("spread", [(0, 60), (-60, 0), (0, 8000), (-8000, 8000), (100, 8100),
                                    (-70, -65), (0, 100_000)])
def test_the_largest_timestamp_is_found_in_runs_of_any_spread(spread):
    # Runs of same-shaped records take their largest timestamp delta from byte slices
    # (one- and two-byte deltas): it must be exact, or the batch's maxTimestamp check fails
    # on good batches or passes bad ones.
    rnd = random.Random(spread[0] * 7 + spread[1])
    base = 1_700_000_000_000
    for trial in range(20):
        first = base + rnd.randrange(*spread) if trial % 2 else base
        stamps = [first] + [base + rnd.randrange(*spread) for _ in range(2999)]
        recs = [Record(None, b"y" * 50, [], t) for t in stamps]
        data = build_batch(recs)
        check(data)
        info = parse_batch(data)
        for wrong in (info.max_timestamp - 1, info.max_timestamp + 1):
            payload = data[HEADER_SIZE:]
            e = refused(bb.batch(payload, len(recs), base_ts=info.base_timestamp, max_ts=wrong))
            assert e.error_code_name == "INVALID_RECORD"


def test_a_log_append_time_batch_is_not_held_to_its_max_timestamp():
    data = bb.batch(bb.record(0, ts_delta=5), 1, max_ts=0, attributes=0x08)
    assert parse_batch(data).timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    check(data)


# -- what is refused ----------------------------------------------------------------------------


def test_an_eleven_byte_varint_is_corrupt():
    garbage = b"\xff" * 11 + b"\x01"
    e = refused(bb.batch(bb.record(0) + garbage, 2))
    assert e.error_code_name == "CORRUPT_MESSAGE"
    assert isinstance(e, InvalidRecords) and e.record_index == 1
    assert "longer than 5 bytes" in str(e)


def test_a_record_count_that_lies_is_corrupt():
    payload = bb.record(0) + bb.record(1) + bb.record(2)
    e = refused(bb.batch(payload, 1_000_000))
    assert e.error_code_name == "CORRUPT_MESSAGE"
    assert e.record_errors == [(3, "the batch ends after 3 of 1000000 declared records (the "
                                   "record count disagrees with the records)")]
    e = refused(bb.batch(payload, 2))  # fewer declared than present
    assert e.error_code_name == "CORRUPT_MESSAGE" and "bytes after the last" in str(e)


def test_offset_deltas_out_of_order_are_invalid():
    e = refused(bb.batch(bb.record(0) + bb.record(2) + bb.record(1), 3))
    assert (e.error_code_name, e.record_index) == ("INVALID_RECORD", 1)
    e = refused(bb.batch(bb.record(0) + bb.record(0), 2))
    assert (e.error_code_name, e.record_index) == ("INVALID_RECORD", 1)


def test_a_wrong_max_timestamp_is_invalid():
    payload = bb.record(0, ts_delta=0) + bb.record(1, ts_delta=9)
    check(bb.batch(payload, 2, base_ts=100, max_ts=109))
    e = refused(bb.batch(payload, 2, base_ts=100, max_ts=100))
    assert e.error_code_name == "INVALID_RECORD" and "maxTimestamp 100" in str(e)


@pytest.mark.parametrize("what, raw, code", [
    ("length overruns the batch", bb.varint(50) + b"\x00" * 10, "CORRUPT_MESSAGE"),
    ("length too small", bb.varint(2) + b"\x00\x00", "CORRUPT_MESSAGE"),
    ("negative length", bb.varint(-3), "CORRUPT_MESSAGE"),
    ("key overruns", bb.varint(7) + b"\x00\x00\x02" + bb.varint(40) + b"\x00\x00\x00",
     "CORRUPT_MESSAGE"),
    ("key length -2", bb.varint(6) + b"\x00\x00\x02" + bb.varint(-2) + b"\x00\x00",
     "CORRUPT_MESSAGE"),
    ("negative header count", bb.varint(6) + b"\x00\x00\x02\x01\x01" + bb.varint(-1),
     "CORRUPT_MESSAGE"),
    ("null header key", bb.varint(8) + b"\x00\x00\x02\x01\x01" + bb.varint(1)
     + bb.varint(-1) + bb.varint(-1), "INVALID_RECORD"),
    ("header key not UTF-8", bb.varint(9) + b"\x00\x00\x02\x01\x01" + bb.varint(1)
     + bb.varint(1) + b"\xff" + bb.varint(-1), "INVALID_RECORD"),
    ("header value overruns", bb.varint(10) + b"\x00\x00\x02\x01\x01" + bb.varint(1)
     + bb.varint(1) + b"k" + bb.varint(30) + b"x", "CORRUPT_MESSAGE"),
    ("fields shorter than the length", bb.varint(8) + b"\x00\x00\x02\x01\x01\x00\x00\x00",
     "CORRUPT_MESSAGE"),
    ("timestamp varint of 11 bytes", bb.varint(16) + b"\x00" + b"\xff" * 11 + b"\x01\x02\x01\x01",
     "CORRUPT_MESSAGE"),
])
def test_each_malformed_record_is_refused_and_named(what, raw, code):
    e = refused(bb.batch(bb.record(0) + raw, 2))
    assert isinstance(e, InvalidRecords), what
    assert (e.error_code_name, e.record_index) == (code, 1), what
    assert str(e).startswith("record 1 of the batch at position 0")


def test_a_bad_record_inside_a_run_of_same_shaped_records_is_found():
    # The fast path checks runs of same-shaped records at once: a change to any structural
    # byte of one record in the middle of a run must still be caught, and the record named.
    n = 5000
    good = build_batch([Record(None, b"x" * 100, [], 1000) for _ in range(n)])
    raw = bytearray(good[HEADER_SIZE:])
    # From offset delta 64 on (a two-byte varint) every record is the same 110 bytes: length
    # (2), attributes, timestamp delta, offset delta (2), key length, value length (2), value
    # (100), header count.
    size = len(bb.record(100, b"x" * 100))
    assert size == 110 and len(raw) == 64 * 109 + (n - 64) * size
    rnd = random.Random(3)
    for victim in (70, 1000, 2500, 4999):
        start = len(raw) - (n - victim) * size
        for at, what in ((0, "length"), (1, "length"), (3, "timestamp"), (4, "offset delta"),
                         (5, "offset delta"), (6, "key length"), (7, "value length"),
                         (8, "value length"), (size - 1, "headers")):
            bad = bytearray(raw)
            bad[start + at] = (bad[start + at] + rnd.randrange(1, 256)) & 0xFF
            if at == 3:
                bad[start + at] |= 0x80  # a timestamp delta that no longer is one byte
            data = bb.batch(bytes(bad), n, base_ts=1000, max_ts=1000)
            with pytest.raises(InvalidRecordBatch) as e:
                check(data)
            assert isinstance(e.value, InvalidRecords), what
            assert e.value.record_index == victim, what


@pytest.mark.parametrize("victim", [5, 100, 250, 499])
@pytest.mark.parametrize("damage", ["offset delta", "length", "null header key",
                                    "header key not UTF-8", "value length"])
def test_a_bad_record_among_records_of_varied_shapes_is_found_and_named(victim, damage):
    # Varied shapes go through the lean per-record loop, which defers anything unusual to the
    # field-by-field parser: the bad record must still be refused and named.
    rnd = random.Random(victim)
    pieces = []
    for i in range(500):
        key = None if i % 3 else b"k%d" % i
        value = bytes(rnd.randrange(200))
        headers = b"\x02" + bb.varint(1) + b"h" + bb.varint(1) + b"v" if i % 7 == 0 else b"\x00"
        if i == victim:
            if damage == "offset delta":
                pieces.append(bb.record(i + 1, value, key=key, headers=headers))
                continue
            if damage == "null header key":
                headers = b"\x02" + bb.varint(-1) + bb.varint(-1)
            elif damage == "header key not UTF-8":
                headers = b"\x02" + bb.varint(1) + b"\xfe" + bb.varint(-1)
            elif damage == "length":
                rec = bb.record(i, value, key=key, headers=headers)
                pieces.append(bb.varint(len(rec) + 5) + rec[len(bb.varint(len(rec) - 1)):])
                continue
            elif damage == "value length":
                body = bb.record(i, value, key=key, headers=headers)
                pieces.append(body.replace(bb.varint(len(value)) + value,
                                           bb.varint(len(value) + 1) + value, 1))
                continue
        pieces.append(bb.record(i, value, key=key, headers=headers))
    e = refused(bb.batch(b"".join(pieces), 500))
    assert isinstance(e, InvalidRecords)
    assert e.record_index == victim, (e, damage)


def test_never_accepts_what_the_reference_decoder_refuses():
    # Random single-byte changes to a batch of varied records: whatever the validator accepts
    # decodes record by record with the reference decoder, with offset deltas 0..n-1.
    rnd = random.Random(11)
    recs = [Record(None if i % 3 else b"k", b"v" * (i % 5 if i % 50 else 130),
                   [("h", b"x")] if i % 17 == 0 else [], 500 + i % 9) for i in range(300)]
    raw = build_batch(recs)[HEADER_SIZE:]
    accepted = 0
    for _ in range(3000):
        bad = bytearray(raw)
        bad[rnd.randrange(len(bad))] = rnd.randrange(256)
        data = bb.batch(bytes(bad), len(recs), base_ts=500, max_ts=508)
        try:
            check(data)
        except InvalidRecordBatch:
            continue
        accepted += 1
        decoded = decode_batch(data)
        assert [r.offset for r in decoded] == list(range(len(recs)))
    assert accepted > 0  # value bytes may change freely


@pytest.mark.parametrize("codec", [Compression.ZSTD, Compression.GZIP, Compression.LZ4,
                                   Compression.SNAPPY])
def test_every_codec_bomb_is_refused_without_holding_its_output(codec):
    data = bb.bomb_batch(codec)
    before = reset_peak_rss_mib()
    e = refused(data)
    assert isinstance(e, DecompressedTooLarge)
    assert e.error_code_name == "MESSAGE_TOO_LARGE"
    assert f"{codec.name} payload decompresses to more than {MiB} bytes" in str(e)
    # The bombs expand to 248 MiB .. 4 GiB; the bound keeps the peak within a few MiB.
    assert peak_rss_mib() - before < 64


def test_an_undecompressable_payload_is_corrupt():
    e = refused(bb.batch(b"\x28\xb5\x2f\xfd garbage", 1, compression=Compression.ZSTD))
    assert type(e) is CorruptRecordBatch and e.error_code_name == "CORRUPT_MESSAGE"


def test_compressed_records_are_validated_too():
    raw = bb.record(0) + bb.record(1) + bb.record(2)
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        from broker_core.wire.compression import compress

        e = refused(bb.batch(compress(codec, raw), 1_000_000, compression=codec))
        assert (e.error_code_name, e.record_index) == ("CORRUPT_MESSAGE", 3)


def test_validate_batch_checks_one_batch_of_a_record_set():
    data = build_batch([Record(None, b"a", [], 1)]) + bb.batch(bb.record(0) + b"\xff" * 11, 2)
    first, second = iter_batches(data)
    validate_batch(data, first, max_decompressed_bytes=MiB)
    with pytest.raises(InvalidRecords, match=f"batch at position {second.position}"):
        validate_batch(data, second, max_decompressed_bytes=MiB)


# -- the leader's append path -------------------------------------------------------------------


@pytest.fixture
def log(tmp_path):
    lg = Log.open(tmp_path / "t-0", LogConfig(), time_ms=lambda: 1000)
    yield lg
    lg.close()


@pytest.mark.parametrize("bad", [
    bb.batch(bb.record(0) + b"\xff" * 11 + b"\x01", 2),
    bb.batch(bb.record(0) + bb.record(1) + bb.record(2), 1_000_000),
    bb.bomb_batch(Compression.ZSTD),
    bb.bomb_batch(Compression.GZIP),
    bb.bomb_batch(Compression.LZ4),
    bb.bomb_batch(Compression.SNAPPY),
], ids=["garbage", "count-lie", "zstd-bomb", "gzip-bomb", "lz4-bomb", "snappy-bomb"])
def test_a_refused_batch_changes_nothing_in_the_log(log, bad):
    log.append_as_leader(build_batch([Record(None, b"good", [], 1)]), 0)
    size = log.size_bytes
    good_after = build_batch([Record(None, b"after", [], 2)])
    with pytest.raises(InvalidRecordBatch):
        # A good batch before the bad one in the same record set is refused with it.
        log.append_as_leader(good_after + bad, 0)
    assert (log.log_end_offset, log.size_bytes) == (1, size)
    assert log.append_as_leader(good_after, 0).first_offset == 1
    got = [r.value for r in decode_batch(log.read(0, 1 << 20).records)]
    assert got == [b"good"]
