"""The broker's shut-down sequence, each step awaited (``MultiService`` would not wait between
children): a controlled shutdown bounded by the metadata session (no follower fetch starts
during it, and all stop after it), then stop listening, write the
coordinator's pending offsets and resign as coordinator, resign as controller, close the
metadata session (the registration goes), stop the replica manager, flush and checkpoint the
logs and mark the shutdown clean, stop the pools. Functions of the
:class:`~broker_core.broker.BrokerService` they stop.

Invariant: a log directory not loaded at start (refused: another broker's or cluster's) is
neither checkpointed nor marked clean.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet import defer

from broker_core.controller.shutdown import controlled_shutdown
from broker_core.metadata import SessionState

if TYPE_CHECKING:
    from broker_core.broker import BrokerService


async def controlled_shutdown_bounded(broker: BrokerService) -> None:
    """Ask the controller to move this broker's leaderships (controlled_shutdown), but give
    up as soon as the metadata session leaves CONNECTED: no controller can act then (the
    controller's decisions are metadata writes), and a controller paused for it holds the
    request until ``controller.socket.timeout.ms`` runs out (30 s: in quorum mode, the last
    brokers of a cluster stopped one after another lose the quorum's majority during their
    stop, and a supervisor's SIGKILL came first). ``controlled_shutdown`` checks the
    session before each attempt; this covers the attempt under way. The abandoned attempt
    is cancelled (it then finds the session suspended and returns, after its backoff)."""
    asked = defer.Deferred.fromCoroutine(controlled_shutdown(
        broker.broker_id, broker.registration_epoch, store=broker.store,
        local_controller=broker.controller, reactor=broker.reactor,
        max_retries=broker.config.controlled_shutdown_max_retries,
        backoff_s=broker.config.controlled_shutdown_retry_backoff_ms / 1000.0,
        timeout_s=broker.config.controller_socket_timeout_ms / 1000.0,
        credential=broker.cluster_credential.login, tls=broker.peer_tls))
    if not hasattr(broker.store, "add_state_listener"):
        await asked
        return
    suspended: defer.Deferred = defer.Deferred()
    seen: list[SessionState] = []

    def on_state(state: SessionState) -> None:
        if state is not SessionState.CONNECTED and not suspended.called:
            seen.append(state)
            suspended.callback(state)

    broker.store.add_state_listener(on_state)
    on_state(getattr(broker.store, "state", SessionState.CONNECTED))
    try:
        _, which = await defer.DeferredList([asked, suspended], fireOnOneCallback=True,
                                            consumeErrors=True)
    finally:
        broker.store.remove_state_listener(on_state)
    if which == 1:
        broker.log.warn("controlled shutdown of broker {b} abandoned: the metadata session is "
                      "{state} (no store leader), so no controller can act on it",
                      b=broker.broker_id, state=seen[0].name)
        asked.addErrback(lambda f: None)  # it ends on its own; nothing waits for it
        asked.cancel()
    else:
        suspended.cancel()


async def stop(broker: BrokerService) -> None:
    """The shut-down sequence of the module docstring, each step awaited; a part whose stop
    fails is logged and the rest still stop."""
    broker._pending_reregister = False
    broker.start_retries.stop()  # a start still waiting for the quorum gives up at once
    broker.log_dir_reporter.stop()
    broker.log.info("broker {b} shutting down", b=broker.broker_id)
    if broker.quorum is not None:
        # From here on the writes are the controlled shutdown's, resignations, offsets and
        # the session's close: each worth a short wait (a healthy quorum commits in
        # milliseconds), not a long one when the rest of the quorum has gone too.
        broker.quorum.begin_shutdown()
    if broker.config.controlled_shutdown_enable and broker.registration_epoch >= 0:
        # Before the listener closes: the controller's LeaderAndIsr that makes this broker
        # a follower arrives through it. Meanwhile no new follower fetch starts, and once it
        # is over (out of every ISR, or no controller could be asked) none goes on: a leaving
        # broker that fetched would be asked back into ISRs (ReplicaFetcherManager.begin_leaving).
        broker.replicas.fetchers.begin_leaving()
        await broker._controlled_shutdown()
        await broker.replicas.fetchers.stop()
    for bound in broker.listeners:
        await bound.port.stopListening()
    # Before the connections close: the coordinator writes its pending offsets and resigns
    # (closing its consumers' channels itself), so losing the channels fails no consumer.
    try:
        await broker.coordinator.stop()
    except Exception:
        broker.log.failure("consumer coordinator stop failed")
    for factory in broker.factories.values():
        factory.close_all()
    broker.heartbeats.stop()
    try:
        await broker.controller.stop()
    except Exception:
        broker.log.failure("controller stop failed")
    broker.users.stop()
    broker.dynamic_configs.stop()
    if broker.acl_cache is not None:
        broker.acl_cache.stop()
    try:
        await broker.store.stop()
    except Exception:
        broker.log.failure("metadata store close failed")
    if broker.quorum is not None:
        try:
            await broker.quorum.stop()
        except Exception:
            broker.log.failure("metadata quorum node stop failed")
    await broker.replicas.stop()
    if broker.metrics_port is not None:
        await broker.metrics_port.stopListening()
    from twisted.internet import threads

    if broker._logs_loaded:
        await threads.deferToThreadPool(broker.reactor, broker.io_pool,
                                        broker.log_manager.shutdown)
    broker.io_pool.stop()
    if broker._logs_loaded:
        broker.log.info("broker {b} stopped cleanly", b=broker.broker_id)
    else:
        broker.log.info("broker {b} stopped (its log directory was not opened)",
                        b=broker.broker_id)
