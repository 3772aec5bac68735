"""Log append and read: offsets, indexes across many segments, rolling, HW-bounded reads,
KIP-74, timestamps, follower appends, reopening."""

from __future__ import annotations

import os
import struct
from itertools import pairwise

import pytest

from broker_core.log import (
    Log,
    LogConfig,
    OffsetOutOfRange,
    RecordTooLarge,
    UnexpectedAppendOffset,
)
from broker_core.log import segment as segment_module
from broker_core.wire.records import (
    CorruptRecordBatch,
    Record,
    build_batch,
    decode_records,
    iter_batches,
)
from tests.support.manual_time import ManualTime


def batch(n: int = 1, *, ts: int = 1_700_000_000_000, size: int = 20, tag: int = 0) -> bytes:
    return build_batch([Record(b"k", bytes([tag % 256]) * size, [], ts + i) for i in range(n)])


def open_log(tmp_path, time=None, *, name="orders-0", **cfg) -> Log:
    return Log.open(tmp_path / name, LogConfig(**cfg), time_ms=time or ManualTime())


def offsets(data: bytes) -> list[int]:
    return [r.offset for r in decode_records(data)]


def test_append_assigns_offsets_and_read_returns_them(tmp_path):
    log = open_log(tmp_path)
    r1 = log.append_as_leader(batch(3), 0)
    r2 = log.append_as_leader(batch(2) + batch(4), 0)
    assert (r1.first_offset, r1.last_offset, r1.record_count, r1.batch_count) == (0, 2, 3, 1)
    assert (r2.first_offset, r2.last_offset, r2.record_count, r2.batch_count) == (3, 8, 6, 2)
    assert log.log_end_offset == 9 and log.size_bytes == r1.size + r2.size
    assert offsets(log.read(0, 1 << 20).records) == list(range(9))
    res = log.read(4, 1 << 20)
    assert offsets(res.records) == list(range(3, 9))  # whole batch holding offset 4
    assert (res.log_start_offset, res.log_end_offset) == (0, 9)


def test_topic_with_dashes_and_partition_parse_from_the_directory(tmp_path):
    log = open_log(tmp_path, name="my-dashed-topic-12")
    assert (log.topic, log.partition) == ("my-dashed-topic", 12)
    with pytest.raises(ValueError, match="not a partition directory"):
        Log.open(tmp_path / "no_partition", LogConfig(), time_ms=ManualTime())


def test_reads_at_every_offset_across_many_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes=1_000, index_interval_bytes=150)
    for i in range(300):
        log.append_as_leader(batch(1 + i % 3, tag=i), 1)
    assert len(log.segments) > 20
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases)
    assert all(a.next_offset == b.base_offset for a, b in pairwise(log.segments))
    for offset in range(log.log_end_offset):
        data = log.read(offset, 1).records  # min_one: exactly the batch holding `offset`
        infos = list(iter_batches(data))
        assert len(infos) == 1 and infos[0].base_offset <= offset <= infos[0].last_offset


def test_offset_index_has_an_entry_every_interval(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=500)
    for _ in range(100):
        log.append_as_leader(batch(1, size=50), 0)
    seg = log.active
    log.flush()  # the active segment's index file gets its entries at a flush
    raw = seg.index_path.read_bytes()
    entries = list(struct.iter_unpack(">ii", raw))
    assert entries[0] == (0, 0)
    one = len(batch(1, size=50))
    gaps = [b[1] - a[1] for a, b in pairwise(entries)]
    assert gaps and all(500 <= gap <= 500 + one for gap in gaps)
    # each entry points at the start of the batch with that (relative) offset
    data = seg.log_path.read_bytes()
    for rel, pos in entries:
        assert struct.unpack_from(">q", data, pos)[0] == rel


def test_read_touches_the_file_once_per_segment(tmp_path, monkeypatch):
    log = open_log(tmp_path, segment_bytes=20_000, index_interval_bytes=1_000)
    for i in range(500):
        log.append_as_leader(batch(2, tag=i), 0)
    calls = []
    real = os.pread

    def counting(fd, n, pos):
        calls.append((fd, n, pos))
        return real(fd, n, pos)

    monkeypatch.setattr(segment_module.os, "pread", counting)
    res = log.read(555, 3_000)
    assert len(calls) == 1
    assert offsets(res.records)[0] == 554 and len(res.records) <= 3_000
    calls.clear()
    res = log.read(10, 60_000)  # spans segments
    assert len(calls) == len({fd for fd, _, _ in calls})
    assert len(calls) >= 2
    got = offsets(res.records)
    assert got == list(range(10, 10 + len(got)))


def test_read_limits_and_kip74_min_one(tmp_path):
    log = open_log(tmp_path)
    big = batch(5, size=1_000)
    log.append_as_leader(big, 0)
    log.append_as_leader(batch(1), 0)
    assert offsets(log.read(0, 100).records) == [0, 1, 2, 3, 4]  # one whole batch > max_bytes
    assert log.read(0, 100, min_one=False).records == b""
    assert log.read(0, 0).records == log.read(0, 1).records
    assert offsets(log.read(0, len(big) + 10).records) == [0, 1, 2, 3, 4]
    assert offsets(log.read(0, 1 << 20).records) == [0, 1, 2, 3, 4, 5]


def test_read_stops_before_the_high_watermark(tmp_path):
    log = open_log(tmp_path)
    for _ in range(5):
        log.append_as_leader(batch(2), 0)  # batches [0,1] [2,3] ... [8,9]
    assert offsets(log.read(0, 1 << 20, max_offset=6).records) == [0, 1, 2, 3, 4, 5]
    assert offsets(log.read(0, 1 << 20, max_offset=5).records) == [0, 1, 2, 3]
    assert log.read(6, 1 << 20, max_offset=6).records == b""
    assert log.read(4, 1 << 20, max_offset=5).records == b""  # batch [4,5] reaches the HW


