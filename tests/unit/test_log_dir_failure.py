"""Failed log directories (KIP-112) on the broker: the offline-directory state machine, the log
manager over several directories, the replica manager taking a directory offline on an I/O
error (real logs, a ``task.Clock``, the error injected where the disk would raise it), and the
report to the controller retried on the clock."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from twisted.internet import defer, task

from broker_core import metadata_paths as paths
from broker_core.log import Log, LogConfig, LogDirOffline, LogManager
from broker_core.log.dir_state import DirState, LogDirStates, describe_io_error
from broker_core.log.manager import CLEAN_SHUTDOWN, RECOVERY_POINTS
from broker_core.metadata import ConnectionLost, NodeExists, NoNode
from broker_core.metadata_cache import MetadataCache
from broker_core.replica.log_dir_reporter import LogDirFailureReporter
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState
from broker_core.wire.records import Record, build_batch

REPLICAS = (1, 2, 3)


def enospc(path: Path | None = None) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", None if path is None else str(path))


def batch(value: bytes) -> bytes:
    return build_batch([Record(None, value)])


# -- the state machine --------------------------------------------------------------------------


def test_a_directory_goes_offline_once_and_keeps_its_first_error():
    clock = task.Clock()
    clock.advance(12.5)
    states = LogDirStates([Path("/a"), Path("/b")], time_ms=lambda: int(clock.seconds() * 1000))
    heard = []
    states.add_listener(heard.append)
    assert states.online() == [Path("/a"), Path("/b")] and not states.all_offline()

    assert states.fail(Path("/b"), enospc()) is True
    clock.advance(1)
    assert states.fail(Path("/b"), OSError(errno.EIO, "Input/output error")) is False
    status = states.status(Path("/b"))
    assert status.state is DirState.OFFLINE
    assert status.error == "ENOSPC: No space left on device"
    assert status.offline_since_ms == 12500
    assert [s.path for s in heard] == [Path("/b")]  # told once
    assert states.online() == [Path("/a")] and states.offline() == [Path("/b")]

    states.fail(Path("/a"), "EROFS")
    assert states.all_offline()
    with pytest.raises(KeyError):
        states.fail(Path("/c"), enospc())


def test_the_directory_of_a_failed_file():
    states = LogDirStates([Path("/data/d1"), Path("/data/d10")], time_ms=lambda: 0)
    assert states.dir_containing("/data/d10/t-0/00.log") == Path("/data/d10")
    assert states.dir_containing("/data/d1/t-0/00.log") == Path("/data/d1")
    assert states.dir_containing("/data/d2/x") is None
    assert states.dir_containing(None) is None
    assert describe_io_error(enospc("/data/d1/x")) == \
        "ENOSPC: No space left on device (/data/d1/x)"


# -- the log manager over several directories ----------------------------------------------------


def manager(tmp_path: Path, n: int = 2) -> LogManager:
    return LogManager([tmp_path / f"d{i}" for i in range(n)], LogConfig(), time_ms=lambda: 0)


def test_new_partitions_go_to_the_directory_with_the_fewest(tmp_path):
    lm = manager(tmp_path, 3)
    lm.load()
    for p in range(6):
        lm.get_or_create("t", p)
    assert sorted(lm.partition_counts().values()) == [2, 2, 2]
    assert lm.dir_of("t", 0) == tmp_path / "d0" and lm.dir_of("t", 1) == tmp_path / "d1"
    assert (tmp_path / "d2" / "t-2").is_dir()
    lm.shutdown()
    again = manager(tmp_path, 3)
    assert set(again.load()) == {("t", p) for p in range(6)}
    assert again.dir_of("t", 2) == tmp_path / "d2"
    again.shutdown()


def test_an_offline_directory_is_never_written_again(tmp_path):
    lm = manager(tmp_path)
    lm.load()
    a, b = lm.get_or_create("t", 0), lm.get_or_create("t", 1)  # d0, d1
    a.append_as_leader(batch(b"x"), 0)
    b.append_as_leader(batch(b"y"), 0)
    assert lm.checkpoint() == {}
    d0 = tmp_path / "d0"
    before = {p: p.read_bytes() for p in d0.rglob("*") if p.is_file()}

    assert lm.fail_dir(d0, enospc()) == [("t", 0)]
    assert lm.fail_dir(d0, enospc()) is None
    assert lm.get("t", 0) is None and lm.is_offline("t", 0)
    assert lm.dir_of("t", 0) == d0
    with pytest.raises(LogDirOffline):
        lm.get_or_create("t", 0)  # never re-created empty elsewhere: its data is on d0
    lm.get_or_create("t", 2)  # a new partition goes to the online directory
    assert lm.dir_of("t", 2) == tmp_path / "d1"
    b.append_as_leader(batch(b"z"), 0)
    lm.checkpoint()
    lm.delete("t", 0)  # forgotten, files left alone
    lm.shutdown()
    after = {p: p.read_bytes() for p in d0.rglob("*") if p.is_file()}
    assert after == before
    assert not (d0 / CLEAN_SHUTDOWN).exists()  # the next start recovers it
    assert (tmp_path / "d1" / CLEAN_SHUTDOWN).exists()
    assert "t 2" in (tmp_path / "d1" / RECOVERY_POINTS).read_text()


def test_a_partition_taken_offline_alone_makes_its_directory_recover_at_the_next_start(
        tmp_path):
    """Its directory stays online, but gets no clean-shutdown marker and the partition leaves
    the recovery-point checkpoint: the next start validates that log from offset 0 and cuts it
    at the damage, instead of trusting it (and finding the damage again on a read)."""
    from broker_core.log.checkpoints import read_offsets

    lm = manager(tmp_path, 2)
    lm.load()
    for p in range(4):
        lm.get_or_create("t", p).append_as_leader(build_batch([Record(None, b"v")]), 1)
    lm.checkpoint()
    d = lm.dir_of("t", 0)
    assert lm.fail_partition(("t", 0)) and lm.offline_partitions == {("t", 0): d}
    lm.shutdown()
    assert not (d / CLEAN_SHUTDOWN).exists()
    other = next(x for x in (tmp_path / "d0", tmp_path / "d1") if x != d)
    assert (other / CLEAN_SHUTDOWN).exists()
    assert ("t", 0) not in read_offsets(d / RECOVERY_POINTS)
    assert ("t", 2) in read_offsets(d / RECOVERY_POINTS)  # t-0 and t-2 were placed in d0


def test_a_checkpoint_failure_is_returned_and_the_other_directory_is_written(tmp_path,
                                                                           monkeypatch):
    lm = manager(tmp_path)
    lm.load()
    lm.get_or_create("t", 0)
    lm.get_or_create("t", 1)
    files = lm._checkpoint_files[tmp_path / "d0"]

    def full(offsets):
        raise enospc(tmp_path / "d0" / RECOVERY_POINTS)

    monkeypatch.setattr(files[0][0], "write", full)
    failed = lm.checkpoint()
    assert list(failed) == [tmp_path / "d0"]
    assert "t 1" in (tmp_path / "d1" / RECOVERY_POINTS).read_text()


def test_a_directory_that_cannot_be_loaded_is_offline_and_unknown_partitions_are_refused(
        tmp_path):
    (tmp_path / "d1").write_text("not a directory")
    lm = manager(tmp_path)
    lm.load()
    assert lm.dir_states.offline() == [tmp_path / "d1"]
    assert str(tmp_path / "d1") in lm.load_errors
    # What d1 held is unknown: an empty replica created elsewhere could be made leader.
    with pytest.raises(LogDirOffline, match="could not be loaded"):
        lm.get_or_create("t", 0)
    lm.shutdown()
    assert (tmp_path / "d0" / CLEAN_SHUTDOWN).exists()


def test_an_io_error_while_a_log_is_opened_takes_its_directory_offline(tmp_path, monkeypatch):
    lm = manager(tmp_path)
    lm.load()
    for p in range(4):
        lm.get_or_create("t", p)  # t-0, t-2 in d0; t-1, t-3 in d1
    lm.shutdown()
    real_open = Log.open

    def failing_open(directory, *args, **kwargs):
        if directory.parent == tmp_path / "d1" and directory.name == "t-3":
            raise OSError(errno.EIO, "Input/output error", str(directory))
        return real_open(directory, *args, **kwargs)

    monkeypatch.setattr(Log, "open", failing_open)
    again = manager(tmp_path)
    assert set(again.load()) == {("t", 0), ("t", 2)}
    assert again.dir_states.offline() == [tmp_path / "d1"]
    assert again.get("t", 1) is None  # opened before the error, dropped with its directory
    with pytest.raises(LogDirOffline):
        again.get_or_create("t", 3)
    again.shutdown()


def test_a_single_directory_still_works_as_before(tmp_path):
    lm = LogManager(tmp_path, LogConfig(), time_ms=lambda: 0)
    assert lm.log_dir == tmp_path and lm.log_dirs == [tmp_path]
    lm.load()
    lm.get_or_create("t", 0)
    assert (tmp_path / "t-0").is_dir()
    lm.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN).exists()


# -- the replica manager ------------------------------------------------------------------------


class Harness:
    """Broker 1 leading ``t``-0 (in d0) and ``t``-1 (in d1) with ISR 1, 2, 3, and following
    ``f``-0 (in d0) from broker 2; IO jobs run inline."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = task.Clock()
        self.logs = LogManager([tmp_path / "d0", tmp_path / "d1"], LogConfig(),
                               time_ms=lambda: int(self.clock.seconds() * 1000))
        self.logs.load()
        self.failures: list = []
        cache = MetadataCache()
        self.rm = ReplicaManager(
            1, self.logs, clock=self.clock, io_pool=None, reactor=None,
            topic_log_config=lambda topic: LogConfig(), metadata_cache=cache,
            min_insync_replicas=lambda topic: 2,
            on_log_dir_failure=lambda status, tps: self.failures.append((status.path, tps)),
            connect=lambda host, port: defer.Deferred())  # the leader never answers
        self.rm.apply_leader_and_isr(1, [
            ("t", p, LeaderAndIsrState(1, 1, REPLICAS, REPLICAS, 1, 0)) for p in (0, 1)],
            full=False)
        self.rm.apply_leader_and_isr(1, [
            ("f", 0, LeaderAndIsrState(2, 1, REPLICAS, REPLICAS, 1, 0))],
            full=False, leaders={2: ("127.0.0.1", 1)})
        self.d0, self.d1 = tmp_path / "d0", tmp_path / "d1"
        assert self.logs.dir_of("t", 0) == self.d0 and self.logs.dir_of("t", 1) == self.d1
        assert self.logs.dir_of("f", 0) == self.d0

    def produce(self, acks: int, partition: int, value: bytes = b"v") -> list:
        got: list = []
        self.rm.append(acks, 30000, [("t", partition, batch(value))]).addCallback(got.append)
        return got

    def consume(self, partition: int) -> str | None:
        got: list = []
        self.rm.fetch([("t", partition, 0, 1 << 20, -1)], max_wait_ms=0, min_bytes=1,
                      max_bytes=1 << 20).addCallback(got.append)
        return got[0][0][2].error

    def close(self) -> None:
        self.rm.produce_purgatory.shutdown()
        self.rm.fetch_purgatory.shutdown()
        for f in list(self.rm.fetchers.fetchers.values()):
            f._running = False
        self.logs.shutdown()


