"""Descriptors a log holds: the active segment's ``.log`` only, rolled segments through the
shared LRU, index files opened just to write them — and the index files stay a correct prefix of
the in-memory entries through flushes, rolls, truncation, retention and crashes."""

from __future__ import annotations

import os
import random
import shutil
import struct
import threading
from pathlib import Path

import pytest

from broker_core.log import Log, LogConfig, LogManager
from broker_core.log import log as log_module
from broker_core.log.open_segments import OpenSegments
from broker_core.log.segment import Segment
from broker_core.wire.records import Record, build_batch, decode_records
from tests.support.manual_time import ManualTime

WAIT = 30  # seconds: a safety net against a hung test, not a speed assertion


def batch(n: int = 1, tag: int = 0) -> bytes:
    return build_batch([Record(None, b"v%05d-" % tag + b"x" * 60, [], 1_000 + tag)
                        for _ in range(n)])


ONE = len(batch())


def open_files_under(path: Path) -> list[str]:
    """Targets of this process's descriptors that lie under ``path`` (deleted ones included)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


def index_entries(seg: Segment) -> tuple[bytes, bytes]:
    base = seg.base_offset
    return (b"".join(struct.pack(">ii", o - base, p)
                     for o, p in zip(seg.index.offsets, seg.index.positions, strict=True)),
            b"".join(struct.pack(">qi", t, o - base)
                     for t, o in zip(seg.time_index.timestamps, seg.index.offsets, strict=True)))


def index_files(seg: Segment) -> tuple[bytes, bytes]:
    return seg.index_path.read_bytes(), seg.time_index_path.read_bytes()


def assert_files_are_prefixes(log: Log) -> None:
    """Every index file holds a prefix of its segment's entries (whole entries, the same count
    in both files is not required), and a rolled segment's files hold all of them."""
    for seg in log.segments:
        mem, mem_t = index_entries(seg)
        disk, disk_t = index_files(seg)
        assert mem.startswith(disk) and len(disk) % 8 == 0
        assert mem_t.startswith(disk_t) and len(disk_t) % 12 == 0
        if seg is not log.active:
            assert (disk, disk_t) == (mem, mem_t)


def crash(log: Log) -> None:
    """Leave the files as a crash of the process would: index entries not yet written stay
    unwritten, no flush, no checkpoint."""
    log._close(persist=False)


def all_offsets(log: Log) -> list[int]:
    return [r.offset for r in decode_records(log.read(log.log_start_offset, 1 << 26).records)]


# -- the LRU -------------------------------------------------------------------------------------


class FakeSegment:
    def __init__(self, name: str) -> None:
        self.name = name
        self.released = 0

    def release_fd(self) -> None:
        self.released += 1


def test_open_segments_closes_the_least_recently_used():
    lru = OpenSegments(2)
    a, b, c = FakeSegment("a"), FakeSegment("b"), FakeSegment("c")
    lru.add(a)
    lru.add(b)
    lru.touch(a)  # b is now the least recently used
    lru.add(c)
    assert (a.released, b.released, c.released) == (0, 1, 0)
    assert len(lru) == 2 and lru.evicted == 1
    lru.discard(a)
    lru.touch(b)  # not in the set: nothing happens
    assert len(lru) == 1


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_open_segments_capacity_is_checked(tmp_path, bad):
    with pytest.raises(ValueError, match="log.open.segments.max"):
        OpenSegments(bad)
    with pytest.raises(ValueError, match="log.open.segments.max"):
        LogManager(tmp_path, LogConfig(), time_ms=ManualTime(), max_open_segments=bad)


# -- descriptors ---------------------------------------------------------------------------------


def test_about_one_descriptor_per_partition_with_many_segments(tmp_path):
    manager = LogManager(tmp_path, LogConfig(segment_bytes=2 * ONE), time_ms=ManualTime(),
                         max_open_segments=8)
    partitions = 150
    for p in range(partitions):
        log = manager.get_or_create("many", p)
        for i in range(9):
            log.append_as_leader(batch(tag=i), 0)
        assert len(log.segments) == 5
    # One .log per partition (the active segment) and at most 8 rolled ones; no index file.
    held = open_files_under(tmp_path)
    assert all(p.endswith(".log") for p in held)
    assert partitions <= len(held) <= partitions + 8
    # Reading old data everywhere reopens segments but never holds more than the cap.
    for log in manager.logs():
        log.high_watermark = log.log_end_offset
        assert all_offsets(log) == list(range(9))
    assert len(open_files_under(tmp_path)) <= partitions + 8
    assert manager.open_segments.evicted > 0
    manager.shutdown()
    assert open_files_under(tmp_path) == []
    again = LogManager(tmp_path, LogConfig(segment_bytes=2 * ONE), time_ms=ManualTime(),
                       max_open_segments=8)
    logs = again.load()
    assert len(logs) == partitions
    assert partitions <= len(open_files_under(tmp_path)) <= partitions + 8
    assert not again.recovery_reports  # clean: every index loaded, none rebuilt
    again.shutdown()


