"""Real Kafka clients against a three-broker Sluice cluster: kcat, confluent-kafka and
kafka-python each round-trip 10,000 keyed messages with headers, compressed and not, across
partitions led by different brokers; the bytes come back identical, in order, with contiguous
offsets."""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

pytestmark = [pytest.mark.interop, pytest.mark.slow]

N = 10_000
PARTITIONS = 3


def create_topic(cluster, partitions: int = PARTITIONS) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"interop-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)], request_timeout=30)
    futures[name].result(timeout=30)
    # Wait until every partition has a leader in the metadata.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return name
        time.sleep(0.2)
    raise AssertionError(f"topic {name} got no leaders")


def leaders(cluster, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def messages(n: int = N) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    out = []
    for i in range(n):
        key = b"key-%05d" % (i % 97)
        value = (b"value-%08d-" % i) + bytes([i % 251]) * (i % 40)
        out.append((key, value, [("seq", b"%d" % i), ("src", b"interop")]))
    return out


def check_partitioned_roundtrip(sent_by_partition, got_by_partition):
    """Per partition: same payloads in the same order, offsets contiguous from 0."""
    assert sorted(got_by_partition) == sorted(sent_by_partition)
    for p, sent in sent_by_partition.items():
        got = got_by_partition[p]
        assert [o for o, *_ in got] == list(range(len(sent))), f"partition {p} offsets"
        assert [(k, v, h) for _, k, v, h in got] == sent, f"partition {p} payloads"


# -- confluent-kafka ---------------------------------------------------------------------------

@pytest.mark.parametrize("compression", ["none", "lz4", "zstd", "gzip", "snappy"])
def test_confluent_kafka_roundtrip(cluster, compression):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = create_topic(cluster)
    assert len(set(leaders(cluster, topic).values())) == PARTITIONS  # led by different brokers
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": compression,
                         "linger.ms": 5, "acks": "all"})
    sent: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    errors = []
    for i, (k, v, h) in enumerate(messages()):
        p = i % PARTITIONS
        producer.produce(topic, value=v, key=k, headers=h, partition=p,
                         on_delivery=lambda err, msg: err and errors.append(err))
        sent[p].append((k, v, h))
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "interop",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < N and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=1):
            assert msg.error() is None, msg.error()
            got[msg.partition()].append((msg.offset(), msg.key(), msg.value(),
                                         [(hk, hv) for hk, hv in (msg.headers() or [])]))
    consumer.close()
    check_partitioned_roundtrip(sent, got)


# -- kafka-python ------------------------------------------------------------------------------

def test_confluent_admin_lists_all_topics_and_describes_configs(cluster):
    """The all-topics Metadata request of librdkafka 2.x (v12, with three trailing bytes that
    Kafka brokers ignore) and DescribeConfigs."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    name = create_topic(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    md = admin.list_topics(timeout=10)
    assert name in md.topics and len(md.brokers) == 3
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([res])[res].result(timeout=30)
    assert configs["retention.ms"].value is not None


@pytest.mark.parametrize("compression", [None, "gzip", "lz4"])
def test_kafka_python_roundtrip(cluster, compression):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = create_topic(cluster)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, compression_type=compression,
                             acks="all", linger_ms=5,
                             # idempotence needs InitProducerId, which Sluice does not serve yet
                             enable_idempotence=False)
    sent: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    futures = []
    for i, (k, v, h) in enumerate(messages()):
        p = i % PARTITIONS
        futures.append(producer.send(topic, value=v, key=k, headers=h, partition=p))
        sent[p].append((k, v, h))
    producer.flush(60)
    for f in futures:
        f.get(timeout=30)
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                             group_id=None, auto_offset_reset="earliest")
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < N and time.monotonic() < deadline:
        for tp, recs in consumer.poll(timeout_ms=1000, max_records=5000).items():
            for r in recs:
                got[tp.partition].append((r.offset, r.key, r.value, list(r.headers)))
    consumer.close()
    check_partitioned_roundtrip(sent, got)


# -- kcat --------------------------------------------------------------------------------------

@pytest.mark.parametrize("compression", ["none", "lz4", "snappy"])
def test_kcat_roundtrip(cluster, tmp_path, compression):
    topic = create_topic(cluster)
    listing = subprocess.run(["kcat", "-b", cluster.bootstrap, "-L", "-t", topic],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    assert "3 brokers" in listing and f'topic "{topic}" with {PARTITIONS} partitions' in listing

    sent: dict[int, list] = {}
    for p in range(PARTITIONS):
        lines = [f"k{p}-{i:05d}:value {i} of partition {p} " + "x" * (i % 30)
                 for i in range(N // PARTITIONS)]
        sent[p] = lines
        src = tmp_path / f"p{p}.txt"
        src.write_text("\n".join(lines) + "\n")
        subprocess.run(["kcat", "-b", cluster.bootstrap, "-P", "-t", topic, "-p", str(p),
                        "-K", ":", "-H", "src=kcat", "-z", compression, "-l", str(src)],
                       check=True, timeout=60)
    for p in range(PARTITIONS):
        out = subprocess.run(
            ["kcat", "-b", cluster.bootstrap, "-C", "-t", topic, "-p", str(p), "-o", "beginning",
             "-e", "-q", "-f", "%o|%k:%s|%h\n"],
            capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
        offsets = [int(line.split("|", 1)[0]) for line in out]
        assert offsets == list(range(len(sent[p])))
        assert [line.split("|")[1] for line in out] == sent[p]
        assert all(line.split("|")[2] == "src=kcat" for line in out)
