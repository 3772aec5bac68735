"""The controller's side of failed log directories (KIP-112): replicas a broker reports offline
lose their leadership and their ISR place, until that broker restarts.

How the controller learns (the same in both metadata modes, through the metadata store):
a broker whose log directory went offline writes ``/brokers/offline_replicas/[id]`` (the
directories and the partitions whose logs were in them, for its registration epoch), then
creates Kafka's notification ``/log_dir_event_notification/log_dir_event_<seq>`` naming itself.
The notification's child watch runs :func:`on_log_dir_event` as a controller event: it reads the
named brokers' records, moves leadership and shrinks ISRs, and deletes the notifications.

(Kafka's ZooKeeper-mode controller asks instead: it sends LeaderAndIsr for every replica of the
broker and reads KAFKA_STORAGE_ERROR per partition from the answer. Sluice's LeaderAndIsr is
version 5, whose answer names topics by topic id, which Sluice does not assign, so the answer
cannot say which partition failed; the broker's record says it directly and is read again by a
new controller after a failover, so no round of requests is needed then either.)

Which replicas are offline is kept in memory (:class:`OfflineReplicaSet`): broker -> (its
registration epoch, partitions). A record of another epoch than the live registration's is a
previous incarnation's and is ignored; a broker that dies or re-registers is forgotten, so its
replicas come back when it restarts with the directory healthy (its new registration carries no
offline record) and catch up as followers, rejoining the ISR through the leader's AlterIsr.

Decisions are pure (:func:`offline_replica_changes`): a partition led by the broker gets a new
leader from the rest of its ISR (``offline_leader`` over the live brokers whose replica is not
offline); with none left it goes offline (leader -1) keeping its ISR, so the broker's replica,
which still holds the data, can lead again after the restart; a partition it follows loses it
from the ISR.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.controller.batch import PartitionDecision
from broker_core.controller.election import NO_LEADER, Election, offline_leader, shrink_isr
from broker_core.metadata import Delete, NoNode, TransactionFailed
from broker_core.wire.topic_partition import TopicPartition

if TYPE_CHECKING:
    from broker_core.controller.controller import Controller


log = Logger(namespace="sluice.controller.log_dirs")


class OfflineReplicaSet:
    """Replicas known to be on an offline log directory, per broker and registration epoch.

    Invariant: a broker's entry belongs to exactly one registration epoch; recording another
    epoch replaces it (a new incarnation starts with nothing offline)."""

    def __init__(self) -> None:
        self._by_broker: dict[int, tuple[int, frozenset[TopicPartition]]] = {}

    def record(self, broker: int, epoch: int, partitions: Iterable[TopicPartition]
               ) -> set[TopicPartition]:
        """Add ``partitions`` for ``broker`` at registration ``epoch``; returns those that were
        not known offline before."""
        known_epoch, known = self._by_broker.get(broker, (epoch, frozenset()))
        if known_epoch != epoch:
            known = frozenset()
        tps = frozenset(partitions)
        self._by_broker[broker] = (epoch, known | tps)
        return set(tps - known)

    def forget(self, brokers: Iterable[int]) -> None:
        for b in brokers:
            self._by_broker.pop(b, None)

    def partitions(self, broker: int) -> frozenset[TopicPartition]:
        return self._by_broker.get(broker, (0, frozenset()))[1]

    def is_offline(self, broker: int, tp: TopicPartition) -> bool:
        return tp in self.partitions(broker)

    def usable(self, tp: TopicPartition, brokers: Iterable[int]) -> list[int]:
        """``brokers`` whose replica of ``tp`` is not offline (order kept)."""
        return [b for b in brokers if not self.is_offline(b, tp)]

    def brokers(self) -> list[int]:
        return sorted(b for b, (_, tps) in self._by_broker.items() if tps)

    def __len__(self) -> int:
        return sum(len(tps) for _, tps in self._by_broker.values())


def offline_replica_election(
    tp: TopicPartition,
    d: PartitionDecision,
    broker: int,
    live: Collection[int],
    usable: Callable[[TopicPartition, Iterable[int]], list[int]],
    unclean_allowed: Callable[[str], bool],
) -> Election | None:
    """The election that takes ``broker``'s offline replica of ``tp`` (state ``d``) out of
    service (see the module docstring), or None when it needs nothing: ``broker`` neither
    leads it nor is in its ISR (so deciding again over the written state changes nothing)."""
    if broker not in d.replicas:
        return None
    if d.leader == broker:
        others = [b for b in usable(tp, live) if b != broker]
        rest = tuple(b for b in d.isr if b != broker)
        el = offline_leader(d.replicas, rest, others, unclean_allowed=unclean_allowed(tp[0]))
        if el.leader == NO_LEADER:
            # Nobody else in sync: offline, and the ISR stays so the broker's replica (its
            # data is on the failed disk, not lost) can lead again after its restart.
            el = Election(NO_LEADER, d.isr)
        return el
    if d.leader != NO_LEADER and broker in d.isr:
        return Election(d.leader, shrink_isr(d.isr, {broker}))
    return None


def offline_replica_changes(
    states: Mapping[TopicPartition, PartitionDecision],
    broker: int,
    offline: Collection[TopicPartition],
    live: Collection[int],
    usable: Callable[[TopicPartition, Iterable[int]], list[int]],
    unclean_allowed: Callable[[str], bool],
) -> dict[TopicPartition, Election]:
    """:func:`offline_replica_election` for each of ``broker``'s ``offline`` replicas that
    needs one. Partitions it neither leads nor is in the ISR of are left out, so applying the
    result twice changes nothing the second time."""
    changes: dict[TopicPartition, Election] = {}
    for tp in sorted(offline):
        d = states.get(tp)
        if d is None:
            continue
        el = offline_replica_election(tp, d, broker, live, usable, unclean_allowed)
        if el is not None:
            changes[tp] = el
    return changes


# -- controller events ---------------------------------------------------------------------------


async def on_log_dir_event(c: Controller) -> None:
    """The notification znode's children changed: act on every broker they name, then delete
    them (after acting: a controller that dies half-way leaves them for its successor)."""
    names = [n for n in await c.context.children(paths.LOG_DIR_EVENT_NOTIFICATION)
             if n.startswith("log_dir_event_")]
    if not names:
        return
    brokers: set[int] = set()
    for name in names:
        try:
            data, _ = await c.store.get(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{name}")
        except NoNode:
            continue
        try:
            brokers.add(paths.LogDirEventNotification.from_bytes(data).broker)
        except ValueError as e:
            log.error("ignoring log dir event notification {n}: {e}", n=name, e=e)
    log.info("log directory failure notifications from brokers {b}", b=sorted(brokers))
    await refresh_brokers(c, sorted(brokers))
    deletes = [Delete(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{n}") for n in names]
    try:
        await c.writer.fenced(deletes)
    except TransactionFailed:
        for op in deletes:  # some were gone already (deleted by a previous controller)
            try:
                await c.writer.fenced([op])
            except TransactionFailed:
                pass


async def refresh_brokers(c: Controller, brokers: Iterable[int]) -> None:
    """Read the offline records of the live ``brokers`` and take their offline replicas out
    of service."""
    brokers = [b for b in brokers if b in c.context.live]
    if not brokers:
        return
    found = await c.store.get_many([paths.offline_replicas(b) for b in brokers])
    reporting: list[int] = []
    for b, got in zip(brokers, found, strict=True):
        if got is None:
            continue
        try:
            rec = paths.OfflineReplicas.from_bytes(got[0])
        except ValueError as e:
            log.error("ignoring the offline-replica record of broker {b}: {e}", b=b, e=e)
            continue
        epoch = c.context.live[b].epoch
        if rec.broker_id != b or rec.broker_epoch != epoch:
            log.debug("offline-replica record of broker {b} is for epoch {r}, not {e}",
                      b=b, r=rec.broker_epoch, e=epoch)
            continue
        new = c.context.offline_replicas.record(b, epoch, rec.partitions)
        if new:
            log.warn("broker {b}: log directories {d} offline; {n} replicas newly offline "
                     "(e.g. {ex})", b=b, d=list(rec.log_dirs), n=len(new),
                     ex=", ".join(f"{t}-{p}" for t, p in sorted(new)[:3]))
        reporting.append(b)
    await apply_changes(c, reporting)


async def apply_changes(c: Controller, brokers: Iterable[int]) -> None:
    """Take the offline replicas of ``brokers`` out of service: decide each partition from
    its current state (again after a conflicting write, by the same rule), write the
    decisions (fenced, conditional) and send them: LeaderAndIsr to the live replicas,
    UpdateMetadata to every live broker. Unclean elections are logged and counted by the
    writer, once written."""
    offline: dict[TopicPartition, list[int]] = {}
    for b in brokers:
        for tp in c.context.offline_replicas.partitions(b):
            offline.setdefault(tp, []).append(b)

    def decide(tp: TopicPartition, d: PartitionDecision) -> Election | None:
        # Judged from the present each time (a retry may come after the broker re-registered
        # with its directory back, or after brokers were fenced or began a controlled
        # shutdown): the leader comes from the live, unfenced brokers, those shutting down
        # only if nobody else can lead (as the controller's own elections do). The first
        # reporting broker whose replica needs something decides (a partition with offline
        # replicas on two brokers is settled for the second on the next report or failover).
        usable = list(c._usable_live())
        preferred = [b for b in usable if b not in c.context.shutting_down]
        for b in sorted(offline.get(tp, ())):
            if b not in c.context.live or not c.context.offline_replicas.is_offline(b, tp):
                continue
            el = offline_replica_election(tp, d, b, preferred, c.context.offline_replicas.usable,
                                          c.unclean_leader_election)
            if el is not None and el.leader == NO_LEADER and len(preferred) < len(usable):
                el = offline_replica_election(tp, d, b, usable, c.context.offline_replicas.usable,
                                              c.unclean_leader_election)
            if el is not None:
                return el
        return None

    tps = [tp for tp in sorted(offline)
           if tp in c.context.states and decide(tp, c.context.states[tp]) is not None]
    if not tps:
        return
    written = await c.writer.write_decisions(tps, decide, "offline replicas")
    moved = sum(1 for d in written.values() if d.leader != NO_LEADER)
    left = [tp for tp, d in written.items() if d.leader == NO_LEADER]
    log.info("offline replicas: {n} partitions changed ({m} with a leader, {o} left without "
             "one{ex})", n=len(written), m=moved, o=len(left),
             ex=(": " + ", ".join(f"{t}-{p}" for t, p in left[:3])) if left else "")
    batch = c._new_batch()
    for tp, d in written.items():
        batch.leader_and_isr([r for r in d.replicas if r in c.context.live], tp, d)
        batch.update_metadata(c.context.live, tp, d)
    c._send(batch)


async def on_failover(c: Controller) -> None:
    """A new controller: learn every live broker's offline replicas (records survive a
    controller change; notifications not yet handled are handled and deleted too)."""
    await refresh_brokers(c, sorted(c.context.live))
    await on_log_dir_event(c)
