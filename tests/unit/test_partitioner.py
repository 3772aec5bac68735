"""The partitioner seam and Kafka's default rule: murmur2 against Kafka's own test values, and
the same partition as kafka-python's DefaultPartitioner for the same keys."""

from __future__ import annotations

import pytest
from zope.interface.verify import verifyObject

from consumer_client.partitioner import (
    DefaultPartitioner,
    IPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2)
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


def test_to_positive_clears_the_sign_bit_only():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(1 << 31)) == 0
    assert to_positive(5) == 5


def test_keyed_partition_matches_kafka_python():
    from kafka.partitioner.default import murmur2 as kp_murmur2

    for i in range(2000):
        key = b"key-%d" % i * (i % 7 + 1)
        for count in (1, 3, 12, 100):
            expected = (kp_murmur2(key) & 0x7FFFFFFF) % count
            assert partition_for_key(key, count) == expected


def test_default_partitioner_provides_the_interface():
    verifyObject(IPartitioner, DefaultPartitioner())


def test_keyed_records_ignore_availability():
    p = DefaultPartitioner()
    parts = list(range(6))
    want = partition_for_key(b"user-42", 6)
    assert p.partition("t", b"user-42", parts, []) == want
    assert p.partition("t", b"user-42", parts, [x for x in parts if x != want]) == want


def test_keyless_records_round_robin_over_available_partitions_per_topic():
    p = DefaultPartitioner()
    assert [p.partition("t", None, [0, 1, 2, 3], [1, 3]) for _ in range(4)] == [1, 3, 1, 3]
    assert [p.partition("u", None, [0, 1, 2], [0, 1, 2]) for _ in range(4)] == [0, 1, 2, 0]
    # no partition has a leader: spread over all of them rather than fail here
    assert {p.partition("v", None, [0, 1], []) for _ in range(4)} == {0, 1}
