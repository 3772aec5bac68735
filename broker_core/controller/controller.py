"""The controller (docs/design.md): one broker at a time, elected through ``/controller``, decides
partition leadership, publishes each decision in ZooKeeper and pushes it to brokers by RPC.

Event model (Kafka's single controller event thread, KAFKA-5027, in
:mod:`broker_core.controller.event_manager`): ZooKeeper watches only enqueue an event; events run
one at a time, in order, on the reactor, and each handler re-reads ZooKeeper when it runs rather
than trusting the watch payload. A handler is an ``async`` method.

Fencing (:mod:`broker_core.controller.writer`): every ZooKeeper write the controller makes is a
``multi`` that starts with a ``check`` of ``/controller_epoch`` at the version this controller
set when it was elected (KAFKA-6082), so a deposed controller's writes fail atomically.
LeaderAndISR znodes are also updated conditionally on their own version. When the epoch check
fails the controller resigns.

The Controller itself is the coordinator: it stands for election, follows the session, loads
the :class:`~broker_core.controller.context.ControllerContext` on a failover, owns the channels
to the brokers and the leadership rules the procedures share, and dispatches watches and broker
requests to one module per procedure family: :mod:`~broker_core.controller.broker_failover`,
:mod:`~broker_core.controller.isr_changes`, :mod:`~broker_core.controller.topic_deletion`,
:mod:`~broker_core.controller.partition_changes`, :mod:`~broker_core.controller.reassignment`,
:mod:`~broker_core.controller.preferred_election`, :mod:`~broker_core.controller.shutdown`
(controlled shutdown) and :mod:`~broker_core.controller.log_dir_failure`.

Election and session (:mod:`broker_core.leader_election`, the recipe the consumer coordinator
shares; its steps run as controller events): on SUSPENDED the controller stops acting (queued
events wait); on LOST it drops its queued events and resigns (its ``/controller`` node is gone);
when the session is CONNECTED again it stands for election if ``/controller`` is vacant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.controller import log_dir_failure
from broker_core.controller.batch import LiveBroker, PartitionDecision, RequestBatch, first_of
from broker_core.controller.broker_failover import BrokerFailover
from broker_core.controller.context import ControllerContext
from broker_core.controller.election import Election, offline_leader
from broker_core.controller.event_manager import EventManager
from broker_core.controller.fencing import FencingAgent
from broker_core.controller.isr_changes import AlterIsrItem, AlterIsrResult, IsrChanges
from broker_core.controller.partition_changes import PartitionChanges
from broker_core.controller.preferred_election import PreferredElection
from broker_core.controller.reassignment import Reassignment
from broker_core.controller.shutdown import ControlledShutdownHandler
from broker_core.controller.topic_deletion import TopicDeletion
from broker_core.controller.writer import ControllerWriter
from broker_core.leader_election import LeaderElection, Role, Seat, Step
from broker_core.rpc import BrokerChannel
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import ClientCredential
from broker_core.wire.topic_partition import TopicPartition

#: Longest the controller waits for the brokers to acknowledge new leaderships before it goes on
#: with the rest of a failover (ISR shrinks, the full state to every broker). Leaders are what
#: clients wait for; the rest is bookkeeping that would otherwise queue in front of them on
#: the brokers' reactors. A broker that does not answer in time still gets everything after.
LEADERS_FIRST_WAIT_S = 1.0

#: The controller's seat and epoch (:mod:`broker_core.leader_election`).
CONTROLLER_SEAT = Seat(
    title="controller", path=paths.CONTROLLER, epoch_path=paths.CONTROLLER_EPOCH,
    registration=paths.ControllerRegistration,
    owner_of=lambda data: paths.ControllerRegistration.from_bytes(data).broker_id)


class EventSteps:
    """The election's steps (:class:`~broker_core.leader_election.Steps`) as controller
    events, so they are ordered with every other event. :meth:`run` (used by ``stop()``) runs a
    step directly: a suspended queue would never run it."""

    def __init__(self, events: EventManager) -> None:
        self.events = events

    def submit(self, name: str, step: Step) -> None:
        self.events.enqueue(name, step)

    def run(self, step: Step) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(step())


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
        #: The serial event queue every action of this controller runs through.
        self.events = EventManager(self, reactor)
        #: The controller's candidacy for ``/controller`` (standing, role, epoch, session).
        self.election = LeaderElection(
            broker_id, store, CONTROLLER_SEAT, EventSteps(self.events),
            on_elected=self._on_elected, on_resigned=self._on_resigned,
            on_suspended=self._on_suspended, on_lost=self._on_session_lost,
            may_stand=self._may_stand, clock=reactor, log=self.log)
        self._watches: list[Any] = []
        # AlterIsr callers waiting for their event; answered NOT_CONTROLLER if we resign first.
        self._alter_waiters: set[defer.Deferred] = set()
        #: Fencing of brokers the controller cannot hear from (broker_core.controller.fencing);
        #: None: brokers are judged by their metadata-store registrations only.
        self.fencing: FencingAgent | None = None
        if session_timeout_s is not None:
            self.fencing = FencingAgent(
                self, heartbeat_interval_s=heartbeat_interval_s or session_timeout_s / 3,
                session_timeout_s=session_timeout_s, clock=reactor)
        #: What this controller knows of the cluster (loaded when it is elected).
        self.context = ControllerContext(store)
        #: Every write this controller makes (fenced multis, leader/ISR decisions).
        self.writer = ControllerWriter(self, self.context)
        #: Broker failures, restarts and returns (and leaderless partitions).
        self.broker_failover = BrokerFailover(self)
        #: AlterIsr requests from partition leaders.
        self.isr_changes = IsrChanges(self)
        #: Topic deletion (``/admin/delete_topics``).
        self.topic_deletion = TopicDeletion(self)
        #: New topics, and partitions added and removed.
        self.partition_changes = PartitionChanges(self)
        #: The reassignment agent (``/admin/reassign_partitions``).
        self.reassignment = Reassignment(self)
        #: Preferred-leader elections (``/admin/preferred_replica_election``).
        self.preferred_election = PreferredElection(self)
        #: ControlledShutdown requests from brokers about to stop.
        self.controlled_shutdown_handler = ControlledShutdownHandler(self)
        self._reset_context()

    def _reset_context(self) -> None:
        self.context.reset()
        self.channels: dict[int, Any] = {}
        self.partition_changes.forget_watches()

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether this broker is the controller. Setting it installs or drops the role without
        an election (test harnesses and benchmarks set up a controller so)."""
        return self.election.active

    @active.setter
    def active(self, value: bool) -> None:
        self.election.role = Role.LEADER if value else Role.FOLLOWER

    @property
    def epoch(self) -> int:
        """The controller epoch this broker won (meaningful while active)."""
        return self.election.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.election.epoch = value

    @property
    def epoch_zk_version(self) -> int:
        """The ``/controller_epoch`` version every fenced write checks."""
        return self.election.epoch_version

    @epoch_zk_version.setter
    def epoch_zk_version(self, value: int) -> None:
        self.election.epoch_version = value

    def start(self) -> None:
        self.election.start()

    async def stop(self) -> None:
        """Resign (deleting ``/controller`` if it is ours) and stop watching."""
        await self.election.stop()

    # -- watches and session (they only enqueue events) ----------------------------------------

    def _active_only(self, name: str, fn: Callable[[], Awaitable[None]]) -> Callable[..., None]:
        """A watch callback that enqueues ``fn`` while we are the active controller."""

        def callback(*_: Any) -> None:
            if self.active:
                self.events.enqueue(name, fn)

        return callback

    def _on_suspended(self, paused: bool) -> None:
        """The session is SUSPENDED (queued events wait) or back (they run)."""
        if paused:
            self.events.suspend()
        else:
            self.events.resume()
            self.events.drain()

    def _on_session_lost(self) -> None:
        self.events.clear()
        self._answer_waiters_not_controller()  # their events were just dropped

    # -- election (docs/design.md#controller-failover) -------------------------------------------

    def _may_stand(self) -> bool:
        # While fencing abstains the others cannot reach us: let one of them lead (see
        # _on_abstention_over).
        return self.fencing is None or self.fencing.may_stand()

    async def _elect(self) -> None:
        await self.election.elect()

    async def _resign(self) -> None:
        await self.election.resign()

    async def _on_elected(self, epoch: int, epoch_version: int) -> None:
        if self.metrics is not None:
            self.metrics.active_controller.set(1)
            self.metrics.controller_epoch.set(epoch)
        await self._on_controller_failover()

    async def _on_resigned(self) -> None:
        self._answer_waiters_not_controller()
        for w in self._watches:
            w.cancel()
        self._watches.clear()
        self.partition_changes.cancel_watches()
        self.reassignment.cancel_timer()
        self.events.cancel_delayed()
        self.broker_failover.forget()
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
        if self.election.standing and not self.active:
            self.election.elect_soon()

    async def _on_controller_failover(self) -> None:
        """Failover: load the state, tell every broker everything (INIT), then catch up on what
        happened while there was no controller."""
        await self._load_context()
        if self.fencing is not None:
            self.fencing.start(self.context.live)
            await self.fencing.inherit()
        # Partitions whose leader died with (or while there was no) controller get a leader
        # before the full state goes out: they are what clients wait for, and the INIT below
        # names every partition to every broker.
        judge = self.broker_failover.judge_live(())
        dead_leaders, _, shrinks = self.broker_failover.classify_live(judge)
        if dead_leaders:
            written = await self.writer.write_decisions(dead_leaders, judge, "dead leaders")
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
        await self.writer.write_decisions(shrinks, judge, "ISR shrinks")
        batch = self._new_batch()
        for b in self.context.live:
            batch.full_leader_and_isr(b)
        for tp, d in self.context.states.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.context.live], tp, d)
            batch.update_metadata(self.context.live, tp, d)
        batch.update_metadata(self.context.live)
        self._send(batch)
        self._register_watches()
        # Steps 5-9: broker changes, leaderless partitions, admin requests. Each is idempotent and
        # re-reads ZooKeeper, so running them now is safe even if their watches also fire.
        await self.broker_failover.on_broker_change()
        await log_dir_failure.on_failover(self)
        await self.partition_changes.on_topic_change()
        await self.broker_failover.elect_offline_partitions(self._new_batch(), send=True)
        await self.partition_changes.on_partitions_add()
        await self.partition_changes.on_partitions_remove()
        await self.topic_deletion.on_delete_topics()
        # Resume reassignments from ZooKeeper (the topic znodes say which
        # replicas were being added), then any pending preferred-leader election.
        await self.reassignment.on_partitions_reassigned()
        await self.preferred_election.on_preferred_election()
        # A topic created while no controller ran (its creator wrote the assignment, nobody
        # watched) was loaded above with its assignment but no partition state; the topic
        # watch above does not see it as new. Elect its first leaders now.
        unstarted = [(t, p) for t, parts in sorted(self.context.assignments.items())
                     for p in sorted(parts) if (t, p) not in self.context.states]
        if unstarted:
            self.log.info("controller failover: {n} partitions of topics created while no "
                          "controller ran get their first leaders", n=len(unstarted))
            batch = self._new_batch()
            await self.partition_changes.init_leaders(unstarted, batch)
            self._send(batch)

    def _register_watches(self) -> None:
        s, on = self.store, self._active_only
        failover, changes = self.broker_failover, self.partition_changes
        self._watches = [
            s.watch_children(paths.BROKER_IDS, on("broker_change", failover.on_broker_change)),
            s.watch_children(paths.TOPICS, on("topic_change", changes.on_topic_change)),
            s.watch_children(paths.DELETE_TOPICS,
                             on("delete_topics", self.topic_deletion.on_delete_topics)),
            s.watch_children(paths.PARTITIONS_ADD, on("partitions_add", changes.on_partitions_add)),
            s.watch_children(paths.PARTITIONS_REMOVE,
                             on("partitions_remove", changes.on_partitions_remove)),
            s.watch_data(paths.REASSIGN_PARTITIONS,
                         on("partitions_reassigned", self.reassignment.on_partitions_reassigned)),
            s.watch_data(paths.PREFERRED_REPLICA_ELECTION,
                         on("preferred_election", self.preferred_election.on_preferred_election)),
            s.watch_children(paths.LOG_DIR_EVENT_NOTIFICATION,
                             on("log_dir_event", lambda: log_dir_failure.on_log_dir_event(self))),
        ]

    # -- state loading ---------------------------------------------------------------------------

    async def _load_context(self) -> None:
        self._reset_context()
        ids = await self.context.children(paths.BROKER_IDS)
        self.context.live = await self.context.read_brokers(ids)
        for b in self.context.live.values():
            self._open_channel(b)
        topics = await self.context.children(paths.TOPICS)
        await self.context.load_topics(topics)
        self.log.info("controller loaded {n} brokers, {t} topics, {p} partitions",
                      n=len(self.context.live), t=len(self.context.assignments),
                      p=len(self.context.states))

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
        return batch.send(self.context.live, self.channels.__getitem__)

    async def _send_leaders_first(self, written: dict[TopicPartition, PartitionDecision],
                                  later: Collection[int] = ()) -> None:
        """Send the new leaderships in ``written`` (LeaderAndIsr to their live replicas,
        UpdateMetadata to every live broker) and wait until the brokers answered or
        :data:`LEADERS_FIRST_WAIT_S` passed, whichever is first. Brokers in ``later`` (new or
        restarted ones, whose full state follows) get nothing now: a partial UpdateMetadata
        would leave a broker with an empty cache answering clients with a few partitions."""
        if not written:
            return
        now = [b for b in self.context.live if b not in later]
        batch = self._new_batch()
        for tp, d in written.items():
            batch.leader_and_isr(
                [r for r in d.replicas if r in self.context.live and r not in later], tp, d)
            batch.update_metadata(now, tp, d)
        await first_of(self._send(batch), LEADERS_FIRST_WAIT_S, self.reactor)

    # -- leadership rules shared by the procedures --------------------------------------------

    def _offline_election(self, tp: TopicPartition, d: PartitionDecision,
                          live: Collection[int]) -> Election:
        """A new leader for a partition whose leader is gone. Brokers in a controlled shutdown
        are passed over (their leaderships are being moved away) unless one of them is the only
        way to keep the partition online: it still serves until it stops."""
        unclean = self.unclean_leader_election(tp[0])
        live = self.context.offline_replicas.usable(tp, live)  # not a replica on a failed log dir
        fenced = self._fenced_brokers()
        live = [b for b in live if b not in fenced]
        el = offline_leader(d.replicas, d.isr,
                            [b for b in live if b not in self.context.shutting_down],
                            unclean_allowed=unclean)
        if el.leader == -1 and self.context.shutting_down:
            el = offline_leader(d.replicas, d.isr, live, unclean_allowed=unclean)
        return el

    def _eligible(self) -> set[int]:
        """Live brokers that may be given leadership or an ISR place (not shutting down, not
        fenced)."""
        fenced = self._fenced_brokers()
        ctx = self.context
        return {b for b in ctx.live if b not in ctx.shutting_down and b not in fenced}

    def _usable_live(self) -> dict[int, LiveBroker]:
        """The live brokers that are not fenced: those a broker change judges partitions by (a
        fenced broker counts as dead)."""
        fenced = self._fenced_brokers()
        return {b: lb for b, lb in self.context.live.items() if b not in fenced}

    def _fenced_brokers(self) -> Collection[int]:
        """Registered brokers fenced for want of heartbeats: treated as dead for leadership and
        ISR places until they are heard from again."""
        return () if self.fencing is None else self.fencing.liveness.fenced

    # -- requests from brokers (each answered from a controller event) ---------------------------

    def broker_heartbeat(self, broker_id: int, broker_epoch: int) -> tuple[str | None, bool]:
        """BrokerHeartbeat: an error name or None, and whether the broker is fenced."""
        if self.fencing is None:
            return (None, False) if self.active else ("NOT_CONTROLLER", True)
        return self.fencing.heartbeat(broker_id, broker_epoch)

    async def alter_isr(self, broker_id: int, broker_epoch: int, items: Sequence[AlterIsrItem]
                        ) -> AlterIsrResult:
        """AlterIsr from leader ``broker_id``: see :meth:`IsrChanges.alter_isr`."""
        return await self.isr_changes.alter_isr(broker_id, broker_epoch, items)

    def _answer(self, waiter: defer.Deferred, result: Any) -> None:
        """Answer an AlterIsr or ControlledShutdown caller once (a resignation may answer
        first)."""
        self._alter_waiters.discard(waiter)
        if not waiter.called:
            waiter.callback(result)

    def _answer_waiters_not_controller(self) -> None:
        for waiter in list(self._alter_waiters):
            self._answer(waiter, ("NOT_CONTROLLER", {}))

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int
                                  ) -> tuple[str | None, list[TopicPartition]]:
        """ControlledShutdown from broker ``broker_id``: see
        :meth:`~broker_core.controller.shutdown.ControlledShutdownHandler.controlled_shutdown`."""
        return await self.controlled_shutdown_handler.controlled_shutdown(broker_id, broker_epoch)

