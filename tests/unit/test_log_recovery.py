"""Recovery after an unclean shutdown: torn and corrupt tails are cut, every complete batch
before them survives, epoch entries past the end are dropped, indexes are rebuilt."""

from __future__ import annotations

import os
import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core.log import CorruptLogError, Log, LogConfig, LogManager
from broker_core.log.leader_epoch import FILE_NAME as EPOCH_FILE
from broker_core.wire.records import Record, build_batch, decode_records, iter_batches
from tests.support.manual_time import ManualTime

CONFIG = LogConfig(segment_bytes=4_000, index_interval_bytes=300)


def batch(n: int, tag: int) -> bytes:
    return build_batch([Record(b"k%d" % tag, b"value-%d-%d" % (tag, i) * 3, [], 1_000 + tag)
                        for i in range(n)])


def write_log(directory, time, *, batches: int = 60) -> Log:
    log = Log.open(directory, CONFIG, time_ms=time)
    for i in range(batches):
        log.append_as_leader(batch(1 + i % 4, i), 1 if i < 20 else 2)
    return log


def snapshot(log: Log) -> dict:
    return {
        "leo": log.log_end_offset,
        "data": log.read(0, 1 << 26).records,
        "epochs": log.leader_epochs.entries,
        "segments": [s.base_offset for s in log.segments],
        "indexes": [index_entries(s)[0] for s in log.segments],
        "timeindexes": [index_entries(s)[1] for s in log.segments],
    }


def index_entries(seg) -> tuple[bytes, bytes]:
    """The segment's in-memory index entries, encoded as in the files."""
    base = seg.base_offset
    return (b"".join(struct.pack(">ii", o - base, p)
                     for o, p in zip(seg.index.offsets, seg.index.positions, strict=True)),
            b"".join(struct.pack(">qi", t, o - base)
                     for t, o in zip(seg.time_index.timestamps, seg.index.offsets, strict=True)))


def assert_index_files_complete(log: Log) -> None:
    """Every index file holds exactly its segment's in-memory entries."""
    for s in log.segments:
        assert (s.index_path.read_bytes(), s.time_index_path.read_bytes()) == index_entries(s)


def crash(log: Log, *, extra_epoch: tuple[int, int] | None = None) -> None:
    """Leave the files as a crash would: no flush, no checkpoint, no marker, and the index
    entries not yet written still missing from the files."""
    log._close(persist=False)
    if extra_epoch is not None:
        entries = log.leader_epochs.entries + [extra_epoch]
        (log.directory / EPOCH_FILE).write_text(
            f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries))


def flipped_crc_batch(log: Log) -> bytes:
    b = bytearray(batch(2, 999))
    struct.pack_into(">q", b, 0, log.log_end_offset)  # even the offsets are plausible
    b[-5] ^= 0x40
    return bytes(b)


TAILS = {
    "garbage": lambda log: b"\x07garbage after the last batch" * 5,
    "half batch": lambda log: batch(3, 500)[:45],
    "flipped crc": flipped_crc_batch,
    "zeros": lambda log: b"\x00" * 512,
}


@pytest.mark.parametrize("tail", list(TAILS))
def test_unclean_shutdown_cuts_the_torn_tail(tmp_path, tail):
    time = ManualTime()
    log = write_log(tmp_path / "orders-3", time)
    assert len(log.segments) >= 3
    log.flush(up_to=log.segments[1].base_offset)  # the recovery point: inside the log
    recovery_point = log.recovery_point
    before = snapshot(log)
    junk = TAILS[tail](log)
    active = log.active.log_path
    crash(log, extra_epoch=(9, before["leo"] + 100))
    with open(active, "ab") as f:
        f.write(junk)
    log.active.index_path.write_bytes(b"\x01\x02\x03")  # a torn index too

    recovered = Log.open(tmp_path / "orders-3", CONFIG, time_ms=time,
                         recovery_point=recovery_point, clean_shutdown=False)
    report = recovered.recovery_report
    assert report.bytes_truncated == len(junk)
    assert report.epoch_entries_dropped == 1
    assert not report.clean_shutdown and report.batches_checked > 0
    after = snapshot(recovered)
    assert after == before  # every complete batch intact, epoch entry dropped, index rebuilt
    assert_index_files_complete(recovered)
    assert recovered.leader_epochs.entries == [(1, 0), (2, before["epochs"][1][1])]
    assert os.path.getsize(active) == recovered.active.size
    assert recovered.recovery_point <= recovered.log_end_offset
    assert recovered.append_as_leader(batch(1, 7), 3).first_offset == before["leo"]


