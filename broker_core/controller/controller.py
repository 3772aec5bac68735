"""The controller (docs/design.md): one broker at a time, elected through ``/controller``, decides
partition leadership, publishes each decision in ZooKeeper and pushes it to brokers by RPC.

Event model (Kafka's single controller event thread, KAFKA-5027): ZooKeeper watches only enqueue
an event; events run one at a time, in order, on the reactor, and each handler re-reads ZooKeeper
when it runs rather than trusting the watch payload. A handler is an ``async`` method.

Fencing: every ZooKeeper write the controller makes is a ``multi`` that starts with a ``check`` of
``/controller_epoch`` at the version this controller set when it was elected (KAFKA-6082), so a
deposed controller's writes fail atomically. LeaderAndISR znodes are also updated conditionally
on their own version. When the epoch check fails the controller resigns.

Session states: on SUSPENDED the controller stops acting (queued events wait); on LOST it resigns
(its ``/controller`` node is gone); when the session is CONNECTED again it stands for election.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import replace
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.controller import log_dir_failure
from broker_core.controller.batch import LiveBroker, PartitionDecision, RequestBatch
from broker_core.controller.decisions import GONE, Decide, DecisionRounds
from broker_core.controller.election import (
    NO_LEADER,
    Election,
    controlled_shutdown_election,
    init_leader,
    judge_isr_change,
    next_leader_epoch,
    offline_leader,
    preferred_leader,
    reassignment_complete,
    reassignment_leader,
    reassignment_replicas,
    shrink_isr,
)
from broker_core.controller.fencing import FencingAgent
from broker_core.metadata import (
    BadVersion,
    Check,
    ConnectionLost,
    Create,
    Delete,
    MetadataStoreError,
    NodeExists,
    NoNode,
    SessionState,
    SetData,
    StoreStopping,
    TransactionFailed,
)
from broker_core.rpc import BrokerChannel
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import ClientCredential
from broker_core.wire.topic_partition import TopicPartition

#: One partition of an AlterIsr request: (topic, partition, leader_epoch, new_isr,
#: partition_epoch), the last being the leaderAndISR znode version the leader holds.
AlterIsrItem = tuple[str, int, int, tuple[int, ...], int]
#: A top-level error name (or None) and, per partition, an error name or the state now in force.
AlterIsrResult = tuple[str | None, dict[TopicPartition, tuple[str | None, PartitionDecision | None]]]

#: Rounds of "write, and on a version conflict re-read and judge again" for one AlterIsr request.
ALTER_ISR_ROUNDS = 3

#: Work stopped by a conflicting write (leader/ISR decisions that conflicted in every round, a
#: partition removal), or a broker change whose writes the store did not take (no quorum
#: leader, ZooKeeper unreachable), is taken up again by a new event this many seconds later,
#: from the state read then.
CONFLICT_RETRY_S = 1.0

#: Longest a partition removal waits for the replicas to answer StopReplica before it writes the
#: removal to ZooKeeper (a replica that does not answer deletes the partition when it next gets
#: its full state, which no longer names it).
STOP_REPLICA_WAIT_S = 5.0

#: The reassignment agent wakes up when notified or after this many seconds.
REASSIGNMENT_WAKEUP_S = 30.0

#: Longest a ControlledShutdown answer waits for the brokers to acknowledge the moves it sent
#: (the moves are decided and written already; this only makes the hand-over smoother).
SHUTDOWN_ACK_WAIT_S = 5.0

#: ZooKeeper caps a whole multi at jute.maxbuffer (~1 MB); our ops are small, so 500 ops per multi
#: stays far below it (python-zk/kazoo#630: ~3,200 creates already failed).
MULTI_BATCH = 500

#: Fenced multis sent before waiting for the first answer. ZooKeeper applies one session's
#: requests in order, so pipelining changes no outcome; it saves a round trip (and a turn of a
#: busy reactor) per 500 partitions: a failover of 10,000 partitions writes 20 multis.
FENCED_PIPELINE = 8

#: Longest the controller waits for the brokers to acknowledge new leaderships before it goes on
#: with the rest of a failover (ISR shrinks, the full state to every broker). Leaders are what
#: clients wait for; the rest is bookkeeping that would otherwise queue in front of them on
#: the brokers' reactors. A broker that does not answer in time still gets everything after.
LEADERS_FIRST_WAIT_S = 1.0


class NotController(Exception):
    """This broker lost the controllership while handling an event."""


class Controller:
    """See the module docstring. ``start()`` after the broker has registered itself."""

    log = Logger(namespace="sluice.controller")

    def __init__(
        self,
        broker_id: int,
        store: Any,
        *,
        reactor: Any,
        unclean_leader_election: Callable[[str], bool] = lambda topic: False,
        request_timeout_s: float = 30.0,
        metrics: Any = None,
        channel_factory: Callable[[LiveBroker], Any] | None = None,
        heartbeat_interval_s: float | None = None,
        session_timeout_s: float | None = None,
        credential: ClientCredential | None = None,
        tls: PeerTls | None = None,
    ) -> None:
        #: The cluster login every channel to a broker starts with.
        self.credential = credential
        #: TLS on those channels (the inter-broker listener is SSL or SASL_SSL), else None.
        self.tls = tls
        self.broker_id = broker_id
        self.store = store
        self.reactor = reactor
        self.unclean_leader_election = unclean_leader_election
        self.request_timeout_s = request_timeout_s
        self.metrics = metrics
        self._channel_factory = channel_factory or self._default_channel
        self.active = False
        self.epoch = -1
        self.epoch_zk_version = -1
        self._suspended = False
        self._events: deque[tuple[str, Callable[[], Awaitable[None]]]] = deque()
        self._running = False
        self._watches: list[Any] = []
        self._controller_watch: Any = None
        self._started = False
        # AlterIsr callers waiting for their event; answered NOT_CONTROLLER if we resign first.
        self._alter_waiters: set[defer.Deferred] = set()
        self.reassignment_wakeup_s = REASSIGNMENT_WAKEUP_S
        self._reassign_call: Any = None
        # Delayed retries of work a conflicting write stopped (cancelled on resigning).
        self._retries: set[Any] = set()
        #: Fencing of brokers the controller cannot hear from (broker_core.controller.fencing);
        #: None: brokers are judged by their metadata-store registrations only.
        self.fencing: FencingAgent | None = None
        if session_timeout_s is not None:
            self.fencing = FencingAgent(
                self, heartbeat_interval_s=heartbeat_interval_s or session_timeout_s / 3,
                session_timeout_s=session_timeout_s, clock=reactor)
        self._broker_change_retry_due = False  # a broker change is to be judged again
        #: New / restarted brokers a broker change has not finished announcing (see
        #: _on_broker_change); emptied on resigning (a new controller sends everyone everything).
        self._owed_new: set[int] = set()
        self._owed_bounced: set[int] = set()
        #: Partitions a removal sent StopReplica for whose removal is not written yet.
        self._stopped_for_removal: dict[str, set[int]] = {}
        self._reset_context()

    def _reset_context(self) -> None:
        self.live: dict[int, LiveBroker] = {}
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self.topic_versions: dict[str, int] = {}
        self.states: dict[TopicPartition, PartitionDecision] = {}
        self.channels: dict[int, Any] = {}
        self._add_watched: dict[str, Any] = {}
        self._remove_watched: dict[str, Any] = {}
        # Replicas a reassignment adds / will remove, per partition (mirrors the
        # topic znodes' adding_replicas / removing_replicas), and the reassignment agent's
        # in-memory map: partition -> RAR.
        self.adding: dict[TopicPartition, tuple[int, ...]] = {}
        self.removing: dict[TopicPartition, tuple[int, ...]] = {}
        self.reassigning: dict[TopicPartition, tuple[int, ...]] = {}
        # Brokers in a controlled shutdown: no leadership or ISR place is given to them.
        self.shutting_down: set[int] = set()
        # Replicas on failed log directories (KIP-112): see controller/log_dir_failure.py.
        self.offline_replicas = log_dir_failure.OfflineReplicaSet()

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._started = True
        self.store.add_state_listener(self._on_session_state)
        self._controller_watch = self.store.watch_data(paths.CONTROLLER, self._on_controller_node)

    async def stop(self) -> None:
        """Resign (deleting ``/controller`` if it is ours) and stop watching."""
        self._started = False
        if self._controller_watch is not None:
            self._controller_watch.cancel()
            self._controller_watch = None
        self.store.remove_state_listener(self._on_session_state)
        was_active = self.active
        await self._resign()
        if was_active:
            try:
                data, _ = await self.store.get(paths.CONTROLLER)
                if paths.ControllerRegistration.from_bytes(data).broker_id == self.broker_id:
                    await self.store.delete(paths.CONTROLLER)
            except (MetadataStoreError, ValueError):
                pass

    # -- events ---------------------------------------------------------------------------------

    def _enqueue(self, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        self._events.append((name, fn))
        if self.metrics is not None:
            self.metrics.controller_event_queue_size.set(len(self._events))
        self._drain()

    def _drain(self) -> None:
        if self._running or self._suspended:
            return
        self._running = True
        d = defer.Deferred.fromCoroutine(self._run_events())
        d.addErrback(lambda f: self.log.failure("controller event loop failed", f))

    async def _run_events(self) -> None:
        try:
            while self._events and not self._suspended:
                name, fn = self._events.popleft()
                started = time.monotonic()
                try:
                    await fn()
                except NotController:
                    self.log.warn("lost the controllership while handling {event}", event=name)
                    await self._resign()
                except MetadataStoreError as e:
                    if not self._started or not self.active:
                        # Stopping or resigned: the store is going away under queued events.
                        self.log.debug("controller event {event} dropped: {e}", event=name, e=e)
                    elif isinstance(e, StoreStopping):
                        # The broker is stopping and its last writes got their short wait (in
                        # quorum mode the rest of the quorum may be gone already).
                        self.log.info("controller event {event} dropped, the broker is "
                                      "stopping: {e}", event=name, e=e)
                    elif isinstance(e, ConnectionLost):
                        # The store took no write (no quorum leader, ZooKeeper unreachable):
                        # a condition, not a bug. A broker change is judged again (it reads
                        # the registrations afresh), or dead leaders' partitions would wait
                        # for the next registration change.
                        self.log.warn("controller event {event} not completed, the metadata "
                                      "store did not take its writes: {e}", event=name, e=e)
                        if name == "broker_change":
                            self._retry_broker_change()
                    else:
                        self.log.failure("controller event {event} failed", event=name)
                except Exception:
                    self.log.failure("controller event {event} failed", event=name)
                finally:
                    if self.metrics is not None:
                        self.metrics.controller_event_duration_seconds.observe(
                            time.monotonic() - started)
                        self.metrics.controller_event_queue_size.set(len(self._events))
        finally:
            self._running = False

    def _retry_broker_change(self) -> None:
        """Judge the brokers again :data:`CONFLICT_RETRY_S` from now (once, however many
        events failed meanwhile); cancelled by a resignation."""
        if self._broker_change_retry_due:
            return
        self._broker_change_retry_due = True

        async def again() -> None:
            self._broker_change_retry_due = False
            await self._on_broker_change()

        self._retry_later("broker_change (retry)", again)

    def _active_only(self, name: str, fn: Callable[[], Awaitable[None]]) -> Callable[..., None]:
        """A watch callback that enqueues ``fn`` while we are the active controller."""

        def callback(*_: Any) -> None:
            if self.active:
                self._enqueue(name, fn)

        return callback

    def _on_controller_node(self, data: bytes | None, stat: Any) -> None:
        if data is None:
            if self._started:
                self._enqueue("elect", self._elect)
            return
        try:
            owner = paths.ControllerRegistration.from_bytes(data).broker_id
        except ValueError:
            self.log.error("unreadable /controller value {v!r}", v=data)
            return
        if owner != self.broker_id and self.active:
            self._enqueue("resign", self._resign)

    def _on_session_state(self, state: SessionState) -> None:
        if state is SessionState.SUSPENDED:
            self.log.warn("ZooKeeper connection suspended: controller pauses")
            self._suspended = True
        elif state is SessionState.LOST:
            self.log.warn("ZooKeeper session lost: controller resigns")
            self._suspended = False
            self._events.clear()
            self._answer_waiters_not_controller()  # their events were just dropped
            self._enqueue("resign", self._resign)
        elif state is SessionState.CONNECTED:
            self._suspended = False
            if self._started and not self.active:
                self._enqueue("elect", self._elect)
            self._drain()

    # -- election (docs/design.md#controller-failover) -------------------------------------------

    async def _elect(self) -> None:
        if self.active or not self._started:
            return
        if self.fencing is not None and not self.fencing.may_stand():
            return  # the others cannot reach us: let one of them lead (see _on_abstention_over)
        for _ in range(5):
            try:
                data, stat = await self.store.get(paths.CONTROLLER_EPOCH)
                epoch, version = int(data.decode() or 0), stat.version
            except NoNode:
                try:
                    await self.store.create(paths.CONTROLLER_EPOCH, b"0", makepath=True)
                except NodeExists:
                    pass
                continue
            reg = paths.ControllerRegistration(self.broker_id, int(time.time() * 1000))
            try:
                # Claiming /controller and bumping the epoch is one atomic step: a broker that
                # wins the node always holds a fresh epoch.
                await self.store.multi([
                    Create(paths.CONTROLLER, reg.to_bytes(), ephemeral=True),
                    SetData(paths.CONTROLLER_EPOCH, str(epoch + 1).encode(), version),
                ])
            except TransactionFailed as e:
                if isinstance(e.first_error, BadVersion):
                    continue  # someone bumped the epoch between our read and write; re-read
                return  # NodeExists: another broker is controller; its node's watch tells us
            self.epoch = epoch + 1
            self.epoch_zk_version = version + 1
            break
        else:
            return
        self.active = True
        self.log.info("broker {b} is now the controller (epoch {e})", b=self.broker_id, e=self.epoch)
        if self.metrics is not None:
            self.metrics.active_controller.set(1)
            self.metrics.controller_epoch.set(self.epoch)
        await self._on_controller_failover()

    async def _resign(self) -> None:
        if not self.active:
            return
        self.log.info("broker {b} resigns as controller (epoch {e})", b=self.broker_id,
                      e=self.epoch)
        self.active = False
        self._answer_waiters_not_controller()
        for w in self._watches:
            w.cancel()
        self._watches.clear()
        for w in list(self._add_watched.values()) + list(self._remove_watched.values()):
            w.cancel()
        if self._reassign_call is not None and self._reassign_call.active():
            self._reassign_call.cancel()
        self._reassign_call = None
        for call in self._retries:
            if call.active():
                call.cancel()
        self._retries.clear()
        self._broker_change_retry_due = False
        self._owed_new, self._owed_bounced = set(), set()
        channels = list(self.channels.values())
        self._reset_context()
        for ch in channels:
            ch.stop()
        if self.fencing is not None:
            self.fencing.stop()
        if self.metrics is not None:
            self.metrics.active_controller.set(0)
            self.metrics.fenced_brokers.set(0)

    def _on_abstention_over(self) -> None:
        """Stand for election again if ``/controller`` is still empty (nobody else could)."""
        async def maybe() -> None:
            try:
                await self.store.get(paths.CONTROLLER)
            except NoNode:
                await self._elect()

        if self._started and not self.active:
            self._enqueue("elect", maybe)

    async def _on_controller_failover(self) -> None:
        """Failover: load the state, tell every broker everything (INIT), then catch up on what
        happened while there was no controller."""
        await self._load_context()
        if self.fencing is not None:
            self.fencing.start(self.live)
            await self.fencing.inherit()
        # Partitions whose leader died with (or while there was no) controller get a leader
        # before the full state goes out: they are what clients wait for, and the INIT below
        # names every partition to every broker.
        judge = self._judge_live(())
        dead_leaders, _, shrinks = self._classify_live(judge)
        if dead_leaders:
            written = await self._write_decisions(dead_leaders, judge, "dead leaders")
            self.log.info("controller failover: {n} partitions whose leader is gone re-elected "
                          "first", n=len(written))
            await self._send_leaders_first(written)
        # The ISRs that still name dead brokers are shrunk before the full state goes out, so
        # that it carries them: shrinking after it (in the broker change below) sent two thirds
        # of the partitions to every broker a second time, a second LeaderAndIsr and
        # UpdateMetadata that each survivor (one of them the new leader of half the moved
        # partitions, the controller itself) decoded and applied while clients waited on it.
        # The new generations of leaders that restarted unseen are left to the broker change
        # (they are not written here, and their ISRs are not shrunk now).
        await self._write_decisions(shrinks, judge, "ISR shrinks")
        batch = self._new_batch()
        for b in self.live:
            batch.full_leader_and_isr(b)
        for tp, d in self.states.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.live], tp, d)
            batch.update_metadata(self.live, tp, d)
        batch.update_metadata(self.live)
        self._send(batch)
        self._register_watches()
        # Steps 5-9: broker changes, leaderless partitions, admin requests. Each is idempotent and
        # re-reads ZooKeeper, so running them now is safe even if their watches also fire.
        await self._on_broker_change()
        await log_dir_failure.on_failover(self)
        await self._on_topic_change()
        await self._elect_offline_partitions(self._new_batch(), send=True)
        await self._on_partitions_add()
        await self._on_partitions_remove()
        await self._on_delete_topics()
        # Resume reassignments from ZooKeeper (the topic znodes say which
        # replicas were being added), then any pending preferred-leader election.
        await self._on_partitions_reassigned()
        await self._on_preferred_election()
        # A topic created while no controller ran (its creator wrote the assignment, nobody
        # watched) was loaded above with its assignment but no partition state; the topic
        # watch above does not see it as new. Elect its first leaders now.
        unstarted = [(t, p) for t, parts in sorted(self.assignments.items())
                     for p in sorted(parts) if (t, p) not in self.states]
        if unstarted:
            self.log.info("controller failover: {n} partitions of topics created while no "
                          "controller ran get their first leaders", n=len(unstarted))
            batch = self._new_batch()
            await self._init_leaders(unstarted, batch)
            self._send(batch)

    def _register_watches(self) -> None:
        s = self.store
        self._watches = [
            s.watch_children(paths.BROKER_IDS,
                             self._active_only("broker_change", self._on_broker_change)),
            s.watch_children(paths.TOPICS, self._active_only("topic_change", self._on_topic_change)),
            s.watch_children(paths.DELETE_TOPICS,
                             self._active_only("delete_topics", self._on_delete_topics)),
            s.watch_children(paths.PARTITIONS_ADD,
                             self._active_only("partitions_add", self._on_partitions_add)),
            s.watch_children(paths.PARTITIONS_REMOVE,
                             self._active_only("partitions_remove", self._on_partitions_remove)),
            s.watch_data(paths.REASSIGN_PARTITIONS,
                         self._active_only("partitions_reassigned",
                                           self._on_partitions_reassigned)),
            s.watch_data(paths.PREFERRED_REPLICA_ELECTION,
                         self._active_only("preferred_election", self._on_preferred_election)),
            s.watch_children(paths.LOG_DIR_EVENT_NOTIFICATION,
                             self._active_only("log_dir_event",
                                               lambda: log_dir_failure.on_log_dir_event(self))),
        ]

    # -- state loading ---------------------------------------------------------------------------

    async def _read_brokers(self, ids: Iterable[str]) -> dict[int, LiveBroker]:
        async def one(bid: str) -> LiveBroker | None:
            try:
                data, stat = await self.store.get(paths.broker(int(bid)))
            except NoNode:
                return None
            reg = paths.BrokerRegistration.from_bytes(data)
            return LiveBroker(reg.id, reg.host, reg.port, reg.rack, stat.czxid,
                              _live_endpoints(reg))

        found = await _gather([one(b) for b in ids if b.isdigit() and b.isascii()])
        return {b.id: b for b in found if b is not None}

    async def _read_assignment(self, topic: str) -> tuple[paths.TopicAssignment, int] | None:
        try:
            data, stat = await self.store.get(paths.topic(topic))
        except NoNode:
            return None
        return paths.TopicAssignment.from_bytes(data), stat.version

    async def _read_state(self, tp: TopicPartition) -> PartitionDecision | None:
        try:
            data, stat = await self.store.get(paths.leader_and_isr(*tp))
        except NoNode:
            return None
        return self._decision_from(tp, data, stat)

    def _decision_from(self, tp: TopicPartition, data: bytes, stat: Any) -> PartitionDecision:
        """A leaderAndISR znode's value and stat as this controller's view of the partition."""
        v = paths.LeaderAndIsr.from_bytes(data)
        replicas = self.assignments.get(tp[0], {}).get(tp[1], ())
        return PartitionDecision(v.leader, v.leader_epoch, tuple(v.isr), tuple(replicas),
                                 stat.version, v.controller_epoch, v.leader_broker_epoch)

    async def _load_context(self) -> None:
        self._reset_context()
        ids = await self._children(paths.BROKER_IDS)
        self.live = await self._read_brokers(ids)
        for b in self.live.values():
            self._open_channel(b)
        topics = await self._children(paths.TOPICS)
        await self._load_topics(topics)
        self.log.info("controller loaded {n} brokers, {t} topics, {p} partitions",
                      n=len(self.live), t=len(self.assignments), p=len(self.states))

    async def _load_topics(self, topics: Iterable[str]) -> list[TopicPartition]:
        """Read assignments and leader states of ``topics``; return partitions with no state."""
        topics = list(topics)
        read = await _gather([self._read_assignment(t) for t in topics])
        missing: list[TopicPartition] = []
        tps: list[TopicPartition] = []
        for t, r in zip(topics, read, strict=True):
            if r is None:
                continue
            value, self.topic_versions[t] = r
            self.assignments[t] = {int(p): tuple(rs) for p, rs in value.partitions.items()}
            for tp in [tp for tp in self.adding if tp[0] == t]:
                self.adding.pop(tp, None)
                self.removing.pop(tp, None)
            for p, rs in value.adding.items():
                self.adding[(t, p)] = tuple(rs)
            for p, rs in value.removing.items():
                self.removing[(t, p)] = tuple(rs)
            tps.extend((t, p) for p in sorted(self.assignments[t]))
        raw = await self.store.get_many([paths.leader_and_isr(*tp) for tp in tps])
        for tp, got in zip(tps, raw, strict=True):
            if got is None:
                missing.append(tp)
            else:
                self.states[tp] = self._decision_from(tp, *got)
        return missing

    async def _children(self, path: str) -> list[str]:
        try:
            return sorted(await self.store.get_children(path))
        except NoNode:
            return []

    # -- channels and batches --------------------------------------------------------------------

    def _default_channel(self, b: LiveBroker) -> BrokerChannel:
        return BrokerChannel(b.id, b.host, b.port, reactor=self.reactor,
                             timeout_s=self.request_timeout_s, credential=self.credential,
                             tls=self.tls)

    def _open_channel(self, b: LiveBroker) -> None:
        old = self.channels.pop(b.id, None)
        if old is not None:
            old.stop()
        ch = self._channel_factory(b)
        ch.start()
        self.channels[b.id] = ch

    def _new_batch(self) -> RequestBatch:
        return RequestBatch(self.broker_id, self.epoch)

    def _send(self, batch: RequestBatch) -> defer.Deferred:
        if batch.is_empty() or not self.active:
            return defer.succeed(None)
        return batch.send(self.live, self.channels.__getitem__)

    async def _send_leaders_first(self, written: dict[TopicPartition, PartitionDecision],
                                  later: Collection[int] = ()) -> None:
        """Send the new leaderships in ``written`` (LeaderAndIsr to their live replicas,
        UpdateMetadata to every live broker) and wait until the brokers answered or
        :data:`LEADERS_FIRST_WAIT_S` passed, whichever is first. Brokers in ``later`` (new or
        restarted ones, whose full state follows) get nothing now: a partial UpdateMetadata
        would leave a broker with an empty cache answering clients with a few partitions."""
        if not written:
            return
        now = [b for b in self.live if b not in later]
        batch = self._new_batch()
        for tp, d in written.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.live and r not in later],
                                 tp, d)
            batch.update_metadata(now, tp, d)
        await _first_of(self._send(batch), LEADERS_FIRST_WAIT_S, self.reactor)

    # -- fenced writes ---------------------------------------------------------------------------

    async def _fenced(self, ops: Sequence[Any]) -> None:
        """Apply ``ops`` in multis that each begin with the controller-epoch check.

        Up to :data:`FENCED_PIPELINE` multis are sent before the first answer is awaited. Each
        multi is atomic, but they are not one transaction: when one fails, the ones before it
        committed and some after it (already sent) may have too; no further window is sent.
        Callers re-read what they meant to write on failure.

        A failed epoch check means a newer controller exists: raise :class:`NotController`.
        Other failures are raised as :class:`TransactionFailed` for the caller to handle.
        """
        if not self.active:
            raise NotController()
        chunks = [list(ops[i:i + MULTI_BATCH]) for i in range(0, len(ops), MULTI_BATCH)]
        for w in range(0, len(chunks), FENCED_PIPELINE):
            check = Check(paths.CONTROLLER_EPOCH, self.epoch_zk_version)
            results = await defer.DeferredList(
                [self.store.multi([check, *chunk]) for chunk in chunks[w:w + FENCED_PIPELINE]],
                consumeErrors=True)
            failures = [r for ok, r in results if not ok]
            if not failures:
                continue
            for f in failures:
                # The controller-epoch check itself failed: a newer controller exists.
                if f.check(TransactionFailed) and f.value.failed_index == 0:
                    raise NotController() from f.value
            failures[0].raiseException()

    def _topic_value(self, topic: str, assignment: dict[int, tuple[int, ...]]) -> bytes:
        """The ``/brokers/topics/[topic]`` value for ``assignment``, keeping the reassignment
        state (adding / removing replicas) the controller holds for the topic's partitions."""
        return paths.TopicAssignment(
            {p: list(r) for p, r in assignment.items()},
            {p: list(self.adding[(topic, p)]) for p in assignment if (topic, p) in self.adding},
            {p: list(self.removing[(topic, p)]) for p in assignment
             if (topic, p) in self.removing},
        ).to_bytes()

    def _offline_election(self, tp: TopicPartition, d: PartitionDecision,
                          live: Collection[int]) -> Election:
        """A new leader for a partition whose leader is gone. Brokers in a controlled shutdown
        are passed over (their leaderships are being moved away) unless one of them is the only
        way to keep the partition online: it still serves until it stops."""
        unclean = self.unclean_leader_election(tp[0])
        live = self.offline_replicas.usable(tp, live)  # not a replica on a failed log dir
        fenced = self._fenced_brokers()
        live = [b for b in live if b not in fenced]
        el = offline_leader(d.replicas, d.isr, [b for b in live if b not in self.shutting_down],
                            unclean_allowed=unclean)
        if el.leader == -1 and self.shutting_down:
            el = offline_leader(d.replicas, d.isr, live, unclean_allowed=unclean)
        return el

    def _eligible(self) -> set[int]:
        """Live brokers that may be given leadership or an ISR place (not shutting down, not
        fenced)."""
        fenced = self._fenced_brokers()
        return {b for b in self.live if b not in self.shutting_down and b not in fenced}

    def _usable_live(self) -> dict[int, LiveBroker]:
        """The live brokers that are not fenced: those a broker change judges partitions by (a
        fenced broker counts as dead)."""
        fenced = self._fenced_brokers()
        return {b: lb for b, lb in self.live.items() if b not in fenced}

    def _fenced_brokers(self) -> Collection[int]:
        """Registered brokers fenced for want of heartbeats: treated as dead for leadership and
        ISR places until they are heard from again."""
        return () if self.fencing is None else self.fencing.liveness.fenced

    def broker_heartbeat(self, broker_id: int, broker_epoch: int) -> tuple[str | None, bool]:
        """BrokerHeartbeat: an error name or None, and whether the broker is fenced."""
        if self.fencing is None:
            return (None, False) if self.active else ("NOT_CONTROLLER", True)
        return self.fencing.heartbeat(broker_id, broker_epoch)

    def _state_value(self, d: PartitionDecision) -> bytes:
        return paths.LeaderAndIsr(d.leader, d.leader_epoch, list(d.isr),
                                  d.controller_epoch, d.leader_broker_epoch).to_bytes()

    def _leader_broker_epoch(self, cur: PartitionDecision, leader: int, epoch: int) -> int:
        """The ``leader_broker_epoch`` to write: the leader's registration when it was made
        leader at ``epoch``. An ISR-only change keeps the recorded one, so a restart of the
        leader nobody has seen yet (docs/design.md#leader-epochs) is still detected later."""
        if leader == cur.leader and epoch == cur.leader_epoch:
            return cur.leader_broker_epoch
        return self._broker_epoch_of(leader)

    def _broker_epoch_of(self, broker: int) -> int:
        b = self.live.get(broker)
        return -1 if b is None else b.epoch

    def _decision(self, cur: PartitionDecision, el: Election) -> PartitionDecision:
        """The state to write for election ``el`` over the current state ``cur``."""
        epoch = next_leader_epoch(cur.leader, cur.leader_epoch, el)
        return PartitionDecision(el.leader, epoch, el.isr, cur.replicas, cur.zk_version + 1,
                                 self.epoch, self._leader_broker_epoch(cur, el.leader, epoch))

    async def _write_decisions(self, tps: Iterable[TopicPartition], decide: Decide, what: str
                               ) -> dict[TopicPartition, PartitionDecision]:
        """Write what ``decide`` makes of each partition of ``tps``, each conditional on its
        state's version; after a conflict, re-read the round's partitions and
        decide again from what was read (:mod:`broker_core.controller.decisions`). Returns what
        was written. Unclean elections are logged and counted once written. Every partition
        left out is logged with the reason (``what`` names the caller's job); those that
        conflicted in every round are decided and written again by a new event after
        :data:`CONFLICT_RETRY_S`, those whose state is gone are not (nothing is left to
        decide)."""
        rounds = DecisionRounds(tps, decide, self._decision)
        while writes := rounds.next_writes(self.states):
            ops = [SetData(paths.leader_and_isr(*tp), self._state_value(d),
                           rounds.planned[tp].base.zk_version) for tp, d in writes.items()]
            try:
                await self._fenced(ops)
            except TransactionFailed:
                # Someone changed a state under us (or a chunk before the failing one
                # committed): re-read every partition of the round.
                fresh = dict(zip(writes, await _gather([self._read_state(tp) for tp in writes]),
                                 strict=True))
                for tp, st in fresh.items():
                    if st is None:
                        self.states.pop(tp, None)
                    else:
                        self.states[tp] = st
                rounds.conflicted(fresh)
                continue
            self.states.update(writes)
            rounds.succeeded()
        written: dict[TopicPartition, PartitionDecision] = {}
        for tp, planned in rounds.written.items():
            written[tp] = planned.decision
            if planned.election.unclean:
                self.log.warn("UNCLEAN leader election for {t}-{p}: broker {l} was not in the "
                              "ISR {isr}; committed messages may be lost", t=tp[0], p=tp[1],
                              l=planned.election.leader, isr=list(planned.base.isr))
                if self.metrics is not None:
                    self.metrics.unclean_leader_elections_total.inc()
        retry = []
        for tp, why in rounds.dropped.items():
            if why == GONE:
                self.log.info("{what}: {t}-{p} left out: {why}", what=what, t=tp[0], p=tp[1],
                              why=why)
            else:
                self.log.warn("{what}: {t}-{p} not written: {why}; deciding again in {s}s",
                              what=what, t=tp[0], p=tp[1], why=why, s=CONFLICT_RETRY_S)
                retry.append(tp)
        if retry:
            self._retry_later(f"{what} (retry)",
                              lambda: self._retry_decisions(retry, decide, what))
        return written

    def _retry_later(self, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` as a new event :data:`CONFLICT_RETRY_S` from now (unless we resign)."""
        call: Any = None

        def fire() -> None:
            self._retries.discard(call)
            if self.active:
                self._enqueue(name, fn)

        call = self.reactor.callLater(CONFLICT_RETRY_S, fire)
        self._retries.add(call)

    async def _retry_decisions(self, tps: list[TopicPartition], decide: Decide,
                               what: str) -> None:
        """Decide ``tps`` again, by the rule of the job that could not write them, from the
        state held now, and send what is written (LeaderAndIsr to the live replicas,
        UpdateMetadata to every live broker)."""
        written = await self._write_decisions(tps, decide, what)
        if written:
            self.log.info("{what}: {n} partitions written on a retry", what=what,
                          n=len(written))
        batch = self._new_batch()
        for tp, d in written.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.live], tp, d)
            batch.update_metadata(self.live, tp, d)
        self._send(batch)

    # -- broker changes (docs/design.md#replication-and-the-controller) ---------------------------

    async def _on_broker_change(self, unfenced: Collection[int] = ()) -> None:
        """Registrations changed (or, with ``unfenced``, brokers were fenced or unfenced):
        judge every partition against the registered brokers that are not fenced."""
        ids = await self._children(paths.BROKER_IDS)
        now = await self._read_brokers(ids)
        if not self.active:
            return
        dead = set(self.live) - set(now)
        new = set(now) - set(self.live)
        bounced = {b for b in set(now) & set(self.live) if now[b].epoch != self.live[b].epoch}
        # A broker that finished its controlled shutdown (or came back as a new incarnation) is
        # an ordinary broker again.
        self.shutting_down -= dead | bounced
        # A new incarnation starts with every log directory it has online (it reports again).
        self.offline_replicas.forget(dead | bounced)
        for b in dead:
            ch = self.channels.pop(b, None)
            if ch is not None:
                ch.stop()
        self.live = now
        for b in new | bounced:
            self._open_channel(now[b])
        if self.fencing is not None:
            self.fencing.liveness.registered(now, bounced)
        fenced = self._fenced_brokers()
        # An unfenced broker (still registered) learns its whole state, as a restarted one does.
        new = new | {b for b in unfenced if b in now and b not in fenced}
        # Brokers an earlier broker change found new or restarted but did not finish announcing
        # (its writes failed and it is being judged again): ``self.live`` knows them already,
        # so only this record says they are still owed their whole state, and that a restarted
        # one's replicas are to leave the ISRs.
        bounced |= {b for b in self._owed_bounced if b in now and b not in new}
        new |= {b for b in self._owed_new if b in now and b not in bounced}
        self._owed_new, self._owed_bounced = set(new), set(bounced)

        # Judge every partition against the live set, not just the brokers that left since the
        # last event: after a failover the new controller never saw the old live set. A fenced
        # broker counts as dead here.
        judge = self._judge_live(bounced)
        dead_leaders, restarted, shrinks = self._classify_live(judge)
        leaders = dead_leaders + restarted
        if not (dead or new or bounced or leaders or shrinks):
            return
        self.log.info("broker change: new {new}, dead {dead}, restarted {bounced}; "
                      "{n} partitions to re-elect, {s} ISRs to shrink", new=sorted(new),
                      dead=sorted(dead), bounced=sorted(bounced), n=len(leaders),
                      s=len(shrinks))
        # New leaderships first, the ISR shrinks once the brokers have taken them (or a moment
        # passed): clients wait for leaders, not for the bookkeeping.
        moved = await self._write_decisions(leaders, judge, "new leaders")
        await self._send_leaders_first(moved, later=new | bounced)
        if not self.active:
            return
        batch = self._new_batch()
        written = await self._write_decisions(shrinks, judge, "ISR shrinks")
        for tp, d in written.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.live], tp, d)
            batch.update_metadata(self.live, tp, d)
        # New and restarted brokers learn everything they host (the leaderships moved above
        # included: they were left out of that send), and the full metadata.
        for b in new | bounced:
            batch.full_leader_and_isr(b)
            for tp, d in self.states.items():
                if b in d.replicas:
                    batch.leader_and_isr([b], tp, d)
                batch.update_metadata([b], tp, d)
        batch.update_metadata(self.live)
        await self._elect_offline_partitions(batch, send=False)
        self._send(batch)
        self._owed_new, self._owed_bounced = set(), set()
        if self.reassigning and (new or bounced):
            # A new replica that was down can catch up now.
            self._enqueue("reassignment_wakeup", self._reassignment_wakeup)
        if new or bounced:
            # Its failure notification may have been handled before this event saw its new
            # registration (and ignored as another epoch's): read its record again.
            self._enqueue("log_dir_refresh", lambda: log_dir_failure.refresh_brokers(
                self, sorted(new | bounced)))

    def _judge_live(self, bounced: Collection[int]) -> Decide:
        """What a broker change means for one partition, against the live brokers at the time it is called (so
        a decision taken again after a conflict, or on a retry, judges the present):

        - its leader is not live: an offline election (it may come out leaderless: no live ISR
          member and no unclean election);
        - its leader restarted (see :meth:`_leader_restarted`): another in-sync replica that
          did not restart leads if there is one (Kafka's rule: a restart is a failure, then a
          start); otherwise the same leader in a new generation (a new leader epoch);
        - an ISR member is not live, or restarted (``bounced``): the ISR without it (same
          leader, same epoch);
        - otherwise nothing. A leaderless partition is left to
          :meth:`_elect_offline_partitions`.

        Why a restarted replica leaves the ISR even when the restart was quick: its recovery may
        have cut its log (a torn tail, a batch failing its CRC), so it may lack messages it had
        acknowledged as an ISR member. Kept in the ISR it could be elected and take committed
        messages away; out of it, it refetches and is asked back once caught up.
        """

        def decide(tp: TopicPartition, d: PartitionDecision) -> Election | None:
            live = self._usable_live()
            if d.leader == NO_LEADER:
                return None
            if d.leader not in live:
                return self._offline_election(tp, d, live)
            gone = [b for b in d.isr if b not in live or (b in bounced and b != d.leader)]
            if self._leader_restarted(d, bounced):
                others = [b for b in self.offline_replicas.usable(tp, live)
                          if b != d.leader and b not in bounced and b not in self.shutting_down]
                el = offline_leader(d.replicas, d.isr, others, unclean_allowed=False)
                if el.leader != NO_LEADER:
                    return el
                return Election(d.leader, shrink_isr(d.isr, gone), new_generation=True)
            if gone:
                return Election(d.leader, shrink_isr(d.isr, gone))
            return None

        return decide

    def _leader_restarted(self, d: PartitionDecision, bounced: Collection[int]) -> bool:
        """Does the live leader of ``d`` need a new leader generation? It does when the
        registration it was made leader under (``leader_broker_epoch``) is not its current one:
        it restarted, seen by us (``bounced``) or not (while there was no controller, or before
        this one loaded its state). A state without a recorded registration (-1) counts as
        restarted only if the leader is in ``bounced``. Idempotent: once the new generation is
        written it records the current registration, so judging the written state again bumps
        nothing (a decision taken again after a conflict must not bump the epoch twice)."""
        reg = self.live.get(d.leader)
        if reg is None:
            return False
        if d.leader_broker_epoch >= 0:
            return d.leader_broker_epoch != reg.epoch
        return d.leader in bounced

    def _classify_live(self, judge: Decide) -> tuple[list[TopicPartition], list[TopicPartition],
                                                     list[TopicPartition]]:
        """The partitions ``judge`` would change, as (dead leaders, restarted leaders, ISR
        shrinks): new leaderships are written and sent before the shrinks."""
        dead: list[TopicPartition] = []
        restarted: list[TopicPartition] = []
        shrinks: list[TopicPartition] = []
        live = self._usable_live()
        for tp, d in self.states.items():
            el = judge(tp, d)
            if el is None:
                continue
            if d.leader not in live:
                dead.append(tp)
            elif el.new_generation or el.leader != d.leader:
                restarted.append(tp)
            else:
                shrinks.append(tp)
        return dead, restarted, shrinks

    async def _elect_offline_partitions(self, batch: RequestBatch, *, send: bool) -> None:
        """Partitions without a leader whose replicas are back get one (OfflinePartition →
        OnlinePartition); those with no live ISR member stay offline unless unclean election is
        enabled for their topic."""

        def decide(tp: TopicPartition, d: PartitionDecision) -> Election | None:
            if d.leader != NO_LEADER or not any(r in self.live for r in d.replicas):
                return None
            el = self._offline_election(tp, d, self.live)
            return None if el.leader == NO_LEADER else el

        changes = [tp for tp, d in self.states.items() if decide(tp, d) is not None]
        if not changes:
            if send:
                self._send(batch)
            return
        written = await self._write_decisions(changes, decide, "offline partitions")
        if written:
            # One line per event, not per partition: a returning broker can bring thousands.
            self.log.info("{n} partitions back online (e.g. {ex})", n=len(written),
                          ex=", ".join(f"{t}-{p} led by {d.leader} at epoch {d.leader_epoch}"
                                       for (t, p), d in list(written.items())[:3]))
        for tp, d in written.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.live], tp, d)
            batch.update_metadata(self.live, tp, d)
        if send:
            self._send(batch)

    # -- ISR changes from leaders (docs/design.md#isr-changes-through-the-controller) -------------

    async def alter_isr(self, broker_id: int, broker_epoch: int, items: Sequence[AlterIsrItem]
                        ) -> AlterIsrResult:
        """AlterIsr: leader ``broker_id`` asks to change the ISR of the partitions in ``items``.

        Returns a top-level error name (NOT_CONTROLLER, STALE_BROKER_EPOCH: ``broker_epoch`` is
        not the czxid we hold for that broker's registration) and no partitions, or ``None`` and
        per partition an error name (see :func:`~broker_core.controller.election.judge_isr_change`)
        or the state now in force: the leader epoch is unchanged and ``zk_version`` is the
        partition epoch the leader must name next time.

        The change runs as an event on the controller's queue, so it is ordered with broker and
        topic changes and judged against the state they left. Accepted changes are written in
        fenced multis, conditional on each znode's version; then UpdateMetadata goes to every
        live broker and LeaderAndIsr to the partition's live replicas.
        """
        if not self.active:
            return "NOT_CONTROLLER", {}
        done: defer.Deferred = defer.Deferred()
        self._alter_waiters.add(done)

        async def event() -> None:
            if done.called:  # answered NOT_CONTROLLER when we resigned
                return
            try:
                result = await self._apply_isr_changes(broker_id, broker_epoch, items)
            except NotController:
                self._answer(done, ("NOT_CONTROLLER", {}))
                raise  # the event loop resigns
            except Exception:
                self.log.failure("AlterIsr from broker {b} failed", b=broker_id)
                result = ("UNKNOWN_SERVER_ERROR", {})
            self._answer(done, result)

        self._enqueue("alter_isr", event)
        return await done

    def _answer(self, waiter: defer.Deferred, result: Any) -> None:
        """Answer an AlterIsr or ControlledShutdown caller once (a resignation may answer
        first)."""
        self._alter_waiters.discard(waiter)
        if not waiter.called:
            waiter.callback(result)

    def _answer_waiters_not_controller(self) -> None:
        for waiter in list(self._alter_waiters):
            self._answer(waiter, ("NOT_CONTROLLER", {}))

    async def _apply_isr_changes(self, broker_id: int, broker_epoch: int,
                                 items: Sequence[AlterIsrItem]) -> AlterIsrResult:
        if not self.active:
            return "NOT_CONTROLLER", {}
        registered = self.live.get(broker_id)
        if registered is None or registered.epoch != broker_epoch:
            # A dead broker, or a request from a previous incarnation of it (KIP-380).
            return "STALE_BROKER_EPOCH", {}
        if broker_id in self._fenced_brokers():
            # A fenced leader may not shrink its ISR to itself and commit alone: its partitions
            # are being (or were) given to other replicas. It retries until it is unfenced, by
            # which time a LeaderAndIsr has told it its new place.
            return "STALE_BROKER_EPOCH", {}
        results: dict[TopicPartition, tuple[str | None, PartitionDecision | None]] = {}
        pending: dict[TopicPartition, tuple[int, tuple[int, ...], int]] = {}
        for topic, index, leader_epoch, new_isr, partition_epoch in items:
            tp = (topic, index)
            if tp in pending or tp in results:
                # Two answers for one partition cannot both hold: refuse both.
                pending.pop(tp, None)
                results[tp] = ("INVALID_REQUEST", None)
                continue
            pending[tp] = (leader_epoch, tuple(new_isr), partition_epoch)
        written: dict[TopicPartition, PartitionDecision] = {}
        refreshed: set[TopicPartition] = set()
        for _ in range(ALTER_ISR_ROUNDS):
            ops: list[Any] = []
            new: dict[TopicPartition, PartitionDecision] = {}
            for tp, (leader_epoch, new_isr, partition_epoch) in pending.items():
                cur = self.states.get(tp)
                # A broker in controlled shutdown may not (re)join an ISR (Kafka, KIP-841).
                # Nor may a replica on a failed log directory (KIP-112).
                verdict = judge_isr_change(broker_id, leader_epoch, partition_epoch, new_isr,
                                           cur, self.offline_replicas.usable(
                                               tp, self._eligible()))
                if verdict.error is not None or cur is None:
                    results[tp] = (verdict.error, None)
                elif not verdict.write:
                    results[tp] = (None, cur)
                elif (self.fencing is not None and not self.fencing.may_shrink_isr()
                      and not set(cur.isr) <= set(new_isr)):
                    # Isolated: the followers dropped may be fine and this controller cut off
                    # (broker_core.controller.broker_liveness). The leader asks again later.
                    results[tp] = ("OPERATION_NOT_ATTEMPTED", None)
                else:
                    # Only the ISR and the znode version move: an ISR change is no new leader
                    # generation (docs/design.md#isr-changes-through-the-controller).
                    d = replace(cur, isr=new_isr, zk_version=cur.zk_version + 1,
                                controller_epoch=self.epoch)
                    new[tp] = d
                    ops.append(SetData(paths.leader_and_isr(*tp), self._state_value(d),
                                       cur.zk_version))
            if not ops:
                pending = {}
                break
            try:
                await self._fenced(ops)  # chunked under the multi limit, each chunk fenced
            except TransactionFailed:
                # A znode is not at the version we hold (or vanished). One multi is all or
                # nothing, but chunks before the failing one committed: re-read every partition
                # of this round and judge them again. A partition that moved answers
                # INVALID_UPDATE_VERSION, or succeeds if what it holds is what was asked.
                fresh = await _gather([self._read_state(tp) for tp in new])
                for tp, st in zip(list(new), fresh, strict=True):
                    if st is None:
                        self.states.pop(tp, None)
                    else:
                        self.states[tp] = st
                        refreshed.add(tp)
                pending = {tp: pending[tp] for tp in new}
                continue
            for tp, d in new.items():
                self.states[tp] = d
                written[tp] = d
                results[tp] = (None, d)
            pending = {}
            break
        for tp in pending:  # still conflicting after every round
            results[tp] = ("INVALID_UPDATE_VERSION", None)
        if written or refreshed:
            self.log.info("ISR change from broker {b}: {n} partitions written{extra}",
                          b=broker_id, n=len(written),
                          extra=f", {len(refreshed)} re-read after a conflict" if refreshed else "")
        batch = self._new_batch()
        for tp in sorted(written.keys() | refreshed):
            d = self.states.get(tp)
            if d is None:
                continue
            batch.leader_and_isr([r for r in d.replicas if r in self.live], tp, d)
            batch.update_metadata(self.live, tp, d)
        # A leader that named an old znode version missed a decision (a lost LeaderAndIsr, or one
        # still on its way): tell it the state again so it stops asking from a stale base.
        for tp, (error, _) in results.items():
            d = self.states.get(tp)
            if error == "INVALID_UPDATE_VERSION" and d is not None and d.leader == broker_id:
                batch.leader_and_isr([broker_id], tp, d)
        self._send(batch)
        if any(tp in self.reassigning for tp in written):
            # Reassignment: a new replica may just have joined the ISR; do not wait for the timer.
            self._enqueue("reassignment_wakeup", self._reassignment_wakeup)
        return None, results

    # -- topics (docs/design.md#replication-and-the-controller) ------------------------------------

    async def _on_topic_change(self) -> None:
        children = set(await self._children(paths.TOPICS))
        known = set(self.assignments)
        new, gone = children - known, known - children
        if not (new or gone):
            return
        batch = self._new_batch()
        if new:
            missing = await self._load_topics(sorted(new))
            for t in sorted(new):
                if t in self.assignments:
                    self.log.info("new topic {t} with {n} partitions", t=t,
                                  n=len(self.assignments[t]))
            # Partitions that already had a state (created by a previous controller) are sent as is.
            for tp, d in self.states.items():
                if tp[0] in new:
                    batch.leader_and_isr([r for r in d.replicas if r in self.live], tp, d)
                    batch.update_metadata(self.live, tp, d)
            await self._init_leaders(missing, batch)
        for t in sorted(gone):
            # The topic's znode vanished without going through /admin/delete_topics.
            self.log.info("topic {t} removed from ZooKeeper", t=t)
            self._forget_topic(t, batch)
        self._send(batch)

    async def _init_leaders(self, tps: Sequence[TopicPartition], batch: RequestBatch,
                            extra_ops: Sequence[Any] = ()) -> None:
        """``init_leaders``: elect among live AR, create the partition and
        LeaderAndISR znodes in fenced multis, then queue LeaderAndIsr (is_new) and metadata."""
        decisions: dict[TopicPartition, PartitionDecision] = {}
        ops: list[Any] = []
        existing = await _gather([self.store.exists(paths.partition(*tp)) for tp in tps])
        for tp, st in zip(tps, existing, strict=True):
            replicas = self.assignments[tp[0]][tp[1]]
            el = init_leader(replicas, self.live)
            d = PartitionDecision(el.leader, 0, el.isr, replicas, 0, self.epoch,
                                  self._broker_epoch_of(el.leader))
            decisions[tp] = d
            if st is None:
                ops.append(Create(paths.partition(*tp)))
            ops.append(Create(paths.leader_and_isr(*tp), self._state_value(d)))
        ops.extend(extra_ops)
        try:
            await self._fenced(ops)
        except TransactionFailed:
            # A previous controller got part of the way: take what ZooKeeper has.
            for tp in tps:
                st = await self._read_state(tp)
                if st is not None:
                    decisions[tp] = st
                else:
                    await self._fenced([Create(paths.leader_and_isr(*tp),
                                               self._state_value(decisions[tp]))])
            if extra_ops:
                await self._fenced(list(extra_ops))
        for tp, d in decisions.items():
            self.states[tp] = d
            batch.leader_and_isr([r for r in d.replicas if r in self.live], tp, d, is_new=True)
            batch.update_metadata(self.live, tp, d)

    def _forget_topic(self, topic: str, batch: RequestBatch) -> None:
        parts = self.assignments.pop(topic, {})
        self.topic_versions.pop(topic, None)
        for p, replicas in parts.items():
            tp = (topic, p)
            self.adding.pop(tp, None)
            self.removing.pop(tp, None)
            self.reassigning.pop(tp, None)
            d = self.states.pop(tp, None)
            batch.stop_replica([r for r in replicas if r in self.live], tp,
                               leader_epoch=-2 if d is None else d.leader_epoch, delete=True)
            batch.update_metadata(self.live, tp, None)

    async def _on_delete_topics(self) -> None:
        marked = await self._children(paths.DELETE_TOPICS)
        for topic in marked:
            batch = self._new_batch()
            parts = dict(self.assignments.get(topic, {}))
            self._forget_topic(topic, batch)
            self._send(batch)
            # Children before parents; only what exists (a previous controller may have got
            # part of the way).
            candidates = []
            for p in sorted(parts):
                candidates += [paths.leader_and_isr(topic, p), paths.partition(topic, p)]
            found = await _gather([self.store.exists(c) for c in candidates])
            ops: list[Any] = [Delete(c) for c, st in zip(candidates, found, strict=True)
                              if st is not None]
            for path in (paths.topic(topic), paths.topic_config(topic)):
                if await self.store.exists(path) is not None:
                    ops.append(Delete(path))
            ops.append(Delete(paths.delete_topic(topic)))
            try:
                await self._fenced(ops)
            except TransactionFailed as e:
                self.log.warn("could not delete the znodes of topic {t} in one step ({e}); "
                              "deleting them one by one", t=topic, e=e.first_error)
                for op in ops:
                    try:
                        await self._fenced([op])
                    except TransactionFailed:
                        pass
            self.log.info("deleted topic {t}", t=topic)

    # -- partitions add/remove (docs/design.md#adding-and-removing-partitions) --------------------

    def _watch_admin_topics(self, root: str, watched: dict[str, Any], topics: Iterable[str],
                            name: str, fn: Callable[[], Awaitable[None]]) -> None:
        # New children under an already-existing /admin/partitions_*/[topic] do not fire the
        # root's child watch, so each topic node gets a watch of its own.
        for t in topics:
            if t not in watched:
                watched[t] = self.store.watch_children(f"{root}/{t}", self._active_only(name, fn))

    async def _admin_requests(self, root: str) -> dict[str, dict[int, bytes]]:
        out: dict[str, dict[int, bytes]] = {}
        for topic in await self._children(root):
            parts: dict[int, bytes] = {}
            for child in await self._children(f"{root}/{topic}"):
                if not (child.isdigit() and child.isascii()):
                    continue
                try:
                    data, _ = await self.store.get(f"{root}/{topic}/{child}")
                except NoNode:
                    continue
                parts[int(child)] = data
            out[topic] = parts
        return out

    async def _on_partitions_add(self) -> None:
        requests = await self._admin_requests(paths.PARTITIONS_ADD)
        self._watch_admin_topics(paths.PARTITIONS_ADD, self._add_watched, requests,
                                 "partitions_add", self._on_partitions_add)
        for topic, parts in requests.items():
            cleanup = [Delete(paths.partition_add(topic, p)) for p in sorted(parts)]
            cleanup.append(Delete(paths.partitions_add_topic(topic)))
            current = self.assignments.get(topic)
            new: dict[int, tuple[int, ...]] = {}
            problem = None
            if current is None:
                problem = "unknown topic"
            else:
                for p, data in sorted(parts.items()):
                    if p in current:
                        continue
                    try:
                        replicas = tuple(int(b) for b in _json_list(data))
                    except ValueError:
                        problem = f"partition {p}: replicas are not a JSON list of broker ids"
                        break
                    if not replicas or len(set(replicas)) != len(replicas):
                        problem = f"partition {p}: bad replica list {list(replicas)}"
                        break
                    new[p] = replicas
                expected = list(range(len(current), len(current) + len(new)))
                if problem is None and sorted(new) != expected:
                    problem = f"new partitions {sorted(new)} are not the next ids {expected}"
            if problem is not None:
                self.log.error("rejecting partitions_add for {t}: {why}", t=topic, why=problem)
                await self._fenced(cleanup)
                continue
            if not new:
                await self._fenced(cleanup)
                continue
            assignment = {**current, **new}
            version = self.topic_versions[topic]
            update = SetData(paths.topic(topic), self._topic_value(topic, assignment), version)
            self.assignments[topic] = assignment
            batch = self._new_batch()
            # Init leaders, remove the admin path, update the topic path; one fenced
            # multi makes the three steps atomic.
            await self._init_leaders([(topic, p) for p in sorted(new)], batch,
                                     extra_ops=[*cleanup, update])
            self.topic_versions[topic] = version + 1
            self.log.info("added partitions {ps} to topic {t}", ps=sorted(new), t=topic)
            self._send(batch)

    async def _on_partitions_remove(self) -> None:
        """Partition removal requests: for each requested topic, validate, then
        :meth:`_remove_partitions`. A request whose write conflicts is logged and taken up again
        (re-read, re-validated) by a new event after :data:`CONFLICT_RETRY_S`: its request
        znodes are deleted only in the write that carries it out."""
        requests = await self._admin_requests(paths.PARTITIONS_REMOVE)
        self._watch_admin_topics(paths.PARTITIONS_REMOVE, self._remove_watched, requests,
                                 "partitions_remove", self._on_partitions_remove)
        retry = False
        for topic, parts in requests.items():
            cleanup = [Delete(paths.partition_remove(topic, p)) for p in sorted(parts)]
            cleanup.append(Delete(paths.partitions_remove_topic(topic)))
            current = self.assignments.get(topic)
            remove = sorted(p for p in parts if current is not None and p in current)
            problem = None
            if current is None:
                problem = "unknown topic"
            elif remove and remove != list(range(len(current) - len(remove), len(current))):
                problem = f"only the highest-numbered partitions can be removed, not {remove}"
            elif len(remove) >= len(current):
                problem = "a topic must keep at least one partition (delete the topic instead)"
            try:
                if problem is not None or not remove:
                    if problem:
                        self.log.error("rejecting partitions_remove for {t}: {why}", t=topic,
                                       why=problem)
                    await self._fenced(cleanup)
                    self._restore_stopped(topic)
                    continue
                await self._remove_partitions(topic, remove, cleanup)
            except TransactionFailed as e:
                # The topic znode is not at the version we hold, or a request znode changed:
                # nothing was written. Reload the topic (its assignment, version and states)
                # and carry the request out again from there.
                self.log.warn("partitions_remove for {t}: conflicting write ({e}); nothing "
                              "removed, trying again in {s}s", t=topic, e=e.first_error,
                              s=CONFLICT_RETRY_S)
                await self._load_topics([topic])
                retry = True
        if retry:
            self._retry_later("partitions_remove (retry)", self._on_partitions_remove)

    async def _remove_partitions(self, topic: str, remove: Sequence[int],
                                 cleanup: Sequence[Any]) -> None:
        """Remove partitions ``remove`` (the highest-numbered ones) of ``topic``, in the order
        that leaves nothing behind if the controller stops at any point:

        1. StopReplica (delete) to their live replicas and UpdateMetadata marking them deleted,
           waiting for the answers (at most :data:`STOP_REPLICA_WAIT_S`): no replica serves or
           keeps them once ZooKeeper no longer names them;
        2. one fenced multi deletes their ``leaderAndISR`` and partition znodes (those that
           exist), replaces the topic znode at its known version and deletes the request
           (``cleanup``);
        3. only then is the controller's state of them dropped.

        A failed write (TransactionFailed) changes no state here; the request stays and is
        carried out again (step 1 is idempotent on the brokers)."""
        current = self.assignments[topic]
        batch = self._new_batch()
        self._stopped_for_removal.setdefault(topic, set()).update(remove)
        for p in remove:
            tp = (topic, p)
            d = self.states.get(tp)
            batch.stop_replica([r for r in current[p] if r in self.live], tp,
                               leader_epoch=-2 if d is None else d.leader_epoch, delete=True)
            batch.update_metadata(self.live, tp, None)
        await _first_of(self._send(batch), STOP_REPLICA_WAIT_S, self.reactor)
        if not self.active:
            raise NotController()
        candidates = [path for p in remove
                      for path in (paths.leader_and_isr(topic, p), paths.partition(topic, p))]
        found = await _gather([self.store.exists(c) for c in candidates])
        ops: list[Any] = [Delete(c) for c, st in zip(candidates, found, strict=True)
                          if st is not None]
        assignment = {p: r for p, r in current.items() if p not in remove}
        version = self.topic_versions[topic]
        ops.append(SetData(paths.topic(topic), self._topic_value(topic, assignment), version))
        await self._fenced([*ops, *cleanup])
        for p in remove:
            tp = (topic, p)
            self.states.pop(tp, None)
            self.adding.pop(tp, None)
            self.removing.pop(tp, None)
        self.assignments[topic] = assignment
        self.topic_versions[topic] = version + 1
        self._stopped_for_removal.pop(topic, None)
        self.log.info("removed partitions {ps} from topic {t}", ps=list(remove), t=topic)

    def _restore_stopped(self, topic: str) -> None:
        """A removal whose StopReplica went out but whose write then conflicted, and that is
        now refused (the topic changed under it, or the request was withdrawn): its partitions
        are still in the metadata but no replica holds them any more. Send their state again so
        that the replicas serve them (empty: what they held was deleted) rather than leave
        them unavailable."""
        stopped = self._stopped_for_removal.pop(topic, set())
        tps = [(topic, p) for p in sorted(stopped) if (topic, p) in self.states]
        if not tps:
            return
        self.log.error("partitions {ps} of topic {t} were stopped for a removal that was then "
                       "refused: serving them again, empty (their data was deleted)",
                       ps=[p for _, p in tps], t=topic)
        batch = self._new_batch()
        for tp in tps:
            d = self.states[tp]
            batch.leader_and_isr([r for r in d.replicas if r in self.live], tp, d)
            batch.update_metadata(self.live, tp, d)
        self._send(batch)

    # -- replica reassignment (docs/design.md#replica-reassignment) -------------------------------

    async def _read_reassignment(self) -> tuple[dict[TopicPartition, tuple[int, ...]] | None, int]:
        """``/admin/reassign_partitions`` and its version; ``(None, -1)`` when absent. An
        unreadable value is logged and deleted (nothing in it can be acted on)."""
        try:
            data, stat = await self.store.get(paths.REASSIGN_PARTITIONS)
        except NoNode:
            return None, -1
        try:
            value = paths.PartitionReassignment.from_bytes(data)
        except ValueError as e:
            self.log.error("rejecting {p}: {e}; deleting it", p=paths.REASSIGN_PARTITIONS, e=e)
            try:
                await self._fenced([Delete(paths.REASSIGN_PARTITIONS, stat.version)])
            except TransactionFailed:
                pass
            return None, -1
        return {tp: tuple(r) for tp, r in value.partitions.items()}, stat.version

    def _reassignment_problem(self, tp: TopicPartition, target: tuple[int, ...]) -> str | None:
        """Why RAR ``target`` for ``tp`` cannot be carried out, or None. A replication factor
        other than the current one is allowed, as in Kafka."""
        parts = self.assignments.get(tp[0])
        if parts is None:
            return f"topic {tp[0]!r} does not exist"
        if tp[1] not in parts:
            return f"topic {tp[0]!r} has no partition {tp[1]}"
        if not target:
            return "the replica list is empty"
        if len(set(target)) != len(target):
            return f"the replica list {list(target)} names a broker twice"
        # Only a reassignment that has not started yet needs every new replica alive; one that
        # is under way (after a failover, say) waits for a replica that died meanwhile.
        if tp not in self.adding:
            dead = [b for b in target if b not in self.live]
            if dead:
                return f"brokers {dead} are not alive"
        return None

    async def _on_partitions_reassigned(self) -> None:
        """``on_partitions_reassigned`` and ``add_reassigned_partitions``: take the
        requested partitions into the agent's map (new ones in INIT), drop those the admin path
        no longer names, reject bad entries (removed from the path, with an error in the log),
        and wake the agent."""
        wanted, _ = await self._read_reassignment()
        wanted = wanted or {}
        rejected: dict[TopicPartition, tuple[int, ...]] = {}
        for tp, target in sorted(wanted.items()):
            if self.reassigning.get(tp) == target:
                continue
            problem = self._reassignment_problem(tp, target)
            if problem is not None:
                self.log.error("rejecting reassignment of {t}-{p} to {r}: {why}", t=tp[0],
                               p=tp[1], r=list(target), why=problem)
                rejected[tp] = target
                self.reassigning.pop(tp, None)
                continue
            self.log.info("reassignment of {t}-{p} to {r} requested", t=tp[0], p=tp[1],
                          r=list(target))
            self.reassigning[tp] = target
        for tp in [tp for tp in self.reassigning if tp not in wanted]:
            self.log.info("reassignment of {t}-{p} withdrawn from {path}", t=tp[0], p=tp[1],
                          path=paths.REASSIGN_PARTITIONS)
            del self.reassigning[tp]
        if rejected:
            await self._remove_reassignments(rejected)
        await self._reassignment_wakeup()

    def _arm_reassignment_timer(self) -> None:
        """The reassignment agent also wakes up every ``reassignment_wakeup_s`` seconds while it
        has work, through the event queue like every other controller action."""
        if self._reassign_call is not None and self._reassign_call.active():
            return
        if not self.active or not self.reassigning:
            return

        def fire() -> None:
            self._reassign_call = None
            if self.active and self.reassigning:
                self._enqueue("reassignment_wakeup", self._reassignment_wakeup)

        self._reassign_call = self.reactor.callLater(self.reassignment_wakeup_s, fire)

    async def _reassignment_wakeup(self) -> None:
        """The agent's ``on_wakeup``: move each partition in the map one step on; finished ones
        leave the map and the admin path."""
        done: dict[TopicPartition, tuple[int, ...]] = {}
        for tp in sorted(self.reassigning):
            target = self.reassigning[tp]
            try:
                finished = await self._reassign_step(tp, target)
            except TransactionFailed as e:
                # A znode moved under us (its version is not the one we hold): reload the
                # topic and try again at the next wake-up.
                self.log.warn("reassignment of {t}-{p}: conflicting write ({e}); will retry",
                              t=tp[0], p=tp[1], e=e.first_error)
                await self._load_topics([tp[0]])
                continue
            if finished:
                done[tp] = target
        for tp in done:
            self.reassigning.pop(tp, None)
        if done:
            await self._remove_reassignments(done)
        self._arm_reassignment_timer()

    async def _reassign_step(self, tp: TopicPartition, target: tuple[int, ...]) -> bool:
        """One step of the INIT → IN_PROGRESS → done machine of one partition; True when done.

        The state is not kept in memory but read off what ZooKeeper holds, so a new controller
        resumes where the old one stopped: OAR is AR minus the replicas being added. INIT: AR is
        not yet OAR ∪ RAR: write it (with adding/removing) and send LeaderAndIsr to every replica,
        so the new ones start following. IN_PROGRESS: wait until every RAR member is in the ISR
        (the leader's AlterIsr puts them there), then AR = RAR, ISR = ISR ∩ RAR, a new leader
        from RAR ∩ ISR if the old one is not in RAR, StopReplica (delete) to the rest.

        A cancellation is a target equal to OAR: the INIT step then shrinks AR back to OAR.
        """
        topic, index = tp
        ar = self.assignments.get(topic, {}).get(index)
        cur = self.states.get(tp)
        if ar is None or cur is None:
            return True  # the topic or partition went away: nothing left to move
        adding = self.adding.get(tp, ())
        original = tuple(b for b in ar if b not in adding)
        if ar == target and not adding:
            return True
        want_ar, want_adding, want_removing = reassignment_replicas(original, target)
        if ar != want_ar or adding != want_adding:
            batch = self._new_batch()
            if not await self._move_replicas(tp, want_ar, want_adding, want_removing, batch):
                return False
            self._send(batch)
            self.log.info("reassignment of {t}-{p}: replicas {ar} (adding {add}, removing "
                          "{rm})", t=topic, p=index, ar=list(want_ar), add=list(want_adding),
                          rm=list(want_removing))
            if want_ar == target and not want_adding:
                return True  # nothing to add (a cancellation, or a reorder of the same set)
        cur = self.states[tp]
        if not reassignment_complete(target, cur.isr):
            return False
        batch = self._new_batch()
        if not await self._move_replicas(tp, target, (), (), batch):
            return False
        self._send(batch)
        d = self.states[tp]
        self.log.info("reassignment of {t}-{p} to {r} completed (leader {l}, epoch {e})",
                      t=topic, p=index, r=list(target), l=d.leader, e=d.leader_epoch)
        return True

    async def _move_replicas(self, tp: TopicPartition, new_ar: Sequence[int],
                             adding: Sequence[int], removing: Sequence[int],
                             batch: RequestBatch) -> bool:
        """Make ``new_ar`` the partition's AR: one fenced multi writes the topic znode
        (conditional on its version) and, when a replica leaves that leads or is in the ISR,
        the new leader/ISR (conditional on the state's version). Queues LeaderAndIsr to the
        live replicas of ``new_ar``, StopReplica (delete) to the live ones that leave, and
        UpdateMetadata to everyone. False (nothing written) when no live ISR member of
        ``new_ar`` could lead. Raises TransactionFailed on a version conflict."""
        topic, index = tp
        cur = self.states[tp]
        new_ar = tuple(new_ar)
        dropped = tuple(b for b in self.assignments[topic][index] if b not in new_ar)
        decision = replace(cur, replicas=new_ar)
        ops: list[Any] = []
        if cur.leader not in new_ar or any(b in dropped for b in cur.isr):
            el = reassignment_leader(new_ar, cur.isr, cur.leader, self._eligible())
            if el is None:
                self.log.warn("reassignment of {t}-{p}: no live in-sync replica among {r} to "
                              "lead yet; waiting", t=topic, p=index, r=list(new_ar))
                return False
            epoch = next_leader_epoch(cur.leader, cur.leader_epoch, el)
            decision = PartitionDecision(
                el.leader, epoch, el.isr, new_ar, cur.zk_version + 1, self.epoch,
                self._leader_broker_epoch(cur, el.leader, epoch))
            ops.append(SetData(paths.leader_and_isr(*tp), self._state_value(decision),
                               cur.zk_version))
        assignment = {**self.assignments[topic], index: new_ar}
        old_meta = (self.adding.get(tp), self.removing.get(tp))
        self._set_reassignment_meta(tp, adding, removing)
        version = self.topic_versions[topic]
        ops.append(SetData(paths.topic(topic), self._topic_value(topic, assignment), version))
        try:
            await self._fenced(ops)
        except BaseException:
            self._set_reassignment_meta(tp, old_meta[0] or (), old_meta[1] or ())
            raise
        self.assignments[topic] = assignment
        self.topic_versions[topic] = version + 1
        self.states[tp] = decision
        batch.leader_and_isr([b for b in new_ar if b in self.live], tp, decision)
        batch.stop_replica([b for b in dropped if b in self.live], tp,
                           leader_epoch=decision.leader_epoch, delete=True)
        batch.update_metadata(self.live, tp, decision)
        return True

    def _set_reassignment_meta(self, tp: TopicPartition, adding: Sequence[int],
                               removing: Sequence[int]) -> None:
        for table, value in ((self.adding, tuple(adding)), (self.removing, tuple(removing))):
            if value:
                table[tp] = value
            else:
                table.pop(tp, None)

    async def _remove_reassignments(self, done: dict[TopicPartition, tuple[int, ...]]) -> None:
        """Take finished (or rejected) partitions out of ``/admin/reassign_partitions``, deleting
        it when none remain. Conditional on the znode's version; an entry an admin has changed
        since (a cancellation, a new target) stays for the agent to act on."""
        for _ in range(5):
            wanted, version = await self._read_reassignment()
            if wanted is None:
                return
            remaining = {tp: r for tp, r in wanted.items() if done.get(tp) != r}
            if len(remaining) == len(wanted):
                return
            if remaining:
                op: Any = SetData(paths.REASSIGN_PARTITIONS, paths.PartitionReassignment(
                    {tp: list(r) for tp, r in remaining.items()}).to_bytes(), version)
            else:
                op = Delete(paths.REASSIGN_PARTITIONS, version)
            try:
                await self._fenced([op])
                return
            except TransactionFailed:
                continue  # an admin wrote the znode meanwhile: read it again

    # -- preferred-leader election ---------------------------------------------------------------

    async def _on_preferred_election(self) -> None:
        """Kafka's ``/admin/preferred_replica_election``: give each named partition to its
        preferred replica (first in AR) when that replica is alive and in the ISR, with a new
        leader epoch; then delete the znode. Partitions that are unknown, already led by their
        preferred replica, or whose preferred replica cannot lead are left as they are."""
        try:
            data, stat = await self.store.get(paths.PREFERRED_REPLICA_ELECTION)
        except NoNode:
            return
        try:
            requested = paths.PreferredReplicaElection.from_bytes(data).partitions
        except ValueError as e:
            self.log.error("rejecting {p}: {e}", p=paths.PREFERRED_REPLICA_ELECTION, e=e)
            requested = []
        await self.elect_preferred(requested)
        try:
            await self._fenced([Delete(paths.PREFERRED_REPLICA_ELECTION, stat.version)])
        except TransactionFailed:
            pass  # rewritten meanwhile (its data watch brings us back) or already gone

    async def elect_preferred(self, tps: Iterable[TopicPartition]
                              ) -> dict[TopicPartition, PartitionDecision]:
        """Move leadership of ``tps`` to their preferred replicas where it is possible (see
        :func:`~broker_core.controller.election.preferred_leader`); returns what was written.
        Runs inside a controller event."""

        def decide(tp: TopicPartition, d: PartitionDecision) -> Election | None:
            return preferred_leader(d.replicas, d.isr, d.leader, self._eligible())

        changes: list[TopicPartition] = []
        for tp in tps:
            d = self.states.get(tp)
            if d is None:
                self.log.info("preferred election: unknown partition {t}-{p}", t=tp[0], p=tp[1])
            elif decide(tp, d) is not None:
                changes.append(tp)
        if not changes:
            return {}
        written = await self._write_decisions(changes, decide, "preferred election")
        batch = self._new_batch()
        for tp, d in written.items():
            self.log.info("preferred election: {t}-{p} now led by {l} (epoch {e})", t=tp[0],
                          p=tp[1], l=d.leader, e=d.leader_epoch)
            batch.leader_and_isr([r for r in d.replicas if r in self.live], tp, d)
            batch.update_metadata(self.live, tp, d)
        self._send(batch)
        return written

    # -- controlled shutdown ---------------------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int
                                  ) -> tuple[str | None, list[TopicPartition]]:
        """Broker ``broker_id`` is about to stop: move leadership of every partition it leads to
        another live ISR member (new leader epoch), take it out of every ISR, and return an
        error name (NOT_CONTROLLER, STALE_BROKER_EPOCH, BROKER_NOT_AVAILABLE) or None with the
        replicated partitions (replication factor > 1, as Kafka) it still leads. From now until
        it leaves, no leadership or ISR place is given to it.

        Runs as a controller event; the answer comes once the decisions are written and the
        brokers have acknowledged them (or ``SHUTDOWN_ACK_WAIT_S`` passed)."""
        if not self.active:
            return "NOT_CONTROLLER", []
        done: defer.Deferred = defer.Deferred()
        self._alter_waiters.add(done)
        sent: list[defer.Deferred] = []

        async def event() -> None:
            if done.called:
                return
            try:
                result = await self._shutdown_broker(broker_id, broker_epoch, sent)
            except NotController:
                self._answer(done, ("NOT_CONTROLLER", []))
                raise
            except Exception:
                self.log.failure("ControlledShutdown of broker {b} failed", b=broker_id)
                result = ("UNKNOWN_SERVER_ERROR", [])
            self._answer(done, result)

        self._enqueue("controlled_shutdown", event)
        top, remaining = await done
        if top is None and sent:
            acks = defer.DeferredList(sent, consumeErrors=True)
            acks.addTimeout(SHUTDOWN_ACK_WAIT_S, self.reactor)
            try:
                await acks
            except defer.TimeoutError:
                pass
        return top, list(remaining)

    async def _shutdown_broker(self, broker_id: int, broker_epoch: int,
                               sent: list[defer.Deferred]
                               ) -> tuple[str | None, list[TopicPartition]]:
        if not self.active:
            return "NOT_CONTROLLER", []
        registered = self.live.get(broker_id)
        if registered is None:
            return "BROKER_NOT_AVAILABLE", []
        if broker_epoch >= 0 and registered.epoch != broker_epoch:
            return "STALE_BROKER_EPOCH", []
        self.shutting_down.add(broker_id)
        eligible = self._eligible()

        def decide(tp: TopicPartition, d: PartitionDecision) -> Election | None:
            if broker_id not in d.replicas or len(d.replicas) < 2:
                return None
            return controlled_shutdown_election(d.replicas, d.isr, d.leader, broker_id,
                                                self._eligible())

        changes = [tp for tp, d in self.states.items() if decide(tp, d) is not None]
        written = await self._write_decisions(changes, decide,
                                              f"controlled shutdown of broker {broker_id}")
        batch = self._new_batch()
        for tp, d in written.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.live], tp, d)
            batch.update_metadata(self.live, tp, d)
        sent.append(self._send(batch))
        # Kafka reports every replicated partition still led here, and the broker retries. A
        # partition whose other replicas are all dead cannot move however often it retries, so
        # it is logged but not reported (the last broker of a cluster would otherwise spend
        # every retry and back-off on it).
        stuck = sorted(tp for tp, d in self.states.items()
                       if d.leader == broker_id and len(d.replicas) > 1)
        remaining = [tp for tp in stuck
                     if any(r in eligible and r != broker_id for r in self.states[tp].replicas)]
        if len(stuck) > len(remaining):
            self.log.warn("controlled shutdown of broker {b}: {n} partitions have no other live "
                          "replica and stay led by it until it stops", b=broker_id,
                          n=len(stuck) - len(remaining))
        moved = sum(1 for tp in written if written[tp].leader != broker_id)
        self.log.info("controlled shutdown of broker {b}: {m} leaderships moved, {n} ISR "
                      "changes, {r} partitions still led by it", b=broker_id, m=moved,
                      n=len(written), r=len(remaining))
        return None, remaining


def _json_list(data: bytes) -> list[Any]:
    import json

    try:
        value = json.loads(data.decode() or "[]")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(str(e)) from e
    if not isinstance(value, list):
        raise ValueError("not a list")
    return value


async def _first_of(d: defer.Deferred, timeout_s: float, clock: Any) -> None:
    """Wait until ``d`` fires or ``timeout_s`` passes, whichever is first; ``d`` itself is left
    alone (not cancelled, its result untouched)."""
    done: defer.Deferred = defer.Deferred()

    def fire(result: Any = None) -> Any:
        if not done.called:
            done.callback(None)
        return result

    call = clock.callLater(timeout_s, fire)
    d.addBoth(fire)
    try:
        await done
    finally:
        if call.active():
            call.cancel()


async def _gather(aws: Sequence[Awaitable[Any]]) -> list[Any]:
    """Run awaitables concurrently (pipelined ZooKeeper requests) and return results in order."""
    ds = [defer.Deferred.fromCoroutine(a) if not isinstance(a, defer.Deferred) else a
          for a in aws]
    if not ds:
        return []
    return list(await defer.gatherResults(ds, consumeErrors=True))


def _live_endpoints(reg: paths.BrokerRegistration) -> tuple[tuple[str, str, int, int], ...]:
    """A registration's endpoints for UpdateMetadata, the inter-broker one (the one at the
    registration's ``host:port``) first."""
    protocols = dict(reg.protocol_map)
    found = [(e.listener, e.host, e.port, paths.SECURITY_PROTOCOL_IDS[protocols[e.listener]])
             for e in reg.endpoints]
    return tuple(sorted(found, key=lambda e: (e[1], e[2]) != (reg.host, reg.port)))
