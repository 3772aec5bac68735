"""AlterConfigs / IncrementalAlterConfigs against three real in-process brokers, in both
metadata modes (ZooKeeper, and the brokers' own quorum): a topic's settings change on every
replica while the brokers run (segments roll at the new size, retention deletes by the new
limit), the dynamic broker defaults reach every log without its own override, CreateTopics'
message.timestamp.type=LogAppendTime and compression.type are what a fetching consumer sees,
and every refusal names the key and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from broker_core import metadata_paths as paths
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Compression,
    decode_records,
    iter_batches,
)
from tests.support.cluster import (
    call,
    create_topic,
    eventually,
    leader_of,
    local_batches,
    produce,
    start_brokers,
    stop_brokers,
)
from tests.support.quorum_brokers import start_quorum_brokers

TOPIC, BROKER = 2, 4
SET, DELETE = 0, 1
#: Retention runs often, so a changed limit is seen applied quickly.
FAST_RETENTION = {"log_retention_check_interval_ms": "100"}


@pytest.fixture(params=["zookeeper", "quorum"])
def brokers(request, tmp_path):
    if request.param == "zookeeper":
        zk_hosts = request.getfixturevalue("zk_hosts")
        started = start_brokers(zk_hosts, tmp_path, 3, **FAST_RETENTION)
    else:
        started = start_quorum_brokers(tmp_path, 3, **FAST_RETENTION)
    running = pytest_twisted.blockon(defer.Deferred.fromCoroutine(started))
    try:
        yield running
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(stop_brokers(running)))


async def incremental(broker: Any, *resources: tuple[int, str, list[tuple[str, int, str | None]]],
                      validate_only: bool = False) -> list[tuple[int, str | None]]:
    resp = await call(broker, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": t, "resource_name": n,
         "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in configs]}
        for t, n, configs in resources], "validate_only": validate_only})
    return [(r.error_code, r.error_message) for r in resp.responses]


async def alter(broker: Any, *resources: tuple[int, str, dict[str, str | None]],
                validate_only: bool = False) -> list[tuple[int, str | None]]:
    resp = await call(broker, ApiKey.ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": t, "resource_name": n,
         "configs": [{"name": k, "value": v} for k, v in configs.items()]}
        for t, n, configs in resources], "validate_only": validate_only})
    return [(r.error_code, r.error_message) for r in resp.responses]


async def replicated(brokers: list[Any], topic: str, configs: Any = ()) -> None:
    await create_topic(brokers[0], topic, rf=3, configs=configs)
    await eventually(lambda: all(b.replicas.get_partition(topic, 0) is not None
                                 for b in brokers) and leader_of(brokers, topic, 0),
                     what=f"{topic} on every broker with a leader")


def logs(brokers: list[Any], topic: str) -> list[Any]:
    return [b.replicas.get_partition(topic, 0).log for b in brokers]


async def stored(broker: Any, path: str) -> dict[str, str] | None:
    if await broker.store.exists(path) is None:
        return None
    return paths.TopicConfig.from_bytes((await broker.store.get(path))[0]).config


@pytest_twisted.ensureDeferred
async def test_a_topics_segment_size_and_retention_change_live_on_every_replica(brokers):
    # The test's records carry 1970 timestamps: time-based retention is off for them.
    await replicated(brokers, "live", configs=[("retention.ms", "-1")])
    assert await incremental(brokers[1], (TOPIC, "live", [("segment.bytes", SET, "100")])) == \
        [(0, None)]
    await eventually(lambda: all(log.config.segment_bytes == 100
                                 for log in logs(brokers, "live")),
                     what="segment.bytes=100 on every replica")
    leader = leader_of(brokers, "live", 0)
    for _ in range(5):  # each batch is larger than a segment may be: one segment each
        assert (await produce(leader, "live", 0, [b"x" * 120])).error_code == 0
    # A follower may append several fetched batches at once (one roll check), so the
    # segment count is the leader's.
    assert len(leader.replicas.get_partition("live", 0).log.segments) == 5
    await eventually(lambda: all(log.log_end_offset == 5 for log in logs(brokers, "live")),
                     what="every record on every replica")
    # retention.bytes: the leader deletes its oldest segments down to the limit.
    assert await incremental(brokers[2], (TOPIC, "live", [("retention.bytes", SET, "1")])) == \
        [(0, None)]
    await eventually(lambda: all(log.config.retention_bytes == 1
                                 for log in logs(brokers, "live")),
                     what="retention.bytes=1 on every replica")
    await eventually(lambda: leader.replicas.get_partition("live", 0).log.log_start_offset == 4,
                     what="retention by the new limit on the leader")
    assert await stored(brokers[0], paths.topic_config("live")) == {
        "retention.ms": "-1", "segment.bytes": "100", "retention.bytes": "1"}
    # DELETE: back to the broker's default.
    assert await incremental(brokers[0], (TOPIC, "live", [("retention.bytes", DELETE, None),
                                                          ("segment.bytes", DELETE, None)])) \
        == [(0, None)]
    await eventually(lambda: all(log.config.retention_bytes == -1
                                 and log.config.segment_bytes == 1 << 30
                                 for log in logs(brokers, "live")),
                     what="the defaults again on every replica")


@pytest_twisted.ensureDeferred
async def test_dynamic_broker_defaults_reach_every_log_without_its_own_override(brokers):
    await replicated(brokers, "plain")
    await replicated(brokers, "own", configs=[("retention.ms", "5000000")])
    assert await alter(brokers[0], (BROKER, "", {"log.retention.ms": "12345000"})) == [(0, None)]
    await eventually(lambda: all(log.config.retention_ms == 12345000
                                 for log in logs(brokers, "plain")),
                     what="the cluster-wide default on every broker")
    assert all(log.config.retention_ms == 5000000 for log in logs(brokers, "own"))
    # One broker's own dynamic config wins over the cluster-wide default, on that broker only.
    node = brokers[2]
    assert await alter(brokers[0], (BROKER, str(node.broker_id),
                                    {"log.retention.ms": "777000"})) == [(0, None)]
    await eventually(lambda: node.replicas.get_partition("plain", 0).log.config.retention_ms
                     == 777000, what="the broker's own dynamic config")
    assert [b.replicas.get_partition("plain", 0).log.config.retention_ms
            for b in brokers[:2]] == [12345000, 12345000]
    # min.insync.replicas: produce checks follow the dynamic value at once.
    assert await incremental(brokers[0], (BROKER, "", [("min.insync.replicas", SET, "4")])) == \
        [(0, None)]
    leader = leader_of(brokers, "plain", 0)
    await eventually(lambda: leader.effective_config.min_insync_replicas == 4,
                     what="the dynamic min.insync.replicas on the leader")
    resp = await produce(leader, "plain", 0, [b"v"])  # acks=all, three in-sync replicas
    assert resp.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert await incremental(brokers[0], (BROKER, "", [("min.insync.replicas", DELETE, None)])) \
        == [(0, None)]
    await eventually(lambda: leader.effective_config.min_insync_replicas == 1,
                     what="the static min.insync.replicas again")
    assert (await produce(leader, "plain", 0, [b"v"])).error_code == 0
    # AlterConfigs replaces the whole set: an empty set removes the defaults.
    assert await alter(brokers[1], (BROKER, "", {})) == [(0, None)]
    await eventually(lambda: brokers[0].replicas.get_partition("plain", 0).log.config
                     .retention_ms == 7 * 24 * 3600 * 1000, what="the static default again")


@pytest_twisted.ensureDeferred
async def test_log_append_time_and_the_topic_codec_are_what_a_consumer_fetches(brokers):
    await replicated(brokers, "stamped", configs=[("message.timestamp.type", "LogAppendTime"),
                                                  ("compression.type", "zstd")])
    leader = leader_of(brokers, "stamped", 0)
    resp = await produce(leader, "stamped", 0, [b"one", b"two"])  # CreateTime 1000, no codec
    assert resp.error_code == 0 and resp.log_append_time_ms > 1000
    fetched = await call(leader, ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": "stamped", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []})
    data = fetched.responses[0].partitions[0].records
    (info,) = iter_batches(data)
    assert (info.compression, info.timestamp_type) == (Compression.ZSTD,
                                                       TIMESTAMP_LOG_APPEND_TIME)
    assert [(r.value, r.timestamp) for r in decode_records(data)] == [
        (b"one", resp.log_append_time_ms), (b"two", resp.log_append_time_ms)]
    # The followers hold the leader's bytes.
    await eventually(lambda: all(local_batches(b, "stamped", 0) == [bytes(data)]
                                 for b in brokers), what="the batch on every replica")
    # Back to the producer's codec and timestamps, live.
    assert await alter(brokers[0], (TOPIC, "stamped", {})) == [(0, None)]
    await eventually(lambda: leader.replicas.get_partition("stamped", 0).log.config
                     .compression_type == "producer", what="the change on the leader")
    resp = await produce(leader, "stamped", 0, [b"three"])
    assert resp.error_code == 0 and resp.log_append_time_ms == -1
    last = list(iter_batches(local_batches(leader, "stamped", 0)[-1]))[0]
    assert (last.compression, last.timestamp_type, last.max_timestamp) == (
        Compression.NONE, TIMESTAMP_CREATE_TIME, 1000)


@pytest_twisted.ensureDeferred
async def test_refusals_name_the_key_and_change_nothing(brokers):
    b = brokers[0]
    await replicated(brokers, "kept", configs=[("retention.ms", "60000")])
    before = await stored(b, paths.topic_config("kept"))
    results = await incremental(
        b, (TOPIC, "kept", [("retention.ms", SET, "soon")]),
        (TOPIC, "ghost", [("retention.ms", SET, "1")]),
        (BROKER, "", [("listeners", SET, "tcp:1")]),
        (TOPIC, "kept", [("segment.ms", SET, "1")]))
    assert results == [
        (ErrorCode.INVALID_REQUEST, "the resource is named more than once"),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic 'ghost' does not exist"),
        (ErrorCode.POLICY_VIOLATION, results[2][1]),
        (ErrorCode.INVALID_REQUEST, "the resource is named more than once")]
    assert results[2][1].startswith("broker key 'listeners' cannot change while the broker runs")
    (result,) = await incremental(b, (TOPIC, "kept", [("retention.ms", SET, "soon"),
                                                      ("segment.ms", SET, "1")]))
    assert result == (ErrorCode.INVALID_CONFIG, "invalid value 'soon' for 'retention.ms': "
                                                "expected an integer ≥ -1 (-1: no limit)")
    (result,) = await alter(b, (TOPIC, "kept", {"min.compaction.lag.ms": "1"}))
    assert result == (ErrorCode.INVALID_CONFIG, "topic config key 'min.compaction.lag.ms' is "
                                                "not supported: Sluice does not compact logs")
    # validate_only checks and writes nothing.
    assert await alter(b, (TOPIC, "kept", {"retention.ms": "1"}), validate_only=True) == \
        [(0, None)]
    assert await stored(b, paths.topic_config("kept")) == before
    assert await stored(b, paths.broker_config("<default>")) is None
    # CreateTopics refuses an unsupported key with the reason, and creates nothing.
    resp = await call(b, ApiKey.CREATE_TOPICS, 5, {"topics": [
        {"name": "refused", "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "min.compaction.lag.ms", "value": "1000"}]}],
        "timeout_ms": 5000, "validate_only": False})
    assert (resp.topics[0].error_code, resp.topics[0].error_message) == (
        ErrorCode.INVALID_CONFIG, "topic config key 'min.compaction.lag.ms' is not "
        "supported: Sluice does not compact logs")
    assert await b.store.exists(paths.topic("refused")) is None


@pytest_twisted.ensureDeferred
async def test_a_recreated_topic_starts_from_its_own_configs(brokers):
    await replicated(brokers, "reborn", configs=[("retention.ms", "1000000")])
    assert await alter(brokers[0], (TOPIC, "reborn", {"retention.ms": "2000000"})) == [(0, None)]
    await eventually(lambda: all(log.config.retention_ms == 2000000
                                 for log in logs(brokers, "reborn")), what="the change")
    resp = await call(brokers[0], ApiKey.DELETE_TOPICS, 5, {"topic_names": ["reborn"],
                                                            "timeout_ms": 10000})
    assert resp.responses[0].error_code == 0
    await eventually(lambda: not any("reborn" in b.cache.topics or "reborn" in b.topic_configs
                                     for b in brokers), what="the topic gone everywhere")
    await replicated(brokers, "reborn")
    await eventually(lambda: all(log.config.retention_ms == 7 * 24 * 3600 * 1000
                                 for log in logs(brokers, "reborn")),
                     what="the recreated topic on the broker defaults")


@pytest_twisted.ensureDeferred
async def test_a_record_too_far_from_the_leaders_clock_is_refused(brokers):
    await replicated(brokers, "clocked", configs=[("message.timestamp.difference.max.ms",
                                                   "3600000")])
    leader = leader_of(brokers, "clocked", 0)
    resp = await produce(leader, "clocked", 0, [b"old"])  # timestamp 1000: 1970
    assert resp.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [(e.batch_index, e.batch_index_error_message) for e in resp.record_errors] == [
        (0, resp.record_errors[0].batch_index_error_message)]
    assert "message.timestamp.difference.max.ms is 3600000" in \
        resp.record_errors[0].batch_index_error_message
    assert leader.replicas.get_partition("clocked", 0).log.log_end_offset == 0
    # Lifting the bound live lets the same batch in.
    assert await incremental(brokers[0], (TOPIC, "clocked", [
        ("message.timestamp.difference.max.ms", DELETE, None)])) == [(0, None)]
    await eventually(lambda: leader.replicas.get_partition("clocked", 0).log.config
                     .message_timestamp_difference_max_ms == (1 << 63) - 1,
                     what="the bound lifted on the leader")
    assert (await produce(leader, "clocked", 0, [b"old"])).error_code == 0


async def produce_at(broker: Any, topic: str, timestamp_ms: int) -> Any:
    """One Produce of one record stamped ``timestamp_ms`` (CreateTime)."""
    from broker_core.wire.records import Record, build_batch

    batch = build_batch([Record(b"k", b"v", [], timestamp_ms)])
    resp = await call(broker, ApiKey.PRODUCE, 8, {"acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return resp.responses[0].partition_responses[0]


@pytest_twisted.ensureDeferred
async def test_the_timestamp_bounds_refuse_and_change_live(brokers):
    import time

    await replicated(brokers, "bounded")
    leader = leader_of(brokers, "bounded", 0)
    log = leader.replicas.get_partition("bounded", 0).log
    # Kafka 4's default: at most an hour ahead of the leader's clock (two hours is well past
    # it whatever the test's pace); the past is unbounded.
    ahead = int(time.time() * 1000) + 2 * 3_600_000
    resp = await produce_at(leader, "bounded", ahead)
    assert resp.error_code == ErrorCode.INVALID_TIMESTAMP
    assert "message.timestamp.after.max.ms is 3600000" in \
        resp.record_errors[0].batch_index_error_message
    assert (await produce_at(leader, "bounded", 1000)).error_code == 0
    assert log.log_end_offset == 1
    # The topic's own bounds, set live: the future opened, the past closed.
    assert await incremental(brokers[0], (TOPIC, "bounded", [
        ("message.timestamp.after.max.ms", SET, str((1 << 63) - 1)),
        ("message.timestamp.before.max.ms", SET, "86400000")])) == [(0, None)]
    await eventually(lambda: log.config.message_timestamp_before_max_ms == 86400000,
                     what="the bounds on the leader")
    assert (await produce_at(leader, "bounded", ahead)).error_code == 0
    resp = await produce_at(leader, "bounded", 1000)
    assert resp.error_code == ErrorCode.INVALID_TIMESTAMP
    assert "message.timestamp.before.max.ms is 86400000" in \
        resp.record_errors[0].batch_index_error_message
    assert log.log_end_offset == 2
    # DescribeConfigs shows both with Kafka's type and their documentation.
    resp = await call(brokers[0], ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": TOPIC, "resource_name": "bounded", "configuration_keys": [
            "message.timestamp.before.max.ms", "message.timestamp.after.max.ms"]}],
        "include_synonyms": False, "include_documentation": True})
    found = {c.name: (c.value, c.config_source, c.config_type, bool(c.documentation))
             for c in resp.results[0].configs}
    assert found == {"message.timestamp.before.max.ms": ("86400000", 1, 5, True),
                     "message.timestamp.after.max.ms": (str((1 << 63) - 1), 1, 5, True)}
    # The broker-level default, changed live for every broker, reaches a topic without its
    # own override.
    await replicated(brokers, "defaulted")
    assert await incremental(brokers[0], (BROKER, "", [
        ("log.message.timestamp.after.max.ms", SET, str((1 << 63) - 1))])) == [(0, None)]
    other = leader_of(brokers, "defaulted", 0)
    await eventually(lambda: other.replicas.get_partition("defaulted", 0).log.config
                     .message_timestamp_after_max_ms == (1 << 63) - 1,
                     what="the broker default on the leader")
    assert (await produce_at(other, "defaulted", ahead)).error_code == 0