def test_hole_in_the_middle_removes_later_segments(tmp_path):
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=100)
    assert len(log.segments) >= 4
    victim = log.segments[1]
    infos = list(iter_batches(victim.log_path.read_bytes()))
    cut = infos[len(infos) // 2].position + 10  # inside a batch: as if never written
    crash(log)
    os.truncate(victim.log_path, cut)
    later = [s.log_path for s in log.segments[2:]]

    recovered = Log.open(tmp_path / "t-0", CONFIG, time_ms=time, clean_shutdown=False)
    report = recovered.recovery_report
    assert [s.base_offset for s in recovered.segments] == [log.segments[0].base_offset,
                                                            victim.base_offset]
    assert recovered.log_end_offset == infos[len(infos) // 2].base_offset
    assert report.segments_deleted == len(later)
    assert not any(p.exists() for p in later)
    got = [r.offset for r in decode_records(recovered.read(0, 1 << 26).records)]
    assert got == list(range(recovered.log_end_offset))


def test_only_segments_past_the_recovery_point_are_revalidated(tmp_path):
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time)
    log.flush()
    last_base = log.active.base_offset
    batches_in_active = len(list(iter_batches(log.active.log_path.read_bytes())))
    crash(log)
    recovered = Log.open(tmp_path / "t-0", CONFIG, time_ms=time,
                         recovery_point=last_base, clean_shutdown=False)
    assert recovered.recovery_report.segments_checked == 1
    assert recovered.recovery_report.batches_checked == batches_in_active
    assert recovered.recovery_point == last_base


def test_a_valid_batch_that_does_not_continue_the_offsets_is_cut(tmp_path):
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=5)
    leo = log.log_end_offset
    stale = log.read(0, 1).records  # a perfectly valid batch, but for offset 0
    crash(log)
    with open(log.active.log_path, "ab") as f:
        f.write(stale)
    recovered = Log.open(tmp_path / "t-0", CONFIG, time_ms=time, clean_shutdown=False)
    assert recovered.log_end_offset == leo
    assert recovered.recovery_report.bytes_truncated == len(stale)


def test_clean_open_rebuilds_a_damaged_index(tmp_path):
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time)
    before = snapshot(log)
    log.close()
    log.segments[0].index_path.write_bytes(struct.pack(">ii", 0, 0) + struct.pack(">ii", 5, 3))
    log.segments[1].time_index_path.unlink()
    reopened = Log.open(tmp_path / "t-0", CONFIG, time_ms=time)
    assert reopened.recovery_report.indexes_rebuilt == 2
    assert snapshot(reopened) == before
    assert_index_files_complete(reopened)


def test_damaged_epoch_file_is_rebuilt_from_the_batches(tmp_path):
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time)
    epochs = log.leader_epochs.entries
    log.close()
    (log.directory / EPOCH_FILE).write_text("0\n5\nrubbish")
    reopened = Log.open(tmp_path / "t-0", CONFIG, time_ms=time)
    assert reopened.recovery_report.epoch_file_rebuilt
    assert reopened.leader_epochs.entries == epochs


def test_manager_detects_an_unclean_shutdown_and_reports_recovery(tmp_path):
    time = ManualTime()
    manager = LogManager(tmp_path, CONFIG, time_ms=time)
    manager.load()
    a = manager.get_or_create("alpha", 0)
    b = manager.get_or_create("beta-gamma", 1)
    for i in range(30):
        a.append_as_leader(batch(2, i), 1)
        b.append_as_leader(batch(1, i), 1)
    a.flush()
    manager.checkpoint()
    a.append_as_leader(batch(2, 77), 1)  # unflushed, past the checkpointed recovery point
    leo_a, leo_b = a.log_end_offset, b.log_end_offset
    for log in manager.logs():
        crash(log)
    with open(a.active.log_path, "ab") as f:
        f.write(b"torn" * 9)

    again = LogManager(tmp_path, CONFIG, time_ms=time)
    logs = again.load()
    assert not again.clean_shutdown
    assert set(logs) == {("alpha", 0), ("beta-gamma", 1)}
    report = again.recovery_reports[("alpha", 0)]
    assert report.bytes_truncated == 36
    assert logs[("alpha", 0)].log_end_offset == leo_a
    assert logs[("beta-gamma", 1)].log_end_offset == leo_b
    # alpha was flushed up to its recovery point: only what follows it is re-validated
    assert report.batches_checked < 31
    again.shutdown()
    third = LogManager(tmp_path, CONFIG, time_ms=time)
    third.load()
    assert third.clean_shutdown and third.recovery_reports == {}
    assert not (tmp_path / ".clean-shutdown").exists()  # removed at start
    third.shutdown()


