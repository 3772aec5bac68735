"""The broker's side of a controlled shutdown (Kafka's ``KafkaServer.controlledShutdown``).

Before a broker stops it asks the active controller, with ControlledShutdown (key 7, v3), to move
leadership of its partitions to other in-sync replicas and to take it out of the ISRs, so clients
switch leaders at once instead of waiting for the controller to notice a missing registration.
The controller answers with the replicated partitions it could not move; the broker then retries,
up to ``controlled.shutdown.max.retries`` attempts in all, ``controlled.shutdown.retry.backoff.ms``
apart, and stops normally whatever the outcome (as Kafka does).

The controller is found through ``/controller`` and its ``/brokers/ids/[id]`` registration each
attempt (it may move between attempts). When this broker is the controller itself the request is
a direct call: going through its own listener would gain nothing.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer, task
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import NoNode, SessionState
from broker_core.rpc import connect_client
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import ClientCredential
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.topic_partition import TopicPartition

CONTROLLED_SHUTDOWN_VERSION = 3

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
