"""The consumer coordinator (docs/design.md): hosted by every broker, active on the elected one.

:class:`CoordinatorService` wires the parts together and answers the coordinator's requests:

- election (:mod:`coordinator.elector`); on winning, start-up (``coordinatorStartup``):
  topic listeners, the groups known from ZooKeeper owners (failover), the Ping
  scheduler, the committer, the rebalance handlers;
- ClusterMetadata (any broker), RegisterConsumer (turns the connection into the coordinator
  channel), CommitOffsets, UnregisterConsumer (a member leaving: its final offsets written, the
  member removed at once) and DescribeConsumerGroups (the coordinator only);
- failure detection: a Ping every session_timeout/3 to each consumer whose previous
  Ping was answered or expired, expiry after 2/3 of the session timeout, failure past
  ``coordinator.ping.max.failures`` expired Pings in a row or when the channel closes;
- rebalancing (:mod:`coordinator.rebalance`), for which this class is the context: ZooKeeper
  reads, fenced writes, StopFetcher/StartFetcher sends.

Invariants:

- everything runs on the reactor thread;
- every ZooKeeper write of the coordinator is a multi that starts with a ``check`` of
  ``/consumers/coordinator_epoch`` at the version this term set (:meth:`fenced`); a failed check
  resigns;
- while not active (or SUSPENDED) the coordinator neither pings, nor rebalances, nor writes;
  resigning forgets every group and closes every channel (consumers then re-register with
  whoever is elected);
- a consumer is in at most one group registry, and its scheduler entry, channel and registry
  entry go together (:meth:`handle_consumer_failure`).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.fenced_writer import EpochMoved, write_fenced
from broker_core.metadata import (
    Create,
    Delete,
    MetadataStoreError,
    NoNode,
    SetData,
    TransactionFailed,
)
from broker_core.purgatory import Purgatory
from broker_core.server.channel import ServerChannel
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from coordinator import purgatories, rebalance, topic_count
from coordinator.assignor import IPartitionAssignor, RangeAssignor, TopicPartition
from coordinator.committer import OffsetCommitter, read_committed_offset
from coordinator.elector import coordinator_election
from coordinator.group_deletion import GroupDeletion
from coordinator.heartbeat import HeartbeatScheduler
from coordinator.kafka_groups import KafkaGroupApis
from coordinator.listeners import TopicListeners
from coordinator.registry import ConsumerRegistry, DuplicateConsumer, GroupRegistry, Registries

log = Logger(namespace="sluice.coordinator")

OFFSET_RESETS = ("smallest", "earliest", "largest", "latest")


@dataclass(frozen=True)
class CoordinatorConfig:
    """The broker keys the coordinator uses (docs/configuration.md), in milliseconds."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
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
            max_group_size=cfg.group_max_size,
            rebalance_backoff_ms=cfg.rebalance_backoff_ms,
            rebalance_max_retries=cfg.rebalance_max_retries,
            offsets_commit_interval_ms=cfg.offsets_commit_interval_ms,
            offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
            rebalance_handlers=cfg.coordinator_rebalance_handlers,
            ping_max_failures=cfg.coordinator_ping_max_failures,
            empty_group_retention_ms=cfg.coordinator_empty_group_retention_ms,
        )


def _principal_of(proto: Any) -> str:
    """The principal text of a connection (``User:ANONYMOUS`` when it carries none)."""
    security = getattr(proto, "security", None)
    return "User:ANONYMOUS" if security is None else str(security.principal)


def _error(code: ErrorCode, message: str) -> dict:
    return {"error_code": int(code), "error_message": message}


