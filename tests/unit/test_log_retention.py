"""Retention by time and size, bounded by the high watermark; truncation."""

from __future__ import annotations

import pytest

from broker_core.log import Log, LogConfig, OffsetOutOfRange
from broker_core.wire.records import Record, build_batch, decode_records
from tests.support.manual_time import ManualTime

HOUR = 3_600_000


def batch(n: int = 1, *, ts: int) -> bytes:
    return build_batch([Record(None, b"v" * 30, [], ts) for _ in range(n)])


def filled_log(tmp_path, time, *, segments: int, per_segment: int = 3, **cfg) -> Log:
    one = len(batch(ts=0))
    log = Log.open(tmp_path / "events-0",
                   LogConfig(segment_bytes=per_segment * one, **cfg), time_ms=time)
    for _ in range(segments * per_segment):
        log.append_as_leader(batch(ts=time.now), 1)
        time.now += 1_000
    assert len(log.segments) == segments
    return log


def test_retention_by_time_deletes_old_segments_only(tmp_path):
    time = ManualTime()
    t0 = time.now
    log = filled_log(tmp_path, time, segments=4, retention_ms=HOUR)
    log.high_watermark = log.log_end_offset
    assert log.delete_old_segments() == 0
    # the segments' newest timestamps are t0+2s, t0+5s, t0+8s, t0+11s
    time.now = t0 + 8_000 + HOUR  # the first two are past retention, the third just not
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [6, 9]
    assert log.log_start_offset == 6
    assert sorted(p.name for p in log.directory.glob("*.log")) == [
        f"{6:020d}.log", f"{9:020d}.log"]
    with pytest.raises(OffsetOutOfRange):
        log.read(5, 100)
    assert decode_records(log.read(6, 100).records)[0].offset == 6


def test_retention_by_size(tmp_path):
    time = ManualTime()
    log = filled_log(tmp_path, time, segments=5, retention_bytes=0, retention_ms=-1)
    one_segment = log.segments[0].size
    log.update_config(LogConfig(segment_bytes=log.config.segment_bytes,
                                retention_bytes=2 * one_segment + 1, retention_ms=-1))
    log.high_watermark = log.log_end_offset
    # keep the newest segments while the log stays >= retention.bytes without the deleted ones
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [6, 9, 12]
    assert log.size_bytes >= 2 * one_segment + 1


def test_retention_never_passes_the_high_watermark(tmp_path):
    time = ManualTime()
    log = filled_log(tmp_path, time, segments=4, retention_ms=HOUR)
    time.now += 10 * HOUR  # everything is expired
    log.high_watermark = 5  # but only offsets < 5 are committed
    assert log.delete_old_segments() == 1  # segment [0,3) ; [3,6) holds offset 5
    assert log.log_start_offset == 3
    log.high_watermark = 6
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 6


def test_expired_active_segment_is_rolled_then_deleted(tmp_path):
    time = ManualTime()
    log = filled_log(tmp_path, time, segments=2, retention_ms=HOUR)
    log.high_watermark = log.log_end_offset
    time.now += 2 * HOUR
    assert log.delete_old_segments() == 2
    assert [(s.base_offset, s.size) for s in log.segments] == [(6, 0)]
    assert (log.log_start_offset, log.log_end_offset) == (6, 6)
    assert log.append_as_leader(batch(ts=time.now), 1).first_offset == 6


def test_retention_trims_the_epoch_file_from_the_start(tmp_path):
    time = ManualTime()
    one = len(batch(ts=0))
    log = Log.open(tmp_path / "e-0", LogConfig(segment_bytes=3 * one, retention_ms=HOUR),
                   time_ms=time)
    for epoch in (1, 1, 2, 2, 3, 3, 3, 4, 4):  # offsets 0..8 in segments [0,3) [3,6) [6,9)
        log.append_as_leader(batch(ts=time.now), epoch)
    assert log.leader_epochs.entries == [(1, 0), (2, 2), (3, 4), (4, 7)]
    log.high_watermark = log.log_end_offset
    time.now += 2 * HOUR
    log.update_config(LogConfig(segment_bytes=3 * one, retention_ms=-1, retention_bytes=0))
    assert log.delete_old_segments() >= 1
    start = log.log_start_offset
    assert start in (3, 6, 9)
    entries = log.leader_epochs.entries
    assert entries[0].start_offset == start
    assert all(e.start_offset >= start for e in entries)


def test_truncate_to_drops_whole_batches_and_segments(tmp_path):
    time = ManualTime()
    log = filled_log(tmp_path, time, segments=4)  # batches of 1, offsets 0..11
    log.high_watermark = 11
    log.truncate_to(7)
    assert log.log_end_offset == 7
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert log.high_watermark == 7
    assert [r.offset for r in decode_records(log.read(0, 1 << 20).records)] == list(range(7))
    assert log.append_as_leader(batch(ts=time.now), 1).first_offset == 7
    log.truncate_to(6)  # exactly a segment base: that segment goes
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert log.log_end_offset == 6
    log.truncate_to(0)  # the first segment is emptied, never removed
    assert [(s.base_offset, s.size) for s in log.segments] == [(0, 0)]
    assert log.log_end_offset == 0


def test_truncate_inside_a_batch_drops_the_batch(tmp_path):
    time = ManualTime()
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=time)
    log.append_as_leader(batch(3, ts=1), 1)  # 0..2
    log.append_as_leader(batch(4, ts=1), 1)  # 3..6
    log.truncate_to(5)
    assert log.log_end_offset == 3
    log.truncate_to(10)  # past the end: nothing happens
    assert log.log_end_offset == 3


def test_truncate_fully_and_start_at(tmp_path):
    time = ManualTime()
    log = filled_log(tmp_path, time, segments=3)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.leader_epochs.entries == []
    assert [p.name for p in log.directory.glob("*.log")] == [f"{100:020d}.log"]
    assert log.append_as_leader(batch(ts=time.now), 2).first_offset == 100
    assert log.leader_epochs.entries == [(2, 100)]
    # below the log start, truncate_to starts over there (as Kafka does)
    log.truncate_to(40)
    assert (log.log_start_offset, log.log_end_offset) == (40, 40)