def test_reads_of_evicted_segments_reopen_them(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=3 * ONE, index_interval_bytes=ONE),
                   time_ms=ManualTime(), open_segments=OpenSegments(2))
    for i in range(30):
        log.append_as_leader(batch(tag=i), 0)
    assert len(log.segments) == 10
    inactive = log.segments[:-1]
    assert sum(s.has_open_fd for s in inactive) <= 2
    assert log.active.has_open_fd and log.active.is_active
    log.high_watermark = log.log_end_offset
    for offset in random.Random(7).sample(range(30), 30):
        records = list(decode_records(log.read(offset, 1).records))
        assert records[0].offset == offset and records[0].value.startswith(b"v%05d-" % offset)
        assert sum(s.has_open_fd for s in inactive) <= 2
    assert len(open_files_under(tmp_path)) <= 3
    # ListOffsets by time and the max-timestamp scan go through the same reopening reads.
    assert log.offset_for_timestamp(1_004) == (4, 1_004)
    assert log.offset_for_max_timestamp() == (29, 1_029)
    assert log.open_segments.evicted > 0


def test_a_full_lru_never_evicts_the_active_segment(tmp_path):
    shared = OpenSegments(1)
    logs = [Log.open(tmp_path / f"t-{p}", LogConfig(segment_bytes=2 * ONE),
                     time_ms=ManualTime(), open_segments=shared) for p in range(3)]
    for i in range(8):
        for log in logs:
            log.append_as_leader(batch(tag=i), 0)
    for log in logs:
        log.high_watermark = log.log_end_offset
        assert all_offsets(log) == list(range(8))
        assert log.active.has_open_fd
    assert len(shared) == 1


# -- index files ---------------------------------------------------------------------------------


