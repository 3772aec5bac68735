"""Controlled shutdown, both sides: the broker's request (Kafka's
``KafkaServer.controlledShutdown``) and the controller's answer
(:class:`ControlledShutdownHandler`).

Before a broker stops it asks the active controller, with ControlledShutdown (key 7, v3), to move
leadership of its partitions to other in-sync replicas and to take it out of the ISRs, so clients
switch leaders at once instead of waiting for the controller to notice a missing registration.
The controller answers with the replicated partitions it could not move; the broker then retries,
up to ``controlled.shutdown.max.retries`` attempts in all, ``controlled.shutdown.retry.backoff.ms``
apart, and stops normally whatever the outcome (as Kafka does).

The controller is found through ``/controller`` and its ``/brokers/ids/[id]`` registration each
attempt (it may move between attempts). When this broker is the controller itself the request is
a direct call: going through its own listener would gain nothing.

The controller's side runs as a controller event: it marks the broker as shutting down (from
then until it leaves, no leadership or ISR place is given to it), moves leadership of every
partition it leads to another eligible ISR member with a new leader epoch, takes it out of every
ISR, and answers once the decisions are written and the brokers have acknowledged them (or
:data:`SHUTDOWN_ACK_WAIT_S` passed). Invariants: a request from a previous incarnation of the
broker (STALE_BROKER_EPOCH) or an unregistered one (BROKER_NOT_AVAILABLE) changes nothing; every
caller is answered once, NOT_CONTROLLER if the controller resigns first.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer, task
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.controller.batch import PartitionDecision
from broker_core.controller.election import Election, controlled_shutdown_election
from broker_core.controller.event_manager import NotController
from broker_core.controller.procedure import ControllerProcedure
from broker_core.metadata import NoNode, SessionState
from broker_core.rpc import connect_client
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import ClientCredential
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.topic_partition import TopicPartition

CONTROLLED_SHUTDOWN_VERSION = 3

#: Longest a ControlledShutdown answer waits for the brokers to acknowledge the moves it sent
#: (the moves are decided and written already; this only makes the hand-over smoother).
SHUTDOWN_ACK_WAIT_S = 5.0

log = Logger(namespace="sluice.broker")



async def _ask_once(broker_id: int, broker_epoch: int, store: Any, local_controller: Any,
                    reactor: Any, timeout_s: float, credential: ClientCredential | None,
                    tls: PeerTls | None) -> tuple[str | None, list[TopicPartition]]:
    """One ControlledShutdown round trip: an error name (or None) and the partitions not moved."""
    if local_controller is not None and local_controller.active:
        return await local_controller.controlled_shutdown(broker_id, broker_epoch)
    try:
        data, _ = await store.get(paths.CONTROLLER)
        controller_id = paths.ControllerRegistration.from_bytes(data).broker_id
        data, _ = await store.get(paths.broker(controller_id))
        reg = paths.BrokerRegistration.from_bytes(data, controller_id)
    except NoNode:
        return "NOT_CONTROLLER", []  # no controller at the moment (an election is under way)
    proto = await connect_client(reactor, reg.host, reg.port, f"broker-{broker_id}", timeout_s,
                                 credential=credential, tls=tls,
                                 peer_name=f"the controller (broker {controller_id})")
    try:
        d = proto.request(ApiKey.CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN_VERSION,
                          {"broker_id": broker_id, "broker_epoch": broker_epoch})
        d.addTimeout(timeout_s, reactor)
        resp = await d
    finally:
        proto.transport.loseConnection()
    error = None if resp.error_code == 0 else ErrorCode(resp.error_code).name
    return error, [(p.topic_name, p.partition_index) for p in resp.remaining_partitions]


async def controlled_shutdown(broker_id: int, broker_epoch: int, *, store: Any,
                              local_controller: Any, reactor: Any, max_retries: int,
                              backoff_s: float, timeout_s: float,
                              credential: ClientCredential | None = None,
                              tls: PeerTls | None = None) -> bool:
    """Ask the controller to move everything off this broker; True once it reports nothing
    left. Never raises: a failed controlled shutdown only makes the stop less smooth."""
    attempts = max(1, max_retries)
    for attempt in range(1, attempts + 1):
        if getattr(store, "state", SessionState.CONNECTED) is not SessionState.CONNECTED:
            # Without ZooKeeper there is no controller to ask, nor one that could act.
            log.warn("controlled shutdown of broker {b} skipped: no ZooKeeper session",
                     b=broker_id)
            return False
        # The whole round trip is bounded: a ZooKeeper read has no timeout of its own.
        d = defer.Deferred.fromCoroutine(_ask_once(broker_id, broker_epoch, store,
                                                   local_controller, reactor, timeout_s,
                                                   credential, tls))
        d.addTimeout(timeout_s, reactor)
        try:
            error, remaining = await d
        except Exception as e:  # refused/lost connections, timeouts, ZooKeeper errors
            error, remaining = f"{type(e).__name__}: {e}", []
        if error is None and not remaining:
            log.info("controlled shutdown of broker {b} succeeded (attempt {n})", b=broker_id,
                     n=attempt)
            return True
        what = error if error is not None else (
            f"{len(remaining)} partitions still led here: "
            + ", ".join(f"{t}-{p}" for t, p in remaining[:10]))
        log.warn("controlled shutdown of broker {b}, attempt {n} of {m}: {what}", b=broker_id,
                 n=attempt, m=attempts, what=what)
        if attempt < attempts:
            await task.deferLater(reactor, backoff_s, lambda: None)
    log.warn("controlled shutdown of broker {b} did not complete; stopping anyway",
             b=broker_id)
    return False


class ControlledShutdownHandler(ControllerProcedure):
    """The controller's side of ControlledShutdown. ``controller`` supplies ``active``,
    ``reactor``, ``events``, ``log``, the waiting callers (``_alter_waiters``, ``_answer``),
    ``_eligible``, ``_new_batch`` / ``_send``, and its ``context`` and ``writer``."""

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int
                                  ) -> tuple[str | None, list[TopicPartition]]:
        """Broker ``broker_id`` is about to stop: move leadership of every partition it leads to
        another live ISR member (new leader epoch), take it out of every ISR, and return an
        error name (NOT_CONTROLLER, STALE_BROKER_EPOCH, BROKER_NOT_AVAILABLE) or None with the
        replicated partitions (replication factor > 1, as Kafka) it still leads. From now until
        it leaves, no leadership or ISR place is given to it.

        Runs as a controller event; the answer comes once the decisions are written and the
        brokers have acknowledged them (or ``SHUTDOWN_ACK_WAIT_S`` passed)."""
        if not self.controller.active:
            return "NOT_CONTROLLER", []
        done: defer.Deferred = defer.Deferred()
        self.controller._alter_waiters.add(done)
        sent: list[defer.Deferred] = []

        async def event() -> None:
            if done.called:
                return
            try:
                result = await self.shutdown_broker(broker_id, broker_epoch, sent)
            except NotController:
                self.controller._answer(done, ("NOT_CONTROLLER", []))
                raise
            except Exception:
                self.log.failure("ControlledShutdown of broker {b} failed", b=broker_id)
                result = ("UNKNOWN_SERVER_ERROR", [])
            self.controller._answer(done, result)

        self.controller.events.enqueue("controlled_shutdown", event)
        top, remaining = await done
        if top is None and sent:
            acks = defer.DeferredList(sent, consumeErrors=True)
            acks.addTimeout(SHUTDOWN_ACK_WAIT_S, self.controller.reactor)
            try:
                await acks
            except defer.TimeoutError:
                pass
        return top, list(remaining)

    async def shutdown_broker(self, broker_id: int, broker_epoch: int,
                              sent: list[defer.Deferred]
                               ) -> tuple[str | None, list[TopicPartition]]:
        if not self.controller.active:
            return "NOT_CONTROLLER", []
        registered = self.ctx.live.get(broker_id)
        if registered is None:
            return "BROKER_NOT_AVAILABLE", []
        if broker_epoch >= 0 and registered.epoch != broker_epoch:
            return "STALE_BROKER_EPOCH", []
        self.ctx.shutting_down.add(broker_id)
        eligible = self.controller._eligible()

        def decide(tp: TopicPartition, d: PartitionDecision) -> Election | None:
            if broker_id not in d.replicas or len(d.replicas) < 2:
                return None
            return controlled_shutdown_election(d.replicas, d.isr, d.leader, broker_id,
                                                self.controller._eligible())

        changes = [tp for tp, d in self.ctx.states.items() if decide(tp, d) is not None]
        written = await self.writer.write_decisions(changes, decide,
                                                    f"controlled shutdown of broker {broker_id}")
        batch = self.controller._new_batch()
        for tp, d in written.items():
            batch.leader_and_isr([r for r in d.replicas if r in self.ctx.live], tp, d)
            batch.update_metadata(self.ctx.live, tp, d)
        sent.append(self.controller._send(batch))
        # Kafka reports every replicated partition still led here, and the broker retries. A
        # partition whose other replicas are all dead cannot move however often it retries, so
        # it is logged but not reported (the last broker of a cluster would otherwise spend
        # every retry and back-off on it).
        stuck = sorted(tp for tp, d in self.ctx.states.items()
                       if d.leader == broker_id and len(d.replicas) > 1)
        remaining = [tp for tp in stuck
                     if any(r in eligible and r != broker_id for r in self.ctx.states[tp].replicas)]
        if len(stuck) > len(remaining):
            self.log.warn("controlled shutdown of broker {b}: {n} partitions have no other live "
                          "replica and stay led by it until it stops", b=broker_id,
                          n=len(stuck) - len(remaining))
        moved = sum(1 for tp in written if written[tp].leader != broker_id)
        self.log.info("controlled shutdown of broker {b}: {m} leaderships moved, {n} ISR "
                      "changes, {r} partitions still led by it", b=broker_id, m=moved,
                      n=len(written), r=len(remaining))
        return None, remaining
