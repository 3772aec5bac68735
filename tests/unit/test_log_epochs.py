"""The leader-epoch file: format, Kafka's assign/lookup rules, and how appends,
truncation and retention keep it in step with the log."""

from __future__ import annotations

import pytest

from broker_core.log import CheckpointError, LeaderEpochFile, Log, LogConfig
from broker_core.wire.records import Record, build_batch


class Leo:
    """A settable log end offset for a bare epoch file."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def batch(n: int = 1) -> bytes:
    return build_batch([Record(None, b"x", [], 1_000) for _ in range(n)])


def test_file_format_is_version_count_then_entries(tmp_path):
    f = LeaderEpochFile(tmp_path, Leo())
    assert f.assign(0, 0) and f.assign(3, 120)
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 120\n"
    again = LeaderEpochFile(tmp_path, Leo())
    assert again.entries == [(0, 0), (3, 120)]
    assert again.latest_epoch == 3 and again.latest_entry == (3, 120)
    assert not list(tmp_path.glob("*.tmp"))


def test_assign_follows_kafkas_rules(tmp_path):
    f = LeaderEpochFile(tmp_path, Leo())
    assert f.assign(1, 0)
    assert not f.assign(1, 5)  # same epoch, later offset: nothing to record
    assert f.assign(2, 10) and f.assign(4, 20)
    assert f.entries == [(1, 0), (2, 10), (4, 20)]
    # an older epoch at an earlier offset replaces everything not below it (a follower whose
    # log is being rewritten by the leader's history)
    assert f.assign(3, 15)
    assert f.entries == [(1, 0), (2, 10), (3, 15)]
    assert f.assign(3, 12)  # the latest epoch starting earlier moves back
    assert f.entries == [(1, 0), (2, 10), (3, 12)]
    with pytest.raises(ValueError, match="must not be negative"):
        f.assign(-1, 0)


def test_end_offset_for_epoch(tmp_path):
    leo = Leo(100)
    f = LeaderEpochFile(tmp_path, leo)
    assert f.end_offset_for_epoch(0) == (-1, -1)  # no entries
    for epoch, start in ((2, 10), (4, 30), (7, 60)):
        f.assign(epoch, start)
    assert f.end_offset_for_epoch(7) == (7, 100)  # latest: the log end
    leo.value = 120
    assert f.end_offset_for_epoch(7) == (7, 120)
    assert f.end_offset_for_epoch(4) == (4, 60)
    assert f.end_offset_for_epoch(5) == (4, 60)  # unknown epoch: largest known below it
    assert f.end_offset_for_epoch(1) == (1, 10)  # below every entry: the first start
    assert f.end_offset_for_epoch(8) == (-1, -1)  # newer than anything seen
    assert f.end_offset_for_epoch(-1) == (-1, -1)


def test_truncation_from_end_and_start(tmp_path):
    f = LeaderEpochFile(tmp_path, Leo())
    for epoch, start in ((1, 0), (2, 10), (3, 20), (5, 40)):
        f.assign(epoch, start)
    assert f.truncate_from_end(40) == 1
    assert f.entries == [(1, 0), (2, 10), (3, 20)]
    assert f.truncate_from_start(15) == 1
    assert f.entries == [(2, 15), (3, 20)]
    assert f.truncate_from_start(15) == 0  # already there
    assert LeaderEpochFile(tmp_path, Leo()).entries == [(2, 15), (3, 20)]


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\n1 0\n", "0\n2\n3 0\n2 10\n", "0\nx\n",
                                  "0\n1\n1 zero\n", "0\n1\n-1 0\n"])
def test_damaged_file_raises_a_typed_error(tmp_path, text):
    (tmp_path / "leader-epoch-checkpoint").write_text(text)
    with pytest.raises(CheckpointError):
        LeaderEpochFile(tmp_path, Leo())


def test_appends_record_where_each_epoch_begins(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=lambda: 0)
    log.append_as_leader(batch(2), 1)
    log.append_as_leader(batch(2), 1)
    log.append_as_leader(batch(3), 4)
    log.append_as_leader(batch(1), 2)  # a stale epoch is stamped but adds no entry
    assert log.leader_epochs.entries == [(1, 0), (4, 4)]
    assert log.leader_epochs.end_offset_for_epoch(1) == (1, 4)
    assert log.leader_epochs.end_offset_for_epoch(4) == (4, 8)


def test_leader_change_without_appends_then_truncation(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=lambda: 0)
    log.append_as_leader(batch(5), 1)
    log.leader_epochs.assign(2, log.log_end_offset)  # what becoming leader does
    log.append_as_leader(batch(5), 2)
    assert log.leader_epochs.entries == [(1, 0), (2, 5)]
    log.truncate_to(5)
    assert log.leader_epochs.entries == [(1, 0)]
    log.truncate_to(3)  # inside the first batch: the log becomes empty
    assert log.log_end_offset == 0 and log.leader_epochs.entries == []


def test_epoch_file_changes_are_fsynced_by_the_next_flush_not_at_once(tmp_path, monkeypatch):
    from broker_core.log import leader_epoch as module

    synced = []
    monkeypatch.setattr(module, "fsync_file", lambda path: synced.append(path.name))
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=lambda: 0)
    log.append_as_leader(batch(3), 5)
    assert synced == []  # becoming leader of many partitions must not fsync each file
    assert log.leader_epochs.entries == [(5, 0)]
    log.flush()
    assert synced == ["leader-epoch-checkpoint"]
    log.flush()
    assert synced == ["leader-epoch-checkpoint"]  # unchanged since: nothing to sync
    log.close()


# -- write-behind (a LeaderAndIsr's epoch files written in one IO job) ---------------------------


def make_write_behind():
    """(clock, jobs, writer): ``jobs`` holds the blocking functions handed to the IO pool; a
    test runs them (as the pool would) and fires their Deferreds."""
    from twisted.internet import defer, task

    from broker_core.log.leader_epoch import WriteBehind

    clock = task.Clock()
    jobs: list[tuple] = []
    errors: list = []

    def run_blocking(fn):
        d = defer.Deferred()
        jobs.append((fn, d))
        return d

    return clock, jobs, errors, WriteBehind(clock, run_blocking, on_error=errors.append)


def run_job(job) -> None:
    fn, d = job
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (handed to the Deferred, as the pool would)
        d.errback(e)
    else:
        d.callback(None)


def test_write_behind_writes_every_file_changed_in_one_turn_in_one_job(tmp_path):
    clock, jobs, _, writer = make_write_behind()
    files = []
    for i in range(3):
        (tmp_path / str(i)).mkdir()
        f = LeaderEpochFile(tmp_path / str(i), Leo(10))
        f.write_behind = writer
        files.append(f)
    for i, f in enumerate(files):
        assert f.assign(5, i)
    # Nothing is written on the thread that changed the entries.
    assert not any(f.path.exists() for f in files) and all(f.unsaved for f in files)
    assert jobs == []
    clock.advance(0)
    assert len(jobs) == 1
    run_job(jobs[0])
    assert [f.path.read_text() for f in files] == [f"0\n1\n5 {i}\n" for i in range(3)]
    assert not any(f.unsaved for f in files)
    clock.advance(0)
    assert len(jobs) == 1  # nothing left to write


def test_write_behind_runs_one_job_at_a_time_and_picks_up_later_changes(tmp_path):
    clock, jobs, _, writer = make_write_behind()
    f = LeaderEpochFile(tmp_path, Leo(100))
    f.write_behind = writer
    f.assign(1, 0)
    clock.advance(0)
    assert len(jobs) == 1
    f.assign(2, 50)  # changed while the first job is queued: waits for it
    clock.advance(0)
    assert len(jobs) == 1
    run_job(jobs[0])  # writes the entries as they are now (a snapshot at write time)
    assert f.path.read_text() == "0\n2\n1 0\n2 50\n"
    clock.advance(0)
    assert len(jobs) == 2  # the second change was queued again; writing it is harmless
    run_job(jobs[1])
    assert LeaderEpochFile(tmp_path, Leo()).entries == [(1, 0), (2, 50)]


def test_write_behind_failure_leaves_the_file_unsaved_for_the_next_flush(tmp_path):
    clock, jobs, errors, writer = make_write_behind()
    d = tmp_path / "p"
    d.mkdir()
    f = LeaderEpochFile(d, Leo(10))
    f.write_behind = writer
    f.assign(3, 0)
    clock.advance(0)
    d.rename(tmp_path / "moved")  # the directory is gone: the write fails
    run_job(jobs[0])
    assert len(errors) == 1 and f.unsaved
    (tmp_path / "moved").rename(d)
    f.sync()  # what the log's flush calls before fsyncing segments
    assert not f.unsaved and f.path.read_text() == "0\n1\n3 0\n"


def test_flush_writes_a_pending_epoch_change_before_the_segments(tmp_path):
    clock, jobs, _, writer = make_write_behind()
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=lambda: 0)
    log.leader_epochs.write_behind = writer
    log.append_as_leader(batch(3), 4)
    assert log.leader_epochs.unsaved
    log.flush()
    assert LeaderEpochFile(tmp_path / "t-0", Leo()).entries == [(4, 0)]
    assert log.recovery_point == 3


def test_clean_close_writes_a_pending_change_and_delete_drops_it(tmp_path):
    clock, jobs, _, writer = make_write_behind()
    kept = Log.open(tmp_path / "t-0", LogConfig(), time_ms=lambda: 0)
    kept.leader_epochs.write_behind = writer
    kept.append_as_leader(batch(), 2)
    kept.close()
    assert LeaderEpochFile(tmp_path / "t-0", Leo()).entries == [(2, 0)]

    doomed = Log.open(tmp_path / "t-1", LogConfig(), time_ms=lambda: 0)
    doomed.leader_epochs.write_behind = writer
    doomed.append_as_leader(batch(), 2)
    clock.advance(0)
    doomed.delete()
    run_job(jobs[-1])  # the job queued before the delete must not recreate the directory
    assert not (tmp_path / "t-1").exists()


def test_write_behind_holds_a_burst_for_its_delay_and_writes_later_changes_with_it(tmp_path):
    from twisted.internet import defer, task

    from broker_core.log.leader_epoch import WriteBehind

    clock = task.Clock()
    jobs: list[tuple] = []

    def run_blocking(fn):
        d = defer.Deferred()
        jobs.append((fn, d))
        return d

    writer = WriteBehind(clock, run_blocking, burst_files=3, burst_delay_s=2.0)
    files = []
    for i in range(4):
        (tmp_path / str(i)).mkdir()
        f = LeaderEpochFile(tmp_path / str(i), Leo(10))
        f.write_behind = writer
        files.append(f)
    # Below the burst size: written at the end of the turn, as always.
    files[0].assign(1, 0)
    clock.advance(0)
    assert len(jobs) == 1
    run_job(jobs[0])
    assert not files[0].unsaved
    # A burst waits out the delay; a change made meanwhile joins it.
    for f in files[1:]:
        f.assign(5, 0)
    clock.advance(0)
    assert len(jobs) == 1 and all(f.unsaved for f in files[1:])
    files[0].assign(6, 3)
    clock.advance(1.9)
    assert len(jobs) == 1
    clock.advance(0.1)
    assert len(jobs) == 2
    run_job(jobs[1])
    assert not any(f.unsaved for f in files)
    assert LeaderEpochFile(tmp_path / "0", Leo()).entries == [(1, 0), (6, 3)]
    # The next burst is held again.
    for f in files[1:]:
        f.assign(7, 1)
    clock.advance(0)
    assert len(jobs) == 2
    clock.advance(2.0)
    assert len(jobs) == 3


def test_a_held_burst_is_written_by_the_flush_if_it_comes_first(tmp_path):
    clock, jobs, _, _ = make_write_behind()
    from broker_core.log.leader_epoch import WriteBehind

    writer = WriteBehind(clock, lambda fn: jobs.append(fn), burst_files=1, burst_delay_s=2.0)
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=lambda: 0)
    log.leader_epochs.write_behind = writer
    log.append_as_leader(batch(3), 4)
    clock.advance(0)
    assert jobs == [] and log.leader_epochs.unsaved
    log.flush()  # durability does not wait for the burst's job
    assert LeaderEpochFile(tmp_path / "t-0", Leo()).entries == [(4, 0)]


def test_an_epoch_begun_with_no_message_yet_survives_a_restart(tmp_path):
    """A leader elected at the log end and stopped before any produce: its epoch's entry
    starts at the log end, and a start after a clean (or unclean) shutdown keeps it; only an
    entry past the end (written before batches a crash lost) is dropped."""
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=lambda: 0)
    log.append_as_leader(batch(5), 1)
    log.leader_epochs.assign(2, log.log_end_offset)  # what becoming leader does
    log.leader_epochs.assign(3, 9)  # as if batches up to offset 9 were lost in a crash
    log.flush()
    log.close()
    for clean in (True, False):
        again = Log.open(tmp_path / "t-0", LogConfig(), time_ms=lambda: 0,
                         clean_shutdown=clean)
        assert again.leader_epochs.entries == [(1, 0), (2, 5)], clean
        assert again.recovery_report.epoch_entries_dropped == (1 if clean else 0)
        again.close()
