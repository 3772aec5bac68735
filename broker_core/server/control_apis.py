"""The inter-broker APIs a broker serves (the control plane, docs/design.md#controller-commands):
the controller's LeaderAndIsr, StopReplica and UpdateMetadata to every broker; AlterPartition,
ControlledShutdown and BrokerHeartbeat from brokers to the controller (answered by this
broker's controller when it is the active one, NOT_CONTROLLER otherwise); and a follower's
OffsetForLeaderEpoch to a leader.

KIP-380: a controller command addressed to an earlier incarnation of this broker is refused
with STALE_BROKER_EPOCH and changes nothing, and an UpdateMetadata of an older controller
epoch with STALE_CONTROLLER_EPOCH. All but OffsetForLeaderEpoch are the control plane, served
to brokers only (:mod:`broker_core.server.authorization`); so is a follower's
OffsetForLeaderEpoch (``replica_id >= 0``), while a client's asks DESCRIBE per topic here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet import defer

from broker_core.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState
from broker_core.server.api_helpers import denied_topics, error_code
from broker_core.server.authorization import Access
from broker_core.server.metadata_waits import MetadataWaits
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode


class ControlApis:
    """The APIs of the module docstring for one broker; :class:`RequestHandler` delegates to
    it. ``broker_epoch`` gives this broker's registration epoch (negative until registered,
    ``when_registered`` fires then); ``load_topic_configs`` reads the configs of topics the
    broker does not know yet (LeaderAndIsr awaits it); ``on_metadata_update`` is told the
    topics an UpdateMetadata changed; ``controller`` is the broker's controller (None: answers
    NOT_CONTROLLER)."""

    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        cache: MetadataCache,
        waits: MetadataWaits,
        broker_epoch: Callable[[], int],
        when_registered: Callable[[], defer.Deferred] | None,
        load_topic_configs: Callable[[set[str]], Awaitable[None]] | None,
        on_metadata_update: Callable[[set[str]], None] | None,
        controller: Any,
    ) -> None:
        self.replicas = replicas
        self.cache = cache
        self.waits = waits
        self.broker_epoch = broker_epoch
        self.when_registered = when_registered
        self.load_topic_configs = load_topic_configs
        self.on_metadata_update = on_metadata_update
        self.controller = controller

    async def _stale_broker_epoch(self, body: Any) -> bool:
        """KIP-380: a command addressed to an earlier incarnation of this broker (an older czxid
        of its registration) is refused. While we register, our own epoch is not known yet, so
        the command waits for it (the controller learns of us only from the registration)."""
        if self.broker_epoch() < 0 and self.when_registered is not None:
            await self.when_registered()
        return 0 <= body.broker_epoch < self.broker_epoch()

    async def leader_and_isr(self, header: Any, body: Any) -> dict:
        if await self._stale_broker_epoch(body):
            return {"error_code": int(ErrorCode.STALE_BROKER_EPOCH), "topics": []}
        states = []
        for t in body.topic_states:
            for s in t.partition_states:
                states.append((t.topic_name, s.partition_index, LeaderAndIsrState(
                    s.leader, s.leader_epoch, tuple(s.isr), tuple(s.replicas),
                    s.controller_epoch, s.partition_epoch)))
        leaders = {b.broker_id: (b.host_name, b.port) for b in body.live_leaders}
        if self.load_topic_configs is not None:
            await self.load_topic_configs({t.topic_name for t in body.topic_states})
        result = self.replicas.apply_leader_and_isr(body.controller_epoch, states,
                                                    full=body.type == 1, leaders=leaders)
        if isinstance(result, str):
            return {"error_code": error_code(result), "topics": []}
        errors = [{"partition_index": p, "error_code": error_code(e)}
                  for (_, p), e in result.items() if e is not None]
        return {"error_code": 0, "topics": [{"partition_errors": errors}] if errors else []}

    async def stop_replica(self, header: Any, body: Any) -> dict:
        if await self._stale_broker_epoch(body):
            return {"error_code": int(ErrorCode.STALE_BROKER_EPOCH), "partition_errors": []}
        parts = [(t.topic_name, s.partition_index, s.delete_partition)
                 for t in body.topic_states for s in t.partition_states]
        result = self.replicas.apply_stop_replica(body.controller_epoch, parts)
        if isinstance(result, str):
            return {"error_code": error_code(result), "partition_errors": []}
        return {"error_code": 0, "partition_errors": [
            {"topic_name": t, "partition_index": p, "error_code": error_code(e)}
            for (t, p), e in result.items()]}

    def offset_for_leader_epoch(self, header: Any, body: Any, access: Access) -> dict:
        """The leader-generation request: where does ``leader_epoch`` end in the leader's
        log? Answered only by the leader, at the epoch the follower believes current."""
        denied = denied_topics(access, ApiKey.OFFSET_FOR_LEADER_EPOCH,
                               (t.topic for t in body.topics))
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                if t.topic in denied:
                    parts.append({"error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                  "partition": p.partition, "leader_epoch": -1,
                                  "end_offset": -1})
                    continue
                part, error = self.replicas.leader_partition(t.topic, p.partition,
                                                             p.current_leader_epoch)
                if part is None:
                    parts.append({"error_code": error_code(error), "partition": p.partition,
                                  "leader_epoch": -1, "end_offset": -1})
                    continue
                epoch, end = part.log.leader_epochs.end_offset_for_epoch(p.leader_epoch)
                parts.append({"error_code": 0, "partition": p.partition, "leader_epoch": epoch,
                              "end_offset": end})
            topics.append({"topic": t.topic, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    async def alter_partition(self, header: Any, body: Any) -> dict:
        """AlterIsr reaching this broker: answered by its controller if active."""
        items = [(t.topic_name, p.partition_index, p.leader_epoch, tuple(p.new_isr),
                  p.partition_epoch) for t in body.topics for p in t.partitions]
        if self.controller is None:
            top, results = "NOT_CONTROLLER", {}
        else:
            top, results = await self.controller.alter_isr(body.broker_id, body.broker_epoch,
                                                           items)
        if top is not None:
            return {"throttle_time_ms": 0, "error_code": error_code(top), "topics": []}
        topics: dict[str, list[dict]] = {}
        for (topic, index), (error, decision) in results.items():
            entry = {"partition_index": index, "error_code": error_code(error), "leader_id": -1,
                     "leader_epoch": -1, "isr": [], "leader_recovery_state": 0,
                     "partition_epoch": -1}
            if decision is not None:
                entry.update(leader_id=decision.leader, leader_epoch=decision.leader_epoch,
                             isr=list(decision.isr), partition_epoch=decision.zk_version)
            topics.setdefault(topic, []).append(entry)
        return {"throttle_time_ms": 0, "error_code": 0, "topics": [
            {"topic_name": t, "partitions": ps} for t, ps in topics.items()]}

    def broker_heartbeat(self, header: Any, body: Any) -> dict:
        """A broker tells the controller (this broker, if active) it is alive and reachable."""
        if self.controller is None:
            error, fenced = "NOT_CONTROLLER", True
        else:
            error, fenced = self.controller.broker_heartbeat(body.broker_id, body.broker_epoch)
        return {"throttle_time_ms": 0, "error_code": error_code(error), "is_caught_up": False,
                "is_fenced": fenced, "should_shut_down": False}

    async def controlled_shutdown(self, header: Any, body: Any) -> dict:
        """A broker about to stop asks the controller (this broker, if active) to move its
        leaderships away; the answer lists the partitions it still leads."""
        if self.controller is None:
            top, remaining = "NOT_CONTROLLER", []
        else:
            top, remaining = await self.controller.controlled_shutdown(body.broker_id,
                                                                       body.broker_epoch)
        return {"error_code": error_code(top), "remaining_partitions": [
            {"topic_name": t, "partition_index": p} for t, p in remaining]}

    async def update_metadata(self, header: Any, body: Any) -> dict:
        if await self._stale_broker_epoch(body):
            return {"error_code": int(ErrorCode.STALE_BROKER_EPOCH)}
        if body.controller_epoch < self.cache.controller_epoch:
            return {"error_code": int(ErrorCode.STALE_CONTROLLER_EPOCH)}
        brokers = []
        for b in body.live_brokers:
            if b.endpoints:
                # The controller sends the inter-broker listener's endpoint first.
                ep = b.endpoints[0]
                brokers.append(BrokerEndpoint(
                    b.id, ep.host, ep.port, b.rack,
                    tuple((e.listener, e.host, e.port) for e in b.endpoints)))
        states = [
            (t.topic_name, s.partition_index, PartitionState(
                s.leader, s.leader_epoch, tuple(s.isr), tuple(s.replicas),
                tuple(s.offline_replicas), s.zk_version))
            for t in body.topic_states for s in t.partition_states
        ]
        changed = self.cache.apply(body.controller_id, body.controller_epoch, brokers, states)
        if self.on_metadata_update is not None:
            self.on_metadata_update(changed)
        self.waits.changed()
        return {"error_code": 0}
