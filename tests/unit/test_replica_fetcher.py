"""``ReplicaFetcher`` on a ``task.Clock`` against a scripted leader: truncation before fetching,
appending what the leader sends, back-off after errors, and partitions moved mid-request; and
what ``ReplicaFetcherManager`` fetches while its broker shuts down."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from twisted.internet import defer, task
from twisted.internet.error import ConnectionLost as TxConnectionLost

from broker_core.log import Log, LogConfig, LogManager
from broker_core.metadata_cache import MetadataCache
from broker_core.replica.fetcher import FetcherConfig, ReplicaFetcher, ReplicaFetcherManager
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState, Partition
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import Record, assign_offsets, build_batch
from tests.support.manual_time import ManualTime


class FakeLeader:
    def __init__(self) -> None:
        self.requests: list[tuple[int, dict, defer.Deferred]] = []
        self.closed = False
        self.transport = SimpleNamespace(loseConnection=lambda: setattr(self, "closed", True))

    def connect(self, host: str, port: int) -> defer.Deferred:
        self.closed = False
        return defer.succeed(self)

    def request(self, api_key: int, version: int, body: dict) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        self.requests.append((api_key, body, d))
        return d

    def last(self, api_key: int) -> tuple[dict, defer.Deferred]:
        for api, body, d in reversed(self.requests):
            if api == api_key:
                return body, d
        raise AssertionError(f"no request {api_key}")

    def answer_epoch(self, leader_epoch: int, end_offset: int, error: int = 0) -> None:
        body, d = self.last(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        t = body["topics"][0]
        d.callback(SimpleNamespace(topics=[SimpleNamespace(topic=t["topic"], partitions=[
            SimpleNamespace(partition=t["partitions"][0]["partition"], error_code=error,
                            leader_epoch=leader_epoch, end_offset=end_offset)])]))

    def answer_fetch(self, records: bytes | None = None, hw: int = 0, error: int = 0,
                     log_start: int = 0) -> None:
        body, d = self.last(ApiKey.FETCH)
        t = body["topics"][0]
        d.callback(SimpleNamespace(error_code=0, session_id=0, responses=[SimpleNamespace(
            topic=t["topic"], partitions=[SimpleNamespace(
                partition_index=t["partitions"][0]["partition"], error_code=error,
                high_watermark=hw, log_start_offset=log_start, records=records)])]))


def leader_batch(base: int, values: list[bytes], epoch: int) -> bytes:
    data, _ = assign_offsets(build_batch([Record(None, v, [], 1000) for v in values]), base, epoch)
    return bytes(data)


@pytest.fixture
def follower(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=ManualTime())
    for i in range(5):  # offsets 0-4 in epoch 0
        log.append_as_leader(build_batch([Record(None, b"old%d" % i, [], 1000)]), 0)
    p = Partition("t", 0, 2, log)
    p.make_follower(LeaderAndIsrState(1, 1, (1, 2), (1, 2), 1, 0))
    yield p
    log.close()


def make(clock, leader, appended):
    return ReplicaFetcher(2, 1, ("127.0.0.1", 9092), reactor=None, clock=clock,
                          config=FetcherConfig(backoff_ms=1000), on_appended=appended.append,
                          connect=leader.connect)


def test_truncates_by_epoch_then_fetches_from_the_new_end(follower):
    clock, leader, appended = task.Clock(), FakeLeader(), []
    fetcher = make(clock, leader, appended)
    fetcher.add(follower)
    fetcher.start()
    body, _ = leader.last(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    asked = body["topics"][0]["partitions"][0]
    assert body["replica_id"] == 2
    assert (asked["leader_epoch"], asked["current_leader_epoch"]) == (0, 1)
    leader.answer_epoch(0, 3)  # the leader's epoch 0 ended at 3
    assert follower.log.log_end_offset == 3
    body, _ = leader.last(ApiKey.FETCH)
    fetched = body["topics"][0]["partitions"][0]
    assert (fetched["fetch_offset"], fetched["current_leader_epoch"]) == (3, 1)
    leader.answer_fetch(leader_batch(3, [b"n3", b"n4"], 1), hw=5)
    assert follower.log.log_end_offset == 5 and follower.high_watermark == 5
    assert appended == [follower]
    assert follower.log.leader_epochs.latest_entry == (1, 3)
    # The next fetch asks from the new end.
    assert leader.last(ApiKey.FETCH)[0]["topics"][0]["partitions"][0]["fetch_offset"] == 5
    fetcher.remove([("t", 0)])
    leader.answer_fetch(None, hw=5)
    clock.advance(1)


def test_fenced_epoch_backs_off_then_truncates_again(follower):
    clock, leader, appended = task.Clock(), FakeLeader(), []
    fetcher = make(clock, leader, appended)
    fetcher.add(follower)
    fetcher.start()
    leader.answer_epoch(0, 5)
    n = len(leader.requests)
    leader.answer_fetch(error=int(ErrorCode.FENCED_LEADER_EPOCH))
    clock.advance(0.5)
    assert len(leader.requests) == n  # backing off
    clock.advance(0.6)
    assert leader.requests[-1][0] == ApiKey.OFFSET_FOR_LEADER_EPOCH
    fetcher.remove([("t", 0)])


def test_data_for_a_partition_moved_during_the_request_is_dropped(follower):
    clock, leader, appended = task.Clock(), FakeLeader(), []
    fetcher = make(clock, leader, appended)
    fetcher.add(follower)
    fetcher.start()
    leader.answer_epoch(0, 5)
    fetcher.remove([("t", 0)])  # a LeaderAndIsr moved it while the fetch was out
    leader.answer_fetch(leader_batch(5, [b"late"], 1), hw=6)
    assert follower.log.log_end_offset == 5 and appended == []


def test_data_that_does_not_continue_the_log_is_not_appended(follower):
    clock, leader, appended = task.Clock(), FakeLeader(), []
    fetcher = make(clock, leader, appended)
    fetcher.add(follower)
    fetcher.start()
    leader.answer_epoch(0, 5)
    leader.answer_fetch(leader_batch(7, [b"gap"], 1), hw=8)  # offsets 5-6 missing
    assert follower.log.log_end_offset == 5
    assert leader.requests[-1][0] == ApiKey.OFFSET_FOR_LEADER_EPOCH  # finds its place again
    fetcher.remove([("t", 0)])


def test_behind_the_leaders_log_start_starts_over_there(follower):
    clock, leader, appended = task.Clock(), FakeLeader(), []
    fetcher = make(clock, leader, appended)
    fetcher.add(follower)
    fetcher.start()
    leader.answer_epoch(0, 5)
    leader.answer_fetch(error=int(ErrorCode.OFFSET_OUT_OF_RANGE), log_start=100)
    assert follower.log.log_start_offset == 100 and follower.log.log_end_offset == 100
    assert leader.last(ApiKey.FETCH)[0]["topics"][0]["partitions"][0]["fetch_offset"] == 100
    fetcher.remove([("t", 0)])


def answer_session(leader: FakeLeader, session_id: int, rows: list[tuple[int, bytes | None, int]],
                   error: int = 0) -> None:
    """Answer the last Fetch with ``session_id`` and ``(partition, records, hw)`` rows of t."""
    _, d = leader.last(ApiKey.FETCH)
    d.callback(SimpleNamespace(error_code=error, session_id=session_id, responses=[
        SimpleNamespace(topic="t", partitions=[SimpleNamespace(
            partition_index=p, error_code=0, high_watermark=hw, log_start_offset=0,
            records=records) for p, records, hw in rows])] if rows else []))


def fetch_shape(leader: FakeLeader) -> tuple[int, int, list[tuple[int, int]]]:
    body, _ = leader.last(ApiKey.FETCH)
    named = [(p["partition"], p["fetch_offset"]) for t in body["topics"] for p in t["partitions"]]
    return body["session_id"], body["session_epoch"], named


def test_fetch_session_names_only_what_changed_and_starts_over_after_an_error(follower):
    clock, leader, appended = task.Clock(), FakeLeader(), []
    fetcher = make(clock, leader, appended)
    fetcher.add(follower)
    fetcher.start()
    leader.answer_epoch(0, 5)
    assert fetch_shape(leader) == (0, 0, [(0, 5)])  # full, asking for a session
    answer_session(leader, 7, [(0, leader_batch(5, [b"n5"], 1), 6)])
    assert follower.log.log_end_offset == 6 and follower.high_watermark == 6
    # Incremental: the partition's offset moved, so it is named.
    assert fetch_shape(leader) == (7, 1, [(0, 6)])
    answer_session(leader, 7, [])  # nothing new: the leader leaves the partition out
    assert fetch_shape(leader) == (7, 2, [])  # and nothing changed here either
    answer_session(leader, 7, [(0, None, 6)])
    assert fetch_shape(leader) == (7, 3, [])
    # The leader lost the session (a restart): the next request is full again.
    answer_session(leader, 0, [], error=int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    assert fetch_shape(leader) == (0, 0, [(0, 6)])
    fetcher.remove([("t", 0)])


def test_fetch_session_starts_over_after_a_lost_request(follower):
    clock, leader, appended = task.Clock(), FakeLeader(), []
    fetcher = make(clock, leader, appended)
    fetcher.add(follower)
    fetcher.start()
    leader.answer_epoch(0, 5)
    answer_session(leader, 7, [])
    assert fetch_shape(leader) == (7, 1, [])
    n = len(leader.requests)
    # The request may or may not have reached the leader: the session is not to be trusted.
    leader.last(ApiKey.FETCH)[1].errback(TxConnectionLost("gone"))
    clock.advance(1.0)  # backoff_ms
    assert len(leader.requests) > n
    assert fetch_shape(leader) == (0, 0, [(0, 5)])
    fetcher.remove([("t", 0)])


def test_stop_cancels_a_connect_the_leader_never_answers(follower):
    """The leader is stopped or cut off: the connect would wait for its whole timeout, and the
    broker's shutdown with it. stop() cancels it, and no fetch is sent after."""
    clock, connects = task.Clock(), []

    def connect(host, port):
        connects.append(defer.Deferred())
        return connects[-1]

    fetcher = ReplicaFetcher(2, 1, ("127.0.0.1", 9092), reactor=None, clock=clock,
                             config=FetcherConfig(backoff_ms=1000), on_appended=lambda p: None,
                             connect=connect)
    fetcher.add(follower)
    fetcher.start()
    assert len(connects) == 1 and not connects[0].called
    stopped = defer.Deferred.fromCoroutine(fetcher.stop())
    assert stopped.called  # not held by the connect
    assert connects[0].called  # cancelled
    clock.advance(10)
    assert len(connects) == 1  # the loop ended: no new attempt


