"""Partition assignment: which consumer thread owns which partition (docs/design.md#rebalancing).

:class:`IPartitionAssignor` is the seam (``zope.interface``); :class:`RangeAssignor` is the
algorithm Kafka's ZooKeeper consumer ran on every member (``ZookeeperConsumerConnector
.rebalance``), now run once by the coordinator for the whole group: per topic, sort the
partitions and the consumer threads, and give each thread a contiguous range, the first
``partitions % threads`` threads one partition more.

Pure and O(P + T log T) per topic, so a 1,000-member group over 1,000 partitions costs a few
milliseconds on the reactor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zope.interface import Attribute, Interface, implementer

from broker_core.wire.topic_partition import TopicPartition


class IPartitionAssignor(Interface):
    """Decides ownership for one group."""

    name = Attribute("A short name for logs and DescribeConsumerGroups (e.g. 'range').")

    def assign(partitions: Mapping[str, Sequence[int]],  # noqa: N805 (zope interface)
               threads: Mapping[str, Sequence[str]]) -> dict[TopicPartition, str]:
        """Given each topic's partitions and the consumer thread ids subscribed to it, return
        the owner thread of every partition. Every partition of a topic with at least one
        thread gets exactly one owner; a topic without threads gets none. Deterministic: the
        same inputs give the same answer whatever their order."""


@implementer(IPartitionAssignor)
class RangeAssignor:
    """Kafka's range assignment over sorted consumer threads (see the module docstring)."""

    name = "range"

    def assign(self, partitions: Mapping[str, Sequence[int]],
               threads: Mapping[str, Sequence[str]]) -> dict[TopicPartition, str]:
        out: dict[TopicPartition, str] = {}
        for topic, parts in partitions.items():
            ts = sorted(set(threads.get(topic, ())))
            if not ts or not parts:
                continue
            ps = sorted(set(parts))
            per, extra = divmod(len(ps), len(ts))
            for i, thread in enumerate(ts):
                start = per * i + min(i, extra)
                count = per + (1 if i < extra else 0)
                for p in ps[start:start + count]:
                    out[(topic, p)] = thread
        return out
