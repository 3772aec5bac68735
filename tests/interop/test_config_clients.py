"""Real Kafka admin clients against a three-broker Sluice cluster (broker processes): the config
APIs as confluent-kafka's AdminClient (describe_configs, alter_configs,
incremental_alter_configs) and kafka-python's KafkaAdminClient (describe_configs,
alter_configs) use them; a topic created with message.timestamp.type=LogAppendTime and
compression.type=zstd as confluent-kafka's producer and consumer see it; and the ``sluice
configs`` command, run as a subprocess, on the same cluster."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.cli_runs import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TIMEOUT = 30
SLUICE = Path(sys.executable).with_name("sluice")


def admin(cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def new_topic(cluster, config: dict[str, str] | None = None, rf: int = 3) -> str:
    from confluent_kafka.admin import NewTopic

    name = f"cfg-{uuid.uuid4().hex[:8]}"
    a = admin(cluster)
    a.create_topics([NewTopic(name, num_partitions=1, replication_factor=rf,
                              config=config or {})], request_timeout=TIMEOUT)[name].result(
        timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        t = a.list_topics(name, timeout=10).topics.get(name)
        if t is not None and t.error is None and all(p.leader >= 0
                                                     for p in t.partitions.values()):
            return name
        time.sleep(0.1)
    raise AssertionError(f"topic {name} got no leader")


def describe_topic(cluster, name: str) -> dict:
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.TOPIC, name)
    a = admin(cluster)  # kept until the result is in: a destroyed client fails its futures
    return a.describe_configs([res], request_timeout=TIMEOUT)[res].result(timeout=TIMEOUT)


# -- confluent-kafka ---------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_confluent_incremental_and_full_alter_then_describe(cluster):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    topic = new_topic(cluster)
    a = admin(cluster)
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("compression.type", "lz4", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "delete",
                    incremental_operation=AlterConfigOpType.APPEND)])
    a.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(timeout=TIMEOUT)
    configs = describe_topic(cluster, topic)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["compression.type"].value == "lz4"
    assert configs["cleanup.policy"].value == "delete"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not configs["retention.ms"].is_read_only

    # AlterConfigs replaces the set: retention.ms and compression.type go back to defaults.
    full = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "600000"})
    a.alter_configs([full], request_timeout=TIMEOUT)[full].result(timeout=TIMEOUT)
    configs = describe_topic(cluster, topic)
    assert configs["segment.ms"].value == "600000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["compression.type"].value == "producer"

    # A refusal is the client's exception, naming the key.
    bad = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(KafkaException, match="APPEND applies to list-typed keys only"):
        a.incremental_alter_configs([bad], request_timeout=TIMEOUT)[bad].result(timeout=TIMEOUT)
    missing = ConfigResource(ResourceType.TOPIC, "no-such-topic", set_config={"retention.ms": "1"})
    with pytest.raises(KafkaException, match="does not exist"):
        a.alter_configs([missing], request_timeout=TIMEOUT)[missing].result(timeout=TIMEOUT)


def test_confluent_broker_dynamic_defaults(cluster):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    a = admin(cluster)
    node = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
        ConfigEntry("log.retention.bytes", "987654321",
                    incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([node], request_timeout=TIMEOUT)[node].result(timeout=TIMEOUT)
    described = ConfigResource(ResourceType.BROKER, "2")
    configs = a.describe_configs([described], request_timeout=TIMEOUT)[described].result(
        timeout=TIMEOUT)
    entry = configs["log.retention.bytes"]
    assert (entry.value, entry.source, entry.is_read_only) == (
        "987654321", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert configs["listeners"].is_read_only
    static = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="cannot change while the broker runs"):
        a.incremental_alter_configs([static], request_timeout=TIMEOUT)[static].result(
            timeout=TIMEOUT)
    undo = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
        ConfigEntry("log.retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    a.incremental_alter_configs([undo], request_timeout=TIMEOUT)[undo].result(timeout=TIMEOUT)


def test_log_append_time_and_recompression_as_a_consumer_sees_them(cluster):
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition

    topic = new_topic(cluster, {"message.timestamp.type": "LogAppendTime",
                                "compression.type": "zstd"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": "gzip",
                         "acks": "all", "linger.ms": 5})
    sent = [(b"k%d" % i, b"value-%d" % i * 10) for i in range(200)]
    before_ms = int(time.time() * 1000)
    for k, v in sent:
        producer.produce(topic, key=k, value=v, timestamp=1000)  # CreateTime far in the past
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
    finally:
        consumer.close()
    assert [(m.key(), m.value()) for m in got] == sent
    for m in got:
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME and ts >= before_ms


# -- kafka-python ------------------------------------------------------------------------------


def test_kafka_python_alter_and_describe(cluster):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    topic = new_topic(cluster, rf=1)
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                             configs={"retention.ms": "7200000"})],
                             raise_on_unknown=False)
        result = client.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True,
            config_filter="all")
        configs = result["topic"][topic]
        assert configs["retention.ms"]["value"] == "7200000"
        assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert [(x["name"], x["source"]) for x in configs["retention.ms"]["synonyms"]] == [
            ("retention.ms", "DYNAMIC_TOPIC_CONFIG"), ("log.retention.ms", "DEFAULT_CONFIG")]
        assert configs["cleanup.policy"]["config_type"] == "LIST"  # v3+
        assert configs["segment.bytes"]["value"] == "1073741824"
        client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                             configs={"retention.ms": "7300000"})],
                             raise_on_unknown=False, incremental=False)
        eventually(lambda: describe_topic(cluster, topic)["retention.ms"].value == "7300000",
                   TIMEOUT, "the full AlterConfigs")
    finally:
        client.close()


# -- sluice configs ----------------------------------------------------------------------------


def sluice(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SLUICE), *args], capture_output=True, text=True,
                          timeout=60)


def test_sluice_configs_describe_and_alter(cluster):
    topic = new_topic(cluster)
    b = ["--bootstrap-server", cluster.bootstrap]
    r = sluice("configs", "alter", *b, "--topic", topic, "--set", "retention.ms=120000",
               "--set", "message.timestamp.type=LogAppendTime")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f'The configs of topic "{topic}" were changed (2 changes).\n'
    r = sluice("configs", "describe", *b, "--topic", topic, "--key", "retention.ms",
               "--synonyms", "--docs")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f'Configs of topic "{topic}":'
    assert lines[1] == "  retention.ms=120000\tDYNAMIC_TOPIC_CONFIG"
    assert lines[2] == "    DYNAMIC_TOPIC_CONFIG: retention.ms=120000"
    assert "DEFAULT_CONFIG: log.retention.ms=" in r.stdout
    assert "How long a segment is kept" in r.stdout
    r = sluice("configs", "describe", *b, "--broker", "3", "--key", "broker.id")
    assert r.returncode == 0, r.stderr
    assert "  broker.id=3\tSTATIC_BROKER_CONFIG read-only" in r.stdout
    # Refusals: one line on stderr naming the key, exit 1; nothing changes.
    r = sluice("configs", "alter", *b, "--topic", topic, "--set", "retention.ms=soon")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == ("sluice: INVALID_CONFIG: invalid value 'soon' for 'retention.ms': "
                        "expected an integer ≥ -1 (-1: no limit)\n")
    r = sluice("configs", "alter", *b, "--broker-defaults", "--set", "num.partitions=3")
    assert r.returncode == 1 and r.stderr.startswith(
        "sluice: POLICY_VIOLATION: broker key 'num.partitions' cannot change while the broker "
        "runs")
    r = sluice("configs", "alter", *b, "--topic", topic, "--delete", "retention.ms",
               "--validate-only")
    assert r.returncode == 0 and "would be changed" in r.stdout
    assert describe_topic(cluster, topic)["retention.ms"].value == "120000"
    r = sluice("configs", "alter", *b, "--topic", topic)
    assert r.returncode == 2 and "at least one --set" in r.stderr