def test_a_leaving_broker_goes_on_with_its_fetches_but_starts_none(follower, tmp_path):
    clock, leader = task.Clock(), FakeLeader()
    fetchers = ReplicaFetcherManager(2, reactor=None, clock=clock,
                                     config=FetcherConfig(backoff_ms=1000),
                                     on_appended=lambda p: None, connect=leader.connect)
    address = ("127.0.0.1", 9092)
    fetchers.follow(follower, 1, address)
    led_log = Log.open(tmp_path / "led-0", LogConfig(), time_ms=ManualTime())
    led = Partition("led", 0, 2, led_log)
    led.make_follower(LeaderAndIsrState(3, 2, (2, 3), (3,), 2, 1))

    fetchers.begin_leaving()
    # t-0 is fetched from broker 1 already: a LeaderAndIsr that keeps its leader keeps it.
    fetchers.follow(follower, 1, address)
    assert fetchers.following(("t", 0)) == 1
    # The controlled shutdown handed "led" to broker 3: followed, but not fetched.
    fetchers.follow(led, 3, address)
    assert fetchers.following(("led", 0)) is None
    assert 3 not in fetchers.fetchers
    # Nor is a partition fetched once its leader changed.
    fetchers.follow(follower, 3, address)
    assert fetchers.following(("t", 0)) is None

    fetchers.follow(follower, 1, address)  # not fetched now, so not started either
    assert fetchers.following(("t", 0)) is None
    # stop() drops every fetcher at once (its loops end when their requests do).
    defer.Deferred.fromCoroutine(fetchers.stop())
    assert fetchers.fetchers == {}
    fetchers.follow(led, 3, address)
    assert fetchers.following(("led", 0)) is None
    # A manager started again fetches as before.
    fetchers.start()
    fetchers.follow(led, 3, address)
    assert fetchers.following(("led", 0)) == 3
    fetchers.unfollow([("led", 0)])
    led_log.close()


