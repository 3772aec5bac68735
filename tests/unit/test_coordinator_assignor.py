"""The range assignor (Kafka's ZooKeeper-consumer algorithm) behind the IPartitionAssignor seam."""

from __future__ import annotations

import random

from zope.interface.verify import verifyObject

from coordinator.assignor import IPartitionAssignor, RangeAssignor


def test_range_assignor_provides_the_interface():
    assert verifyObject(IPartitionAssignor, RangeAssignor())


def test_ranges_over_sorted_threads_first_ones_get_the_extra_partitions():
    out = RangeAssignor().assign({"t": [0, 1, 2, 3, 4]}, {"t": ["b-0", "a-1", "a-0"]})
    assert out == {("t", 0): "a-0", ("t", 1): "a-0", ("t", 2): "a-1", ("t", 3): "a-1",
                   ("t", 4): "b-0"}


def test_more_threads_than_partitions_leaves_threads_idle():
    out = RangeAssignor().assign({"t": [0, 1]}, {"t": ["a-0", "b-0", "c-0"]})
    assert out == {("t", 0): "a-0", ("t", 1): "b-0"}


def test_topic_without_threads_gets_no_owner_and_topics_are_independent():
    out = RangeAssignor().assign({"t": [0], "u": [0, 1]}, {"u": ["x-0"]})
    assert out == {("u", 0): "x-0", ("u", 1): "x-0"}


def test_deterministic_and_complete_at_scale():
    parts = list(range(1000))
    threads = [f"c{i}-0" for i in range(1000)]
    a = RangeAssignor().assign({"t": parts}, {"t": threads})
    random.Random(1).shuffle(parts)
    random.Random(2).shuffle(threads)
    b = RangeAssignor().assign({"t": parts}, {"t": threads})
    assert a == b
    assert sorted(p for _, p in a) == list(range(1000))
    assert len(set(a.values())) == 1000
