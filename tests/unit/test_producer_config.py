"""Producer configuration: Kafka's names and defaults; a bad value names its key."""

from __future__ import annotations

import pytest
from zope.interface import implementer

from broker_core.config.parsing import ConfigError
from broker_core.wire.records import Compression
from consumer_client.partitioner import DefaultPartitioner, IPartitioner
from consumer_client.producer_config import ProducerConfig


def test_defaults_are_kafkas():
    cfg = ProducerConfig.from_mapping({"bootstrap.servers": "h:9092"})
    assert cfg.acks == -1
    assert cfg.batch_size == 16384
    assert cfg.linger_ms == 5
    assert cfg.buffer_memory == 32 * 1024 * 1024
    assert cfg.max_request_size == 1048576
    assert cfg.compression_type is Compression.NONE
    assert cfg.retry_backoff_ms == 100
    assert cfg.delivery_timeout_ms == 120000
    assert cfg.max_block_ms == 60000
    assert isinstance(cfg.partitioner, DefaultPartitioner)


def test_keyword_arguments_and_kafka_spellings():
    cfg = ProducerConfig.from_kwargs({"acks": "1"}, bootstrap_servers="h:1", linger_ms=0,
                                     compression_type="ZSTD")
    assert (cfg.acks, cfg.linger_ms, cfg.compression_type) == (1, 0, Compression.ZSTD)
    assert ProducerConfig.from_kwargs(bootstrap_servers="h:1", acks=0).acks == 0
    assert ProducerConfig.from_kwargs(bootstrap_servers="h:1", acks="-1").acks == -1


@pytest.mark.parametrize(("values", "key", "words"), [
    ({}, "bootstrap.servers", "missing"),
    ({"acks": "2"}, "acks", "expected all"),
    ({"linger.ms": "-1"}, "linger.ms", "≥ 0"),
    ({"batch.size": "0"}, "batch.size", "≥ 1"),
    ({"compression.type": "brotli"}, "compression.type", "gzip"),
    ({"lingr.ms": "5"}, "lingr.ms", "did you mean 'linger.ms'"),
    ({"delivery.timeout.ms": "1000"}, "delivery.timeout.ms", "linger.ms + request.timeout.ms"),
    ({"partitioner": object()}, "partitioner", "IPartitioner"),
])
def test_bad_values_name_the_key(values, key, words):
    if key != "bootstrap.servers":
        values = {"bootstrap.servers": "h:1", **values}
    with pytest.raises(ConfigError) as e:
        ProducerConfig.from_mapping(values)
    assert e.value.key == key
    assert words in str(e.value)


def test_a_custom_partitioner_is_accepted():
    @implementer(IPartitioner)
    class Zero:
        def partition(self, topic, key, partitions, available):
            return partitions[0]

    z = Zero()
    assert ProducerConfig.from_kwargs(bootstrap_servers="h:1", partitioner=z).partitioner is z
