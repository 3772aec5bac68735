"""The broker's view of the cluster, kept current by the controller's UpdateMetadata requests.

Every broker answers Metadata requests from this cache, never from ZooKeeper: the controller is the
one writer (seed 000: decisions are published in ZooKeeper *and* pushed to brokers). Kafka's
convention for deletion is kept: a partition state whose leader is ``LEADER_DURING_DELETE`` (-2)
removes the partition from the cache.

Invariant: ``controller_epoch`` never goes backwards; an update carrying an older epoch is refused by
the caller before it reaches :meth:`MetadataCache.apply`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

LEADER_DURING_DELETE = -2
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """A live broker as clients should reach it."""

    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Leader, epoch and replica sets of one partition as the controller last published them."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    zk_version: int = 0


@dataclass
class MetadataCache:
    """Brokers, controller and partition states; see the module docstring."""

    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)
    controller_id: int = NO_LEADER
    controller_epoch: int = -1
    topics: dict[str, dict[int, PartitionState]] = field(default_factory=dict)

    def apply(
        self,
        controller_id: int,
        controller_epoch: int,
        brokers: Iterable[BrokerEndpoint],
        partition_states: Iterable[tuple[str, int, PartitionState]],
    ) -> set[str]:
        """Apply one UpdateMetadata; return the topics whose partitions changed.

        The broker list is replaced whole (the controller always sends every live broker); partition
        states are applied one by one, and a -2 leader deletes the partition.
        """
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self.brokers = {b.id: b for b in brokers}
        changed: set[str] = set()
        for topic, index, state in partition_states:
            changed.add(topic)
            if state.leader == LEADER_DURING_DELETE:
                parts = self.topics.get(topic)
                if parts is not None:
                    parts.pop(index, None)
                    if not parts:
                        del self.topics[topic]
                continue
            self.topics.setdefault(topic, {})[index] = state
        return changed

    def partition(self, topic: str, index: int) -> PartitionState | None:
        parts = self.topics.get(topic)
        return None if parts is None else parts.get(index)

    def has_topic(self, topic: str) -> bool:
        return topic in self.topics

    def leader_endpoint(self, topic: str, index: int) -> BrokerEndpoint | None:
        state = self.partition(topic, index)
        if state is None or state.leader < 0:
            return None
        return self.brokers.get(state.leader)

    def alive(self, broker_id: int) -> bool:
        return broker_id in self.brokers