class CoordinatorService:
    """See the module docstring. ``brokers()`` returns the live brokers (objects with ``id``,
    ``host``, ``port``) for ClusterMetadata and StartFetcher."""

    def __init__(self, broker_id: int, store: Any, *, clock: IReactorTime,
                 config: CoordinatorConfig | None = None,
                 brokers: Callable[[], Iterable[Any]] = lambda: (),
                 metrics: Any = None, assignor: IPartitionAssignor | None = None,
                 channel_factory: Callable[[], Any] = ServerChannel) -> None:
        self.broker_id = broker_id
        self.channel_factory = channel_factory
        self.store = store
        self.clock = clock
        self.config = config or CoordinatorConfig()
        self.brokers = brokers
        self.metrics = metrics
        self.assignor: IPartitionAssignor = assignor or RangeAssignor()
        self.backoff_s = self.config.rebalance_backoff_ms / 1000.0
        self.max_retries = self.config.rebalance_max_retries
        self.elector = coordinator_election(broker_id, store, on_elected=self._on_elected,
                                            on_resigned=self._on_resigned,
                                            on_suspended=self._on_suspended, clock=clock)
        self.registries = Registries()
        self.ping_purgatory = Purgatory("coordinator_ping", clock, metrics=metrics)
        self.stop_purgatory = Purgatory("coordinator_stop_fetcher", clock, metrics=metrics)
        self.start_purgatory = Purgatory("coordinator_start_fetcher", clock, metrics=metrics)
        self.scheduler = HeartbeatScheduler(clock, self._ping_due)
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
        self.term = 0
        if metrics is not None:
            metrics.coordinator_members.set_function(
                lambda: self.registries.consumers if self.active else 0)
            metrics.coordinator_groups.set_function(
                lambda: len(self.registries.groups) if self.active else 0)

    def _new_handlers(self) -> rebalance.RebalanceHandlers:
        return rebalance.RebalanceHandlers(
            self.config.rebalance_handlers, self.registries.groups.get,
            lambda g: rebalance.rebalance(self, g))

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.elector.active

    @property
    def coordinator_id(self) -> int:
        """The elected coordinator as this broker knows it (-1: none)."""
        return self.broker_id if self.active else self.elector.leader_id

    def start(self) -> None:
        """Stand for election (call after the broker registered itself)."""
        self.elector.start()

    async def stop(self) -> None:
        """Write pending offsets, resign (deleting ``/consumers/coordinator``), close channels."""
        if self.active and not self.elector.suspended:
            try:
                await self._commit(list(self.registries.groups.values()))
            except Exception as e:
                log.warn("final offset commit failed: {e}", e=e)
        await self.elector.stop()
        for p in (self.ping_purgatory, self.stop_purgatory, self.start_purgatory):
            p.shutdown()
        self.kafka.stop()

    def can_act(self) -> bool:
        return self.active and not self.elector.suspended

    async def _on_elected(self, epoch: int, epoch_version: int) -> None:
        """``coordinatorStartup`` and failover (docs/design.md#coordinator-failover)."""
        self.term += 1
        self.registries = Registries()
        self.handlers = self._new_handlers()
        self._ensured = set()
        if self.metrics is not None:
            self.metrics.active_coordinator.set(1)
            self.metrics.coordinator_epoch.set(epoch)
        self.listeners.start()
        self.scheduler.stop()
        self.committer.start()
        sweep_s = max(0.1, min(60.0, self.config.empty_group_retention_ms / 2000.0))
        self._sweeper = task.LoopingCall(self._sweep_empty_groups)
        self._sweeper.clock = self.clock
        self._sweeper.start(sweep_s, now=False).addErrback(
            lambda f: log.failure("empty-group sweeper stopped", f))
        await self._load_groups_from_zookeeper()

    async def _load_groups_from_zookeeper(self) -> None:
        """Failover: groups whose owners are in ZooKeeper wait (bounded by the initial
        rebalance delay) for their previous members to re-register before they rebalance."""
        term = self.term
        try:
            children = await self.store.get_children(paths.CONSUMERS)
        except NoNode:
            return
        now = self.clock.seconds()
        delay = self.config.initial_rebalance_delay_ms / 1000.0
        for gid in sorted(children):
            if gid in paths.CONSUMERS_RESERVED:
                continue
            try:
                paths.validate_group_id(gid)
            except ValueError:
                continue
            probe = GroupRegistry(gid)
            owners = await self.read_owners(probe)
            if term != self.term or not self.active:
                return
            if not owners:
                continue
            g = self.registries.group(gid)
            if g.members:
                continue  # someone registered while we were reading
            g.expected = {rebalance.thread_owner(t) for t in owners.values()}
            g.not_before = now + delay
            g.empty_since = now
            log.info("group {g} had {n} owners before the failover; waiting up to {d}s for "
                     "them to re-register", g=gid, n=len(g.expected), d=delay)
            self.request_rebalance(g)

    async def _on_resigned(self) -> None:
        self.term += 1
        if self.metrics is not None:
            self.metrics.active_coordinator.set(0)
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
        if not suspended and self.active:
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

    # -- requests: any broker ----------------------------------------------------------------------

    def _broker_list(self, listener: str | None) -> list[dict]:
        """The live brokers as a client of ``listener`` reaches them (a broker without that
        listener is left out, as Kafka's Metadata does)."""
        out = []
        for b in sorted(self.brokers(), key=lambda b: b.id):
            address = b.address(listener)
            if address is not None:
                out.append({"node_id": b.id, "host": address[0], "port": address[1]})
        return out

    def cluster_metadata(self, header: Any, body: Any, listener: str | None = None) -> dict:
        """The coordinator's id and the brokers' addresses on ``listener`` (the one the
        request came on; None: the inter-broker addresses)."""
        cid = self.coordinator_id
        brokers = self._broker_list(listener)
        if cid < 0:
            return {**_error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             "no consumer coordinator is elected yet; retry shortly"),
                    "coordinator_id": -1, "brokers": brokers}
        known = {b.id: b for b in self.brokers()}
        if cid in known and known[cid].address(listener) is None:
            return {**_error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"the coordinator (broker {cid}) has no listener {listener}"),
                    "coordinator_id": -1, "brokers": brokers}
        return {"error_code": 0, "error_message": None, "coordinator_id": cid,
                "brokers": brokers}

    def _not_coordinator(self) -> dict | None:
        if not self.active:
            cid = self.elector.leader_id
            where = f"broker {cid}" if cid >= 0 else "not elected yet"
            return _error(ErrorCode.NOT_COORDINATOR,
                          f"broker {self.broker_id} is not the consumer coordinator (the "
                          f"coordinator is {where}; ask ClusterMetadata)")
        if self.elector.suspended:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          "the coordinator lost its ZooKeeper connection; retry shortly")
        return None

    # -- RegisterConsumer --------------------------------------------------------------------------

    def register_consumer(self, header: Any, body: Any, proto: Any) -> dict:
        """Check, register, open the channel, ask for a rebalance."""
        refused = self._not_coordinator()
        if refused is not None:
            return refused
        cfg = self.config
        try:
            paths.validate_group_id(body.group_id)
        except ValueError as e:
            return _error(ErrorCode.INVALID_GROUP_ID, str(e))
        if self.kafka.has_members(body.group_id):
            return _error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                          f"group {body.group_id!r} is a Kafka consumer group (JoinGroup) with "
                          "members; a group id is of one kind at a time")
        cid = body.consumer_id
        if not cid or len(cid) > 249 or any(ord(c) < 0x20 for c in cid):
            return _error(ErrorCode.INVALID_REQUEST,
                          "consumer id must be 1 to 249 printable characters")
        timeout = body.session_timeout_ms
        if not cfg.min_session_timeout_ms <= timeout <= cfg.max_session_timeout_ms:
            return _error(ErrorCode.INVALID_SESSION_TIMEOUT,
                          f"session_timeout_ms {timeout} is outside the broker's range "
                          f"[{cfg.min_session_timeout_ms}, {cfg.max_session_timeout_ms}] "
                          "(group.min.session.timeout.ms / group.max.session.timeout.ms)")
        try:
            tc = topic_count.parse(body.topic_count)
        except topic_count.InvalidTopicCount as e:
            return _error(ErrorCode.INVALID_TOPIC_COUNT, str(e))
        reset = (body.auto_offset_reset or "").lower()
        if reset not in OFFSET_RESETS:
            return _error(ErrorCode.INVALID_REQUEST,
                          f"auto_offset_reset {body.auto_offset_reset!r} is not one of "
                          f"{', '.join(OFFSET_RESETS)}")
        existing = self.registries.member(body.group_id, cid)
        if existing is not None:
            return _error(ErrorCode.DUPLICATE_CONSUMER_ID,
                          f"consumer id {cid!r} is already registered in group "
                          f"{body.group_id!r}; pick a unique id (or wait until the previous "
                          "session with this id is detected dead)")
        now = self.clock.seconds()
        g_before = self.registries.groups.get(body.group_id)
        was_empty = g_before is None or not g_before.members
        # After a failover the group waits for its previous owners (bounded).
        failover_wait = g_before is not None and bool(g_before.expected)
        channel = self.channel_factory()
        c = ConsumerRegistry(body.group_id, cid, tc, body.topic_count, bool(body.auto_commit),
                             reset, timeout, host=getattr(proto, "peer", "?"), channel=channel,
                             registered_at=now, session_id=secrets.randbits(63) or 1,
                             principal=_principal_of(proto))
        try:
            g = self.registries.add_member(c, now)
        except DuplicateConsumer:  # pragma: no cover - checked above on the same thread
            return _error(ErrorCode.DUPLICATE_CONSUMER_ID, f"consumer id {cid!r} is taken")
        proto.attach_channel(channel)
        channel.on_lost(lambda: self.handle_consumer_failure(c, "disconnect"))
        self.scheduler.add(c.key, c.ping_interval_s)
        log.info("consumer {c} registered in group {g} from {peer} (session {t} ms, {tc})",
                 c=cid, g=g.group_id, peer=c.host, t=timeout, tc=body.topic_count)
        if failover_wait:
            if not g.expected and g.delayed_call is not None and g.delayed_call.active():
                # Every previous owner is back: rebalance now instead of waiting out the delay.
                g.delayed_call.cancel()
                g.delayed_call = None
                g.rebalance_initiated = False
                g.not_before = now
        elif was_empty:
            # KIP-134: the first member of an empty group waits for the rest of a starting
            # group, so N members joining cost one rebalance, not N.
            g.not_before = now + cfg.initial_rebalance_delay_ms / 1000.0
        self.request_rebalance(g)
        # session_id is left out of a v0 answer (ignorable): such a member cannot leave early.
        return {"error_code": 0, "error_message": None, "session_id": c.session_id}

    # -- failure detection (docs/design.md#failure-detection) ------------------------------------

    def _ping_due(self, key: Any) -> None:
        c = self.registries.member(*key)
        if c is None or not c.alive:
            self.scheduler.remove(key)
            return
        if not self.can_act() or c.ping_outstanding:
            return
        c.ping_outstanding = True
        c.ping_seq += 1
        sent = self.clock.seconds()
        req = c.channel.request(ApiKey.PING, 0, {"consumer_id": c.consumer_id,
                                                 "num_retries": c.failed_pings})
        req.addCallback(self._ping_answered, c, sent)
        d = purgatories.watch(self.ping_purgatory, c.key, c.response_timeout_s, req)
        d.addCallback(self._ping_outcome, c, c.ping_seq)

    def _ping_answered(self, body: Any, c: ConsumerRegistry, sent: float) -> Any:
        if not c.alive:
            return body
        if self.metrics is not None:
            self.metrics.coordinator_ping_rtt_seconds.observe(self.clock.seconds() - sent)
        # Any answer, even a late one, shows the consumer is alive.
        c.failed_pings = 0
        if body.error_code == 0 and body.offsets:
            g = self.registries.groups.get(c.group_id)
            if g is not None:
                g.record_offsets(c, ((o.topic, o.partition, o.offset) for o in body.offsets))
        return body

    def _ping_outcome(self, outcome: purgatories.Outcome, c: ConsumerRegistry, seq: int) -> None:
        if seq == c.ping_seq:
            c.ping_outstanding = False
        if not c.alive or not self.active:
            return
        if outcome.kind == purgatories.LOST:
            self.handle_consumer_failure(c, "disconnect")
            return
        if outcome.ok:
            return
        if self.elector.suspended:
            return  # we may be the slow one; do not fail consumers while cut off
        c.failed_pings += 1
        if self.metrics is not None:
            self.metrics.coordinator_failed_pings_total.inc()
        log.info("ping to consumer {c} of group {g} failed ({n} in a row): {d}",
                 c=c.consumer_id, g=c.group_id, n=c.failed_pings, d=outcome.detail)
        if c.failed_pings > self.config.ping_max_failures:
            self.handle_consumer_failure(c, "ping")
        else:
            # Retry at once rather than at the next tick, so a consumer that stopped
            # answering is failed about (max failures + 1) x 2/3 session timeouts after its
            # first unanswered Ping, not later.
            self._ping_due(c.key)

    def handle_consumer_failure(self, c: ConsumerRegistry, reason: str) -> None:
        """``handleConsumerFailure``: unschedule, close, remove, fail an ongoing rebalance
        fast, rebalance the rest. Idempotent."""
        self._remove_member(c, reason, left=False)

    def _remove_member(self, c: ConsumerRegistry, reason: str, *, left: bool) -> None:
        """Unschedule, close the channel, remove, fail an ongoing rebalance fast, rebalance
        the rest. ``left``: the member asked to leave (counted apart from failures, so that
        expirations count only members the coordinator had to give up on). Idempotent: the
        first removal wins (a channel closing after a leave changes nothing)."""
        if not c.alive:
            return
        c.alive = False
        self.scheduler.remove(c.key)
        if c.channel is not None:
            if left:
                # The member closes its channel once it has our answer (closing it first
                # would race the answer, which travels on another connection); one that
                # does not is closed after the time it had to answer any request.
                channel = c.channel
                self.clock.callLater(c.response_timeout_s, channel.close)
            else:
                c.channel.close()
        if not self.active:
            return
        g = self.registries.remove_member(c, self.clock.seconds())
        if g is None:
            return
        what = "left" if left else f"failed ({reason})"
        log.info("consumer {c} of group {g} {w}; {n} members left", c=c.consumer_id,
                 g=g.group_id, w=what, n=len(g.members))
        if self.metrics is not None:
            if left:
                self.metrics.coordinator_left_members_total.inc()
            else:
                self.metrics.coordinator_expired_members_total.labels(reason=reason).inc()
        if g.rebalancing:
            g.rebalance_failed = f"member {c.consumer_id} {what}"
        self.request_rebalance(g)

    # -- rebalance requests ------------------------------------------------------------------------

    def request_rebalance(self, g: GroupRegistry) -> None:
        """Queue a rebalance unless one is already initiated (coalescing); held
        until ``g.not_before`` (the initial delay)."""
        if not self.active or g.rebalance_initiated:
            return
        g.rebalance_initiated = True
        delay = g.not_before - self.clock.seconds()
        if delay > 0:
            g.delayed_call = self.clock.callLater(delay, self._submit, g.group_id, self.term)
        else:
            self.handlers.submit(g)

    def _submit(self, gid: str, term: int) -> None:
        g = self.registries.groups.get(gid)
        if g is None or term != self.term or not self.active:
            return
        g.delayed_call = None
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

    # -- RebalanceContext --------------------------------------------------------------------------

    def known_topics(self) -> set[str]:
        return set(self.listeners.topics)

    async def read_partitions(self, topics: set[str]) -> dict[str, list[int]]:
        names = sorted(topics)
        if not names:
            return {}
        raw = await self.store.get_many([paths.topic(t) for t in names])
        out = {}
        for t, r in zip(names, raw, strict=True):
            if r is None:
                continue
            try:
                out[t] = sorted(paths.TopicAssignment.from_bytes(r[0]).partitions)
            except ValueError as e:
                log.warn("unreadable assignment of topic {t}: {e}", t=t, e=e)
        return out

    async def read_owners(self, group: GroupRegistry) -> dict[TopicPartition, str]:
        """The owners in ZooKeeper (read once, then as this coordinator wrote them; see
        ``GroupRegistry.zk_owners``); a read also lifts ``group.generation`` to the one stored
        with them, so generations keep growing across coordinator failovers."""
        if group.zk_owners is not None:
            return dict(group.zk_owners)
        owners = await self._read_owners(group)
        group.zk_owners = dict(owners)
        return owners

    async def _read_owners(self, group: GroupRegistry) -> dict[TopicPartition, str]:
        gid = group.group_id
        try:
            data, _ = await self.store.get(paths.consumer_owners(gid))
            topics = await self.store.get_children(paths.consumer_owners(gid))
        except NoNode:
            return {}
        stored = paths.parse_offset_value(data)  # a decimal, like an offset
        if stored is not None and stored > group.generation:
            group.generation = stored
        tps: list[TopicPartition] = []
        for t in sorted(topics):
            try:
                children = await self.store.get_children(paths.consumer_owners_topic(gid, t))
            except NoNode:
                continue
            tps.extend((t, int(p)) for p in children if p.isdigit())
        if not tps:
            return {}
        raw = await self.store.get_many([paths.consumer_owner(gid, *tp) for tp in tps])
        return {tp: r[0].decode("utf-8", "replace") for tp, r in zip(tps, raw, strict=True)
                if r is not None}

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

    async def write_owners(self, group: GroupRegistry, new: Mapping[TopicPartition, str],
                           old: Mapping[TopicPartition, str]) -> None:
        gid = group.group_id
        ops: list[Any] = []
        parents = set()
        for tp, thread in sorted(new.items()):
            path = paths.consumer_owner(gid, *tp)
            if tp not in old:
                parents.add(paths.consumer_owners_topic(gid, tp[0]))
                ops.append(Create(path, thread.encode()))
            elif old[tp] != thread:
                ops.append(SetData(path, thread.encode()))
        for tp in sorted(set(old) - set(new)):
            ops.append(Delete(paths.consumer_owner(gid, *tp)))
        # The generation travels with the owners it produced (read back by read_owners).
        await self.ensure_path(paths.consumer_owners(gid))
        ops.append(SetData(paths.consumer_owners(gid), str(group.generation).encode()))
        for parent in sorted(parents):
            await self.ensure_path(parent)
        group.zk_owners = None  # unknown until the write is known to have happened
        await self.fenced(ops)
        group.zk_owners = dict(new)

    def send_stop(self, m: ConsumerRegistry) -> defer.Deferred:
        g = self.registries.groups.get(m.group_id)

        def answered(body: Any) -> Any:
            if body.error_code == 0 and m.alive:
                if body.offsets and g is not None:
                    g.record_offsets(m, ((o.topic, o.partition, o.offset) for o in body.offsets))
                m.owned = {}  # stopped: it owns nothing until its next StartFetcher
            return body

        req = m.channel.request(ApiKey.STOP_FETCHER, 0, {"consumer_id": m.consumer_id})
        req.addCallback(answered)
        return purgatories.watch(self.stop_purgatory, m.key, m.response_timeout_s, req)

    def send_start(self, m: ConsumerRegistry, generation: int,
                   ownership: list[dict]) -> defer.Deferred:
        def answered(body: Any) -> Any:
            if body.error_code == 0 and m.alive:
                m.owned = {(p["topic"], p["partition"]): t["consumer_thread_id"]
                           for t in ownership for p in t["partitions"]}
                m.started = True
            return body

        req = m.channel.request(ApiKey.START_FETCHER, 0, {
            "consumer_id": m.consumer_id, "generation_id": generation & 0x7FFFFFFF,
            "ownership": ownership,
            # Where the consumer fetches from: the brokers on the listener it came on.
            "brokers": self._broker_list(getattr(m.channel, "listener", None))})
        req.addCallback(answered)
        return purgatories.watch(self.start_purgatory, m.key, m.response_timeout_s, req)

    def rebalance_finished(self, group: GroupRegistry, result: str, seconds: float) -> None:
        if result == rebalance.COMPLETED:
            log.info("group {g} rebalanced (generation {gen}) in {s:.3f}s", g=group.group_id,
                     gen=group.generation, s=seconds)
        if self.metrics is not None and result != rebalance.ABANDONED:
            self.metrics.coordinator_rebalances_total.labels(result=result).inc()
            if result == rebalance.COMPLETED:
                self.metrics.coordinator_rebalance_duration_seconds.observe(seconds)

    def attempt_failed(self, group: GroupRegistry, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.coordinator_rebalance_attempts_failed_total.labels(reason=reason).inc()

    # -- ZooKeeper writes --------------------------------------------------------------------------

    async def ensure_path(self, path: str) -> None:
        if path in self._ensured:
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
            await write_fenced(self.store, paths.CONSUMERS_COORDINATOR_EPOCH,
                               self.elector.epoch_version, ops)
        except EpochMoved as e:
            log.warn("coordinator epoch check failed: a newer coordinator exists; resigning")
            self.elector.resign_soon()
            raise rebalance.NotCoordinator() from e

    # -- CommitOffsets (active commit) ----------------------------------------------------------

    async def commit_offsets(self, header: Any, body: Any, *, principal: str | None = None,
                             topic_allowed: Callable[[str], bool] | None = None) -> dict:
        """Only the member itself may commit: the request must carry the session id of its
        current registration (v1; a v0 commit cannot prove it and is refused) and come from
        the principal that registered. ``topic_allowed`` (the ACL check) refuses partitions of
        topics the principal may not READ. Any refusal changes nothing."""
        refused = self._not_coordinator()
        if refused is not None:
            return {**refused, "partitions": []}
        c = self.registries.member(body.group_id, body.consumer_id)
        if c is None:
            return {**_error(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"consumer {body.consumer_id!r} is not a member of group "
                             f"{body.group_id!r} at this coordinator; register first"),
                    "partitions": []}
        if not self._is_own_session(c, getattr(body, "session_id", 0), principal):
            log.info("refused a commit for consumer {c} of group {g}: not that member's current "
                     "registration", c=body.consumer_id, g=body.group_id)
            return {**_error(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"consumer {body.consumer_id!r} has no registration in group "
                             f"{body.group_id!r} with this session id (CommitOffsets v1) and "
                             "principal; a member can only commit for itself"),
                    "partitions": []}
        g = self.registries.groups[c.group_id]
        results, accepted, problems = self._check_offsets(c, g, body.offsets, topic_allowed)
        g.record_offsets(c, ((o.topic, o.partition, o.offset) for o in body.offsets
                             if (o.topic, o.partition) in accepted))
        failed = await self._commit_accepted(g, accepted)
        if failed is not None:
            return {**failed, "partitions": []}
        return {"error_code": 0, "error_message": "; ".join(problems) or None,
                "partitions": results}

    @staticmethod
    def _is_own_session(c: ConsumerRegistry, session_id: int, principal: str | None) -> bool:
        """Whether a request naming member ``c`` proves to be that member's own: the session
        id of its live registration, from the principal that registered (when known)."""
        if not c.alive or c.session_id == 0:
            return False
        if principal is not None and principal != c.principal:
            return False
        return secrets.compare_digest(c.session_id.to_bytes(8, "big"),
                                      (session_id & (2**64 - 1)).to_bytes(8, "big"))

    def _check_offsets(self, c: ConsumerRegistry, g: GroupRegistry, offsets: Any,
                       topic_allowed: Callable[[str], bool] | None = None
                       ) -> tuple[list[dict], set[TopicPartition], list[str]]:
        """Which of a member's offsets may be committed: only partitions it owns, of topics
        it may READ, never behind the group's offset. Returns (per-partition results,
        accepted, problems)."""
        results = []
        accepted: set[TopicPartition] = set()
        problems = []
        for o in offsets:
            tp = (o.topic, o.partition)
            if topic_allowed is not None and not topic_allowed(o.topic):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                problems.append(f"{o.topic}-{o.partition}: READ on the topic is not allowed")
            elif tp not in c.owned:
                code = ErrorCode.REBALANCE_IN_PROGRESS if g.state == "rebalancing" else \
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                problems.append(f"{o.topic}-{o.partition} is not owned by {c.consumer_id}")
            elif o.offset < g.offsets.get(tp, -1):
                code = ErrorCode.OFFSET_OUT_OF_RANGE
                problems.append(f"{o.topic}-{o.partition}: {o.offset} is behind the group's "
                                f"offset {g.offsets[tp]} (committed offsets only move forward)")
            else:
                code = ErrorCode.NONE
                accepted.add(tp)
            results.append({"topic": o.topic, "partition": o.partition, "error_code": int(code)})
        return results, accepted, problems

    async def _commit_accepted(self, g: GroupRegistry, accepted: set[TopicPartition]
                               ) -> dict | None:
        """Write the group's ``accepted`` offsets in the committer's next multi (fenced,
        shared with the commits of other requests that arrived meanwhile); None once they are
        durable, or the error to answer."""
        try:
            await self.committer.commit_soon(g, accepted)
        except rebalance.NotCoordinator:
            return _error(ErrorCode.NOT_COORDINATOR, "this broker stopped being the "
                          "coordinator before the offsets were written")
        except (TransactionFailed, MetadataStoreError) as e:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          f"offsets could not be written to ZooKeeper: {e}")
        return None

    # -- UnregisterConsumer (a member leaves) ------------------------------------------------------

    async def unregister_consumer(self, header: Any, body: Any, *,
                                  principal: str | None = None,
                                  topic_allowed: Callable[[str], bool] | None = None) -> dict:
        """A member leaves: check that the request is the member's own (its consumer id and the
        session id of its current registration), take and write its final offsets as
        CommitOffsets does (``topic_allowed`` refuses those of topics the principal may not
        READ), then remove it at once and rebalance its group. Any refusal changes
        nothing; when the offsets cannot be written the member stays (it then hands them over
        on its channel, the way a leave worked before this request existed)."""
        refused = self._not_coordinator()
        if refused is not None:
            return {**refused, "partitions": []}
        c = self.registries.member(body.group_id, body.consumer_id)
        if c is None or not self._is_own_session(c, body.session_id, principal):
            log.info("refused a leave for consumer {c} of group {g}: not that member's current "
                     "registration", c=body.consumer_id, g=body.group_id)
            return {**_error(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"consumer {body.consumer_id!r} has no registration in group "
                             f"{body.group_id!r} with this session id; a member can only "
                             "leave itself"), "partitions": []}
        g = self.registries.groups[c.group_id]
        results, accepted, problems = self._check_offsets(c, g, body.offsets, topic_allowed)
        g.record_offsets(c, ((o.topic, o.partition, o.offset) for o in body.offsets
                             if (o.topic, o.partition) in accepted))
        failed = await self._commit_accepted(g, accepted)
        if failed is not None:
            return {**failed, "partitions": []}
        # The member may have failed (its channel closed) while the offsets were written:
        # then it is gone already and counted as such.
        self._remove_member(c, "leave", left=True)
        return {"error_code": 0, "error_message": "; ".join(problems) or None,
                "partitions": results}

    # -- DescribeConsumerGroups --------------------------------------------------------------------

    def describe_consumer_groups(self, header: Any, body: Any) -> dict:
        refused = self._not_coordinator()
        if refused is not None:
            return {**refused, "groups": []}
        gids = sorted(self.registries.groups) if body.groups is None else list(body.groups)
        out = []
        for gid in gids:
            g = self.registries.groups.get(gid)
            if g is None:
                out.append({"group_id": gid, "error_code": int(ErrorCode.GROUP_ID_NOT_FOUND),
                            "state": "dead", "generation_id": -1, "rebalance_failures": 0,
                            "members": [], "offsets": []})
                continue
            members = []
            for m in sorted(g.members.values(), key=lambda m: m.consumer_id):
                threads: dict[str, list[dict]] = {}
                for tp, thread in sorted(m.owned.items()):
                    threads.setdefault(thread, []).append(
                        {"topic": tp[0], "partition": tp[1], "offset": g.offsets.get(tp, -1)})
                members.append({
                    "consumer_id": m.consumer_id, "host": m.host,
                    "topic_count": m.topic_count_text, "session_timeout_ms": m.session_timeout_ms,
                    "auto_commit": m.auto_commit, "failed_pings": m.failed_pings,
                    "ownership": [{"consumer_thread_id": t, "partitions": ps}
                                  for t, ps in sorted(threads.items())]})
            out.append({"group_id": gid, "error_code": 0, "state": g.state,
                        "generation_id": g.generation & 0x7FFFFFFF,
                        "rebalance_failures": g.rebalance_failures, "members": members,
                        "offsets": [{"topic": t, "partition": p, "offset": v}
                                    for (t, p), v in sorted(g.offsets.items())]})
        return {"error_code": 0, "error_message": None, "groups": out}
