"""The blocking consumer (consumer_client/blocking_consumer.py) driven from ordinary threads,
and topics written by real Kafka clients (confluent-kafka with every codec, kafka-python) read
back by our decoder. The brokers and the test coordinator run on the test's reactor; the
blocking code runs in worker threads, as an application's would."""

from __future__ import annotations

import threading

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, threads

from consumer_client.blocking_consumer import BlockingConsumer
from consumer_client.consumer import RegistrationRejected, State
from consumer_client.consumer_streams import StreamClosed
from tests.support.cluster import running_brokers
from tests.support.consumer_harness import fill, offsets_of, ready_topic
from tests.support.fake_coordinator import FakeCoordinator


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 2)


@pytest.fixture
def coordinator(brokers):
    fake = FakeCoordinator(lambda: brokers)
    pytest_twisted.blockon(defer.Deferred.fromCoroutine(fake.start()))
    yield fake
    pytest_twisted.blockon(defer.Deferred.fromCoroutine(fake.stop()))


def config(coordinator, **overrides):
    values = {"bootstrap_servers": coordinator.address, "group_id": "g", "consumer_id": "b1",
              "topics": {"t": 1}, "session_timeout_ms": 6000, "fetch_max_wait_ms": 100,
              "auto_offset_reset": "smallest", "retry_backoff_ms": 50}
    values.update(overrides)
    return values


def in_thread(f, *args):
    return threads.deferToThread(f, *args)


@pytest_twisted.ensureDeferred
async def test_for_message_in_consumer_poll_commit_and_close(brokers, coordinator):
    await ready_topic(brokers, partitions=2)
    await fill(brokers, "t", 0, 20)
    await fill(brokers, "t", 1, 20)
    consumer = await in_thread(lambda: BlockingConsumer(**config(coordinator)))
    await coordinator.member("b1")
    await coordinator.start_fetcher("b1", 1, {"b1-0": [("t", 0, 0), ("t", 1, 10)]})

    def read():
        got = []
        for m in consumer:
            got.append((m.partition, m.offset))
            if len(got) == 25:
                break
        # the loop's unfinished chunk is not lost: poll continues where it stopped
        while len(got) < 30:
            m = consumer.poll(timeout=5)
            assert m is not None
            got.append((m.partition, m.offset))
        assert consumer.poll(timeout=0.2) is None
        return got, consumer.commit(), consumer.member

    got, committed, member = await in_thread(read)
    assert sorted(got) == [(0, i) for i in range(20)] + [(1, i) for i in range(10, 20)]
    assert committed == {("t", 0): 20, ("t", 1): 20}
    assert member.state is State.FETCHING and member.generation == 1
    assert offsets_of(await coordinator.ping("b1")) == {("t", 0): 20, ("t", 1): 20}
    coordinator.start_pinging(0.2)
    try:
        await in_thread(consumer.close)
    finally:
        coordinator.stop_pinging()
    assert consumer.consumer.state is State.CLOSED
    with pytest.raises(StreamClosed):
        await in_thread(consumer.poll, 1)
    assert not [t for t in threading.enumerate() if t.name == "sluice-reactor"]


@pytest_twisted.ensureDeferred
async def test_consume_hands_out_lists_and_moves_positions_with_them(brokers, coordinator):
    await ready_topic(brokers, partitions=2)
    await fill(brokers, "t", 0, 20)
    await fill(brokers, "t", 1, 20)
    consumer = await in_thread(lambda: BlockingConsumer(**config(coordinator,
                                                                 auto_commit_enable=False)))
    await coordinator.member("b1")
    await coordinator.start_fetcher("b1", 1, {"b1-0": [("t", 0, 0), ("t", 1, 5)]})

    def read():
        with pytest.raises(ValueError, match="at least 1"):
            consumer.consume(0)
        first = consumer.consume(7, timeout=5)
        assert 1 <= len(first) <= 7
        # the position moved with the list: its last message counts as consumed
        assert consumer.commit()[("t", first[-1].partition)] == first[-1].offset + 1
        # the rest of that chunk is not lost: poll and consume go on where it stopped
        got = first + [consumer.poll(timeout=5)]
        while len(got) < 35:
            batch = consumer.consume(4, timeout=5)
            assert 1 <= len(batch) <= 4
            got += batch
        # A list handed out is the caller's: changing it reaches nothing of the consumer's.
        batch.append(batch[-1])
        assert consumer.consume(timeout=0.2) == []
        return got, consumer.commit()

    got, committed = await in_thread(read)
    assert sorted((m.partition, m.offset) for m in got) == (
        [(0, i) for i in range(20)] + [(1, i) for i in range(5, 20)])
    for p in (0, 1):
        offsets = [m.offset for m in got if m.partition == p]
        assert offsets == sorted(offsets)
    assert committed == {("t", 0): 20, ("t", 1): 20}
    await in_thread(consumer.close)
    with pytest.raises(StreamClosed):
        await in_thread(consumer.consume, 10, 1)


