"""The data source's options: every bad input fails with a message naming the option."""

from __future__ import annotations

import pytest

from consumer_client.spark.offsets import EARLIEST, OffsetSpec
from consumer_client.spark.options import (
    OptionError,
    parse_read_options,
    parse_write_options,
)

BASE = {"bootstrap.servers": "127.0.0.1:9092"}


def read(streaming=False, **opts):
    return parse_read_options({**BASE, **opts}, streaming=streaming)


def test_defaults_like_spark_kafka():
    o = read(subscribe="a, b")
    assert o.subscription.topics == ("a", "b")
    assert o.starting == OffsetSpec.earliest() and o.ending == OffsetSpec.latest()
    assert o.fail_on_data_loss and not o.include_headers and o.min_partitions is None
    s = read(streaming=True, subscribe="a", maxOffsetsPerTrigger="100")
    assert s.starting == OffsetSpec.latest() and s.max_offsets_per_trigger == 100


def test_keys_are_case_insensitive_and_kafka_prefix_accepted():
    o = parse_read_options({"kafka.bootstrap.servers": "h:1", "SUBSCRIBEPATTERN": "ev.*",
                            "failondataloss": "FALSE", "IncludeHeaders": "true",
                            "minpartitions": "8"}, streaming=False)
    assert o.bootstrap_servers == "h:1" and o.subscription.pattern == "ev.*"
    assert not o.fail_on_data_loss and o.include_headers and o.min_partitions == 8


@pytest.mark.parametrize("opts, option", [
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "subscribe"),
    ({}, "subscribe"),
    ({"subscribe": " , "}, "subscribe"),
    ({"subscribePattern": "(["}, "subscribePattern"),
    ({"assign": '{"a": 0}'}, "assign"),
    ({"subscribe": "a", "startingOffsets": "{nope"}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -1}}'}, "startingOffsets"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets"),
    ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "endingOffsets"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": 9}}',
      "endingOffsets": '{"a": {"0": 4}}'}, "endingOffsets"),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions"),
    ({"subscribe": "a", "minPartitions": "many"}, "minPartitions"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"subscribe": "a", "includeHeaders": "1"}, "includeHeaders"),
])
def test_bad_batch_options_name_the_option(opts, option):
    with pytest.raises(OptionError) as e:
        read(**opts)
    assert e.value.option == option
    assert repr(option) in str(e.value)


def test_both_subscribe_and_assign_says_so():
    with pytest.raises(OptionError, match="exactly one of .*got 'subscribe' and 'assign'"):
        read(subscribe="a", assign='{"a": [0]}')


def test_bootstrap_servers():
    with pytest.raises(OptionError, match="'bootstrap.servers' is required"):
        parse_read_options({"subscribe": "a"}, streaming=False)
    with pytest.raises(OptionError, match="'bootstrap.servers'.*host:port"):
        parse_read_options({"bootstrap.servers": "nohost", "subscribe": "a"}, streaming=False)


def test_streaming_rules():
    with pytest.raises(OptionError, match="'endingOffsets' is not valid in streaming"):
        read(streaming=True, subscribe="a", endingOffsets="latest")
    o = read(streaming=True, subscribe="a", startingOffsets='{"a": {"0": -2, "1": -1}}')
    assert o.starting.offsets[("a", 0)] == EARLIEST
    with pytest.raises(OptionError, match="'maxOffsetsPerTrigger'"):
        read(streaming=True, subscribe="a", maxOffsetsPerTrigger="0")
    # Spark ignores it for batch queries.
    assert read(subscribe="a", maxOffsetsPerTrigger="5").max_offsets_per_trigger is None


def test_write_options():
    o = parse_write_options({**BASE, "topic": "out", "kafka.linger.ms": "20"})
    assert o.topic == "out"
    assert o.producer["acks"] == "all" and o.producer["linger.ms"] == "20"
    assert parse_write_options({**BASE, "kafka.acks": "1"}).producer["acks"] == "1"
    assert parse_write_options(BASE).topic is None
    with pytest.raises(OptionError, match="'kafka.acks'"):
        parse_write_options({**BASE, "kafka.acks": "most"})
    with pytest.raises(OptionError, match="'bootstrap.servers'"):
        parse_write_options({"topic": "x"})