# -- any prefix of the active segment recovers to its last complete batch ----------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A log whose active segment holds batches of assorted sizes, and those batches' ends."""
    root = tmp_path_factory.mktemp("recovery-template")
    log = Log.open(root / "t-0", LogConfig(segment_bytes=3_000, index_interval_bytes=200),
                   time_ms=ManualTime())
    for i in range(40):
        log.append_as_leader(batch(1 + i % 5, i), 1 + i // 10)
    log.flush()
    active = log.active
    infos = list(iter_batches(active.log_path.read_bytes()))
    ends = [(0, active.base_offset)] + [(i.end, i.last_offset + 1) for i in infos]
    data = log.read(0, 1 << 26).records
    log.close()
    yield root / "t-0", active.log_path.name, ends, data
    shutil.rmtree(root)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.floats(0, 1), junk=st.binary(max_size=80))
def test_any_prefix_recovers_to_the_last_complete_batch(template, tmp_path_factory, cut, junk):
    source, active_name, ends, data = template
    work = tmp_path_factory.mktemp("prefix")
    try:
        directory = work / "t-0"
        shutil.copytree(source, directory)
        size = ends[-1][0]
        keep = int(cut * size)
        original = (directory / active_name).read_bytes()
        with open(directory / active_name, "r+b") as f:
            f.truncate(keep)
            f.seek(keep)
            f.write(junk)
        # Junk that happens to repeat the bytes cut off (a batch's last byte, say) gives those
        # batches back whole: they recover too.
        cut_off = original[keep:]
        same = keep + next((i for i, (a, b) in enumerate(zip(junk, cut_off, strict=False))
                            if a != b), min(len(junk), len(cut_off)))
        end, leo = max(e for e in ends if e[0] <= same)
        log = Log.open(directory, LogConfig(segment_bytes=3_000, index_interval_bytes=200),
                       time_ms=ManualTime(), clean_shutdown=False)
        try:
            assert log.log_end_offset == leo
            assert log.active.size == end
            assert os.path.getsize(directory / active_name) == end
            assert data.startswith(log.read(0, 1 << 26).records)
            assert all(e.start_offset < leo for e in log.leader_epochs.entries)
            # the rebuilt index points at batch starts
            for offset, pos in zip(log.active.index.offsets, log.active.index.positions,
                                   strict=True):
                assert (pos, offset) in [(e, o) for e, o in ends]
        finally:
            log.close()
    finally:
        shutil.rmtree(work)


def test_unclean_start_adds_epoch_entries_the_file_lacks_from_the_batches(tmp_path):
    """docs/storage.md: an epoch entry written behind (in memory only when the broker died)
    is not lost if it has data: its batches carry the epoch, and recovery re-reads the batches
    past the recovery point and adds the entry."""
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=20)  # epoch 1 only
    log.flush()
    rp = log.log_end_offset
    written_behind: list = []
    log.leader_epochs.write_behind = written_behind.append  # never written: the crash wins
    for i in range(10):
        log.append_as_leader(batch(2, 100 + i), 7)
    before = log.leader_epochs.entries
    assert before == [(1, 0), (7, rp)] and written_behind
    crash(log)
    assert (tmp_path / "t-0" / EPOCH_FILE).read_text() == "0\n1\n1 0\n"  # the file lacks it
    recovered = Log.open(tmp_path / "t-0", CONFIG, time_ms=time, recovery_point=rp,
                         clean_shutdown=False)
    assert recovered.leader_epochs.entries == before
    assert recovered.recovery_report.epoch_entries_added == 1


# -- the log ends at the first invalid batch: no hole, whatever the shutdown was ---------------


def flip_bytes(path, position: int, count: int = 16) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        data = bytearray(f.read(count))
        f.seek(position)
        f.write(bytes(b ^ 0xFF for b in data))


def assert_contiguous_prefix(log: Log, data_before: bytes) -> None:
    """The log holds offsets 0..leo-1 without a gap, byte-identical to the start of what it
    held before, and nothing (segment, index or epoch entry) past its end."""
    data = log.read(0, 1 << 26).records
    assert data_before.startswith(data)
    assert [r.offset for r in decode_records(data)] == list(range(log.log_end_offset))
    assert all(e.start_offset < log.log_end_offset for e in log.leader_epochs.entries)
    names = sorted(p.name for p in log.directory.iterdir() if p.suffix in
                   (".log", ".index", ".timeindex"))
    assert names == sorted(n for s in log.segments for n in
                           (s.log_path.name, s.index_path.name, s.time_index_path.name))
    assert_index_files_complete(log)


