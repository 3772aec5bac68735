"""The broker's view of the cluster, kept current by the controller's UpdateMetadata requests.

Every broker answers Metadata requests from this cache, never from ZooKeeper: the controller is the
one writer (the controller's decisions are published in ZooKeeper *and* pushed to brokers). Kafka's
convention for deletion is kept: a partition state whose leader is ``LEADER_DURING_DELETE`` (-2)
removes the partition from the cache.

Invariant: ``controller_epoch`` never goes backwards; an update carrying an older epoch is refused by
the caller before it reaches :meth:`MetadataCache.apply`.

Derived values (:meth:`MetadataCache.derived`, e.g. a topic's partitions pre-encoded for Metadata
responses) are built once and kept until that topic's partitions, the live broker ids or their
listeners' names change: clients poll Metadata for every partition many times a second during a
failover, and re-encoding 10,000 unchanged partitions each time was a third of a broker's
reactor time.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

LEADER_DURING_DELETE = -2
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """A live broker: ``host``/``port`` is its inter-broker listener (where other brokers
    reach it); ``listeners`` each advertised listener as (name, host, port), which is where a
    client that came on that listener is sent. Empty ``listeners`` (a hand-built value): the
    broker is reached at ``host:port`` on every listener."""

    id: int
    host: str
    port: int
    rack: str | None = None
    listeners: tuple[tuple[str, str, int], ...] = ()

    def address(self, listener: str | None) -> tuple[str, int] | None:
        """Where a client of ``listener`` reaches this broker; None if it has no such
        listener (Kafka leaves it out). ``listener`` None: the inter-broker address."""
        if listener is None or not self.listeners:
            return self.host, self.port
        for name, host, port in self.listeners:
            if name == listener:
                return host, port
        return None


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
    _derived: dict[str, dict[Hashable, Any]] = field(default_factory=dict, repr=False,
                                                     compare=False)

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
        old = _listener_names(self.brokers)
        self.brokers = {b.id: b for b in brokers}
        if _listener_names(self.brokers) != old:
            # Leaders and offline replicas are shown against the live brokers and the listeners
            # they have (a broker may come back with other listeners under the same id).
            self._derived.clear()
        changed: set[str] = set()
        for topic, index, state in partition_states:
            if topic not in changed:
                changed.add(topic)
                self._derived.pop(topic, None)
            if state.leader == LEADER_DURING_DELETE:
                parts = self.topics.get(topic)
                if parts is not None:
                    parts.pop(index, None)
                    if not parts:
                        del self.topics[topic]
                continue
            self.topics.setdefault(topic, {})[index] = state
        return changed

    def derived(self, topic: str, key: Hashable, build: Callable[[], T]) -> T:
        """``build()``'s value for ``topic`` and ``key``, computed once and kept until the
        topic's partitions, the live broker ids or their listeners' names change (``build``
        may read only those, not the brokers' addresses)."""
        per_topic = self._derived.setdefault(topic, {})
        try:
            return per_topic[key]
        except KeyError:
            value = per_topic[key] = build()
            return value

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


def _listener_names(brokers: dict[int, BrokerEndpoint]) -> dict[int, tuple[str, ...]]:
    return {i: tuple(name for name, _, _ in b.listeners) for i, b in brokers.items()}