@pytest.fixture
def harness(tmp_path):
    h = Harness(tmp_path)
    yield h
    h.close()


def test_an_append_that_fails_takes_the_whole_directory_offline(harness, monkeypatch):
    h = harness
    waiting = h.produce(-1, 0, b"acked-later?")  # acks=all, waits for the followers
    assert waiting == []
    log0 = h.logs.get("t", 0)

    def full(records, epoch):
        raise enospc(log0.directory / "00000000000000000000.log")

    monkeypatch.setattr(log0, "append_as_leader", full)
    answer = h.produce(1, 0)
    assert answer[0][("t", 0)].error == "KAFKA_STORAGE_ERROR"
    # The directory is offline: every partition in it, led or followed, is gone.
    assert h.logs.dir_states.offline() == [h.d0]
    assert h.failures == [(h.d0, [("f", 0), ("t", 0)])]
    assert ("t", 0) not in h.rm.partitions and ("f", 0) not in h.rm.partitions
    assert h.rm.fetchers.following(("f", 0)) is None
    # The waiting acks=all produce was answered (with an error, not an ack).
    assert waiting and waiting[0][("t", 0)].error is not None
    # Later requests are refused with KAFKA_STORAGE_ERROR, not served from the failed disk.
    assert h.produce(1, 0)[0][("t", 0)].error == "KAFKA_STORAGE_ERROR"
    assert h.consume(0) == "KAFKA_STORAGE_ERROR"
    # A LeaderAndIsr for it is refused too, so it is not re-created empty in d1.
    result = h.rm.apply_leader_and_isr(2, [("t", 0, LeaderAndIsrState(
        1, 2, REPLICAS, REPLICAS, 2, 1))], full=False)
    assert result == {("t", 0): "KAFKA_STORAGE_ERROR"}
    assert h.logs.dir_of("t", 0) == h.d0
    # The other directory keeps serving.
    assert h.produce(1, 1)[0][("t", 1)].error is None
    assert h.consume(1) is None
    assert len(h.failures) == 1