def test_out_of_range_and_end_offset(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(3), 0)
    assert log.read(3, 100).records == b""
    with pytest.raises(OffsetOutOfRange) as e:
        log.read(4, 100)
    assert (e.value.offset, e.value.log_start_offset, e.value.log_end_offset) == (4, 0, 3)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)


def test_high_watermark_is_clamped(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(3), 0)
    log.high_watermark = 10
    assert log.high_watermark == 3
    log.high_watermark = -5
    assert log.high_watermark == 0


def test_roll_by_size(tmp_path):
    one = len(batch(1))
    log = open_log(tmp_path, segment_bytes=3 * one)
    for _ in range(7):
        log.append_as_leader(batch(1), 0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert [s.size for s in log.segments] == [3 * one, 3 * one, one]
    assert sorted(p.name for p in log.directory.glob("*.log")) == [
        f"{b:020d}.log" for b in (0, 3, 6)]


def test_oversized_append_goes_into_an_empty_segment(tmp_path):
    log = open_log(tmp_path, segment_bytes=100)
    log.append_as_leader(batch(1, size=500), 0)
    log.append_as_leader(batch(1, size=500), 0)
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_roll_by_time_with_injected_time(tmp_path):
    time = ManualTime()
    log = open_log(tmp_path, time, segment_ms=60_000)
    assert not log.maybe_roll()  # empty segments never roll
    log.append_as_leader(batch(1), 0)
    time.now += 59_999
    assert not log.maybe_roll()
    log.append_as_leader(batch(1), 0)
    assert len(log.segments) == 1
    time.now += 1
    assert log.maybe_roll()
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert not log.maybe_roll()
    time.now += 60_000
    log.append_as_leader(batch(1), 0)  # the segment is empty: the append does not roll it
    time.now += 60_000
    log.append_as_leader(batch(1), 0)  # now it is old and non-empty: roll first
    assert [s.base_offset for s in log.segments] == [0, 2, 3]


def test_roll_when_the_index_is_full(tmp_path):
    log = open_log(tmp_path, index_interval_bytes=0, segment_index_bytes=8 * 4)
    for _ in range(10):
        log.append_as_leader(batch(1), 0)
    assert [s.base_offset for s in log.segments] == [0, 4, 8]


def test_record_too_large(tmp_path):
    log = open_log(tmp_path, max_message_bytes=500)
    with pytest.raises(RecordTooLarge) as e:
        log.append_as_leader(batch(1) + batch(1, size=600), 0)
    assert e.value.limit == 500 and e.value.error_code_name == "MESSAGE_TOO_LARGE"
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_corrupt_produce_appends_nothing(tmp_path):
    log = open_log(tmp_path)
    bad = bytearray(batch(2))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordBatch):
        log.append_as_leader(batch(1) + bytes(bad), 0)
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path, segment_bytes=600, index_interval_bytes=100)
    for i in range(40):
        log.append_as_leader(batch(3, ts=10_000 + 10 * i), 0)  # record j of batch i: ts+j
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(0) == (0, 10_000)
    assert log.offset_for_timestamp(10_001) == (1, 10_001)
    assert log.offset_for_timestamp(10_003) == (3, 10_010)  # first record at/after the time
    assert log.offset_for_timestamp(10_251) == (76, 10_251)
    assert log.offset_for_timestamp(10_392) == (119, 10_392)
    assert log.offset_for_timestamp(10_393) is None
    assert log.offset_for_max_timestamp() == (119, 10_392)


def test_follower_append_keeps_offsets_and_epochs(tmp_path):
    leader = open_log(tmp_path, name="t-0")
    leader.append_as_leader(batch(2), 3)
    leader.append_as_leader(batch(3), 5)
    data = leader.read(0, 1 << 20).records
    follower = open_log(tmp_path, name="t-1")
    partial = batch(4)[:30]
    result = follower.append_as_follower(data + partial)  # a trailing partial batch is ignored
    assert (result.first_offset, result.last_offset, result.batch_count) == (0, 4, 2)
    assert follower.read(0, 1 << 20).records == data
    assert follower.leader_epochs.entries == [(3, 0), (5, 2)]
    with pytest.raises(UnexpectedAppendOffset) as e:
        follower.append_as_follower(data)
    assert (e.value.first_offset, e.value.expected) == (0, 5)
    empty = follower.append_as_follower(b"")
    assert empty.record_count == 0 and follower.log_end_offset == 5


def test_reopen_after_clean_close_keeps_everything(tmp_path):
    time = ManualTime()
    log = open_log(tmp_path, time, segment_bytes=2_000, index_interval_bytes=200)
    for i in range(100):
        log.append_as_leader(batch(2, tag=i), 4)
    before = log.read(0, 1 << 24).records
    layout = [(s.base_offset, s.size, list(s.index.offsets)) for s in log.segments]
    log.flush()
    log.close()
    again = Log.open(log.directory, LogConfig(segment_bytes=2_000, index_interval_bytes=200),
                     time_ms=time)
    assert again.log_end_offset == 200 and again.recovery_point == 200
    assert [(s.base_offset, s.size, list(s.index.offsets)) for s in again.segments] == layout
    assert again.read(0, 1 << 24).records == before
    assert not again.recovery_report.changed
    r = again.append_as_leader(batch(1), 4)
    assert r.first_offset == 200


def test_closed_log_refuses_work(tmp_path):
    from broker_core.log import LogClosed

    log = open_log(tmp_path)
    log.close()
    with pytest.raises(LogClosed):
        log.append_as_leader(batch(1), 0)
    with pytest.raises(LogClosed):
        log.read(0, 10)