@pytest.mark.parametrize("shutdown", ["clean", "unclean past the damage", "unclean from 0"])
def test_damage_in_the_middle_of_segment_0_ends_the_log_there(tmp_path, shutdown):
    """The issue's case: 16 flipped bytes in the middle of segment 0 and a cut tail. The log
    ends at the damaged batch and every later segment goes, so the offsets stay contiguous
    (the old code kept the later segments after a clean stop, or when the damage lay below the
    recovery point, leaving a hole)."""
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=100)
    assert len(log.segments) >= 4
    log.flush()
    rp = log.recovery_point if shutdown == "unclean past the damage" else 0
    before = log.read(0, 1 << 26).records
    seg0 = log.segments[0]
    infos = list(iter_batches(seg0.log_path.read_bytes()))
    victim = infos[len(infos) // 2]
    later = [p for s in log.segments[1:] for p in (s.log_path, s.index_path, s.time_index_path)]
    if shutdown == "clean":
        log.close()
    else:
        crash(log)
    flip_bytes(seg0.log_path, victim.position + victim.size // 2)
    os.truncate(seg0.log_path, seg0.size - 7)  # and a cut tail

    recovered = Log.open(tmp_path / "t-0", CONFIG, time_ms=time, recovery_point=rp,
                         clean_shutdown=shutdown == "clean")
    report = recovered.recovery_report
    assert [s.base_offset for s in recovered.segments] == [0]
    assert recovered.log_end_offset == victim.base_offset
    assert report.truncated_to == victim.base_offset
    assert report.segments_deleted == len(later) // 3
    assert not any(p.exists() for p in later)
    assert report.reason.startswith(f"{seg0.log_path.name}: at offset {victim.base_offset}")
    assert f"truncated the log to offset {victim.base_offset}" in report.describe()
    assert_contiguous_prefix(recovered, before)
    assert recovered.append_as_leader(batch(1, 5), 3).first_offset == victim.base_offset


@pytest.mark.parametrize("clean", [True, False])
def test_a_cut_tail_in_a_rolled_segment_deletes_the_later_ones(tmp_path, clean):
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=100)
    log.flush()
    before = log.read(0, 1 << 26).records
    seg1 = log.segments[1]
    infos = list(iter_batches(seg1.log_path.read_bytes()))
    n_later = len(log.segments) - 2
    log.close() if clean else crash(log)
    os.truncate(seg1.log_path, infos[-1].position + 20)

    recovered = Log.open(tmp_path / "t-0", CONFIG, time_ms=time,
                         recovery_point=log.recovery_point, clean_shutdown=clean)
    assert recovered.log_end_offset == infos[-1].base_offset
    assert len(recovered.segments) == 2
    assert recovered.recovery_report.segments_deleted == n_later
    assert_contiguous_prefix(recovered, before)


def test_an_index_pointing_past_the_end_is_rebuilt_and_nothing_is_lost(tmp_path):
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=100)
    before = snapshot(log)
    log.close()
    seg = log.segments[1]
    with open(seg.index_path, "ab") as f:
        f.write(struct.pack(">ii", 10_000, seg.size + 100))  # an entry past the segment's end
    reopened = Log.open(tmp_path / "t-0", CONFIG, time_ms=time)
    report = reopened.recovery_report
    assert report.indexes_rebuilt == 1 and report.segments_checked == 1
    assert report.truncated_to == -1 and report.segments_deleted == 0
    assert snapshot(reopened) == before
    assert_index_files_complete(reopened)


def test_a_disagreeing_index_leads_to_the_damage_behind_it(tmp_path):
    """An index that does not check out gets its segment re-validated in full: damage found
    there ends the log, even after a clean shutdown."""
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=100)
    before = log.read(0, 1 << 26).records
    seg = log.segments[1]
    infos = list(iter_batches(seg.log_path.read_bytes()))
    log.close()
    seg.index_path.write_bytes(b"\x00" * 5)  # a torn index
    flip_bytes(seg.log_path, infos[1].position + 70, 4)
    reopened = Log.open(tmp_path / "t-0", CONFIG, time_ms=time)
    assert reopened.log_end_offset == infos[1].base_offset
    assert len(reopened.segments) == 2
    assert_contiguous_prefix(reopened, before)


def test_a_missing_segment_ends_the_log_before_the_hole(tmp_path):
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=100)
    before = log.read(0, 1 << 26).records
    gone = log.segments[2]
    end = gone.base_offset
    log.close()
    for p in (gone.log_path, gone.index_path, gone.time_index_path):
        p.unlink()
    reopened = Log.open(tmp_path / "t-0", CONFIG, time_ms=time)
    assert reopened.log_end_offset == end
    assert [s.base_offset for s in reopened.segments] == [s.base_offset
                                                           for s in log.segments[:2]]
    assert "the next segment starts at offset" in reopened.recovery_report.reason
    assert_contiguous_prefix(reopened, before)


