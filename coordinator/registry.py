"""The coordinator's in-memory registries (docs/design.md#procedure-index-consumer-coordinator).

- :class:`ConsumerRegistry`: one registered consumer: what it sent in RegisterConsumer, its
  channel, its ping bookkeeping and the partitions it owns per the last StartFetcher it
  acknowledged.
- :class:`GroupRegistry`: one group: members, offsets per partition (``offset_updated`` is
  "some are not in ZooKeeper yet") with what a Kafka client committed alongside them, and
  the rebalance bits ``rebalance_initiated``, ``curr_rebalancer`` and ``rebalance_failed``.
- :class:`Registries`: every group, the groups per (statically subscribed) topic, the groups
  with wildcard members, and the removal of empty groups after a grace period (the design leaves
  "when can a group be deleted" open: here, when it has been empty for the grace period and no
  rebalance is pending).

Pure bookkeeping: no I/O and no timers; callers pass ``now``. Everything runs on the reactor
thread, so nothing here locks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from broker_core.wire.topic_partition import TopicPartition
from coordinator.topic_count import TopicCount

#: What a Kafka client commits alongside an offset: (leader epoch, metadata).
OffsetExtras = tuple[int, str]
#: None committed (a thin member's offsets, an OffsetCommit without them).
NO_EXTRAS: OffsetExtras = (-1, "")


class DuplicateConsumer(Exception):
    """A consumer with this id is already a member of the group."""


@dataclass(eq=False)
class ConsumerRegistry:
    """One registered consumer.

    Invariants: ``owned`` is what the consumer last told this coordinator it fetches: the
    partitions of the last StartFetcher it acknowledged, emptied when it acknowledges a
    StopFetcher (between its old owner's StopFetcher answer and its new owner's StartFetcher
    nobody owns a partition that moves; a member whose partitions do not change in a rebalance
    gets neither, and keeps ``owned``). ``started`` ("settled") is True only while the last
    StopFetcher or StartFetcher sent to this consumer was a StartFetcher it acknowledged: it
    turns False when either is *sent*, so a member with a request unanswered, expired or
    refused, or one stopped and not started again, is never taken to fetch exactly ``owned``,
    and the next rebalance stops and starts it (coordinator.rebalance.members_to_move). It is
    False until this coordinator's first acknowledged StartFetcher (a thin consumer stops
    fetching when it registers, so it needs one). ``fetcher_requests`` counts the
    StopFetcher/StartFetcher requests sent, so an answer can tell whether it is the last one.
    """

    group_id: str
    consumer_id: str
    topic_count: TopicCount
    topic_count_text: str
    auto_commit: bool
    auto_offset_reset: str
    session_timeout_ms: int
    host: str = "?"
    channel: Any = None
    registered_at: float = 0.0
    #: Drawn at registration and returned only to this member (RegisterConsumer v1): an
    #: UnregisterConsumer or a CommitOffsets (v1) must carry it, so nobody else can make the
    #: member leave or commit in its name.
    session_id: int = 0
    #: The principal of the registering connection (``User:alice``); a commit or leave must
    #: come from the same one.
    principal: str = "User:ANONYMOUS"
    failed_pings: int = 0
    ping_outstanding: bool = False
    ping_seq: int = 0
    started: bool = False
    fetcher_requests: int = 0
    alive: bool = True
    owned: dict[TopicPartition, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.group_id, self.consumer_id)

    @property
    def ping_interval_s(self) -> float:
        """A Ping every third of the session timeout."""
        return self.session_timeout_ms / 3000.0

    @property
    def response_timeout_s(self) -> float:
        """Every request must be answered within 2/3 of the session timeout."""
        return self.session_timeout_ms * 2 / 3000.0


@dataclass(eq=False)
class GroupRegistry:
    """One consumer group; see the module docstring.

    Invariants: ``offsets[tp]`` never decreases through what thin members report (it only
    takes a reported or committed offset above the one it holds; a Kafka client's explicit
    commit, :meth:`set_offset`, may set it lower); ``dirty`` is the set of partitions whose
    ``offsets`` value is not known to be in ZooKeeper; a partition's reported offset is
    accepted only from the member that owns it; ``extras[tp]`` (absent: :data:`NO_EXTRAS`) goes
    with ``offsets[tp]`` and ``committed_extras[tp]`` with ``committed[tp]``, and a partition
    is clean only when both match (a commit of the same offset with new metadata is a change);
    ``explicit`` (a subset of ``dirty``) holds the partitions whose pending value is a Kafka
    client's explicit commit, which a re-read of the stored value never replaces (the client
    was told nothing yet, and is told success only once that value is written);
    ``curr_rebalancer`` is set while a rebalance
    of this group is queued or running and names the handler that has it.
    """

    group_id: str
    members: dict[str, ConsumerRegistry] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    dirty: set[TopicPartition] = field(default_factory=set)
    explicit: set[TopicPartition] = field(default_factory=set)
    extras: dict[TopicPartition, OffsetExtras] = field(default_factory=dict)
    committed_extras: dict[TopicPartition, OffsetExtras] = field(default_factory=dict)
    rebalance_initiated: bool = False
    curr_rebalancer: int | None = None
    rebalance_failed: str | None = None
    rebalancing: bool = False
    #: When a rebalance of this group was first superseded by a newer request since its last
    #: completed one (None: not since); bounds how long supersession may go on
    #: (coordinator.rebalance).
    superseded_since: float | None = None
    #: When this group's pending rebalance entered a handler's queue (None: not queued), and how
    #: long the last one dequeued had waited there (coordinator.rebalance.RebalanceHandlers).
    queued_at: float | None = None
    queue_wait_s: float = 0.0
    generation: int = 0
    rebalance_failures: int = 0
    empty_since: float | None = None
    #: KIP-134 and failover: no rebalance before this time (initial delay after the group's first
    #: registration, or after election while previous owners re-register).
    not_before: float = 0.0
    #: While the group waits for arrivals to pause (:mod:`coordinator.initial_rebalance`: a new
    #: group's first rebalance, or the next one when members arrive while it rebalances): the
    #: latest time it may run (first arrival + the initial delay); None otherwise. Each
    #: arrival pushes ``not_before`` by the quiet period, never past this.
    initial_bound: float | None = None
    #: Consumer ids that owned partitions in ZooKeeper when this coordinator was elected and
    #: have not re-registered yet; the group's first rebalance waits for them (bounded).
    expected: set[str] = field(default_factory=set)
    #: Static topics subscribed by the members, with how many members subscribe each.
    static_topics: Counter[str] = field(default_factory=Counter)
    wildcard_members: int = 0
    delayed_call: Any = None
    #: The owners in ZooKeeper as this coordinator last read or wrote them; None when unknown
    #: (not read yet, or a write failed). Only the active coordinator writes owners, under its
    #: epoch, so what it wrote is what ZooKeeper holds: rebalances compare with this instead
    #: of reading a thousand znodes each time.
    zk_owners: dict[TopicPartition, str] | None = None

    @property
    def offset_updated(self) -> bool:
        return bool(self.dirty)

    @property
    def state(self) -> str:
        if not self.members:
            return "empty"
        if self.rebalancing or self.rebalance_initiated or any(
                not m.started for m in self.members.values()):
            return "rebalancing"
        return "stable"

    def topics(self, known: Iterable[str]) -> set[str]:
        """Topics the group consumes: every statically named one (existing or not) and the
        known topics any wildcard member matches."""
        out = set(self.static_topics)
        if self.wildcard_members:
            wild = [m.topic_count for m in self.members.values() if m.topic_count.is_wildcard]
            out.update(t for t in known if any(tc.matches(t) for tc in wild))
        return out

    def wants(self, topic: str) -> bool:
        if topic in self.static_topics:
            return True
        return self.wildcard_members > 0 and any(
            m.topic_count.is_wildcard and m.topic_count.matches(topic)
            for m in self.members.values())

    def record_offsets(self, consumer: ConsumerRegistry,
                       offsets: Iterable[tuple[str, int, int]]) -> int:
        """Take offsets a member reported (Ping / StopFetcher): only for partitions it owns,
        only moving forward. Returns how many changed the registry."""
        changed = 0
        for topic, partition, offset in offsets:
            tp = (topic, partition)
            if tp not in consumer.owned or offset < 0:
                continue
            if offset > self.offsets.get(tp, -1):
                self.offsets[tp] = offset
                self.extras.pop(tp, None)  # a thin member commits no epoch or metadata
                self.dirty.add(tp)
                self.explicit.discard(tp)
                changed += 1
        return changed

    def set_offset(self, tp: TopicPartition, offset: int,
                   extras: OffsetExtras = NO_EXTRAS) -> None:
        """A Kafka client's explicit OffsetCommit (coordinator.kafka_groups): the group's offset
        becomes ``offset`` with ``extras``, even behind the one held (the client seeked back);
        the thin members' forward-only rule is for offsets they report, not for commits a
        Kafka group makes of itself."""
        self.offsets[tp] = offset
        self._set_extras(self.extras, tp, extras)
        self.dirty.add(tp)
        self.explicit.add(tp)

    def note_committed(self, tp: TopicPartition, offset: int,
                       extras: OffsetExtras = NO_EXTRAS) -> None:
        """ZooKeeper holds ``offset`` with ``extras`` for ``tp`` (read or just written; -1: the
        znode exists but holds no usable offset). The registry takes it unless it holds a
        later offset, or the same one with other extras still to be written, or an explicit
        commit still to be written (a seek back must not be undone by the value it replaces)."""
        self.committed[tp] = offset
        self._set_extras(self.committed_extras, tp, extras)
        if tp in self.explicit:
            return
        held = self.offsets.get(tp, -1)
        if offset < 0 or offset < held:
            return
        if offset == held and tp in self.dirty and self.extras.get(tp, NO_EXTRAS) != extras:
            return
        self.offsets[tp] = offset
        self._set_extras(self.extras, tp, extras)
        self.dirty.discard(tp)

    def note_written(self, tp: TopicPartition, offset: int, extras: OffsetExtras) -> None:
        """The committer wrote ``offset`` with ``extras``: clean unless the registry took
        another value while the write was in flight."""
        self.committed[tp] = offset
        self._set_extras(self.committed_extras, tp, extras)
        if self.offsets.get(tp) == offset and self.extras.get(tp, NO_EXTRAS) == extras:
            self.dirty.discard(tp)
            self.explicit.discard(tp)

    def forget_offset(self, tp: TopicPartition) -> None:
        """The partition's offset was deleted (DeleteGroups, OffsetDelete)."""
        for d in (self.offsets, self.committed, self.extras, self.committed_extras):
            d.pop(tp, None)
        self.dirty.discard(tp)
        self.explicit.discard(tp)

    def forget_offsets(self) -> None:
        """Every offset of the group was deleted."""
        for d in (self.offsets, self.committed, self.extras, self.committed_extras):
            d.clear()
        self.dirty.clear()
        self.explicit.clear()

    @staticmethod
    def _set_extras(into: dict[TopicPartition, OffsetExtras], tp: TopicPartition,
                    extras: OffsetExtras) -> None:
        if extras == NO_EXTRAS:
            into.pop(tp, None)
        else:
            into[tp] = extras

    def start_offset(self, tp: TopicPartition) -> int:
        """Where the new owner starts: the registry's offset, else -1 (the
        consumer applies its auto_offset_reset)."""
        return self.offsets.get(tp, -1)


