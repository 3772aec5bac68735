"""The consumer coordinator of one shard (docs/design.md, docs/coordinator.md#sharding): hosted
by the brokers that stand for the shard, active on the elected one. The groups of the shard
are those :func:`coordinator.shard_hash.shard_of` maps to it; :mod:`coordinator.shards` routes
each request naming a group to its shard's service.

:class:`CoordinatorService` wires the parts together and answers the coordinator's requests:

- election of its shard (:mod:`coordinator.elector`); on winning, start-up (``coordinatorStartup``):
  topic listeners, the shard's groups known from ZooKeeper owners (:mod:`coordinator.failover`),
  the Ping
  scheduler, the committer, the rebalance handlers;
- the thin-client requests (:mod:`coordinator.consumer_requests`; ClusterMetadata is
  answered for the group's shard by :mod:`coordinator.shards`): RegisterConsumer (turns the
  connection into the coordinator
  channel), CommitOffsets, UnregisterConsumer (a member leaving: its final offsets written, the
  member removed at once) and DescribeConsumerGroups (the coordinator only);
- failure detection (:mod:`coordinator.failure_detection`): a Ping every session_timeout/3
  to each consumer whose previous Ping was answered or expired, expiry after 2/3 of the
  session timeout, failure past ``coordinator.ping.max.failures`` expired Pings in a row or
  when the channel closes;
- rebalancing (:mod:`coordinator.rebalance`): requests coalesced per group and held until
  ``not_before``, run by the rebalance handlers on :mod:`coordinator.rebalance_context`
  (ZooKeeper reads, fenced writes, StopFetcher/StartFetcher sends).

Invariants:

- everything runs on the reactor thread;
- every ZooKeeper write of the coordinator is a multi that starts with a ``check`` of its
  shard's epoch ``/coordinator_shards/epochs/[k]`` at the version this term set
  (:meth:`fenced`); a failed check resigns;
- it only ever holds groups of its own shard (the router sends it no other; failover loads no
  other);
- while not active (or SUSPENDED) the coordinator neither pings, nor rebalances, nor writes;
  resigning forgets every group and closes every channel (consumers then re-register with
  whoever is elected);
- a consumer is in at most one group registry, and its scheduler entry, channel and registry
  entry go together (:meth:`handle_consumer_failure`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.fenced_writer import EpochMoved, write_fenced
from broker_core.purgatory import Purgatory
from broker_core.server.channel import ServerChannel
from coordinator import rebalance
from coordinator.assignor import IPartitionAssignor, StickyAssignor, TopicPartition
from coordinator.committer import OffsetCommitter, read_committed_offset
from coordinator.consumer_requests import ConsumerRequests
from coordinator.elector import coordinator_election
from coordinator.failover import load_groups_from_zookeeper
from coordinator.failure_detection import MemberFailures
from coordinator.group_deletion import GroupDeletion
from coordinator.heartbeat import HeartbeatScheduler
from coordinator.kafka_groups import KafkaGroupApis
from coordinator.listeners import TopicListeners
from coordinator.rebalance_context import CoordinatorRebalanceContext
from coordinator.registry import ConsumerRegistry, GroupRegistry, Registries

log = Logger(namespace="sluice.coordinator")

@dataclass(frozen=True)
class CoordinatorConfig:
    """The broker keys the coordinator uses (docs/configuration.md), in milliseconds."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    initial_rebalance_quiet_ms: int = 200
    max_group_size: int = 1000
    rebalance_backoff_ms: int = 2000
    rebalance_max_retries: int = 4
    offsets_commit_interval_ms: int = 5000
    offset_metadata_max_bytes: int = 4096
    rebalance_handlers: int = 4
    ping_max_failures: int = 1
    empty_group_retention_ms: int = 600000

    @classmethod
    def from_broker_config(cls, cfg: Any) -> CoordinatorConfig:
        return cls(
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            initial_rebalance_quiet_ms=cfg.group_initial_rebalance_quiet_ms,
            max_group_size=cfg.group_max_size,
            rebalance_backoff_ms=cfg.rebalance_backoff_ms,
            rebalance_max_retries=cfg.rebalance_max_retries,
            offsets_commit_interval_ms=cfg.offsets_commit_interval_ms,
            offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
            rebalance_handlers=cfg.coordinator_rebalance_handlers,
            ping_max_failures=cfg.coordinator_ping_max_failures,
            empty_group_retention_ms=cfg.coordinator_empty_group_retention_ms,
        )


