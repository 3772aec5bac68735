"""The leader's rewrite of produced batches for the topic's message.timestamp.type and
compression.type (broker_core.log.leader_rewrite), alone and through Log.append_as_leader."""

from __future__ import annotations

import os

import pytest

from broker_core.log import Log, LogConfig
from broker_core.log.leader_rewrite import (
    BatchTooLargeAfterRewrite,
    check_timestamps,
    rewrite_for_topic,
)
from broker_core.log.validator import InvalidRecords
from broker_core.wire.compression import DecompressedTooLarge
from broker_core.wire.records import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Compression,
    Record,
    build_batch,
    decode_records,
    iter_batches,
)
from tests.support.manual_time import ManualTime

TS = 1_700_000_000_000
NOW = 1_800_000_000_000


def records(n: int = 3, size: int = 50) -> list[Record]:
    return [Record(b"k%d" % i, b"v" * size, [("h", b"x")], TS + i) for i in range(n)]


def produced(codec: Compression = Compression.NONE, *, n: int = 3, size: int = 50,
             pid: int = -1, seq: int = -1) -> bytes:
    return build_batch(records(n, size), compression=codec, producer_id=pid, producer_epoch=0
                       if pid >= 0 else -1, base_sequence=seq)


def rewrite(data: bytes, **kw) -> tuple[bytes, list]:
    kw.setdefault("compression_type", "producer")
    kw.setdefault("timestamp_type", "CreateTime")
    kw.setdefault("now_ms", NOW)
    kw.setdefault("max_batch_bytes", 1 << 20)
    return rewrite_for_topic(data, list(iter_batches(data)), **kw)


def test_nothing_to_change_returns_the_same_bytes():
    data = produced(Compression.GZIP)
    out, infos = rewrite(data)
    assert out is data and infos == list(iter_batches(data))
    out, _ = rewrite(data, compression_type="gzip")
    assert out is data


def test_log_append_time_stamps_every_batch_and_keeps_the_records():
    data = produced() + produced(Compression.LZ4, n=2)
    out, infos = rewrite(data, timestamp_type="LogAppendTime")
    assert [i.timestamp_type for i in infos] == [TIMESTAMP_LOG_APPEND_TIME] * 2
    assert [i.max_timestamp for i in infos] == [NOW, NOW]
    assert [i.compression for i in infos] == [Compression.NONE, Compression.LZ4]
    assert len(out) == len(data)  # in place: only attributes, maxTimestamp and CRC change
    got = decode_records(out)
    assert [r.timestamp for r in got] == [NOW] * 5
    assert [r.value for r in got] == [r.value for r in decode_records(data)]


@pytest.mark.parametrize("source", list(Compression))
@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_recompression_to_the_topic_codec(source: Compression, target: str):
    data = produced(source, pid=7, seq=11)
    out, infos = rewrite(data, compression_type=target)
    want = Compression.NONE if target == "uncompressed" else Compression[target.upper()]
    (info,) = infos
    (before,) = iter_batches(data)
    assert info.compression is want
    assert info.timestamp_type == TIMESTAMP_CREATE_TIME
    # The header a producer and a reader rely on is kept.
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.record_count,
            info.base_timestamp, info.max_timestamp) == \
        (7, 0, 11, 3, before.base_timestamp, before.max_timestamp)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in decode_records(out)] == \
        [(r.key, r.value, r.headers, r.timestamp) for r in records()]


def test_recompression_and_log_append_time_together():
    out, (info,) = rewrite(produced(Compression.SNAPPY), compression_type="zstd",
                           timestamp_type="LogAppendTime")
    assert (info.compression, info.timestamp_type, info.max_timestamp) == \
        (Compression.ZSTD, TIMESTAMP_LOG_APPEND_TIME, NOW)
    assert [r.timestamp for r in decode_records(out)] == [NOW] * 3


def incompressible() -> bytes:
    return build_batch([Record(None, os.urandom(4000), [], TS)])


def test_a_batch_the_topic_codec_makes_too_large_is_refused():
    data = incompressible()  # gzip makes random bytes a little larger
    with pytest.raises(BatchTooLargeAfterRewrite,
                       match=f"max.message.bytes is {len(data)}"):
        rewrite(data, compression_type="gzip", max_batch_bytes=len(data))


def test_each_batch_has_its_own_decompression_bound():
    """Every batch decompresses within max.message.bytes, as the validator checks; the set is
    not given a shared budget (acceptance must not depend on the topic's codec)."""
    one = produced(Compression.ZSTD, n=1, size=40_000)
    out, infos = rewrite(one * 40, compression_type="gzip", max_batch_bytes=100_000)
    assert [i.compression for i in infos] == [Compression.GZIP] * 40
    assert [r.value for r in decode_records(out)] == [b"v" * 40_000] * 40
    # A batch above the bound is still refused, wherever it lies in the set.
    bomb = produced(Compression.ZSTD, n=1, size=200_000)
    with pytest.raises(DecompressedTooLarge):
        rewrite(one + bomb, compression_type="gzip", max_batch_bytes=100_000)