def test_a_read_error_takes_the_directory_offline(harness, monkeypatch):
    h = harness
    h.produce(1, 1, b"x")
    log1 = h.logs.get("t", 1)
    log1.high_watermark = 1

    class CorruptBatch(OSError):
        """What a CRC failure on the read path raises (an OSError subclass)."""

    def bad(*args, **kwargs):
        raise CorruptBatch(errno.EIO, "batch at offset 0 fails its CRC")

    monkeypatch.setattr(log1, "read", bad)
    assert h.consume(1) == "KAFKA_STORAGE_ERROR"
    assert h.logs.dir_states.offline() == [h.d1]
    assert h.failures == [(h.d1, [("t", 1)])]


def test_a_follower_append_error_stops_the_fetch_and_the_directory(harness, monkeypatch):
    h = harness
    fetcher = h.rm.fetchers.fetchers[2]
    state = fetcher.partitions[("f", 0)]
    log_f = h.logs.get("f", 0)

    def full(records):
        raise enospc(log_f.directory / "00000000000000000000.log")

    monkeypatch.setattr(log_f, "append_as_follower", full)

    class Answer:
        error_code = 0
        records = batch(b"from the leader")
        high_watermark = 1

    fetcher._handle_partition(("f", 0), state, 0, Answer())
    assert ("f", 0) not in fetcher.partitions
    assert h.logs.dir_states.offline() == [h.d0]
    assert ("t", 0) not in h.rm.partitions  # the leader partition in the same directory too


