"""The producer against real in-process brokers: every acked record is in its partition exactly
once (read back with Fetch), keys land where Kafka's partitioner puts them, every codec round
trips (also through confluent-kafka's consumer), failures name partition and Kafka error, a leader
killed mid-stream loses nothing acked, memory stays bounded, and the blocking API works from
plain threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, threads

from broker_core.wire.errors import ErrorCode
from consumer_client.blocking_producer import BlockingProducer
from consumer_client.producer import Producer, RecordMetadata
from consumer_client.producer_errors import DeliveryTimeout, MetadataUnavailable, UnknownTopic
from tests.support.cluster import (
    ROOT,
    eventually,
    leader_of,
    running_brokers,
)
from tests.support.producer_harness import fetch_all, topic_ready


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 3, replica_lag_time_max_ms="2000",
                               replica_fetch_wait_max_ms="100", replica_fetch_backoff_ms="100")


def bootstrap(brokers) -> str:
    return ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers if b.running)






@pytest_twisted.ensureDeferred
async def test_every_acked_record_lands_once_where_kafkas_partitioner_puts_it(brokers):
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

    await topic_ready(brokers, "t", partitions=4, rf=2)
    producer = Producer(bootstrap_servers=bootstrap(brokers), linger_ms=2, batch_size=4096)
    try:
        sends = []
        for i in range(3000):
            key = b"user-%d" % (i % 50) if i % 3 else None
            value = b"value-%05d" % i
            sends.append((key, value, producer.send("t", value, key=key)))
        acked = {}
        for key, value, d in sends:
            md = await d
            assert isinstance(md, RecordMetadata) and md.topic == "t"
            if key is not None:
                assert md.partition == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 4
            acked[(md.partition, md.offset)] = (key, value)
    finally:
        await producer.close()
    assert len(acked) == 3000
    stored = {}
    for p in range(4):
        for r in await fetch_all(brokers, "t", p):
            assert (p, r.offset) not in stored
            stored[(p, r.offset)] = (r.key, r.value)
    assert stored == acked  # exactly once, at the offset the ack named
    per_partition = [sum(1 for (p, _) in acked if p == q) for q in range(4)]
    assert all(n > 300 for n in per_partition), per_partition


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest_twisted.ensureDeferred
async def test_every_codec_round_trips_and_confluent_kafka_reads_it(brokers, codec):
    await topic_ready(brokers, "c")
    producer = Producer(bootstrap_servers=bootstrap(brokers), compression_type=codec)
    sent = [(b"k%d" % i, b"payload %d " % i * 20, [("n", b"%d" % i)]) for i in range(500)]
    try:
        ds = [producer.send("c", v, key=k, headers=h) for k, v, h in sent]
        offsets = [(await d).offset for d in ds]
    finally:
        await producer.close()
    assert offsets == list(range(500))
    got = [(r.key, r.value, r.headers) for r in await fetch_all(brokers, "c", 0)]
    assert got == sent
    address = bootstrap(brokers)
    read = await threads.deferToThread(_read_with_confluent_kafka, address, "c", 500)
    assert read == [(k, v, [(hk, hv) for hk, hv in h]) for k, v, h in sent]


def _read_with_confluent_kafka(bootstrap_servers, topic, n):
    """librdkafka decodes every codec (kafka-python needs python-snappy for snappy)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "producer-test",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out = []
        while len(out) < n:
            m = consumer.poll(15)
            assert m is not None, f"read {len(out)} of {n} records"
            assert m.error() is None, m.error()
            out.append((m.key(), m.value(), list(m.headers() or [])))
        return out
    finally:
        consumer.close()


@pytest_twisted.ensureDeferred
async def test_unmet_min_insync_replicas_fails_naming_the_partition_and_the_error(brokers):
    await topic_ready(brokers, "strict", partitions=2, rf=1,
                      configs=[("min.insync.replicas", "2")])
    producer = Producer(bootstrap_servers=bootstrap(brokers), acks="all", linger_ms=0,
                        request_timeout_ms=1000, delivery_timeout_ms=2500,
                        retry_backoff_ms=200)
    try:
        with pytest.raises(DeliveryTimeout) as e:
            await producer.send("strict", b"v", partition=1)
    finally:
        await producer.close()
    err = e.value
    assert err.partition == 1 and err.topic == "strict"
    assert err.error_code is ErrorCode.NOT_ENOUGH_REPLICAS
    assert err.broker == leader_of(brokers, "strict", 1).config.broker_id
    assert "partition 1" in str(err) and "NOT_ENOUGH_REPLICAS" in str(err)
    assert err.attempts >= 2  # it was retried, as the error is retriable


