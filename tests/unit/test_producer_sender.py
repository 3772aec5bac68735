"""The Twisted producer's sender on a ``task.Clock`` with a scripted cluster: linger, batching
into requests, retries with metadata refresh, errors that name partition and broker,
backpressure, unknown topics, acks=0, flush and close."""

from __future__ import annotations

import pytest
from twisted.internet.error import ConnectionLost

from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import decode_batch
from consumer_client.producer import RecordMetadata
from consumer_client.producer_errors import (
    BufferExhausted,
    DeliveryTimeout,
    ProduceError,
    ProducerClosed,
    RecordTooLarge,
    UnknownTopic,
)
from tests.support.producer_sender_harness import answer, make, results


def records_of(body):
    return {(t["name"], p["index"]): [r.value for r in decode_batch(p["records"])]
            for t in body["topic_data"] for p in t["partition_data"]}






def test_records_linger_then_go_in_one_request_per_broker():
    clock, cluster, p = make(linger_ms=5)
    ds = [p.send("t", b"v%d" % i, partition=i % 2) for i in range(4)]
    assert cluster.requests == []
    clock.advance(0.004)
    assert cluster.requests == []
    clock.advance(0.001)
    assert sorted(n for n, _, _ in cluster.requests) == [1, 2]
    node, body, d = cluster.requests[0]
    assert body["acks"] == -1
    assert records_of(body) == {("t", 0): [b"v0", b"v2"]}
    got = results(ds)
    for _, body, d in cluster.requests:
        d.callback(answer(body, base=10))
    assert sorted(got) == [RecordMetadata("t", 0, 10), RecordMetadata("t", 0, 11),
                           RecordMetadata("t", 1, 10), RecordMetadata("t", 1, 11)]
    assert [m.partition for m in got[:2]] == [0, 0]  # a partition's records complete in order
    assert p.buffer_used == 0


def test_keyless_records_spread_and_keyed_records_follow_murmur2():
    from consumer_client.partitioner import partition_for_key

    clock, cluster, p = make({"t": [1, 1, 1]}, linger_ms=0)
    for _ in range(6):
        p.send("t", b"x")
    p.send("t", b"y", key=b"user-7")
    clock.advance(0)
    (_, body, _), = cluster.requests
    by_part = records_of(body)
    assert [len(by_part[("t", i)]) for i in range(3)] == [
        2 + (partition_for_key(b"user-7", 3) == i) for i in range(3)]


def test_not_leader_refreshes_metadata_and_retries_on_the_new_leader_in_order():
    clock, cluster, p = make({"t": [1]}, linger_ms=0, batch_size=50, retry_backoff_ms=100)
    ds = [p.send("t", b"m%02d" % i + b"." * 30) for i in range(3)]
    got = results(ds)
    clock.advance(0)
    (node, body, d), = cluster.requests  # one batch of the partition at a time
    assert records_of(body)[("t", 0)] == [b"m00" + b"." * 30]
    refreshes = cluster.refreshes
    cluster.leaders["t"] = [2]
    d.callback(answer(body, {0: ErrorCode.NOT_LEADER_OR_FOLLOWER}))
    clock.advance(0.1)
    assert cluster.refreshes == refreshes + 1
    clock.advance(0)
    node, body, d = cluster.requests[-1]
    assert node == 2 and records_of(body)[("t", 0)] == [b"m00" + b"." * 30]
    d.callback(answer(body, base=0))
    clock.advance(0)
    node, body, d = cluster.requests[-1]
    assert records_of(body)[("t", 0)] == [b"m01" + b"." * 30]
    d.callback(answer(body, base=1))
    clock.advance(0)
    node, body, d = cluster.requests[-1]
    d.callback(answer(body, base=2))
    assert [m.offset for m in got] == [0, 1, 2]


def test_a_lost_connection_is_retried():
    clock, cluster, p = make({"t": [1]}, linger_ms=0)
    got = results([p.send("t", b"v")])
    clock.advance(0)
    cluster.requests[0][2].errback(ConnectionLost("gone"))
    assert cluster.disconnected == [1]
    clock.advance(0.1)
    node, body, d = cluster.requests[-1]
    d.callback(answer(body, base=5))
    assert got == [RecordMetadata("t", 0, 5)]


def test_a_fatal_error_fails_the_batch_naming_topic_partition_broker_and_error():
    clock, cluster, p = make({"t": [1, 2]}, linger_ms=0)
    got = results([p.send("t", b"v", partition=1)])
    clock.advance(0)
    node, body, d = cluster.requests[0]
    d.callback(answer(body, {1: ErrorCode.MESSAGE_TOO_LARGE}))
    err = got[0].value
    assert isinstance(err, ProduceError) and not err.retriable
    assert (err.topic, err.partition, err.broker, err.error_code) == (
        "t", 1, 2, ErrorCode.MESSAGE_TOO_LARGE)
    assert "topic 't' partition 1 (leader broker 2)" in str(err)
    assert "MESSAGE_TOO_LARGE" in str(err)