def test_a_flush_error_and_a_checkpoint_error_take_their_directories_offline(tmp_path,
                                                                           monkeypatch):
    h = Harness(tmp_path)
    try:
        ran: list = []

        def inline(reactor, pool, fn, *args):
            ran.append(fn)
            return defer.maybeDeferred(fn, *args)

        monkeypatch.setattr("broker_core.replica.manager.threads.deferToThreadPool", inline)

        def broken_flush(up_to=None):
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(h.logs.get("t", 1), "flush", broken_flush)
        h.rm._flush(h.logs.get("t", 1))
        assert h.logs.dir_states.offline() == [h.d1]

        def broken_checkpoint():
            return {h.d0: OSError(errno.EROFS, "Read-only file system")}

        monkeypatch.setattr(h.logs, "checkpoint", broken_checkpoint)
        h.rm._checkpoint()
        assert h.logs.dir_states.all_offline()
        assert [d for d, _ in h.failures] == [h.d1, h.d0]
        assert h.logs.dir_states.status(h.d0).error == "EROFS: Read-only file system"
    finally:
        monkeypatch.undo()
        h.close()


# -- the report to the controller ---------------------------------------------------------------


class FlakyStore:
    """The store calls the reporter makes; the first ``fail`` calls fail (ConnectionLost)."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.nodes: dict[str, bytes] = {}
        self.seq = 0
        self.calls = 0

    def _maybe_fail(self) -> defer.Deferred | None:
        self.calls += 1
        if self.fail > 0:
            self.fail -= 1
            return defer.fail(ConnectionLost("no quorum"))
        return None

    def set(self, path, value, version=-1):
        failed = self._maybe_fail()
        if failed is not None:
            return failed
        if path not in self.nodes:
            return defer.fail(NoNode(path))
        self.nodes[path] = value
        return defer.succeed(None)

    def create(self, path, value=b"", ephemeral=False, sequence=False, makepath=False):
        failed = self._maybe_fail()
        if failed is not None:
            return failed
        if sequence:
            path = f"{path}{self.seq:010d}"
            self.seq += 1
        if path in self.nodes:
            return defer.fail(NodeExists(path))
        self.nodes[path] = value
        return defer.succeed(path)

    def delete(self, path, version=-1, recursive=False):
        if path not in self.nodes:
            return defer.fail(NoNode(path))
        del self.nodes[path]
        return defer.succeed(None)

    def notifications(self) -> list[bytes]:
        return [v for p, v in sorted(self.nodes.items())
                if p.startswith(paths.LOG_DIR_EVENT_PREFIX)]


def reporter(store, clock, offline, epoch) -> LogDirFailureReporter:
    return LogDirFailureReporter(2, store, clock, offline=lambda: offline,
                                 broker_epoch=lambda: epoch[0], retry_initial_s=0.25,
                                 retry_max_s=1.0)


def test_the_report_is_retried_on_the_clock_until_the_store_takes_it():
    clock, store = task.Clock(), FlakyStore(fail=4)
    offline = (["/d0"], [("t", 0), ("f", 0)])
    r = reporter(store, clock, offline, [77])
    r.report()
    # 1st attempt failed; retries after 0.25, 0.5, 1.0 then 1.0 (capped) seconds.
    for delay in (0.25, 0.5, 1.0):
        assert r.waiting and store.notifications() == []
        clock.advance(delay)
    assert store.notifications() == [] and r.waiting
    clock.advance(0.5)
    assert store.notifications() == []
    clock.advance(0.5)
    assert not r.waiting and r.reported == 1
    record = paths.OfflineReplicas.from_bytes(store.nodes[paths.offline_replicas(2)])
    assert record == paths.OfflineReplicas(2, 77, ("/d0",), (("f", 0), ("t", 0)))
    assert [paths.LogDirEventNotification.from_bytes(v) for v in store.notifications()] == [
        paths.LogDirEventNotification(2)]
    assert not clock.getDelayedCalls()


def test_nothing_is_reported_before_registration_and_everything_after():
    clock, store = task.Clock(), FlakyStore()
    offline = (["/d0"], [("t", 0)])
    epoch = [-1]
    r = reporter(store, clock, offline, epoch)
    r.report()
    assert store.calls == 0 and not clock.getDelayedCalls()
    epoch[0] = 5
    r.registered()
    assert r.reported == 1
    # A re-registration (a new epoch) reports again, with the new epoch.
    epoch[0] = 9
    r.registered()
    assert r.reported == 2 and len(store.notifications()) == 2
    assert paths.OfflineReplicas.from_bytes(
        store.nodes[paths.offline_replicas(2)]).broker_epoch == 9


def test_a_healthy_start_removes_a_previous_incarnations_record():
    clock, store = task.Clock(), FlakyStore()
    store.nodes[paths.offline_replicas(2)] = b"old"
    r = reporter(store, clock, ([], []), [3])
    r.registered()
    assert paths.offline_replicas(2) not in store.nodes and store.notifications() == []


def test_a_partition_offline_on_its_own_is_reported_again_after_a_re_registration():
    """A partition taken offline alone (its stored bytes failed a read check) leaves no
    directory offline: the record must be written again for the new epoch all the same."""
    clock, store = task.Clock(), FlakyStore()
    epoch = [5]
    r = reporter(store, clock, ([], [("t", 0)]), epoch)
    r.registered()
    epoch[0] = 9
    r.registered()
    record = paths.OfflineReplicas.from_bytes(store.nodes[paths.offline_replicas(2)])
    assert record.broker_epoch == 9 and record.partitions == (("t", 0),)
    assert r.reported == 2


def test_a_record_too_large_for_the_store_gives_up_at_once_instead_of_retrying():
    clock, store = task.Clock(), FlakyStore()
    parts = [("t" * 200, p) for p in range(5000)]  # about 1 MB of JSON
    gave_up: list[str] = []
    r = LogDirFailureReporter(2, store, clock, offline=lambda: (["/d0"], parts),
                              broker_epoch=lambda: 4, give_up=gave_up.append)
    r.report()
    assert len(gave_up) == 1 and "cannot be reported" in gave_up[0]
    assert str(paths.MAX_OFFLINE_RECORD_BYTES) in gave_up[0]
    assert not r.waiting and not clock.getDelayedCalls() and store.notifications() == []


def test_a_report_while_one_is_written_is_written_again_after_it():
    clock = task.Clock()
    held: list[defer.Deferred] = []

    class SlowStore(FlakyStore):
        def set(self, path, value, version=-1):
            d: defer.Deferred = defer.Deferred()
            held.append(d)
            self.nodes[path] = value
            return d

    store = SlowStore()
    offline = (["/d0"], [("t", 0)])
    r = reporter(store, clock, offline, [1])
    r.report()
    r.report()  # while the first is in flight
    assert len(held) == 1
    held[0].callback(None)
    assert len(held) == 2  # written again
    held[1].callback(None)
    assert r.reported == 2 and not r.dirty


@pytest.mark.parametrize("raw", [
    b"{", b"[]", b'{"broker": -1}', b'{"broker": true}', b'{"broker": "1"}'])
def test_a_bad_notification_is_refused(raw):
    with pytest.raises(ValueError):
        paths.LogDirEventNotification.from_bytes(raw)


@pytest.mark.parametrize("raw", [
    b"null",
    b'{"broker": 1, "broker_epoch": 2, "offline_log_dirs": ["/d"], "partitions": 5}',
    b'{"broker": 1, "broker_epoch": 2, "offline_log_dirs": [1], "partitions": []}',
    b'{"broker": 1, "broker_epoch": 2, "offline_log_dirs": [], '
    b'"partitions": [{"topic": "a/b", "partition": 0}]}',
    b'{"broker": 1, "broker_epoch": 2, "offline_log_dirs": [], '
    b'"partitions": [{"topic": "t", "partition": -1}]}',
    b'{"broker": 1, "broker_epoch": 2, "offline_log_dirs": [], "partitions": ['
    + b",".join([b'{"topic": "t", "partition": 0}'] * (paths.MAX_OFFLINE_REPLICAS + 1)) + b"]}",
])
def test_a_bad_offline_record_is_refused(raw):
    with pytest.raises(ValueError):
        paths.OfflineReplicas.from_bytes(raw)
