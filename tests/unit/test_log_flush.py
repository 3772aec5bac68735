"""Flush policy and flushing from another thread while the owner thread appends."""

from __future__ import annotations

import os
import threading

from broker_core.log import Log, LogConfig
from broker_core.log import log as log_module
from broker_core.wire.records import Record, build_batch, decode_records
from tests.support.manual_time import ManualTime

WAIT = 30  # seconds: a safety net against a hung test, not a speed assertion


def batch(n: int = 1) -> bytes:
    return build_batch([Record(None, b"v" * 40, [], 1) for _ in range(n)])


def test_should_flush_by_message_count(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=10), time_ms=ManualTime())
    assert not log.should_flush()
    log.append_as_leader(batch(6), 0)
    assert log.unflushed_messages == 6 and not log.should_flush()
    log.append_as_leader(batch(4), 0)
    assert log.should_flush()
    log.flush()
    assert log.unflushed_messages == 0 and not log.should_flush()
    assert log.recovery_point == log.log_end_offset == 10


def test_should_flush_by_time(tmp_path):
    time = ManualTime()
    log = Log.open(tmp_path / "t-0", LogConfig(flush_ms=1_000), time_ms=time)
    time.now += 5_000
    assert not log.should_flush()  # nothing unflushed
    log.append_as_leader(batch(), 0)
    assert log.should_flush()
    log.flush()
    assert log.last_flush_ms == time.now
    log.append_as_leader(batch(), 0)
    time.now += 999
    assert not log.should_flush()
    time.now += 1
    assert log.should_flush()


def test_no_flush_policy_never_asks(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=ManualTime())
    log.append_as_leader(batch(1000), 0)
    assert not log.should_flush()


def test_flush_up_to_advances_the_recovery_point_that_far(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500), time_ms=ManualTime())
    for _ in range(20):
        log.append_as_leader(batch(), 0)
    log.flush(up_to=7)
    assert log.recovery_point == 7
    log.flush(up_to=3)  # never backwards
    assert log.recovery_point == 7
    log.flush(up_to=1_000)  # never past the end
    assert log.recovery_point == 20


def test_flush_fsyncs_every_segment_file_past_the_recovery_point(tmp_path, monkeypatch):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500), time_ms=ManualTime())
    for _ in range(12):
        log.append_as_leader(batch(), 0)
    log.flush()
    for _ in range(12):
        log.append_as_leader(batch(), 0)
    fresh = [s for s in log.segments if s.next_offset > 12]
    synced = []
    real = os.fsync
    monkeypatch.setattr(log_module.os, "fsync",
                        lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                    real(fd))[1])
    log.flush()
    names = sorted(os.path.basename(p) for p in synced)
    expected = sorted([p.name for s in fresh
                       for p in (s.log_path, s.index_path, s.time_index_path)]
                      + ["t-0"])  # and the directory, as segments were created
    assert names == expected


def test_appends_proceed_while_a_flush_waits_on_fsync(tmp_path, monkeypatch):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=400), time_ms=ManualTime())
    for _ in range(5):
        log.append_as_leader(batch(), 0)
    in_fsync = threading.Event()
    release = threading.Event()
    real = os.fsync

    def slow_fsync(fd):
        if threading.current_thread() is t:  # the owner's own fsyncs (epoch file) run freely
            in_fsync.set()
            assert release.wait(WAIT)
        real(fd)

    monkeypatch.setattr(log_module.os, "fsync", slow_fsync)
    errors = []

    def flusher():
        try:
            log.flush()
        except BaseException as e:  # reported to the test thread
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    assert in_fsync.wait(WAIT)
    # The flush is stuck in fsync; appends, rolls, retention and truncation still go on.
    for _ in range(20):
        log.append_as_leader(batch(), 0)
    log.high_watermark = log.log_end_offset
    log.update_config(LogConfig(segment_bytes=400, retention_bytes=0, retention_ms=-1))
    assert log.delete_old_segments() > 0  # deletes segments the flush is syncing
    release.set()
    t.join(WAIT)
    assert not t.is_alive() and errors == []
    assert log.recovery_point <= log.log_end_offset


def test_truncation_during_a_flush_keeps_the_recovery_point(tmp_path, monkeypatch):
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=ManualTime())
    for _ in range(10):
        log.append_as_leader(batch(), 0)
    real = os.fsync
    done = []

    def fsync_then_truncate(fd):
        real(fd)
        if not done:  # interleave: the owner truncates and appends new data mid-flush
            done.append(1)
            log.truncate_to(4)
            for _ in range(8):
                log.append_as_leader(batch(), 1)

    log.leader_epochs.sync()  # so the flush's first fsync is a segment's, not the epoch file's
    monkeypatch.setattr(log_module.os, "fsync", fsync_then_truncate)
    log.flush()
    # offsets 4..11 are new and were not part of what this flush synced
    assert log.recovery_point == 0
    monkeypatch.undo()
    log.flush()
    assert log.recovery_point == log.log_end_offset == 12


def test_flush_thread_races_appends_rolls_and_retention(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2_000, retention_bytes=20_000,
                                                retention_ms=-1), time_ms=ManualTime())
    stop = threading.Event()
    errors = []
    flushes = [0]

    def flusher():
        try:
            while not stop.is_set():
                log.flush()
                flushes[0] += 1
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(3_000):
            log.append_as_leader(batch(1 + i % 3), 0)
            if i % 50 == 0:
                log.high_watermark = log.log_end_offset
                log.delete_old_segments()
            if i % 700 == 699:
                log.truncate_to(log.log_end_offset - 5)
    finally:
        stop.set()
        t.join(WAIT)
    assert not t.is_alive() and errors == [] and flushes[0] > 0
    log.flush()
    assert log.recovery_point == log.log_end_offset
    got = [r.offset for r in decode_records(log.read(log.log_start_offset, 1 << 26).records)]
    assert got == list(range(log.log_start_offset, log.log_end_offset))


def test_flush_after_close_or_delete_is_harmless(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=ManualTime())
    log.append_as_leader(batch(), 0)
    log.close()
    log.flush()
    log.delete()
    log.flush()
    assert not (tmp_path / "t-0").exists()
