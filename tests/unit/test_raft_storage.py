"""The metadata log on disk (broker_core/raft/storage.py), with real files under ``tmp_path``:
it behaves as the in-memory log on random operation sequences, survives clean and unclean
reopening with its epochs, cuts a torn tail, and refuses appends that break the log's rules."""

from __future__ import annotations

import os
import random

import pytest
from zope.interface.verify import verifyObject

from broker_core.log import LogConfig
from broker_core.log.leader_epoch import FILE_NAME as EPOCH_FILE
from broker_core.log.log import LogClosed
from broker_core.log.manager import CLEAN_SHUTDOWN
from broker_core.raft.entries import LeaderChange, LogEntry, VoterAssignment
from broker_core.raft.log import InMemoryRaftLog, IRaftLog, LogInvariantError
from broker_core.raft.records import entries_to_records, records_to_entries
from broker_core.raft.storage import DIR_NAME, DiskRaftLog
from tests.support.manual_time import ManualTime
from tests.support.raft_sim import Faults, Simulation

# Small segments and a sparse index, so the sequences below roll, read and truncate across
# segment boundaries and index entries.
SMALL = LogConfig(segment_bytes=2_000, index_interval_bytes=300)


def open_log(tmp_path, config: LogConfig = SMALL) -> DiskRaftLog:
    """The subject: a metadata log under ``tmp_path`` (a fixed clock; nothing here is timed)."""
    return DiskRaftLog.open(tmp_path, time_ms=ManualTime(), config=config)


def crash(log: DiskRaftLog) -> None:
    """Stop without the clean-shutdown marker and without a flush: what a killed process
    leaves (the files hold what was written; the next open must recover)."""
    log.log.close()


def random_payload(rng: random.Random, epoch: int) -> bytes | LeaderChange | VoterAssignment:
    kind = rng.random()
    if kind < 0.1:
        return LeaderChange(rng.randrange(5), (1, 2, 3), (rng.randrange(5),))
    if kind < 0.15:
        voters = tuple(rng.sample(range(1, 8), rng.randint(1, 4)))
        return VoterAssignment("cluster", voters, rng.choice([None, voters[:1]]))
    return rng.randbytes(rng.choice([0, 1, 10, 100, 100, 700]))


def whole(log) -> tuple[LogEntry, ...]:
    return log.read(0, log.end_offset() + 1)


def assert_same(disk: DiskRaftLog, memory: InMemoryRaftLog, rng: random.Random) -> None:
    end = memory.end_offset()
    assert disk.end_offset() == end
    assert disk.last_epoch() == memory.last_epoch()
    assert whole(disk) == memory.entries
    for epoch in {0, 1, memory.last_epoch(), memory.last_epoch() + 1, rng.randrange(12)}:
        assert disk.end_offset_for_epoch(epoch) == memory.end_offset_for_epoch(epoch), epoch
    for offset in {-1, 0, end - 1, rng.randrange(-1, max(end, 1))}:
        if offset < end:
            assert disk.epoch_at(offset) == memory.epoch_at(offset), offset


@pytest.mark.parametrize("seed", range(12))
def test_random_operation_sequences_behave_like_the_in_memory_log(tmp_path, seed):
    rng = random.Random(seed)
    disk = open_log(tmp_path)
    memory = InMemoryRaftLog()
    epoch = 1
    most_segments = 1
    try:
        for _ in range(150):
            op = rng.random()
            if op < 0.45:
                if rng.random() < 0.3:
                    epoch += rng.randint(1, 2)
                start = memory.end_offset()
                batch = [LogEntry(start + i, epoch, random_payload(rng, epoch))
                         for i in range(rng.choice([1, 1, 2, 5, 20]))]
                disk.append(batch)
                memory.append(batch)
            elif op < 0.55:
                offset = rng.randrange(memory.end_offset() + 3)
                disk.truncate_to(offset)
                memory.truncate_to(offset)
                epoch = max(epoch, memory.last_epoch())
            elif op < 0.7:
                start = rng.randrange(memory.end_offset() + 2)
                n = rng.choice([0, 1, 3, 50])
                got = disk.read(start, n)
                assert got == memory.read(start, n)
                assert records_to_entries(disk.read_records(start, n)) == got
                assert disk.read_records(start, n) == entries_to_records(got)
            elif op < 0.8:
                bad = rng.choice(["gap", "overlap", "epoch"])
                end, last = memory.end_offset(), memory.last_epoch()
                entry = {"gap": LogEntry(end + 1, max(last, 1), b"x"),
                         "overlap": LogEntry(end - 1, max(last, 1), b"x"),
                         "epoch": LogEntry(end, last - 1, b"x")}[bad]
                with pytest.raises(LogInvariantError):
                    disk.append([entry])
            elif op < 0.88:
                disk.flush()
                assert disk.log.recovery_point == disk.end_offset()
            elif op < 0.94:
                disk.close()
                disk = open_log(tmp_path)
                assert disk.recovery_report.clean_shutdown
            else:
                crash(disk)  # nothing is torn: the page cache keeps every write
                disk = open_log(tmp_path)
                assert not disk.recovery_report.clean_shutdown
                assert not disk.recovery_report.changed
            assert_same(disk, memory, rng)
            most_segments = max(most_segments, len(disk.log.segments))
        assert most_segments > 2  # the sequence did cross segments
    finally:
        disk.close()


