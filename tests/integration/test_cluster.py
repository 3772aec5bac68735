"""In-process brokers against a real ZooKeeper: controller election and failover, topic
creation, deletion and partition addition, produce/fetch/list-offsets through the real wire
protocol, and the protocol's errors for bad input."""

from __future__ import annotations

import socket
import struct

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from broker_core import metadata_paths as paths
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import Record, build_batch, decode_records
from tests.support.cluster import (
    call,
    connect,
    controller_of,
    create_topic,
    eventually,
    leader_of,
    running_brokers,
    start_brokers,
    stop_brokers,
)

led = leader_of


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 3)


@pytest_twisted.ensureDeferred
async def test_one_controller_elected_and_metadata_lists_brokers(brokers):
    ctrl = await eventually(lambda: controller_of(brokers), what="one active controller")
    md = await eventually(lambda: call(brokers[0], ApiKey.METADATA, 9, {"topics": None}),
                          what="metadata")
    await eventually(lambda: len(brokers[2].cache.brokers) == 3, what="cache has 3 brokers")
    md = await call(brokers[2], ApiKey.METADATA, 9, {"topics": None})
    assert sorted(b.node_id for b in md.brokers) == [1, 2, 3]
    assert md.controller_id == ctrl.broker_id
    data, _ = await brokers[0].store.get(paths.CONTROLLER_EPOCH)
    assert int(data) == ctrl.controller.epoch >= 1


@pytest_twisted.ensureDeferred
async def test_create_produce_fetch_list_offsets(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "orders", partitions=3)
    await eventually(lambda: all(led(brokers, "orders", p) for p in range(3)),
                     what="leaders for every partition")
    # Leaders are spread over the brokers.
    assert len({led(brokers, "orders", p).broker_id for p in range(3)}) == 3
    leader = led(brokers, "orders", 1)
    other = next(b for b in brokers if b is not leader)
    batch = build_batch([Record(b"k%d" % i, b"v%d" % i, [("h", b"x")], 1000 + i)
                         for i in range(5)])
    body = {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": "orders", "partition_data": [{"index": 1, "records": batch}]}]}
    resp = await call(leader, ApiKey.PRODUCE, 8, body)
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (0, 0)
    resp = await call(leader, ApiKey.PRODUCE, 8, body)
    assert resp.responses[0].partition_responses[0].base_offset == 5
    # A broker that does not lead the partition refuses it.
    resp = await call(other, ApiKey.PRODUCE, 8, body)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    fetch = await call(leader, ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "topics": [{"topic": "orders", "partitions": [
            {"partition": 1, "fetch_offset": 3, "partition_max_bytes": 1 << 20}]}]})
    p = fetch.responses[0].partitions[0]
    assert p.error_code == 0 and p.high_watermark == 10
    recs = [r for r in decode_records(p.records) if r.offset >= 3]
    assert [r.offset for r in recs] == list(range(3, 10))
    assert recs[0].value == b"v3" and recs[0].headers == [("h", b"x")]
    offsets = await call(leader, ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "topics": [
        {"name": "orders", "partitions": [{"partition_index": 1, "timestamp": -1},
                                          {"partition_index": 1, "timestamp": -2}]}]})
    assert [x.offset for x in offsets.topics[0].partitions] == [10, 0]


@pytest_twisted.ensureDeferred
async def test_long_poll_fetch_waits_for_data(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "poll", partitions=1)
    leader = await eventually(lambda: led(brokers, "poll", 0), what="leader")
    proto = await connect(leader)
    waiting = proto.request(ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 10000, "min_bytes": 1, "max_bytes": 1 << 20,
        "topics": [{"topic": "poll", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    assert not waiting.called
    await call(leader, ApiKey.PRODUCE, 8, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "poll", "partition_data": [
            {"index": 0, "records": build_batch([Record(None, b"wake", [], 1)])}]}]})
    resp = await waiting
    proto.transport.loseConnection()
    assert decode_records(resp.responses[0].partitions[0].records)[0].value == b"wake"


