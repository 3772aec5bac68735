"""Idempotent producers' per-partition state: the sans-IO checks
(:mod:`broker_core.log.producer_state`), the leader's and a follower's appends through
:class:`Log`, the state rebuilt when a log opens and after truncation, the snapshot files
(:mod:`broker_core.log.producer_snapshot`) and what happens to bad ones, and expiry through the
replica manager on a ``task.Clock``."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from twisted.internet import task

from broker_core.log import Log, LogConfig, LogManager
from broker_core.log import producer_snapshot as snap
from broker_core.log.producer_state import (
    MAX_BATCHES,
    ProducerStateError,
    ProducerStateManager,
)
from broker_core.metadata_cache import MetadataCache
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState
from broker_core.wire.records import Record, build_batch, iter_batches
from tests.support.inline_pool import InlinePool
from tests.support.manual_time import ManualTime

T0 = 1_700_000_000_000


def pbatch(pid=7, epoch=0, seq=0, n=1, ts=T0) -> bytes:
    return build_batch([Record(None, b"v%d" % (seq + i), [], ts) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def info_of(data: bytes, base_offset: int = 0):
    info = next(iter(iter_batches(data)))
    return replace(info, base_offset=base_offset,
                   last_offset=base_offset + info.last_offset_delta)


def open_log(tmp_path, time=None, **cfg) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig(**cfg), time_ms=time or ManualTime())


# -- the checks, sans-IO -----------------------------------------------------------------------


def test_a_new_producer_starts_at_zero_and_continues_in_sequence():
    state = ProducerStateManager()
    first = info_of(pbatch(seq=0, n=3))
    assert state.check(first) is None
    state.update(first)
    nxt = info_of(pbatch(seq=3, n=2), base_offset=3)
    assert state.check(nxt) is None
    state.update(nxt)
    assert state.entries[7].last_seq == 4


@pytest.mark.parametrize("data, code", [
    (pbatch(seq=5), "UNKNOWN_PRODUCER_ID"),  # unknown producer, sequence not 0
])
def test_an_unknown_producer_not_at_zero_is_refused(data, code):
    with pytest.raises(ProducerStateError) as e:
        ProducerStateManager().check(info_of(data))
    assert e.value.error_code_name == code


def known(seq_batches=((0, 2),), epoch=0) -> ProducerStateManager:
    state = ProducerStateManager()
    offset = 0
    for seq, n in seq_batches:
        state.update(info_of(pbatch(epoch=epoch, seq=seq, n=n), base_offset=offset))
        offset += n
    return state


@pytest.mark.parametrize("data, code", [
    (pbatch(seq=3), "OUT_OF_ORDER_SEQUENCE_NUMBER"),  # a gap: 2 expected
    (pbatch(seq=1), "OUT_OF_ORDER_SEQUENCE_NUMBER"),  # overlaps, not a duplicate
    (pbatch(epoch=1, seq=2), "OUT_OF_ORDER_SEQUENCE_NUMBER"),  # a new epoch not at 0
    (pbatch(epoch=0, seq=2), "INVALID_PRODUCER_EPOCH"),  # older than the bumped epoch
    (pbatch(epoch=-1, seq=2), "INVALID_RECORD"),
    (pbatch(seq=-1), "INVALID_RECORD"),
])
def test_each_refusal_has_its_error_and_changes_nothing(data, code):
    state = known(epoch=1 if code == "INVALID_PRODUCER_EPOCH" else 0)
    before = {pid: (e.epoch, list(e.batches)) for pid, e in state.entries.items()}
    with pytest.raises(ProducerStateError) as e:
        state.check(info_of(data, base_offset=2))
    assert e.value.error_code_name == code
    assert {pid: (e.epoch, list(e.batches)) for pid, e in state.entries.items()} == before


@pytest.mark.parametrize("pid", [7, -1])
def test_a_transactional_batch_is_refused(pid):
    info = replace(info_of(pbatch()), attributes=0x10, producer_id=pid)
    with pytest.raises(ProducerStateError, match="transactional") as e:
        ProducerStateManager().check(info)
    assert e.value.error_code_name == "INVALID_RECORD"


def test_a_retry_of_any_of_the_last_five_batches_is_a_duplicate_with_its_offsets():
    state = known(((0, 1), (1, 1), (2, 3), (5, 1), (6, 1), (7, 2)))
    assert len(state.entries[7].batches) == MAX_BATCHES
    dup = state.check(info_of(pbatch(seq=2, n=3)))
    assert (dup.first_offset, dup.last_offset) == (2, 4)
    # The oldest (sequence 0) fell out of the five: its retry is out of order.
    with pytest.raises(ProducerStateError, match="OUT_OF_ORDER|next expected"):
        state.check(info_of(pbatch(seq=0, n=1)))


def test_a_new_epoch_at_zero_starts_over_and_sequences_wrap():
    state = known()
    state.update(info_of(pbatch(epoch=1, seq=0), base_offset=2))
    assert state.entries[7].epoch == 1 and len(state.entries[7].batches) == 1
    wrap = ProducerStateManager()
    wrap.update(info_of(pbatch(seq=0)))
    wrap.entries[7].batches[-1] = replace(wrap.entries[7].batches[-1], last_seq=(1 << 31) - 2)
    assert wrap.check(info_of(pbatch(seq=(1 << 31) - 1, n=2), base_offset=1)) is None
    wrap.update(info_of(pbatch(seq=(1 << 31) - 1, n=2), base_offset=1))
    assert wrap.entries[7].last_seq == 0
    assert wrap.check(info_of(pbatch(seq=1), base_offset=3)) is None


def test_the_table_is_bounded_least_recently_written_first():
    state = ProducerStateManager(max_producers=3)
    for pid in (1, 2, 3):
        state.update(info_of(pbatch(pid=pid)))
    state.update(info_of(pbatch(pid=1, seq=1), base_offset=1))  # 1 is now the most recent
    state.update(info_of(pbatch(pid=4)))
    assert list(state.entries) == [3, 1, 4]


def test_expiry_forgets_producers_by_their_last_batch_timestamp():
    state = ProducerStateManager()
    state.update(info_of(pbatch(pid=1, ts=T0)))
    state.update(info_of(pbatch(pid=2, ts=T0 + 5000)))
    assert state.remove_expired(T0 + 9999, 10_000) == 0
    assert state.remove_expired(T0 + 10_000, 10_000) == 1
    assert list(state.entries) == [2]


# -- through the log ---------------------------------------------------------------------------


def test_the_leader_answers_a_retry_with_the_original_offsets_and_appends_nothing(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(build_batch([Record(None, b"plain")]), 0)
    first = log.append_as_leader(pbatch(seq=0, n=2), 0)
    assert (first.first_offset, first.last_offset, first.duplicate) == (1, 2, False)
    end = log.log_end_offset
    again = log.append_as_leader(pbatch(seq=0, n=2), 0)
    assert (again.first_offset, again.last_offset, again.duplicate) == (1, 2, True)
    assert log.log_end_offset == end
    with pytest.raises(ProducerStateError):
        log.append_as_leader(pbatch(seq=9), 0)
    assert log.log_end_offset == end
    log.close()


def test_several_idempotent_batches_in_one_record_set_are_refused(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(ProducerStateError, match="send one") as e:
        log.append_as_leader(pbatch(seq=0) + pbatch(seq=1), 0)
    assert e.value.error_code_name == "INVALID_RECORD" and log.log_end_offset == 0
    log.close()


def test_a_follower_takes_the_state_from_the_leaders_batches(tmp_path):
    leader = open_log(tmp_path / "a")
    leader.append_as_leader(pbatch(seq=0, n=2), 3)
    leader.append_as_leader(pbatch(seq=2, n=1), 3)
    follower = open_log(tmp_path / "b")
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    # Become leader: a retry of the last batch is a duplicate here too.
    dup = follower.append_as_leader(pbatch(seq=2, n=1), 4)
    assert dup.duplicate and dup.first_offset == 2
    leader.close()
    follower.close()


def test_truncation_rebuilds_the_state_from_before_the_cut(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(seq=0, n=2), 0)
    log.append_as_leader(pbatch(seq=2, n=2), 0)
    log.truncate_to(2)
    # The cut batch is gone: its sequences are next again, not duplicates.
    again = log.append_as_leader(pbatch(seq=2, n=2), 0)
    assert not again.duplicate and again.first_offset == 2
    log.truncate_fully_and_start_at(10)
    assert len(log.producer_state) == 0
    log.close()


def test_a_restart_rebuilds_the_state_from_the_log_without_a_snapshot(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(seq=0, n=2), 0)
    log.append_as_leader(pbatch(pid=8, seq=0), 0)
    log.abandon()  # a crash: no snapshot written
    assert snap.snapshot_offsets(tmp_path / "t-0") == []
    log = open_log(tmp_path)
    assert log.recovery_report.producer_batches_replayed == 2
    assert log.append_as_leader(pbatch(seq=0, n=2), 0).duplicate
    log.close()


def test_a_clean_close_snapshots_so_the_next_start_replays_nothing(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(seq=0, n=2), 0)
    log.close()
    assert snap.snapshot_offsets(tmp_path / "t-0") == [2]
    log = open_log(tmp_path)
    assert log.recovery_report.producer_batches_replayed == 0
    assert log.append_as_leader(pbatch(seq=0, n=2), 0).duplicate
    log.close()


def test_a_roll_snapshots_and_a_start_replays_only_the_batches_after_it(tmp_path):
    size = len(pbatch(seq=0))
    log = open_log(tmp_path, segment_bytes=size * 2)
    for seq in range(5):
        log.append_as_leader(pbatch(seq=seq), 0)
    assert len(log.segments) == 3
    offsets = snap.snapshot_offsets(tmp_path / "t-0")
    assert offsets == [2, 4]  # one per roll, the two newest kept
    log.abandon()
    log = open_log(tmp_path, segment_bytes=size * 2)
    assert log.recovery_report.producer_batches_replayed == 1  # offset 4 only
    assert log.producer_state.entries[7].last_seq == 4
    assert log.append_as_leader(pbatch(seq=3), 0).duplicate
    log.close()


@pytest.mark.parametrize("damage", [
    lambda b: b[:-3],  # torn
    lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:],  # a flipped bit: CRC
    lambda b: b"XXXX" + b[4:],  # not a snapshot
    lambda b: b"",
])
def test_a_damaged_snapshot_is_ignored_and_the_state_rebuilt_from_the_log(tmp_path, damage):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(seq=0, n=2), 0)
    log.close()
    path = snap.snapshot_path(tmp_path / "t-0", 2)
    path.write_bytes(damage(path.read_bytes()))
    log = open_log(tmp_path)
    report = log.recovery_report
    assert report.snapshots_ignored == 1 and report.changed
    assert "ignored 1 producer-state snapshot" in report.describe()
    assert report.producer_batches_replayed == 1 and not path.exists()
    assert log.append_as_leader(pbatch(seq=0, n=2), 0).duplicate
    log.close()


def body_with_crc(body: bytes) -> bytes:
    import zlib
    crc = zlib.crc32(body)
    return snap._HEAD.pack(snap.MAGIC, snap.VERSION, crc - (1 << 32) if crc >= 1 << 31
                           else crc) + body


@pytest.mark.parametrize("body, why", [
    (struct.pack(">qi", 99, 0), "name says"),
    (struct.pack(">qi", 5, 2), "ends inside"),
    (struct.pack(">qi", 5, 1) + struct.pack(">qhb", 1, 0, 0), "out of bounds"),
    (struct.pack(">qi", 5, 1) + struct.pack(">qhb", 1, 0, 6), "out of bounds"),
    (struct.pack(">qi", 5, 1) + struct.pack(">qhb", -1, 0, 1), "out of bounds"),
    (struct.pack(">qi", 5, 1) + struct.pack(">qhb", 1, 0, 1)
     + struct.pack(">iiqqq", 0, 0, 3, 9, T0), "out of bounds"),  # past the snapshot's offset
    (struct.pack(">qi", 5, 1) + struct.pack(">qhb", 1, 0, 2)
     + struct.pack(">iiqqq", 0, 0, 3, 3, T0) + struct.pack(">iiqqq", 1, 1, 2, 2, T0),
     "out of bounds"),  # offsets going back
    (struct.pack(">qi", 5, 0) + b"x", "after the last entry"),
    (struct.pack(">qi", 5, 10_001), "at most"),
])
def test_a_snapshot_with_a_good_crc_but_bad_content_is_refused(body, why):
    with pytest.raises(snap.SnapshotError, match=why):
        snap.decode(body_with_crc(body), 5, 10_000)


def test_a_snapshot_round_trips(tmp_path):
    state = known(((0, 2), (2, 1)))
    state.update(info_of(pbatch(pid=9, epoch=3), base_offset=3))
    entries = snap.decode(snap.encode(state, 4), 4, 10)
    assert [(e.producer_id, e.epoch, list(e.batches)) for e in entries] == [
        (e.producer_id, e.epoch, list(e.batches)) for e in state.entries.values()]


def test_a_snapshot_past_the_recovered_end_is_deleted(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(seq=0, n=2), 0)
    log.close()
    (tmp_path / "t-0" / snap.snapshot_path(tmp_path / "t-0", 50).name).write_bytes(
        (tmp_path / "t-0" / snap.snapshot_path(tmp_path / "t-0", 2).name).read_bytes())
    log = open_log(tmp_path)
    assert snap.snapshot_offsets(tmp_path / "t-0") == [2]
    log.close()


# -- expiry on the replica manager's clock -----------------------------------------------------


def test_the_replica_manager_expires_producers_on_its_clock(tmp_path):
    clock = task.Clock()
    clock.advance(T0 / 1000)
    logs = LogManager(tmp_path, LogConfig(), time_ms=lambda: int(clock.seconds() * 1000))
    pool = InlinePool()
    rm = ReplicaManager(1, logs, clock=clock, io_pool=pool, reactor=pool,
                        topic_log_config=lambda topic: LogConfig(),
                        metadata_cache=MetadataCache(), producer_id_expiration_ms=60_000,
                        producer_id_expiration_check_interval_s=10.0)
    rm.apply_leader_and_isr(1, [("t", 0, LeaderAndIsrState(1, 1, (1,), (1,), 1, 0))],
                            full=False)
    # Only the expiry timer runs (the others need the broker's I/O threads).
    interval = dict((fn.__name__, i) for fn, i in rm._intervals)["_expire_producers"]
    loop = task.LoopingCall(rm._expire_producers)
    loop.clock = clock
    loop.start(interval, now=False)
    try:
        answered: list = []
        rm.append(1, 1000, [("t", 0, pbatch(seq=0, ts=T0))]).addCallback(answered.append)
        assert answered[0][("t", 0)].error is None
        clock.advance(50)
        assert len(rm.get_partition("t", 0).log.producer_state) == 1
        clock.advance(10)  # 60 s after the batch's timestamp, at the next check
        assert len(rm.get_partition("t", 0).log.producer_state) == 0
        answered.clear()
        rm.append(1, 1000, [("t", 0, pbatch(seq=1, ts=T0))]).addCallback(answered.append)
        assert answered[0][("t", 0)].error == "UNKNOWN_PRODUCER_ID"
    finally:
        loop.stop()
        logs.shutdown()


def test_a_log_without_producers_still_snapshots_so_a_start_scans_nothing(tmp_path):
    log = open_log(tmp_path)
    for _ in range(3):
        log.append_as_leader(build_batch([Record(None, b"plain")]), 0)
    log.close()
    assert snap.snapshot_offsets(tmp_path / "t-0") == [3]
    log = open_log(tmp_path)
    assert log.recovery_report.producer_batches_replayed == 0 and len(log.producer_state) == 0
    log.close()


def test_a_log_that_tracks_no_producers_writes_no_snapshot(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=ManualTime(), track_producers=False)
    log.append_as_leader(pbatch(seq=0), 0)
    log.close()
    assert snap.snapshot_offsets(tmp_path / "t-0") == []