def test_it_provides_the_raft_log_interface(tmp_path):
    log = open_log(tmp_path)
    try:
        verifyObject(IRaftLog, log)
    finally:
        log.close()


def test_the_log_is_an_ordinary_partition_directory_with_an_epoch_file(tmp_path):
    log = open_log(tmp_path, LogConfig())
    log.append([LogEntry(0, 1, LeaderChange(1, (1,), (1,))), LogEntry(1, 1, b"a"),
                LogEntry(2, 3, LeaderChange(1, (1,), (1,)))])
    log.close()
    directory = tmp_path / "__cluster_metadata-0"
    assert DIR_NAME == directory.name
    names = sorted(p.name for p in directory.iterdir())
    assert names == [CLEAN_SHUTDOWN, "00000000000000000000.index", "00000000000000000000.log",
                     "00000000000000000000.timeindex", EPOCH_FILE]
    assert (directory / EPOCH_FILE).read_text().split("\n")[2:4] == ["1 0", "3 2"]
    assert records_to_entries((directory / "00000000000000000000.log").read_bytes()) == \
        whole(InMemoryRaftLog([LogEntry(0, 1, LeaderChange(1, (1,), (1,))),
                               LogEntry(1, 1, b"a"), LogEntry(2, 3, LeaderChange(1, (1,), (1,)))]))