def test_retriable_errors_end_at_delivery_timeout_with_the_last_error():
    clock, cluster, p = make({"t": [1]}, linger_ms=0, request_timeout_ms=1000,
                             delivery_timeout_ms=2000, retry_backoff_ms=300)
    got = results([p.send("t", b"v")])
    for _ in range(10):
        clock.advance(0)
        if got:
            break
        node, body, d = cluster.requests[-1]
        d.callback(answer(body, {0: ErrorCode.NOT_ENOUGH_REPLICAS}))
        clock.advance(0.3)
    err = got[0].value
    assert isinstance(err, DeliveryTimeout)
    assert err.error_code is ErrorCode.NOT_ENOUGH_REPLICAS and err.partition == 0
    assert "NOT_ENOUGH_REPLICAS" in str(err) and "delivery.timeout.ms=2000" in str(err)
    assert err.attempts >= 6


def test_a_full_buffer_parks_sends_until_acks_free_memory():
    clock, cluster, p = make({"t": [1]}, linger_ms=0, buffer_memory=400, batch_size=200)
    ds = [p.send("t", b"v" * 100) for _ in range(6)]
    assert p.buffer_used <= 400 and len(p._mem_waiters) > 0
    cap = p.wait_for_capacity(200)
    assert not cap.called
    got = results(ds)
    offset = 0
    for _ in range(10):
        clock.advance(0)
        pending = [r for r in cluster.requests if not r[2].called]
        if not pending:
            break
        for _, body, d in pending:
            n = len(records_of(body)[("t", 0)])
            d.callback(answer(body, base=offset))
            offset += n
    assert [m.offset for m in got] == list(range(6))
    assert cap.called and p.buffer_used == 0


def test_a_send_waiting_for_memory_fails_after_max_block_ms():
    clock, cluster, p = make({"t": [1]}, linger_ms=0, buffer_memory=300, max_block_ms=1000)
    first = p.send("t", b"v" * 200)
    got = results([p.send("t", b"w" * 200)])
    clock.advance(1.0)
    assert isinstance(got[0].value, BufferExhausted)
    assert "max.block.ms=1000" in str(got[0].value)
    assert not first.called


def test_a_record_larger_than_the_limits_fails_at_once():
    clock, cluster, p = make({"t": [1]}, max_request_size=1000)
    got = results([p.send("t", b"v" * 2000)])
    assert isinstance(got[0].value, RecordTooLarge)


def test_an_unknown_topic_waits_for_metadata_then_fails_naming_it():
    clock, cluster, p = make({}, max_block_ms=2000, retry_backoff_ms=100)
    got = results([p.send("nope", b"v")])
    clock.pump([0.1] * 19)
    assert got == [] and cluster.refreshes > 5
    clock.advance(0.2)
    err = got[0].value
    assert isinstance(err, UnknownTopic) and err.topic == "nope"
    assert "'nope'" in str(err) and "UNKNOWN_TOPIC_OR_PARTITION" in str(err)


def test_the_producer_lets_the_broker_create_a_missing_topic():
    """As Kafka's producers do: Metadata with allow_auto_topic_creation (the broker decides,
    per auto.create.topics.enable)."""
    clock, cluster, p = make({}, max_block_ms=2000, retry_backoff_ms=100)
    p.send("new", b"v")
    clock.pump([0.1] * 5)
    assert cluster.auto_create and all(cluster.auto_create)


def test_with_no_broker_reachable_a_send_fails_saying_so_not_unknown_topic():
    from consumer_client.cluster import NoBrokersAvailable
    from consumer_client.producer_errors import MetadataUnavailable

    clock, cluster, p = make({}, max_block_ms=2000, retry_backoff_ms=100)
    cluster.unreachable = NoBrokersAvailable(
        "could not connect to any of: 127.0.0.1:9092 (Connection refused)")
    got = results([p.send("t2", b"v")])
    clock.pump([0.1] * 21)
    err = got[0].value
    assert isinstance(err, MetadataUnavailable) and not isinstance(err, UnknownTopic)
    assert "no broker answered for topic 't2'" in str(err)
    assert "max.block.ms=2000" in str(err) and "Connection refused" in str(err)
    assert "does not host" not in str(err)


