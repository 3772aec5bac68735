"""The consumer's configuration (consumer_client/consumer_config.py): Kafka names, defaults,
the topic count, and errors that name the key."""

from __future__ import annotations

import json

import pytest

from broker_core.config.parsing import ConfigError
from consumer_client.consumer_config import ConsumerConfig

BASE = {"bootstrap.servers": "a:9092,b:9093", "group.id": "g", "topics": "events"}


def test_defaults_and_kafka_names():
    c = ConsumerConfig.from_mapping(BASE)
    assert c.topics == {"events": 1} and c.pattern == "static"
    assert c.auto_commit is True and c.reset_to == "latest"
    assert c.session_timeout_ms == 30000 and c.max_partition_fetch_bytes == 1 << 20
    assert c.consumer_id.startswith("g_") and c.client_id == c.consumer_id
    assert json.loads(c.topic_count_json()) == {"version": 1, "pattern": "static",
                                                "subscription": {"events": 1}}
    assert c.thread_ids("events") == [f"{c.consumer_id}-0"]


def test_keyword_form_and_aliases():
    c = ConsumerConfig.create(bootstrap_servers="h:1", group_id="g", consumer_id="me",
                              topics={"a": 2, "b": 1}, auto_offset_reset="smallest",
                              enable_auto_commit=False)
    assert c.thread_ids("a") == ["me-0", "me-1"] and c.reset_to == "earliest"
    assert c.auto_commit is False
    c = ConsumerConfig.from_mapping({**BASE, "topics": "a:3,b", "zookeeper.session.timeout.ms":
                                     "6000"})
    assert c.topics == {"a": 3, "b": 1} and c.session_timeout_ms == 6000


def test_wildcards():
    c = ConsumerConfig.from_mapping({**BASE, "topics": {"ev.*": 2}, "topic.pattern":
                                     "whitelist"})
    assert c.pattern == "white_list" and c.matches("events") and not c.matches("x")
    b = ConsumerConfig.from_mapping({**BASE, "topics": {"ev.*": 1}, "topic.pattern":
                                     "black_list"})
    assert not b.matches("events") and b.matches("x")


@pytest.mark.parametrize(("values", "key"), [
    ({"group.id": None}, "group.id"),
    ({"bootstrap.servers": "nohost"}, "bootstrap.servers"),
    ({"auto.offset.reset": "middle"}, "auto.offset.reset"),
    ({"session.timeout.ms": "-1"}, "session.timeout.ms"),
    ({"session.timeout.ms": "soon"}, "session.timeout.ms"),
    ({"topics": "a:0"}, "topics"),
    ({"topics": "{bad json"}, "topics"),
    ({"topic.pattern": "grey_list"}, "topic.pattern"),
    ({"topic.pattern": "white_list", "topics": "a,b"}, "topics"),
    ({"topic.pattern": "white_list", "topics": "(["}, "topics"),
    ({"auto.commit.enable": "yes"}, "auto.commit.enable"),
    ({"max.partition.fetch.bytes": "2000000", "fetch.max.bytes": "1000000"},
     "max.partition.fetch.bytes"),
    ({"fetch.max.byte": "1"}, "fetch.max.byte"),
])
def test_bad_values_name_the_key(values, key):
    merged = {**BASE, **values}
    merged = {k: v for k, v in merged.items() if v is not None}
    with pytest.raises(ConfigError) as e:
        ConsumerConfig.from_mapping(merged)
    assert e.value.key == key and key in str(e.value)