def test_acceptance_does_not_depend_on_the_topic_codec(tmp_path):
    """Two small gzip batches that each decompress to ~600 KB, with the default
    max.message.bytes: stored under compression.type=producer, so under lz4 too."""
    one = build_batch([Record(None, bytes(600_000), [], TS)], compression=Compression.GZIP)
    data = one + one
    assert len(data) < 4_000
    for codec in ("producer", "lz4", "gzip", "snappy", "zstd"):
        log = Log.open(tmp_path / f"{codec}-0", LogConfig(compression_type=codec), time_ms=ManualTime())
        result = log.append_as_leader(data, 0)
        assert (result.first_offset, result.last_offset) == (0, 1)
        stored = log.read(0, 4 << 20).records
        assert [r.value for r in decode_records(stored)] == [bytes(600_000)] * 2
        log.close()


def test_a_rewritten_set_is_bounded_by_its_size_plus_max_message_bytes():
    """Many tiny bombs, each within max.message.bytes, stored uncompressed would make a set
    thousands of times the request: refused; a set within the bound passes."""
    one = produced(Compression.ZSTD, n=1, size=40_000)
    data = one * 40
    assert len(data) < 40 * 200
    with pytest.raises(BatchTooLargeAfterRewrite, match="once stored with compression.type=uncompressed"):
        rewrite(data, compression_type="uncompressed", max_batch_bytes=100_000)
    out, infos = rewrite(one * 2, compression_type="uncompressed", max_batch_bytes=100_000)
    assert [i.compression for i in infos] == [Compression.NONE] * 2


def test_log_append_applies_the_topic_settings(tmp_path):
    time = ManualTime()
    log = Log.open(tmp_path / "t-0", LogConfig(compression_type="lz4",
                                                message_timestamp_type="LogAppendTime"),
                   time_ms=time)
    result = log.append_as_leader(produced(Compression.GZIP), 0)
    assert result.max_timestamp == time()
    stored = log.read(0, 1 << 20).records
    (info,) = iter_batches(stored)
    assert (info.compression, info.timestamp_type) == (Compression.LZ4,
                                                       TIMESTAMP_LOG_APPEND_TIME)
    assert [r.offset for r in decode_records(stored)] == [0, 1, 2]
    # A live change applies from the next append.
    log.update_config(LogConfig())
    log.append_as_leader(produced(Compression.GZIP), 0)
    (_, second) = iter_batches(log.read(0, 1 << 20).records)
    assert (second.compression, second.timestamp_type) == (Compression.GZIP,
                                                           TIMESTAMP_CREATE_TIME)


def test_refused_rewrite_appends_nothing(tmp_path):
    data = incompressible()
    log = Log.open(tmp_path / "t-0", LogConfig(compression_type="gzip",
                                                max_message_bytes=len(data)),
                   time_ms=ManualTime())
    with pytest.raises(BatchTooLargeAfterRewrite):
        log.append_as_leader(data, 0)
    assert log.log_end_offset == 0 and log.size_bytes == 0


# -- message.timestamp.difference.max.ms ---------------------------------------------------------


def stamped_batch(*timestamps: int, codec: Compression = Compression.NONE) -> bytes:
    return build_batch([Record(None, b"v", [], ts) for ts in timestamps], compression=codec)


def check(data: bytes, **kw) -> None:
    kw.setdefault("timestamp_type", "CreateTime")
    kw.setdefault("now_ms", NOW)
    kw.setdefault("max_batch_bytes", 1 << 20)
    check_timestamps(data, list(iter_batches(data)), **kw)


def test_timestamps_within_the_bound_pass_and_the_first_beyond_it_is_named():
    ok = stamped_batch(NOW - 1000, NOW + 1000)
    check(ok, max_difference_ms=1000)
    bad = ok + stamped_batch(NOW, NOW - 500, NOW + 1001, codec=Compression.SNAPPY)
    with pytest.raises(InvalidRecords) as info:
        check(bad, max_difference_ms=1000)
    assert info.value.error_code_name == "INVALID_TIMESTAMP"
    assert info.value.record_errors == [(2, "timestamp 1800000001001 is 1001 ms after the "
                                            "leader's clock; message.timestamp.difference.max.ms "
                                            "is 1000")]


def test_no_check_without_a_bound_with_log_append_time_or_for_a_record_without_timestamp():
    far = stamped_batch(1000)
    check(far, max_difference_ms=(1 << 63) - 1)
    check(far, max_difference_ms=0, timestamp_type="LogAppendTime")
    check(stamped_batch(-1), max_difference_ms=0)


def test_log_refuses_a_batch_too_far_from_its_clock_and_appends_nothing(tmp_path):
    time = ManualTime(NOW)
    log = Log.open(tmp_path / "t-0", LogConfig(message_timestamp_difference_max_ms=60_000),
                   time_ms=time)
    with pytest.raises(InvalidRecords):
        log.append_as_leader(stamped_batch(NOW - 60_001), 0)
    assert log.log_end_offset == 0
    assert log.append_as_leader(stamped_batch(NOW - 60_000), 0).record_count == 1