@pytest_twisted.ensureDeferred
async def test_bad_input_gets_errors_and_broker_keeps_serving(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "bad", partitions=1)
    leader = await eventually(lambda: led(brokers, "bad", 0), what="leader")
    good = build_batch([Record(None, b"ok", [], 1)])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # breaks the CRC
    resp = await call(leader, ApiKey.PRODUCE, 8, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "bad", "partition_data": [{"index": 0, "records": bytes(corrupt)}]},
        {"name": "nope", "partition_data": [{"index": 0, "records": good}]}]})
    codes = [r.partition_responses[0].error_code for r in resp.responses]
    assert codes == [ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert led(brokers, "bad", 0).replicas.get_partition("bad", 0).log.log_end_offset == 0

    port = leader.port.getHost().port
    # Garbage, an oversized frame and an unknown api key each close only their connection.
    for payload in (struct.pack(">i", 8) + b"\xff" * 8,
                    struct.pack(">i", 200 * 1024 * 1024),
                    struct.pack(">ihhi", 10, 9999, 0, 1) + b"\x00\x00"):
        assert await _exchange(port, payload) == b""
    # ApiVersions at an unknown version answers UNSUPPORTED_VERSION with our ranges (KIP-511).
    body = await _exchange(port, struct.pack(">ihhih", 10, 18, 99, 7, -1))
    assert struct.unpack(">iih", body[:10]) == (len(body) - 4, 7, ErrorCode.UNSUPPORTED_VERSION)
    # ...and the broker still serves.
    resp = await call(leader, ApiKey.PRODUCE, 8, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "bad", "partition_data": [{"index": 0, "records": good}]}]})
    assert resp.responses[0].partition_responses[0].error_code == 0


def _exchange(port, payload):
    """Send raw bytes from a worker thread (the reactor must keep running) and return the first
    response frame, or b"" if the broker closed the connection."""
    from twisted.internet import threads

    def run():
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(payload)
            buf = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    return b""
                if not chunk:
                    return b""
                buf += chunk
                if len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                    return buf

    return threads.deferToThread(run)


@pytest_twisted.ensureDeferred
async def test_controller_failover_and_offline_partitions(brokers):
    first = await eventually(lambda: controller_of(brokers), what="controller")
    epoch = first.controller.epoch
    await create_topic(brokers[0], "fo", partitions=3)
    await eventually(lambda: all(led(brokers, "fo", p) for p in range(3)), what="leaders")
    victim_parts = [p for p in range(3) if led(brokers, "fo", p) is first]
    await first.stopService()
    rest = [b for b in brokers if b is not first]
    new = await eventually(lambda: controller_of(rest), timeout=30, what="new controller")
    assert new.controller.epoch > epoch
    # Single-copy partitions of the dead broker go offline (leader -1) in every cache.
    for p in victim_parts:
        await eventually(lambda p=p: all(b.cache.partition("fo", p).leader == -1 for b in rest),
                         what="offline partition in metadata")
    assert new.metrics.registry.get_sample_value("sluice_offline_partitions") == len(victim_parts)
    # The surviving leaders still serve.
    for p in range(3):
        if p not in victim_parts:
            assert led(rest, "fo", p) is not None


