"""The log start offset of both metadata logs (broker_core/raft/log.py, storage.py): deleting
a prefix after a snapshot, resetting to a snapshot's end, reads below the start refused with
a clear error, the epoch below the start still answered, and on disk the start and its epoch
surviving clean and unclean restarts, with the segments below the start gone."""

from __future__ import annotations

import pytest

from broker_core.log import LogConfig
from broker_core.raft.entries import LogEntry
from broker_core.raft.log import InMemoryRaftLog, OffsetBelowLogStart
from broker_core.raft.storage import START_FILE, DiskRaftLog
from tests.support.manual_time import ManualTime

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=100)


def entries(epochs: list[int], start: int = 0) -> list[LogEntry]:
    return [LogEntry(start + i, e, b"x%03d" % (start + i)) for i, e in enumerate(epochs)]


#: 0-9 epoch 1, 10-19 epoch 2, 20-29 epoch 4.
EPOCHS = [1] * 10 + [2] * 10 + [4] * 10


@pytest.fixture(params=["memory", "disk"])
def make_log(request, tmp_path):
    logs = []

    def make():
        if request.param == "memory":
            log = InMemoryRaftLog()
        else:
            log = DiskRaftLog.open(tmp_path, time_ms=ManualTime(), config=SMALL)
            logs.append(log)
        log.append(entries(EPOCHS))
        return log

    yield make
    for log in logs:
        log.close()


@pytest.mark.parametrize("start", [5, 10, 20, 30])
def test_deleting_a_prefix_keeps_the_rest_and_the_epoch_below_the_start(make_log, start):
    log = make_log()
    log.delete_prefix(start)
    assert log.start_offset() == start
    assert log.end_offset() == 30
    assert log.read(start, 100) == tuple(entries(EPOCHS)[start:])
    assert log.epoch_at(start - 1) == EPOCHS[start - 1]
    assert log.last_epoch() == 4
    with pytest.raises(OffsetBelowLogStart, match=f"below the log start offset {start}"):
        log.read(start - 1, 1)
    with pytest.raises(OffsetBelowLogStart):
        log.epoch_at(start - 2)
    with pytest.raises(OffsetBelowLogStart):
        log.truncate_to(start - 1)
    # Epoch questions at or above the epoch below the start are answered as before.
    full = InMemoryRaftLog(entries(EPOCHS))
    for epoch in range(EPOCHS[start - 1], 6):
        assert log.end_offset_for_epoch(epoch) == full.end_offset_for_epoch(epoch), epoch
    log.delete_prefix(start - 1)  # moving the start back is a no-op
    assert log.start_offset() == start


def test_a_log_emptied_by_its_prefix_deletion_still_appends_and_truncates(make_log):
    log = make_log()
    log.delete_prefix(30)
    assert log.read(30, 5) == ()
    assert log.end_offset_for_epoch(4) == (4, 30)
    log.append([LogEntry(30, 5, b"a"), LogEntry(31, 5, b"b")])
    assert log.end_offset_for_epoch(4) == (4, 30)
    assert log.end_offset_for_epoch(5) == (5, 32)
    log.truncate_to(30)
    assert log.end_offset() == 30 and log.last_epoch() == 4


def test_reset_starts_an_empty_log_at_a_snapshots_end(make_log):
    log = make_log()
    log.reset(100, 7)
    assert (log.start_offset(), log.end_offset(), log.last_epoch()) == (100, 100, 7)
    assert log.epoch_at(99) == 7
    assert log.end_offset_for_epoch(7) == (7, 100)
    log.append([LogEntry(100, 8, b"n")])
    assert log.read(100, 5) == (LogEntry(100, 8, b"n"),)
    assert log.end_offset_for_epoch(7) == (7, 100)


@pytest.mark.parametrize("clean", [True, False])
def test_on_disk_the_start_survives_a_restart_and_segments_below_it_are_gone(tmp_path, clean):
    log = DiskRaftLog.open(tmp_path, time_ms=ManualTime(), config=SMALL)
    for entry in entries(EPOCHS):
        log.append([entry])  # one at a time: segments roll between appends
    log.flush()
    segments_before = len(log.log.segments)
    log.delete_prefix(20)
    assert len(log.log.segments) < segments_before
    assert all(s.next_offset > 20 for s in log.log.segments)
    if clean:
        log.close()
    else:
        log.log.close()  # killed: no marker, the next open recovers
    again = DiskRaftLog.open(tmp_path, time_ms=ManualTime(), config=SMALL)
    try:
        assert again.start_offset() == 20
        assert again.epoch_at(19) == 2
        assert again.read(20, 100) == tuple(entries(EPOCHS)[20:])
        with pytest.raises(OffsetBelowLogStart):
            again.read(10, 1)
    finally:
        again.close()


def test_a_deletion_that_crashed_before_its_segments_went_finishes_at_the_next_open(tmp_path):
    log = DiskRaftLog.open(tmp_path, time_ms=ManualTime(), config=SMALL)
    for entry in entries(EPOCHS):
        log.append([entry])
    log.close()
    # The start file is written first; the crash came before the segments were deleted.
    (log.directory / START_FILE).write_text("0\n1\n20 2\n")
    again = DiskRaftLog.open(tmp_path, time_ms=ManualTime(), config=SMALL)
    try:
        assert again.start_offset() == 20 and again.epoch_at(19) == 2
        assert all(s.next_offset > 20 for s in again.log.segments)
        assert again.read(20, 100) == tuple(entries(EPOCHS)[20:])
    finally:
        again.close()


def test_a_reset_survives_a_restart(tmp_path):
    log = DiskRaftLog.open(tmp_path, time_ms=ManualTime(), config=SMALL)
    log.append(entries(EPOCHS))
    log.reset(100, 7)
    log.append([LogEntry(100, 8, b"n")])
    log.close()
    again = DiskRaftLog.open(tmp_path, time_ms=ManualTime(), config=SMALL)
    try:
        assert (again.start_offset(), again.end_offset(), again.epoch_at(99)) == (100, 101, 7)
        assert again.read(100, 5) == (LogEntry(100, 8, b"n"),)
    finally:
        again.close()