class CoordinatorService:
    """See the module docstring. ``brokers()`` returns the live brokers (objects with ``id``,
    ``host``, ``port``) for ClusterMetadata and StartFetcher. ``shard`` is the shard this
    service coordinates, of ``shard_count``.

    Of ``metrics`` it updates the counters, histograms and its shard's
    ``coordinator_epoch``; the gauges over every shard of the broker (active, members, groups,
    purgatory sizes) are :class:`coordinator.shards.CoordinatorShards`'s to export."""

    def __init__(self, broker_id: int, store: Any, *, clock: IReactorTime,
                 shard: int = 0, shard_count: int = 1,
                 config: CoordinatorConfig | None = None,
                 brokers: Callable[[], Iterable[Any]] = lambda: (),
                 metrics: Any = None, assignor: IPartitionAssignor | None = None,
                 channel_factory: Callable[[], Any] = ServerChannel) -> None:
        self.broker_id = broker_id
        self.shard = shard
        self.shard_count = shard_count
        self.channel_factory = channel_factory
        self.store = store
        self.clock = clock
        self.config = config or CoordinatorConfig()
        self.brokers = brokers
        self.metrics = metrics
        self.assignor: IPartitionAssignor = assignor or StickyAssignor()
        self.backoff_s = self.config.rebalance_backoff_ms / 1000.0
        self.max_retries = self.config.rebalance_max_retries
        self.elector = coordinator_election(broker_id, store, shard, on_elected=self._on_elected,
                                            on_resigned=self._on_resigned,
                                            on_suspended=self._on_suspended,
                                            on_lost=self._on_session_lost, clock=clock)
        #: The session ended and the resignation it calls for has not run yet (it is a step,
        #: and may wait behind one in progress): the shard may already have a new coordinator,
        #: so nothing is sent or written meanwhile, though the session is no longer suspended.
        self._session_lost = False
        self.registries = Registries()
        self.ping_purgatory = Purgatory("coordinator_ping", clock)
        self.stop_purgatory = Purgatory("coordinator_stop_fetcher", clock)
        self.start_purgatory = Purgatory("coordinator_start_fetcher", clock)
        #: Pings and the removal of members that failed or left.
        self.failures = MemberFailures(self)
        self.scheduler = HeartbeatScheduler(clock, self.failures.ping_due)
        #: What a rebalance reads, writes and sends through (coordinator.rebalance_context).
        self.rebalance_context = CoordinatorRebalanceContext(self)
        self.handlers = self._new_handlers()
        #: Held around every write of offsets (the committer's) and by group deletion.
        self._commit_lock = defer.DeferredLock()
        self.committer = OffsetCommitter(
            clock, self.config.offsets_commit_interval_ms / 1000.0,
            groups=lambda: list(self.registries.groups.values()), fenced=self.fenced,
            ensure_path=self.ensure_path, reload=self.load_committed, can_act=self.can_act,
            metrics=metrics, lock=self._commit_lock)
        self.listeners = TopicListeners(store, on_topics=self._on_topics,
                                        on_partitions=self._on_partitions)
        self._sweeper: task.LoopingCall | None = None
        self._ensured: set[str] = set()
        #: Kafka's group protocol (JoinGroup ... DescribeGroups) for standard Kafka clients.
        self.kafka = KafkaGroupApis(self)
        #: DeleteGroups and OffsetDelete, for both kinds of group.
        self.deletion = GroupDeletion(self)
        #: The thin-client requests (RegisterConsumer ... DescribeConsumerGroups).
        self.requests = ConsumerRequests(self)
        self.term = 0

    def _new_handlers(self) -> rebalance.RebalanceHandlers:
        metrics = self.metrics
        return rebalance.RebalanceHandlers(
            self.config.rebalance_handlers, self.registries.groups.get,
            lambda g: rebalance.rebalance(self.rebalance_context, g), clock=self.clock,
            waited=(None if metrics is None
                    else metrics.coordinator_rebalance_queue_seconds.observe))

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.elector.active

    @property
    def coordinator_id(self) -> int:
        """The shard's elected coordinator as this broker knows it (-1: none)."""
        return self.broker_id if self.active else self.elector.leader_id

    @property
    def members(self) -> int:
        """Consumers registered here (0 unless active)."""
        return self.registries.consumers if self.active else 0

    @property
    def group_count(self) -> int:
        """Groups in this shard's registry (0 unless active)."""
        return len(self.registries.groups) if self.active else 0

    def start(self) -> None:
        """Stand for election (call after the broker registered itself)."""
        self.elector.start()

    async def stop(self) -> None:
        """Write pending offsets, resign (deleting the shard's seat), close channels."""
        if self.can_act():
            try:
                await self._commit(list(self.registries.groups.values()))
            except Exception as e:
                log.warn("final offset commit failed: {e}", e=e)
        await self.elector.stop()
        for p in (self.ping_purgatory, self.stop_purgatory, self.start_purgatory):
            p.shutdown()
        self.kafka.stop()

    def can_act(self) -> bool:
        return self.active and not self.elector.suspended and not self._session_lost

    def _on_session_lost(self) -> None:
        self._session_lost = True

    async def _on_elected(self, epoch: int, epoch_version: int) -> None:
        """``coordinatorStartup`` and failover (docs/design.md#coordinator-failover)."""
        self.term += 1
        self._session_lost = False
        self.registries = Registries()
        self.handlers = self._new_handlers()
        self._ensured = set()
        if self.metrics is not None:
            self.metrics.coordinator_epoch.labels(shard=str(self.shard)).set(epoch)
        self.listeners.start()
        self.scheduler.stop()
        self.committer.start()
        sweep_s = max(0.1, min(60.0, self.config.empty_group_retention_ms / 2000.0))
        self._sweeper = task.LoopingCall(self._sweep_empty_groups)
        self._sweeper.clock = self.clock
        self._sweeper.start(sweep_s, now=False).addErrback(
            lambda f: log.failure("empty-group sweeper stopped", f))
        await load_groups_from_zookeeper(self)

    async def _on_resigned(self) -> None:
        self.term += 1
        self._session_lost = False
        self.listeners.stop()
        self.committer.stop()
        self.handlers.stop()
        self.scheduler.stop()
        if self._sweeper is not None and self._sweeper.running:
            self._sweeper.stop()
        self._sweeper = None
        members = [m for g in self.registries.groups.values() for m in g.members.values()]
        self.registries.clear()
        self.kafka.resigned()
        for m in members:
            m.alive = False
            if m.channel is not None:
                m.channel.close()

    def _on_suspended(self, suspended: bool) -> None:
        self.scheduler.paused = suspended
        if not suspended and self.can_act():
            # Rebalances abandoned while suspended are asked for again.
            for g in list(self.registries.groups.values()):
                if g.state != "stable" and not g.rebalance_initiated:
                    self.request_rebalance(g)

    def _sweep_empty_groups(self) -> None:
        now, grace_s = self.clock.seconds(), self.config.empty_group_retention_ms / 1000.0
        gone = self.registries.expire_empty(now, grace_s)
        for gid in gone:
            log.info("group {g} removed after being empty for the grace period", g=gid)
        self.kafka.sweep(now, grace_s)

    # -- requests (coordinator.consumer_requests) -------------------------------------------------

    def register_consumer(self, header: Any, body: Any, proto: Any) -> dict:
        return self.requests.register_consumer(header, body, proto)

    async def commit_offsets(self, header: Any, body: Any, *, principal: str | None = None,
                             topic_allowed: Callable[[str], bool] | None = None) -> dict:
        return await self.requests.commit_offsets(header, body, principal=principal,
                                                  topic_allowed=topic_allowed)

    async def unregister_consumer(self, header: Any, body: Any, *,
                                  principal: str | None = None,
                                  topic_allowed: Callable[[str], bool] | None = None) -> dict:
        return await self.requests.unregister_consumer(header, body, principal=principal,
                                                       topic_allowed=topic_allowed)

    def describe_consumer_groups(self, header: Any, body: Any) -> dict:
        return self.requests.describe_consumer_groups(header, body)

    async def _commit_accepted(self, g: GroupRegistry, accepted: set[TopicPartition]
                               ) -> dict | None:
        """Write a group's accepted offsets (see ``ConsumerRequests.commit_accepted``)."""
        return await self.requests.commit_accepted(g, accepted)

    # -- failure detection (coordinator.failure_detection) ------------------------------------------

    def handle_consumer_failure(self, c: ConsumerRegistry, reason: str) -> None:
        """``handleConsumerFailure``: unschedule, close, remove, fail an ongoing rebalance
        fast, rebalance the rest. Idempotent."""
        self.failures.handle_consumer_failure(c, reason)

    # -- rebalance requests ------------------------------------------------------------------------

    def request_rebalance(self, g: GroupRegistry) -> None:
        """Ask for a rebalance of ``g`` unless one is already initiated (coalescing). It is
        handed to the rebalance handlers by a timer, never from here: at ``g.not_before`` (the
        initial wait, which arrivals may push while it runs:
        :mod:`coordinator.initial_rebalance`), else on the next reactor turn. So the caller (a
        RegisterConsumer being answered, a failure being handled) returns before any rebalance
        work runs: a registration's answer never waits for the assignment, the StopFetcher
        sends or the metadata reads of the rebalance it caused."""
        if not self.active or g.rebalance_initiated:
            return
        g.rebalance_initiated = True
        delay = max(0.0, g.not_before - self.clock.seconds())
        g.delayed_call = self.clock.callLater(delay, self._submit, g.group_id, self.term)

    def _submit(self, gid: str, term: int) -> None:
        g = self.registries.groups.get(gid)
        if g is None or term != self.term or not self.active:
            return
        remaining = g.not_before - self.clock.seconds()
        if remaining > 0:
            # A member arrived meanwhile and pushed the initial quiet deadline: wait on. One
            # timer per group; arrivals only move ``not_before``, never reschedule it.
            g.delayed_call = self.clock.callLater(remaining, self._submit, gid, term)
            return
        g.delayed_call = None
        g.initial_bound = None
        g.expected.clear()
        self.handlers.submit(g)

    def _on_topics(self, new: set[str], deleted: set[str]) -> None:
        for t in sorted(new | deleted):
            for gid in sorted(self.registries.interested(t)):
                log.info("topic {t} {what}: rebalancing group {g}", t=t,
                         what="created" if t in new else "deleted", g=gid)
                self.request_rebalance(self.registries.groups[gid])

    def _on_partitions(self, topic: str) -> None:
        for gid in sorted(self.registries.interested(topic)):
            log.info("partitions of {t} changed: rebalancing group {g}", t=topic, g=gid)
            self.request_rebalance(self.registries.groups[gid])

    # -- offsets -----------------------------------------------------------------------------------

    async def load_committed(self, group: GroupRegistry, tps: Sequence[TopicPartition]) -> None:
        """Learn what the store holds for ``tps`` of ``group`` (whether each znode exists
        decides create or set when writing)."""
        tps = list(tps)
        if not tps:
            return
        raw = await self.store.get_many([paths.consumer_offset(group.group_id, *tp)
                                         for tp in tps])
        for tp, r in zip(tps, raw, strict=True):
            if r is None:
                group.committed.pop(tp, None)
                group.committed_extras.pop(tp, None)
            else:
                stored = read_committed_offset(group.group_id, tp, r[0])
                group.note_committed(tp, stored.offset, (stored.leader_epoch, stored.metadata))

    async def _commit(self, groups: list[GroupRegistry],
                      only: dict[str, set[TopicPartition]] | None = None) -> int:
        # One write of offsets at a time (the committer holds _commit_lock): the periodic
        # committer, a rebalance and the commit requests must not race to create the same
        # offset znode.
        return await self.committer.commit(groups, only)

    async def commit(self, group: GroupRegistry) -> None:
        await self._commit([group])

    # -- ZooKeeper writes --------------------------------------------------------------------------

    async def ensure_path(self, path: str) -> None:
        """Create a parent znode a fenced write needs. The creation itself is not fenced (an
        empty persistent parent is harmless), but a service that cannot act (not elected,
        suspended, stopped) creates nothing: the fenced write that follows is refused."""
        if path in self._ensured or not self.can_act():
            return
        await self.store.ensure_path(path)
        self._ensured.add(path)

    async def fenced(self, ops: Sequence[Any]) -> None:
        """Apply ``ops`` through the shared fenced writer (:mod:`broker_core.fenced_writer`):
        multis that each begin with the coordinator-epoch check, sent one at a time; a failed
        check resigns and raises :class:`~coordinator.rebalance.NotCoordinator`."""
        if not self.can_act():
            raise rebalance.NotCoordinator()
        try:
            await write_fenced(self.store, paths.coordinator_shard_epoch(self.shard),
                               self.elector.epoch_version, ops)
        except EpochMoved as e:
            log.warn("coordinator epoch check of shard {k} failed: a newer coordinator of the "
                     "shard exists; resigning", k=self.shard)
            self.elector.resign_soon()
            raise rebalance.NotCoordinator() from e