def test_index_files_are_written_at_roll_flush_and_close_not_per_append(tmp_path, monkeypatch):
    config = LogConfig(segment_bytes=20 * ONE, index_interval_bytes=2 * ONE)
    log = Log.open(tmp_path / "t-0", config, time_ms=ManualTime())
    opened = []
    real_open = os.open

    def counting_open(path, *args, **kwargs):
        opened.append(os.path.basename(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    for i in range(10):
        log.append_as_leader(batch(tag=i), 0)
    assert opened == []  # appends open nothing: index entries wait in memory
    assert index_files(log.active) == (b"", b"")
    assert_files_are_prefixes(log)
    log.flush()
    assert index_files(log.active) == index_entries(log.active) != (b"", b"")
    for i in range(10, 45):
        log.append_as_leader(batch(tag=i), 0)
    assert len(log.segments) == 3
    assert_files_are_prefixes(log)  # the rolled ones hold every entry (written at the roll)
    assert index_files(log.active) != index_entries(log.active)
    before = [index_entries(s) for s in log.segments]
    log.close()
    assert [index_files(s) for s in log.segments] == before

    monkeypatch.setattr(Segment, "recover", lambda *a, **k: pytest.fail("index rebuilt"))
    again = Log.open(tmp_path / "t-0", config, time_ms=ManualTime())
    assert again.recovery_report.indexes_rebuilt == 0
    assert [index_entries(s) for s in again.segments] == before


def test_an_index_file_lagging_after_a_crash_is_a_correct_prefix(tmp_path, monkeypatch):
    config = LogConfig(segment_bytes=30 * ONE, index_interval_bytes=2 * ONE)
    log = Log.open(tmp_path / "t-0", config, time_ms=ManualTime())
    for i in range(40):
        log.append_as_leader(batch(tag=i), 0)
    log.flush()
    for i in range(40, 52):
        log.append_as_leader(batch(tag=i), 0)
    full = index_entries(log.active)
    recovery_point = log.recovery_point
    crash(log)
    disk = index_files(log.active)
    assert full[0].startswith(disk[0]) and len(disk[0]) < len(full[0])
    saved = tmp_path / "saved"
    shutil.copytree(tmp_path / "t-0", saved)

    # Unclean start: the active segment is past the recovery point, so it is re-validated and
    # its index rebuilt from the batches.
    recovered = Log.open(tmp_path / "t-0", config, time_ms=ManualTime(),
                         recovery_point=recovery_point, clean_shutdown=False)
    assert recovered.recovery_report.segments_checked == 1
    assert index_entries(recovered.active) == index_files(recovered.active) == full
    recovered.high_watermark = recovered.log_end_offset
    assert all_offsets(recovered) == list(range(52))
    recovered.close()

    # Even on the trusted path (as if the start were clean) the prefix is accepted as it is:
    # the walk after its last entry puts the missing entries back.
    shutil.rmtree(tmp_path / "t-0")
    shutil.copytree(saved, tmp_path / "t-0")
    monkeypatch.setattr(Segment, "recover", lambda *a, **k: pytest.fail("index rebuilt"))
    trusted = Log.open(tmp_path / "t-0", config, time_ms=ManualTime())
    assert trusted.recovery_report.indexes_rebuilt == 0
    assert index_entries(trusted.active) == full
    trusted.high_watermark = trusted.log_end_offset
    assert all_offsets(trusted) == list(range(52))


def test_a_rolled_segment_with_a_lagging_index_file_gets_it_completed(tmp_path):
    config = LogConfig(segment_bytes=10 * ONE, index_interval_bytes=2 * ONE)
    log = Log.open(tmp_path / "t-0", config, time_ms=ManualTime())
    for i in range(25):
        log.append_as_leader(batch(tag=i), 0)
    first = log.segments[0]
    full = index_entries(first)
    log.close()
    os.truncate(first.index_path, 8)  # as if only the first entry had been written
    os.truncate(first.time_index_path, 12)
    again = Log.open(tmp_path / "t-0", config, time_ms=ManualTime())
    assert again.recovery_report.indexes_rebuilt == 0
    assert index_entries(again.segments[0]) == index_files(again.segments[0]) == full


def test_a_wrong_entry_in_an_index_file_is_rebuilt_not_trusted(tmp_path):
    config = LogConfig(segment_bytes=10 * ONE, index_interval_bytes=2 * ONE)
    log = Log.open(tmp_path / "t-0", config, time_ms=ManualTime())
    for i in range(25):
        log.append_as_leader(batch(tag=i), 0)
    first = log.segments[0]
    full = index_entries(first)
    log.close()
    raw = bytearray(first.index_path.read_bytes())
    struct.pack_into(">ii", raw, len(raw) - 8, 5, ONE * 5 + 3)  # the last entry points mid-batch
    first.index_path.write_bytes(bytes(raw))
    again = Log.open(tmp_path / "t-0", config, time_ms=ManualTime())
    assert again.recovery_report.indexes_rebuilt == 1
    assert index_entries(again.segments[0]) == index_files(again.segments[0]) == full


def test_truncation_cuts_the_index_files(tmp_path):
    config = LogConfig(segment_bytes=12 * ONE, index_interval_bytes=2 * ONE)
    log = Log.open(tmp_path / "t-0", config, time_ms=ManualTime())
    for i in range(30):
        log.append_as_leader(batch(tag=i), 0)
    log.flush()
    assert len(log.segments) == 3
    log.truncate_to(27)  # inside the active segment
    assert index_files(log.active) == index_entries(log.active)
    log.truncate_to(17)  # back into a rolled segment: it is the active one again
    assert len(log.segments) == 2 and log.active.is_active and log.active.has_open_fd
    assert index_files(log.active) == index_entries(log.active)
    assert len(index_entries(log.active)[0]) == 3 * 8  # entries at 12, 14, 16
    for i in range(17, 22):
        log.append_as_leader(batch(tag=100 + i), 1)
    assert_files_are_prefixes(log)
    crash(log)
    for clean in (True, False):
        again = Log.open(tmp_path / "t-0", config, time_ms=ManualTime(), clean_shutdown=clean)
        again.high_watermark = again.log_end_offset
        assert all_offsets(again) == list(range(22))
        values = [r.value for r in decode_records(again.read(17, 1 << 20).records)]
        assert all(v.startswith(b"v%05d-" % (100 + o)) for o, v in zip(range(17, 22), values,
                                                                    strict=True))
        again.close()


def test_index_files_stay_correct_prefixes_under_random_operations(tmp_path):
    rng = random.Random(11)
    config = LogConfig(segment_bytes=8 * ONE, index_interval_bytes=ONE + ONE // 2)
    for run in range(12):
        directory = tmp_path / f"r-{run}"
        log = Log.open(directory, config, time_ms=ManualTime(), open_segments=OpenSegments(1))
        expected = 0
        for _ in range(rng.randrange(20, 80)):
            op = rng.random()
            if op < 0.7:
                log.append_as_leader(batch(rng.randrange(1, 3), tag=expected), 0)
            elif op < 0.8:
                log.flush()
            elif op < 0.9 and log.log_end_offset > 0:
                log.truncate_to(rng.randrange(0, log.log_end_offset))
            else:
                log.high_watermark = log.log_end_offset
                log.read(rng.randrange(0, log.log_end_offset + 1), 200)
            expected = log.log_end_offset
            assert_files_are_prefixes(log)
        leo = log.log_end_offset
        crash(log)
        # Trusted path for every segment: a prefix is accepted, never a wrong entry.
        again = Log.open(directory, config, time_ms=ManualTime())
        assert again.log_end_offset == leo
        again.high_watermark = leo
        assert all_offsets(again) == list(range(leo))
        assert_files_are_prefixes(again)
        again.close()


# -- retention -----------------------------------------------------------------------------------


def test_retention_deletes_segments_with_open_and_closed_descriptors(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2 * ONE), time_ms=ManualTime(),
                   open_segments=OpenSegments(2))
    for i in range(14):
        log.append_as_leader(batch(tag=i), 0)
    assert len(log.segments) == 7
    log.high_watermark = log.log_end_offset
    log.read(0, 1)  # segment 0 open (most recent), segment 5 open, the others closed
    assert [s.has_open_fd for s in log.segments] == [True, False, False, False, False, True,
                                                     True]
    doomed = [s.log_path for s in log.segments[:4]]
    log.update_config(LogConfig(segment_bytes=2 * ONE, retention_bytes=3 * 2 * ONE,
                                retention_ms=-1))
    assert log.delete_old_segments() == 4
    assert not any(p.exists() for p in doomed)
    assert not any(t.endswith("(deleted)") for t in open_files_under(tmp_path))
    assert len(log.open_segments) == 1  # segment 5 still open; segment 0's descriptor closed
    assert all_offsets(log) == list(range(8, 14))


# -- flushing from another thread ----------------------------------------------------------------


def test_flush_fsyncs_evicted_segments_too(tmp_path, monkeypatch):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2 * ONE), time_ms=ManualTime(),
                   open_segments=OpenSegments(1))
    for i in range(10):
        log.append_as_leader(batch(tag=i), 0)
    assert sum(s.has_open_fd for s in log.segments) == 2
    log.leader_epochs.sync()  # so the flush fsyncs only segment files and the directory
    synced = []
    real = os.fsync
    monkeypatch.setattr(log_module.os, "fsync",
                        lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                    real(fd))[1])
    log.flush()
    names = sorted(os.path.basename(p) for p in synced)
    assert names == sorted([p.name for s in log.segments
                            for p in (s.log_path, s.index_path, s.time_index_path)] + ["t-0"])
    assert log.recovery_point == 10
    assert len(open_files_under(tmp_path)) == 2  # the flush's descriptors are all closed


