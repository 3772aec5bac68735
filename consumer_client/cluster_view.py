"""The client side's one view of the cluster: brokers and partition leaders from Metadata.

Sans-IO: a :class:`ClusterView` is built from a decoded Metadata response by
:meth:`ClusterView.updated` and read by every client (the Twisted
:class:`~consumer_client.cluster.ClusterClient` of the consumer and the producer, the blocking
:class:`~consumer_client.spark.reader.Cluster` of the Spark data source); none of them indexes
a Metadata response itself. Time comes from the caller (``now``), so freshness runs on any
clock.

Invariants:

- a view is replaced, never edited by a refresh: :meth:`ClusterView.updated` returns a new one
  (only :meth:`ClusterView.learn_brokers` adds addresses learned elsewhere);
- topics a refresh did not name keep their previous entries (partitions and error); a refresh of
  every topic (``topics`` None) keeps nothing of the previous view's topics;
- a topic is either in ``topics`` (its partitions) or in ``topic_errors`` (why the broker
  refused it), never both;
- a partition whose error is neither NONE nor REPLICA_NOT_AVAILABLE (a follower is down, the
  leader is fine) is leaderless (leader -1), whatever leader id the answer carries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from broker_core.wire.errors import ErrorCode

#: Partition errors that still leave the answer's leader usable.
_LEADER_USABLE = frozenset({ErrorCode.NONE, ErrorCode.REPLICA_NOT_AVAILABLE})


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int  # -1 while the partition has no leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class ClusterView:
    """One Metadata response, indexed. ``topics`` maps a topic to its partitions by index;
    ``topic_errors`` holds the error of every topic the broker refused (e.g. unknown);
    ``updated_at`` is the caller's clock when the response arrived (``-inf``: never)."""

    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    topic_errors: dict[str, ErrorCode] = field(default_factory=dict)
    controller_id: int = -1
    updated_at: float = float("-inf")

    # -- reads ----------------------------------------------------------------------------------

    def leader_for(self, topic: str, partition: int) -> int:
        """The leader's node id, or -1 when unknown or leaderless."""
        p = self.topics.get(topic, {}).get(partition)
        return -1 if p is None else p.leader

    def partitions_for(self, topic: str) -> list[int] | None:
        """The topic's partition indexes in order; None when the view does not know it."""
        parts = self.topics.get(topic)
        return None if parts is None else sorted(parts)

    def age(self, now: float) -> float:
        """Seconds since this view's Metadata answer (infinite for a view never refreshed)."""
        return now - self.updated_at

    def is_fresh(self, now: float, max_age: float) -> bool:
        return self.age(now) < max_age

    def brokers_gone(self, previous: ClusterView) -> set[int]:
        """The brokers ``previous`` knew that this view does not: their connections go."""
        return set(previous.brokers) - set(self.brokers)

    # -- updates --------------------------------------------------------------------------------

    def learn_brokers(self, brokers: Iterable[tuple[int, str, int]]) -> None:
        """Add broker addresses learned elsewhere (StartFetcher carries the broker list)."""
        for node_id, host, port in brokers:
            self.brokers[node_id] = (host, port)

    def updated(self, resp: Any, topics: Iterable[str] | None, now: float) -> ClusterView:
        """A new view from Metadata response ``resp``, asked for ``topics`` (None: every
        topic) at ``now``; see the module docstring for what is kept."""
        view = ClusterView(controller_id=resp.controller_id, updated_at=now)
        view.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        if topics is not None:
            named = set(topics)
            view.topics = {t: p for t, p in self.topics.items() if t not in named}
            view.topic_errors = {t: e for t, e in self.topic_errors.items() if t not in named}
        for t in resp.topics:
            code = _error_code(t.error_code)
            view.topics.pop(t.name, None)
            view.topic_errors.pop(t.name, None)
            if code != ErrorCode.NONE:
                view.topic_errors[t.name] = code
                continue
            view.topics[t.name] = {
                p.partition_index: PartitionInfo(
                    t.name, p.partition_index,
                    p.leader_id if p.error_code in _LEADER_USABLE else -1,
                    p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes))
                for p in t.partitions}
        return view


def _error_code(code: int) -> ErrorCode:
    # A code this client does not know still refuses the topic: keep it as the generic one
    # rather than fail on the whole answer.
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