def test_a_batch_whose_epoch_goes_backwards_ends_the_log(tmp_path):
    """A batch with a valid CRC whose leader epoch (outside the CRC) is below its
    predecessor's is invalid: recovery cuts the log there."""
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=30)  # epochs 1 then 2
    leo = log.log_end_offset
    crash(log)
    stale = bytearray(batch(1, 3))
    struct.pack_into(">qii", stale, 0, leo, len(stale) - 12, 1)  # offsets fit, epoch 1 < 2
    with open(log.active.log_path, "ab") as f:
        f.write(stale)
    recovered = Log.open(tmp_path / "t-0", CONFIG, time_ms=time, clean_shutdown=False)
    assert recovered.log_end_offset == leo
    assert "leader epoch 1" in recovered.recovery_report.reason


def test_a_clean_open_checks_the_crcs_of_the_active_segments_tail(tmp_path):
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=30)
    active = log.active
    last = list(iter_batches(active.log_path.read_bytes()))[-1]
    log.close()
    flip_bytes(active.log_path, last.position + last.size - 3, 1)  # only the CRC can tell
    reopened = Log.open(tmp_path / "t-0", CONFIG, time_ms=time)
    assert reopened.log_end_offset == last.base_offset
    assert reopened.recovery_report.truncated_to == last.base_offset
    assert "CRC" in reopened.recovery_report.reason


# -- reads never serve a batch that fails its checks -------------------------------------------


def test_a_read_of_a_corrupt_batch_raises_corrupt_log_error(tmp_path):
    """Damage only a CRC can see, in a segment a clean open trusts: the open keeps it, and the
    first read that would return the batch raises an OSError naming partition and offset."""
    time = ManualTime()
    log = write_log(tmp_path / "orders-7", time, batches=100)
    seg = log.segments[1]
    infos = list(iter_batches(seg.log_path.read_bytes()))
    victim = infos[2]
    log.close()
    flip_bytes(seg.log_path, victim.position + victim.size // 2)
    reopened = Log.open(tmp_path / "orders-7", CONFIG, time_ms=time)
    assert reopened.recovery_report.truncated_to == -1  # nothing told the open
    ok = reopened.read(0, 1 << 26, max_offset=victim.base_offset).records
    assert [r.offset for r in decode_records(ok)] == list(range(victim.base_offset))
    with pytest.raises(CorruptLogError) as e:
        reopened.read(infos[1].base_offset, 1 << 20)
    assert isinstance(e.value, OSError)
    assert e.value.offset == victim.base_offset
    assert f"orders-7 at offset {victim.base_offset}" in str(e.value) and "CRC" in str(e.value)
    with pytest.raises(CorruptLogError):  # every time, not just once
        reopened.read(victim.base_offset, 1)
    # a batch appended since the open is served (the damage is behind it)
    new = reopened.append_as_leader(batch(1, 8), 3).first_offset
    assert reopened.read(new, 1 << 20).records
    reopened.close()


def test_a_garbage_length_in_trusted_bytes_raises_instead_of_looping(tmp_path):
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=100)
    seg = log.segments[1]
    infos = list(iter_batches(seg.log_path.read_bytes()))
    log.close()
    with open(seg.log_path, "r+b") as f:  # the length field of the second batch: -12
        f.seek(infos[1].position + 8)
        f.write(struct.pack(">i", -12))
    reopened = Log.open(tmp_path / "t-0", CONFIG, time_ms=time)
    for offset in (infos[0].base_offset, infos[1].base_offset):
        with pytest.raises(CorruptLogError):
            reopened.read(offset, 1 << 20)
    reopened.close()


def test_a_verified_range_is_not_checked_again(tmp_path):
    """The read check costs a CRC once per trusted batch: after a sequential read covered a
    segment, later reads of it check nothing (damage made after that is not seen again, as
    with any checksum checked on first use)."""
    time = ManualTime()
    log = write_log(tmp_path / "t-0", time, batches=100)
    log.close()
    reopened = Log.open(tmp_path / "t-0", CONFIG, time_ms=time)
    seg = reopened.segments[0]
    assert seg._unverified == (0, seg.size)
    offset = 0
    while offset < seg.next_offset:
        data = reopened.read(offset, 500).records
        offset = list(iter_batches(data))[-1].last_offset + 1
    assert seg._unverified == (0, 0)
    assert reopened.active._unverified[1] <= reopened.active.index.positions[-1]
    reopened.close()