@pytest_twisted.ensureDeferred
async def test_a_partition_leads_only_once_its_topic_config_is_known(brokers):
    """The broker reads a new topic's overrides before LeaderAndIsr makes it leader: a
    produce arriving in between was checked against the broker's default
    min.insync.replicas (1), so acks=all with one replica of a topic that asks for two
    succeeded now and then."""
    seen: list[tuple[int, int]] = []
    for b in brokers:
        apply = b.replicas.apply_leader_and_isr

        def recording(controller_epoch, states, *a, _b=b, _apply=apply, **kw):
            for topic, _, state in states:
                if topic == "strict2" and state.leader == _b.config.broker_id:
                    seen.append((_b.config.broker_id, _b._min_insync_replicas(topic)))
            return _apply(controller_epoch, states, *a, **kw)

        b.replicas.apply_leader_and_isr = recording
    await topic_ready(brokers, "strict2", partitions=2, rf=1,
                      configs=[("min.insync.replicas", "2")])
    assert len(seen) == 2 and all(m == 2 for _, m in seen), seen


@pytest_twisted.ensureDeferred
async def test_leader_killed_mid_stream_retries_onto_the_new_leader_and_loses_nothing_acked(
        brokers):
    await topic_ready(brokers, "fo", rf=3)
    old = leader_of(brokers, "fo", 0)
    await eventually(lambda: len(old.replicas.get_partition("fo", 0).isr) == 3, what="full ISR")
    producer = Producer(bootstrap_servers=bootstrap(brokers), acks="all", linger_ms=1,
                        retry_backoff_ms=100, request_timeout_ms=5000)
    acked, failed = [], []
    try:
        pending = []
        for i in range(3000):
            v = b"m%05d" % i
            d = producer.send("fo", v)
            d.addCallbacks(lambda md, v=v: acked.append((md.offset, v)),
                           lambda f: failed.append(f))
            pending.append(d)
            if i == 1000:
                await defer.gatherResults(pending[:900])
                stopping = old.stopService()  # the leader goes away while records flow
            if i % 100 == 0:
                await producer.wait_for_capacity()
                await _tick()
        await stopping
        await defer.DeferredList(pending)
    finally:
        await producer.close()
    assert failed == []
    assert len(acked) == 3000
    rest = [b for b in brokers if b is not old]
    new = await eventually(lambda: leader_of(rest, "fo", 0), what="new leader")
    assert new is not old
    stored = {r.offset: r.value for r in await fetch_all(rest, "fo", 0)}
    for offset, v in acked:
        assert stored[offset] == v
    # Per-partition order holds across the retries: acked offsets grow with the send order.
    in_send_order = [o for o, _ in sorted(acked, key=lambda a: a[1])]
    assert in_send_order == sorted(in_send_order)


def _tick():
    d = defer.Deferred()
    reactor.callLater(0, d.callback, None)
    return d


@pytest_twisted.ensureDeferred
async def test_a_missing_topic_is_created_by_the_broker_and_the_send_delivered(brokers):
    """auto.create.topics.enable is on by default: the producer's Metadata request lets the
    broker create the topic (num.partitions, default.replication.factor), as for kcat."""
    producer = Producer(bootstrap_servers=bootstrap(brokers), max_block_ms=10_000)
    try:
        md = await producer.send("made-on-first-use", b"v")
    finally:
        await producer.close()
    assert md.topic == "made-on-first-use" and md.offset == 0


@pytest.fixture
def no_auto_create(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 1, auto_create_topics_enable="false")