@pytest_twisted.ensureDeferred
async def test_one_thread_per_stream(brokers, coordinator):
    await ready_topic(brokers, partitions=2)
    await fill(brokers, "t", 0, 15)
    await fill(brokers, "t", 1, 15)
    consumer = await in_thread(lambda: BlockingConsumer(**config(coordinator,
                                                                 topics={"t": 2},
                                                                 auto_commit_enable=False)))
    await coordinator.member("b1")
    await coordinator.start_fetcher("b1", 1, {"b1-0": [("t", 0, 0)], "b1-1": [("t", 1, 0)]})
    streams = consumer.streams("t")
    assert len(streams) == 2

    def drain(stream):
        out = []
        for m in stream:
            out.append((m.partition, m.offset))
            if len(out) == 15:
                return out

    a, b = await defer.gatherResults([in_thread(drain, streams[0]), in_thread(drain, streams[1])])
    assert a == [(0, i) for i in range(15)] and b == [(1, i) for i in range(15)]
    await in_thread(consumer.close)


@pytest_twisted.ensureDeferred
async def test_rejection_is_raised_to_the_reader(brokers, coordinator):
    from broker_core.wire.errors import ErrorCode

    coordinator.register_errors = [ErrorCode.INVALID_SESSION_TIMEOUT]
    consumer = await in_thread(lambda: BlockingConsumer(**config(coordinator)))

    def read():
        with pytest.raises(RegistrationRejected, match="INVALID_SESSION_TIMEOUT"):
            for _ in consumer:
                pass
        with pytest.raises(RegistrationRejected):
            consumer.wait_for(State.FETCHING, timeout=5)
        consumer.close()

    await in_thread(read)


def _produce_confluent(bootstrap, topic, codec, n):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
                  "acks": "all"})
    for i in range(n):
        p.produce(topic, value=b"%s-%d" % (codec.encode(), i) * 5, key=b"k%d" % i,
                  partition=0, headers=[("h", b"%d" % i)])
    assert p.flush(30) == 0


def _produce_kafka_python(bootstrap, topic, codec, n):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec,
                      enable_idempotence=False, linger_ms=20, acks="all")
    for i in range(n):
        p.send(topic, value=b"%s-%d" % (codec.encode(), i) * 5, key=b"k%d" % i, partition=0,
               headers=[("h", b"%d" % i)])
    p.flush(30)
    p.close()


@pytest.mark.parametrize(("client", "codec"), [
    ("confluent", "gzip"), ("confluent", "snappy"), ("confluent", "lz4"),
    ("confluent", "zstd"), ("kafka-python", "gzip"), ("kafka-python", "lz4"),
])
@pytest_twisted.ensureDeferred
async def test_compressed_topics_from_real_clients(brokers, coordinator, client, codec):
    topic = f"{client}-{codec}"
    await ready_topic(brokers, topic, partitions=1)
    bootstrap = ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)
    produce = _produce_confluent if client == "confluent" else _produce_kafka_python
    await in_thread(produce, bootstrap, topic, codec, 300)
    consumer = await in_thread(lambda: BlockingConsumer(**config(
        coordinator, topics={topic: 1}, auto_commit_enable=False)))
    await coordinator.member("b1")
    await coordinator.start_fetcher("b1", 1, {"b1-0": [(topic, 0, 0)]})

    def read():
        out = []
        for m in consumer:
            out.append(m)
            if len(out) == 300:
                return out

    got = await in_thread(read)
    assert [m.offset for m in got] == list(range(300))
    assert got[7].value == b"%s-7" % codec.encode() * 5 and got[7].key == b"k7"
    assert got[7].headers == (("h", b"7"),)
    await in_thread(consumer.close)
    assert reactor.running
