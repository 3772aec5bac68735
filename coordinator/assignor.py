"""Partition assignment: which consumer thread owns which partition (docs/design.md#rebalancing).

:class:`IPartitionAssignor` is the seam (``zope.interface``). Two algorithms, both run once by
the coordinator for the whole group:

- :class:`RangeAssignor` is the algorithm Kafka's ZooKeeper consumer ran on every member
  (``ZookeeperConsumerConnector.rebalance``): per topic, sort the partitions and the consumer
  threads, and give each thread a contiguous range, the first ``partitions % threads`` threads
  one partition more. A member joining or leaving shifts every range after it.
- :class:`StickyAssignor` (the coordinator's default) gives each thread the same number of
  partitions as the range assignor does, but keeps every partition with the thread that owns
  it now as far as that balance allows: a member joining a group of ``n`` takes its share from
  a few others and the rest keep theirs, so a rebalance needs to stop and start only the members
  whose partitions move (coordinator.rebalance). With nobody owning anything yet it gives exactly
  the range assignor's answer.

Both are pure and O(P log P + T log T) per topic, so a 1,000-member group over 1,000 partitions
costs a few milliseconds on the reactor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zope.interface import Attribute, Interface, implementer

from broker_core.wire.topic_partition import TopicPartition


class IPartitionAssignor(Interface):
    """Decides ownership for one group."""

    name = Attribute("A short name for logs and DescribeConsumerGroups (e.g. 'range').")

    def assign(partitions: Mapping[str, Sequence[int]],  # noqa: N805 (zope interface)
               threads: Mapping[str, Sequence[str]],
               previous: Mapping[TopicPartition, str] | None = None,
               ) -> dict[TopicPartition, str]:
        """Given each topic's partitions and the consumer thread ids subscribed to it, return
        the owner thread of every partition. Every partition of a topic with at least one
        thread gets exactly one owner; a topic without threads gets none. ``previous`` is the
        owner thread each partition has now (an assignor may keep it there); the coordinator
        always passes it, so an assignor that ignores it must still accept it. Deterministic:
        the same inputs give the same answer whatever their order."""


@implementer(IPartitionAssignor)
class RangeAssignor:
    """Kafka's range assignment over sorted consumer threads (see the module docstring)."""

    name = "range"

    def assign(self, partitions: Mapping[str, Sequence[int]],
               threads: Mapping[str, Sequence[str]],
               previous: Mapping[TopicPartition, str] | None = None,
               ) -> dict[TopicPartition, str]:
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


@implementer(IPartitionAssignor)
class StickyAssignor:
    """Balanced as :class:`RangeAssignor`, moving as few partitions as that allows (see the
    module docstring).

    Per topic with ``P`` partitions and ``T`` threads, every thread gets ``P // T`` partitions
    and ``P % T`` of them one more; the extra places go first to threads that own more than
    ``P // T`` now (so they keep them), then by thread id. Each thread keeps the partitions it
    owns now up to its quota (the lowest-numbered ones when over it); the partitions left (new,
    owned by a thread that left, or taken from a thread over its quota) fill the threads below
    their quota in thread-id order, lowest partition first.
    """

    name = "sticky"

    def assign(self, partitions: Mapping[str, Sequence[int]],
               threads: Mapping[str, Sequence[str]],
               previous: Mapping[TopicPartition, str] | None = None,
               ) -> dict[TopicPartition, str]:
        owned: dict[str, dict[str, list[int]]] = {}  # topic -> thread -> partitions held now
        for (topic, p), thread in (previous or {}).items():
            owned.setdefault(topic, {}).setdefault(thread, []).append(p)
        out: dict[TopicPartition, str] = {}
        for topic, parts in partitions.items():
            ts = sorted(set(threads.get(topic, ())))
            if not ts or not parts:
                continue
            ps = sorted(set(parts))
            base, extra = divmod(len(ps), len(ts))
            existing = set(ps)
            held = owned.get(topic, {})
            kept = {t: sorted(p for p in held.get(t, ()) if p in existing) for t in ts}
            quota = dict.fromkeys(ts, base)
            for t in sorted(ts, key=lambda t: (len(kept[t]) <= base, t))[:extra]:
                quota[t] += 1
            count = dict.fromkeys(ts, 0)
            for t in ts:
                for p in kept[t][:quota[t]]:
                    out[(topic, p)] = t
                    count[t] += 1
            free = iter(p for p in ps if (topic, p) not in out)
            for t in ts:
                for _ in range(quota[t] - count[t]):
                    out[(topic, next(free))] = t
        return out
