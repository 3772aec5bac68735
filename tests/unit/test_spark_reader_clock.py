"""The Spark reader's retry, deadline and poll-timeout paths (consumer_client/spark/reader.py)
on a test clock whose sleep advances it: no real waiting. The broker is a scripted server on a
real socket (tests/support/scripted_broker.py) answering what a real broker only answers by
chance (a leader that never settles, a log that ends early); tests/spark reads a real cluster.
"""

from __future__ import annotations

import pytest

from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import Record, build_batch
from consumer_client.spark.offsets import EARLIEST, OffsetRange
from consumer_client.spark.options import Subscription
from consumer_client.spark.reader import (
    Cluster,
    DataLossError,
    SluiceSourceError,
    read_messages,
)
from tests.support.scripted_broker import FakeClock, ScriptedBroker, metadata

NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER


class Script:
    """Answers for one partition ``t-0`` led by broker 1 (the scripted server itself):
    ``list_offsets`` and ``fetches`` are lists of answers taken in order (the last one
    repeats)."""

    def __init__(self, clock: FakeClock, *, leader: int = 1, partition_error: int = 0,
                 list_offsets: list[tuple[int, int]] | None = None,
                 fetches: list[dict] | None = None) -> None:
        self.clock = clock
        self.leader, self.partition_error = leader, partition_error
        self.list_offsets = list_offsets or [(0, 0)]  # (error, offset)
        self.fetches = fetches or []
        self.port = 0

    def __call__(self, key: int, body: object) -> dict | None:
        if key == ApiKey.METADATA:
            return metadata(self.port, {"t": [(self.leader, self.partition_error)]})
        if key == ApiKey.LIST_OFFSETS:
            err, offset = _take(self.list_offsets)
            return {"topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "error_code": err, "offset": offset}]}]}
        if key == ApiKey.FETCH:
            answer = _take(self.fetches)
            if not answer.get("records") and not answer.get("error"):
                # An empty answer comes after the broker's long poll: max_wait_ms on the clock.
                self.clock.sleep(body.max_wait_ms / 1000)
            return {"responses": [{"topic": "t", "partitions": [
                {"partition_index": 0, "high_watermark": answer.get("hw", 0),
                 "error_code": answer.get("error", 0), "records": answer.get("records")}]}]}
        raise AssertionError(f"unexpected request {key}")


def _take(answers: list):
    return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _run(script: Script, clock: FakeClock, **kw):
    broker = ScriptedBroker(script)
    script.port = broker.port
    cluster = Cluster(broker.address, clock=clock, **kw)
    return broker, cluster


def _batch(first: int, n: int) -> bytes:
    return build_batch([Record(b"k", b"v%d" % i) for i in range(first, first + n)],
                       base_offset=first)


def test_a_leader_error_is_retried_with_backoff_until_the_deadline_names_the_partition(clock):
    script = Script(clock, list_offsets=[(NOT_LEADER, -1)])
    broker, cluster = _run(script, clock, request_timeout_s=5.0)
    with broker:
        try:
            with pytest.raises(SluiceSourceError, match=r"could not look up offsets of 1 "
                               r"partitions: t-0 on broker 1: NOT_LEADER_OR_FOLLOWER"):
                cluster.earliest([("t", 0)])
        finally:
            cluster.close()
    # 50 ms doubling to 1 s, then 1 s, until the 5 s deadline has passed.
    assert clock.sleeps[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    assert set(clock.sleeps[6:]) == {1.0} and clock.now > 5.0
    assert sum(clock.sleeps[:-1]) <= 5.0  # no wait past the deadline's check


def test_a_leader_error_then_an_answer_costs_one_backoff(clock):
    script = Script(clock, list_offsets=[(NOT_LEADER, -1), (0, 7)])
    broker, cluster = _run(script, clock)
    with broker:
        try:
            assert cluster.earliest([("t", 0)]) == {("t", 0): 7}
        finally:
            cluster.close()
    assert clock.sleeps == [0.05]


def test_a_fetch_that_never_progresses_ends_at_the_poll_timeout(clock):
    script = Script(clock, fetches=[{"error": NOT_LEADER}])
    broker, cluster = _run(script, clock)
    with broker:
        try:
            with pytest.raises(SluiceSourceError, match=r"reading t-0 offsets \[0, 10\) made no "
                               r"progress for 3s \(kafkaConsumer.pollTimeoutMs\): broker 1 "
                               r"answered NOT_LEADER_OR_FOLLOWER"):
                list(read_messages(cluster, OffsetRange("t", 0, 0, 10), poll_timeout_s=3.0))
        finally:
            cluster.close()
    assert clock.now > 3.0 and clock.sleeps[0] == 0.05


def test_a_leaderless_partition_ends_at_the_poll_timeout_saying_so(clock):
    script = Script(clock, leader=-1, partition_error=ErrorCode.LEADER_NOT_AVAILABLE)
    broker, cluster = _run(script, clock)
    with broker:
        try:
            with pytest.raises(SluiceSourceError, match="t-0 has no leader"):
                list(read_messages(cluster, OffsetRange("t", 0, 0, 10), poll_timeout_s=2.0))
        finally:
            cluster.close()
    assert not broker.of(ApiKey.FETCH)  # never asked a broker that does not lead


def test_records_after_a_leader_error_are_read_once_in_order(clock):
    script = Script(clock, fetches=[{"error": NOT_LEADER},
                                    {"records": _batch(0, 5), "hw": 8},
                                    {"records": _batch(5, 3), "hw": 8}])
    broker, cluster = _run(script, clock)
    with broker:
        try:
            chunks = list(read_messages(cluster, OffsetRange("t", 0, EARLIEST, 8)))
        finally:
            cluster.close()
    assert [m.offset for c in chunks for m in c] == list(range(8))
    assert [m.value for c in chunks for m in c] == [b"v%d" % i for i in range(8)]
    assert clock.sleeps == [0.05]  # one backoff, after the leader error
    assert [f.topics[0].partitions[0].fetch_offset for f in broker.of(ApiKey.FETCH)] == [
        0, 0, 5]


def test_a_log_that_ends_before_the_range_is_data_loss_at_the_deadline(clock):
    script = Script(clock, fetches=[{"hw": 4}], list_offsets=[(0, 0)])
    broker, cluster = _run(script, clock)
    with broker:
        try:
            with pytest.raises(DataLossError, match=r"offsets \[4, 10\) of t-0 cannot be read: "
                               r"the partition ends at 4"):
                list(read_messages(cluster, OffsetRange("t", 0, 4, 10), poll_timeout_s=5.0,
                                   max_wait_ms=500))
            # Without failOnDataLoss the read just stops there.
            assert list(read_messages(cluster, OffsetRange("t", 0, 4, 10), poll_timeout_s=5.0,
                                      fail_on_data_loss=False)) == []
        finally:
            cluster.close()
    assert clock.sleeps and set(clock.sleeps) == {0.5}  # only the broker's long polls


def test_metadata_is_asked_again_only_when_older_than_its_max_age(clock):
    script = Script(clock)
    broker, cluster = _run(script, clock, metadata_max_age_s=1.0)
    sub = Subscription(topics=("t",))
    with broker:
        try:
            assert cluster.partitions_of(sub) == [("t", 0)]
            clock.now += 0.5
            assert cluster.partitions_of(sub) == [("t", 0)]
            assert len(broker.of(ApiKey.METADATA)) == 1
            clock.now += 0.6
            assert cluster.partitions_of(sub) == [("t", 0)]
            assert len(broker.of(ApiKey.METADATA)) == 2
        finally:
            cluster.close()