class Registries:
    """Every group of the coordinator and its indexes; see the module docstring.

    Invariants: ``groups_per_topic[t]`` holds exactly the groups with a member statically
    subscribed to ``t``; ``wildcard_groups`` exactly the groups with a wildcard member;
    ``consumers`` is the number of members over all groups.
    """

    def __init__(self) -> None:
        self.groups: dict[str, GroupRegistry] = {}
        self.groups_per_topic: dict[str, set[str]] = {}
        self.wildcard_groups: set[str] = set()
        self.consumers = 0

    def group(self, group_id: str) -> GroupRegistry:
        """The group's registry, created empty if new (``handleNewGroup``)."""
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = GroupRegistry(group_id)
        return g

    def member(self, group_id: str, consumer_id: str) -> ConsumerRegistry | None:
        g = self.groups.get(group_id)
        return None if g is None else g.members.get(consumer_id)

    def add_member(self, c: ConsumerRegistry, now: float) -> GroupRegistry:
        """``handleAddedConsumer`` steps 2-3; raises :class:`DuplicateConsumer`."""
        g = self.group(c.group_id)
        if c.consumer_id in g.members:
            raise DuplicateConsumer(c.consumer_id)
        g.members[c.consumer_id] = c
        g.empty_since = None
        g.expected.discard(c.consumer_id)
        self.consumers += 1
        if c.topic_count.is_wildcard:
            g.wildcard_members += 1
            self.wildcard_groups.add(g.group_id)
        else:
            for topic in c.topic_count.subscription:
                g.static_topics[topic] += 1
                if g.static_topics[topic] == 1:
                    self.groups_per_topic.setdefault(topic, set()).add(g.group_id)
        return g

    def remove_member(self, c: ConsumerRegistry, now: float) -> GroupRegistry | None:
        """Drop ``c`` from its group (failure detection); returns the group, or None if ``c`` was
        not (any more) a member."""
        g = self.groups.get(c.group_id)
        if g is None or g.members.get(c.consumer_id) is not c:
            return None
        del g.members[c.consumer_id]
        self.consumers -= 1
        if c.topic_count.is_wildcard:
            g.wildcard_members -= 1
            if not g.wildcard_members:
                self.wildcard_groups.discard(g.group_id)
        else:
            for topic in c.topic_count.subscription:
                g.static_topics[topic] -= 1
                if g.static_topics[topic] <= 0:
                    del g.static_topics[topic]
                    groups = self.groups_per_topic.get(topic)
                    if groups is not None:
                        groups.discard(g.group_id)
                        if not groups:
                            del self.groups_per_topic[topic]
        if not g.members:
            g.empty_since = now
        return g

    def interested(self, topic: str) -> set[str]:
        """Groups that consume ``topic`` (static subscribers and matching wildcards)."""
        out = set(self.groups_per_topic.get(topic, ()))
        for gid in self.wildcard_groups:
            if gid not in out and self.groups[gid].wants(topic):
                out.add(gid)
        return out

    def expire_empty(self, now: float, grace_s: float) -> list[str]:
        """Remove groups empty for at least ``grace_s`` with no rebalance queued or running and
        no offsets waiting to be committed; returns their ids."""
        gone = []
        for gid, g in list(self.groups.items()):
            if (not g.members and g.empty_since is not None and now - g.empty_since >= grace_s
                    and g.curr_rebalancer is None and not g.rebalance_initiated
                    and not g.dirty and not g.expected):
                if g.delayed_call is not None and g.delayed_call.active():
                    g.delayed_call.cancel()
                del self.groups[gid]
                gone.append(gid)
        return gone

    def forget(self, group_id: str) -> None:
        """Drop a group without members (its offsets were deleted: DeleteGroups)."""
        g = self.groups.get(group_id)
        if g is None or g.members:
            return
        if g.delayed_call is not None and g.delayed_call.active():
            g.delayed_call.cancel()
        del self.groups[group_id]

    def clear(self) -> None:
        for g in self.groups.values():
            if g.delayed_call is not None and g.delayed_call.active():
                g.delayed_call.cancel()
        self.__init__()  # type: ignore[misc]