@pytest_twisted.ensureDeferred
async def test_unknown_topic_fails_naming_it(no_auto_create):
    producer = Producer(bootstrap_servers=bootstrap(no_auto_create), max_block_ms=1000)
    try:
        with pytest.raises(UnknownTopic) as e:
            await producer.send("no-such-topic", b"v")
    finally:
        await producer.close()
    assert e.value.topic == "no-such-topic"
    assert "'no-such-topic'" in str(e.value) and "UNKNOWN_TOPIC_OR_PARTITION" in str(e.value)


@pytest_twisted.ensureDeferred
async def test_with_no_broker_up_the_error_says_none_answered():
    from tests.support.cluster import free_port

    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    producer = Producer(bootstrap_servers=address, max_block_ms=1000)
    try:
        with pytest.raises(MetadataUnavailable) as e:
            await producer.send("t", b"v")
    finally:
        await producer.close()
    assert address in str(e.value) and "refused" in str(e.value).lower()
    assert "does not host" not in str(e.value)


@pytest_twisted.ensureDeferred
async def test_bounded_memory_makes_send_wait(brokers):
    await topic_ready(brokers, "mem")
    producer = Producer(bootstrap_servers=bootstrap(brokers), buffer_memory=20_000,
                        batch_size=4_000, linger_ms=0)
    peak, waited = 0, 0
    try:
        ds = []
        for i in range(2000):
            room = producer.wait_for_capacity(200)
            if not room.called:
                waited += 1
            await room
            ds.append(producer.send("mem", b"x" * 100 + b"%05d" % i))
            peak = max(peak, producer.buffer_used)
        offsets = [(await d).offset for d in ds]
        # Sends beyond the buffer park (their Deferreds wait) instead of growing it.
        parked = [producer.send("mem", b"y" * 100) for _ in range(400)]
        assert producer.buffer_used <= 20_000 and producer._mem_waiters
        await defer.gatherResults(parked)
    finally:
        await producer.close()
    assert waited > 0 and peak <= 20_000, (waited, peak)
    assert offsets == list(range(2000))
    assert len(await fetch_all(brokers, "mem", 0)) == 2400


@pytest_twisted.ensureDeferred
async def test_blocking_api_from_threads_and_no_thread_left_behind(brokers):
    await topic_ready(brokers, "b", partitions=2)
    address = bootstrap(brokers)
    before = {t.ident for t in threading.enumerate()}

    def use_it():
        with BlockingProducer({"bootstrap.servers": address, "linger.ms": 1}) as p:
            futures = []

            def sender(n):
                for i in range(500):
                    futures.append(p.send("b", b"%d-%d" % (n, i), key=b"%d" % i))
            workers = [threading.Thread(target=sender, args=(n,)) for n in range(4)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            p.flush(timeout=30)
            assert all(f.done() for f in futures)
            metadata = [f.get(timeout=1) for f in futures]
            assert p.partitions_for("b") == [0, 1]
            with pytest.raises(MetadataUnavailable):  # nothing listens on port 1
                BlockingProducer(bootstrap_servers="127.0.0.1:1", max_block_ms=500).send(
                    "nope", b"v")
            return metadata

    metadata = await threads.deferToThread(use_it)
    assert len({(m.partition, m.offset) for m in metadata}) == 2000
    stored = sum([len(await fetch_all(brokers, "b", p)) for p in (0, 1)])
    assert stored == 2000
    left = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()
            and not t.daemon and not t.name.startswith("PoolThread-twisted.internet.reactor")]
    assert left == []


@pytest_twisted.ensureDeferred
async def test_blocking_api_in_a_plain_program_exits_even_without_close(brokers):
    await topic_ready(brokers, "plain")
    script = textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        from consumer_client.blocking_producer import BlockingProducer
        p = BlockingProducer(bootstrap_servers={bootstrap(brokers)!r})
        md = p.send("plain", b"hello", key=b"k").get(timeout=20)
        print(md.partition, md.offset)
        p.send("plain", b"unflushed")
        print(sorted(t.name for t in threading.enumerate() if not t.daemon))
    """)
    done = await threads.deferToThread(
        subprocess.run, [sys.executable, "-c", script], capture_output=True, timeout=60,
        text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "0 0"
    assert lines[1] == "['MainThread']"