@pytest_twisted.ensureDeferred
async def test_delete_topic_and_add_partitions(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "grow", partitions=2)
    await create_topic(brokers[0], "gone", partitions=3)
    await eventually(lambda: all(led(brokers, "gone", p) for p in range(3)), what="leaders")
    dirs = [b.log_dir / f"gone-{p}" for b in brokers for p in range(3)
            if (b.log_dir / f"gone-{p}").exists()]
    assert len(dirs) == 3
    resp = await call(brokers[1], ApiKey.DELETE_TOPICS, 4, {"topic_names": ["gone"],
                                                            "timeout_ms": 10000})
    assert resp.responses[0].error_code == 0
    await eventually(lambda: not any(d.exists() for d in dirs), what="partition dirs deleted")
    store = brokers[0].store

    async def znodes_gone():
        return (await store.exists(paths.topic("gone")) is None
                and await store.exists(paths.delete_topic("gone")) is None
                and await store.exists(paths.topic_config("gone")) is None)

    await eventually(lambda: defer.Deferred.fromCoroutine(znodes_gone()),
                     what="topic znodes deleted")
    await eventually(lambda: all(not b.cache.has_topic("gone") for b in brokers),
                     what="topic gone from metadata")

    # validate_only runs every check and writes nothing.
    resp = await call(brokers[2], ApiKey.CREATE_PARTITIONS, 2, {
        "topics": [{"name": "grow", "count": 4, "assignments": None},
                   {"name": "grow", "count": 1, "assignments": None},
                   {"name": "nope", "count": 4, "assignments": None}],
        "timeout_ms": 10000, "validate_only": True})
    assert [r.error_code for r in resp.results] == [
        0, ErrorCode.INVALID_PARTITIONS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert await brokers[0].store.exists(paths.partitions_add_topic("grow")) is None
    assert sorted(brokers[0].cache.topics["grow"]) == [0, 1]

    resp = await call(brokers[2], ApiKey.CREATE_PARTITIONS, 2, {
        "topics": [{"name": "grow", "count": 4, "assignments": None}], "timeout_ms": 10000,
        "validate_only": False})
    assert resp.results[0].error_code == 0, resp
    await eventually(lambda: all(led(brokers, "grow", p) for p in range(4)),
                     what="new partitions have leaders")
    data, _ = await brokers[0].store.get(paths.topic("grow"))
    assert sorted(paths.TopicAssignment.from_bytes(data).partitions) == [0, 1, 2, 3]
    assert await brokers[0].store.get_children(paths.PARTITIONS_ADD) == []


@pytest_twisted.ensureDeferred
async def test_zookeeper_down_at_start_fails_with_clear_message(tmp_path):
    from broker_core.broker import BrokerService
    from tests.support.cluster import broker_config, free_port

    cfg = broker_config(1, f"127.0.0.1:{free_port()}", tmp_path / "b",
                        zookeeper_connection_timeout_ms="1500")
    svc = BrokerService(cfg, reactor=reactor)
    svc.reactor = _NoStop(reactor)
    with pytest.raises(Exception, match="could not reach ZooKeeper"):
        await svc._start()
    svc.io_pool.stop()


class _NoStop:
    def __init__(self, r):
        self._r = r

    def __getattr__(self, name):
        return getattr(self._r, name)


def _scrape(port: int) -> dict[str, float]:
    """GET /metrics (blocking; run off the reactor) into {'name{labels}': value}."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


@pytest_twisted.ensureDeferred
async def test_metrics_endpoint_reports_a_live_broker(zk_hosts, tmp_path):
    from twisted.internet import threads

    (broker,) = await start_brokers(zk_hosts, tmp_path, 1,
                                    metrics_listener="tcp:0:interface=127.0.0.1")
    try:
        await eventually(lambda: broker.controller.active, what="controller")
        await create_topic(broker, "metered", partitions=2)
        await eventually(lambda: led([broker], "metered", 1), what="leader")
        batch = build_batch([Record(None, b"x" * 100, [], 1000 + i) for i in range(10)])
        resp = await call(broker, ApiKey.PRODUCE, 8, {"acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": "metered", "partition_data": [{"index": 1, "records": batch}]}]})
        assert resp.responses[0].partition_responses[0].error_code == 0

        port = broker.metrics_port.getHost().port
        m = await threads.deferToThread(_scrape, port)
        assert m['sluice_requests_total{api="PRODUCE"}'] >= 1
        assert m['sluice_request_duration_seconds_count{api="PRODUCE"}'] >= 1
        assert m['sluice_bytes_in_total{topic="metered"}'] == len(batch)
        assert m['sluice_log_end_offset{partition="1",topic="metered"}'] == 10
        assert m['sluice_log_end_offset{partition="0",topic="metered"}'] == 0
        assert m['sluice_log_size_bytes{partition="1",topic="metered"}'] >= len(batch)
        assert m["sluice_partitions_led"] == 2
        assert m["sluice_active_controller"] == 1
        assert m['sluice_zookeeper_session_state{sluice_zookeeper_session_state="connected"}'] == 1
    finally:
        await stop_brokers([broker])