def test_a_refused_login_fails_the_waiting_sends_at_once_without_retrying():
    from broker_core.security.sasl import SaslAuthenticationError
    from consumer_client.producer_errors import AuthenticationFailed

    clock, cluster, p = make({}, max_block_ms=60000, retry_backoff_ms=100)
    cluster.unreachable = SaslAuthenticationError(
        "127.0.0.1:9094 refused SASL SCRAM-SHA-512 login of 'alice': "
        "SASL_AUTHENTICATION_FAILED: invalid credentials", 58)
    got = results([p.send("t4", b"v"), p.wait_for_topic("t5")])
    clock.advance(0)
    assert [type(f.value) for f in got] == [AuthenticationFailed, AuthenticationFailed]
    assert "SASL_AUTHENTICATION_FAILED" in str(got[0].value)
    assert got[0].value.cause is cluster.unreachable
    refreshes = cluster.refreshes
    clock.pump([0.1] * 50)  # nothing is waiting: no refresh loop against the refusal
    assert cluster.refreshes == refreshes and p.buffer_used == 0


def test_a_broker_answering_again_makes_an_unknown_topic_unknown_again():
    clock, cluster, p = make({}, max_block_ms=2000, retry_backoff_ms=100)
    cluster.unreachable = ConnectionRefusedError("refused")
    got = results([p.send("t3", b"v")])
    clock.pump([0.1] * 5)
    cluster.unreachable = None  # a broker answers now, and does not know the topic
    clock.pump([0.1] * 16)
    assert isinstance(got[0].value, UnknownTopic)


def test_a_topic_created_while_waiting_is_used():
    clock, cluster, p = make({}, linger_ms=0)
    got = results([p.send("late", b"v")])
    clock.advance(0.1)
    cluster.leaders["late"] = [2]
    clock.advance(0.1)
    clock.advance(0)
    node, body, d = cluster.requests[0]
    d.callback(answer(body, base=0))
    assert node == 2 and got == [RecordMetadata("late", 0, 0)]


def test_a_partition_out_of_range_fails_naming_the_count():
    clock, cluster, p = make({"t": [1, 1]})
    got = results([p.send("t", b"v", partition=5)])
    assert isinstance(got[0].value, ProduceError) and "2 partitions" in str(got[0].value)


def test_acks_zero_completes_once_written():
    clock, cluster, p = make({"t": [1]}, linger_ms=0, acks="0")
    got = results([p.send("t", b"v")])
    clock.advance(0)
    assert cluster.requests == [] and cluster.oneway[0][1]["acks"] == 0
    assert got == [RecordMetadata("t", 0, -1)]


def test_pipelined_requests_per_broker_are_capped():
    clock, cluster, p = make({"t": [1] * 4}, linger_ms=0,
                             max_in_flight_requests_per_connection=2, max_request_size=200)
    for part in range(4):
        p.send("t", b"v" * 100, partition=part)
    clock.advance(0)
    assert len(cluster.requests) == 2
    _, body, d = cluster.requests[0]
    d.callback(answer(body))
    clock.advance(0)
    assert len(cluster.requests) == 3


def test_flush_sends_at_once_and_waits_for_acks():
    clock, cluster, p = make({"t": [1]}, linger_ms=60_000, delivery_timeout_ms=200_000)
    p.send("t", b"v")
    flushed = p.flush()
    clock.advance(0)
    assert not flushed.called and len(cluster.requests) == 1
    _, body, d = cluster.requests[0]
    d.callback(answer(body))
    assert flushed.called


def test_close_delivers_then_refuses_and_fails_leftovers():
    clock, cluster, p = make({"t": [1]}, linger_ms=0)
    got = results([p.send("t", b"v")])
    closing = p.close(timeout=5)
    assert isinstance(results([p.send("t", b"late")])[0].value, ProducerClosed)
    clock.advance(0)
    _, body, d = cluster.requests[0]
    d.callback(answer(body))
    clock.advance(0)
    assert closing.called and cluster.closed and got == [RecordMetadata("t", 0, 0)]


def test_close_with_timeout_fails_what_is_left():
    clock, cluster, p = make({}, max_block_ms=60_000)
    got = results([p.send("nope", b"v")])
    closing = p.close(timeout=1)
    clock.pump([0.1] * 11)
    assert closing.called
    assert isinstance(got[0].value, ProducerClosed)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_decode(codec):
    clock, cluster, p = make({"t": [1]}, linger_ms=0, compression_type=codec)
    p.send("t", b"hello " * 50, key=b"k", headers=[("h", b"1")])
    clock.advance(0)
    _, body, _ = cluster.requests[0]
    (rec,) = decode_batch(body["topic_data"][0]["partition_data"][0]["records"])
    assert (rec.key, rec.value, rec.headers) == (b"k", b"hello " * 50, [("h", b"1")])


def test_sends_waiting_for_metadata_count_against_capacity():
    clock, cluster, p = make({}, buffer_memory=1000, batch_size=200)
    for _ in range(8):
        p.send("late", b"v" * 100)
    room = p.wait_for_capacity(200)
    assert not room.called  # ~8 x 140 bytes wait for metadata: no room for another batch
    cluster.leaders["late"] = [1]
    clock.advance(0.1)
    assert p.buffer_used > 0 and not p._meta_waiters