def test_a_clean_reopen_trusts_the_files_and_removes_the_marker(tmp_path):
    log = open_log(tmp_path)
    entries = [LogEntry(i, 1 + i // 10, b"e%d" % i) for i in range(40)]
    log.append(entries)
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogClosed):
        log.append([LogEntry(40, 5, b"late")])
    again = open_log(tmp_path)
    try:
        assert not (again.directory / CLEAN_SHUTDOWN).exists()
        assert again.recovery_report.clean_shutdown
        assert again.recovery_report.segments_checked == 0
        assert whole(again) == tuple(entries)
        assert again.end_offset_for_epoch(2) == (2, 20)
    finally:
        again.close()


def _torn_tail(tmp_path) -> tuple[list[LogEntry], DiskRaftLog]:
    """40 durable entries in epochs 1-2, then 5 unflushed ones of epoch 4 whose last batch is
    half written, as a crash in the middle of a write leaves them."""
    log = open_log(tmp_path)
    durable = [LogEntry(i, 1 if i < 25 else 2, b"d%d" % i * 20) for i in range(40)]
    log.append(durable)
    log.flush()
    log.append([LogEntry(40, 4, LeaderChange(3, (1, 2, 3), (3, 2)))])
    log.append([LogEntry(i, 4, b"late" * 30) for i in range(41, 45)])
    crash(log)
    active = log.log.active.log_path
    with open(active, "r+b") as f:
        f.truncate(os.path.getsize(active) - 50)
    return durable, log


def test_an_unclean_reopen_cuts_a_half_written_batch_and_keeps_everything_before_it(tmp_path):
    durable, _ = _torn_tail(tmp_path)
    log = open_log(tmp_path)
    try:
        report = log.recovery_report
        assert not report.clean_shutdown and report.bytes_truncated > 0
        expected = InMemoryRaftLog(durable)
        expected.append([LogEntry(40, 4, LeaderChange(3, (1, 2, 3), (3, 2)))]
                        + [LogEntry(i, 4, b"late" * 30) for i in range(41, 44)])
        assert whole(log) == expected.entries
        for epoch in range(6):
            assert log.end_offset_for_epoch(epoch) == expected.end_offset_for_epoch(epoch)
        # The log goes on from the recovered end.
        log.append([LogEntry(44, 5, b"after")])
        assert log.read(44, 5) == (LogEntry(44, 5, b"after"),)
    finally:
        log.close()


def test_a_torn_first_batch_of_an_epoch_takes_the_epoch_out_of_the_epoch_file(tmp_path):
    log = open_log(tmp_path)
    log.append([LogEntry(i, 1, b"x" * 50) for i in range(10)])
    log.flush()
    log.append([LogEntry(10, 2, b"y" * 200)])  # the epoch file now names epoch 2
    crash(log)
    path = log.log.active.log_path
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)
    log = open_log(tmp_path)
    try:
        assert log.end_offset() == 10 and log.last_epoch() == 1
        assert log.end_offset_for_epoch(2) == (1, 10)
        assert log.recovery_report.epoch_entries_dropped == 1
    finally:
        log.close()


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_lost_or_damaged_epoch_file_is_rebuilt_from_the_batches(tmp_path, damage):
    log = open_log(tmp_path)
    entries = [LogEntry(i, 1 + i // 7 * 2, b"z%d" % i) for i in range(30)]
    log.append(entries)
    crash(log)
    epoch_file = log.directory / EPOCH_FILE
    if damage == "missing":
        epoch_file.unlink()
    else:
        epoch_file.write_text("0\n2\n1 oops\n")
    log = open_log(tmp_path)
    try:
        expected = InMemoryRaftLog(entries)
        assert whole(log) == expected.entries
        for epoch in range(12):
            assert log.end_offset_for_epoch(epoch) == expected.end_offset_for_epoch(epoch)
            assert log.epoch_at(epoch) == expected.epoch_at(epoch)
    finally:
        log.close()


@pytest.mark.parametrize("bad, message", [
    ([LogEntry(1, 1, b"gap")], "offset 1 appended where offset 0 is next"),
    ([LogEntry(0, 0, b"epoch 0")], "epoch 0"),
    ([LogEntry(0, 2, b"a"), LogEntry(1, 1, b"b")], "epoch 1 after epoch 2"),
    ([LogEntry(0, 1, b"a"), LogEntry(0, 1, b"b")], "offset 0 appended where offset 1"),
])
def test_appends_that_break_the_logs_rules_are_refused_whole(tmp_path, bad, message):
    log = open_log(tmp_path)
    try:
        with pytest.raises(LogInvariantError, match=message):
            log.append(bad)
        assert log.end_offset() == 0 and log.last_epoch() == 0
        assert log.log.size_bytes == 0
    finally:
        log.close()


def test_a_read_returns_whole_entries_whatever_their_sizes(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=100_000))
    entries = ([LogEntry(i, 1, b"s") for i in range(50)] + [LogEntry(50, 1, b"L" * 30_000)]
               + [LogEntry(i, 1, b"s") for i in range(51, 60)])
    log.append(entries)
    try:
        # The size estimate from the average entry is far too small for the big one.
        assert log.read(45, 15) == tuple(entries[45:60])
        assert log.read(0, 1000) == tuple(entries)
        assert log.read(60, 5) == () and log.read(100, 5) == () and log.read(3, 0) == ()
        with pytest.raises(ValueError):
            log.read(-1, 3)
    finally:
        log.close()


def test_raw_reads_stop_at_the_byte_limit_but_return_at_least_one_batch(tmp_path):
    log = open_log(tmp_path)
    entries = [LogEntry(i, 1, b"p" * 100) for i in range(20)]
    log.append(entries)
    try:
        one = len(entries_to_records(entries[:1]))
        assert records_to_entries(log.read_records(0, 20, max_bytes=1)) == tuple(entries[:1])
        got = records_to_entries(log.read_records(2, 20, max_bytes=3 * one + one // 2))
        assert got == tuple(entries[2:5])
        assert log.read_records(5, 3) == entries_to_records(entries[5:8])
    finally:
        log.close()


def test_flush_makes_the_recovery_point_reach_the_end(tmp_path):
    log = open_log(tmp_path)
    try:
        log.append([LogEntry(i, 1, b"f") for i in range(10)])
        assert log.log.recovery_point == 0 and log.log.unflushed_messages == 10
        log.flush()
        assert log.log.recovery_point == 10 and log.log.unflushed_messages == 0
    finally:
        log.close()


# -- the Raft simulation over files --------------------------------------------------------------


class DiskSimulation(Simulation):
    """The quorum simulation with every node's log on disk under ``data_dir``: a node's restart
    after a crash reopens its log without the clean-shutdown marker, so each restart goes
    through recovery. (The simulation's crash loses no written bytes, as a process crash
    does not; torn writes are the tests above.)"""

    def __init__(self, seed: int, data_dir, **kwargs) -> None:
        self.data_dir = data_dir
        super().__init__(seed, **kwargs)

    def _start_node(self, n: int) -> None:
        current = self.logs[n]
        if isinstance(current, DiskRaftLog):
            crash(current)
        self.logs[n] = open_log(self.data_dir / f"node-{n}")
        super()._start_node(n)

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


@pytest.mark.parametrize("seed", range(3))
def test_the_quorum_simulation_keeps_its_invariants_with_logs_on_disk(tmp_path, seed):
    sim = DiskSimulation(seed, tmp_path, voters=(1, 2, 3),
                         faults=Faults(crashes_per_s=2.0, downtime_ms=(50.0, 300.0)))
    try:
        sim.run_for(1500.0)
        sim.heal()
        assert sim.run_until(lambda: sim.leader() is not None, 40_000)
        proposal = sim.propose_to_leader(b"last")
        assert proposal is not None
        assert sim.run_until(lambda: sim.committed_everywhere(proposal.offset), 40_000)
        assert sim.checker.steps > 0 and any(sim.incarnation.values())  # nodes did restart
    finally:
        sim.close()
    # What the files hold after the run is the committed log (and what followed it).
    committed = tuple(sim.checker.committed)
    assert len(committed) > proposal.offset
    for n in sim.ids:
        reopened = open_log(tmp_path / f"node-{n}")
        try:
            assert reopened.read(0, len(committed)) == committed
        finally:
            reopened.close()