def test_a_leaving_broker_stops_fetching_a_partition_once_out_of_its_isr(tmp_path):
    """Its controlled shutdown takes it out of the ISR of a partition it fetches already: it
    fetches that one no more (its leader would ask to take it back). Another partition whose
    ISR still holds it goes on."""
    clock = task.Clock()
    logs = LogManager(tmp_path, LogConfig(), time_ms=lambda: int(clock.seconds() * 1000))
    logs.load()
    rm = ReplicaManager(2, logs, clock=clock, io_pool=None, reactor=None,
                        topic_log_config=lambda topic: LogConfig(),
                        metadata_cache=MetadataCache(), min_insync_replicas=lambda topic: 1,
                        connect=lambda host, port: defer.Deferred())  # never answers
    leaders = {1: ("127.0.0.1", 1)}
    try:
        rm.apply_leader_and_isr(1, [(t, 0, LeaderAndIsrState(1, 1, (1, 2), (1, 2), 1, 0))
                                    for t in ("a", "b")], full=False, leaders=leaders)
        assert rm.fetchers.following(("a", 0)) == rm.fetchers.following(("b", 0)) == 1
        # Not leaving: a shrunk ISR changes nothing about fetching (it fetches to rejoin).
        rm.apply_leader_and_isr(1, [("a", 0, LeaderAndIsrState(1, 1, (1,), (1, 2), 1, 1))],
                                full=False, leaders=leaders)
        assert rm.fetchers.following(("a", 0)) == 1

        rm.fetchers.begin_leaving()
        rm.apply_leader_and_isr(1, [("b", 0, LeaderAndIsrState(1, 1, (1,), (1, 2), 1, 1))],
                                full=False, leaders=leaders)
        assert rm.fetchers.following(("b", 0)) is None
        # "a" is out of the ISR as well by now: the next LeaderAndIsr for it ends its fetch.
        assert rm.fetchers.following(("a", 0)) == 1
        rm.apply_leader_and_isr(1, [("a", 0, LeaderAndIsrState(1, 1, (1,), (1, 2), 1, 1))],
                                full=False, leaders=leaders)
        assert rm.fetchers.following(("a", 0)) is None
    finally:
        defer.Deferred.fromCoroutine(rm.fetchers.stop())
        rm.produce_purgatory.shutdown()
        rm.fetch_purgatory.shutdown()
        logs.shutdown()