def test_flush_thread_races_appends_reads_evictions_and_retention(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=3_000, retention_bytes=30_000,
                                                retention_ms=-1, index_interval_bytes=500),
                   time_ms=ManualTime(), open_segments=OpenSegments(1))
    stop = threading.Event()
    errors = []
    flushes = [0]

    def flusher():
        try:
            while not stop.is_set():
                log.flush()
                flushes[0] += 1
        except BaseException as e:  # reported to the test thread
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    rng = random.Random(3)
    try:
        for i in range(2_000):
            log.append_as_leader(batch(1 + i % 3, tag=i), 0)
            log.high_watermark = log.log_end_offset
            if i % 7 == 0:  # old data: reopens evicted segments while the flush syncs them
                log.read(rng.randrange(log.log_start_offset, log.log_end_offset), 300)
            if i % 50 == 0:
                log.delete_old_segments()
            if i % 450 == 449:
                log.truncate_to(log.log_end_offset - 5)
    finally:
        stop.set()
        t.join(WAIT)
    assert not t.is_alive() and errors == [] and flushes[0] > 0
    log.flush()
    assert log.recovery_point == log.log_end_offset
    assert all_offsets(log) == list(range(log.log_start_offset, log.log_end_offset))
    assert_files_are_prefixes(log)
    assert index_files(log.active) == index_entries(log.active)
    assert len(open_files_under(tmp_path)) <= 2
    start, leo, rp = log.log_start_offset, log.log_end_offset, log.recovery_point
    crash(log)
    again = Log.open(tmp_path / "t-0", log.config, time_ms=ManualTime(), recovery_point=rp,
                     log_start_offset=start, clean_shutdown=False)
    assert again.log_end_offset == leo and again.recovery_report.bytes_truncated == 0
    assert again.recovery_report.indexes_rebuilt == 0
