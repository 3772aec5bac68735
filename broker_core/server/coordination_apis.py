"""Sluice's consumer-coordination APIs on a broker (docs/coordinator.md): ClusterMetadata,
RegisterConsumer, CommitOffsets, UnregisterConsumer, DescribeConsumerGroups, answered by the
broker's coordinator shards (:class:`coordinator.shards.CoordinatorShards`, which route each
group to its shard's coordinator), and Ping,
StopFetcher, StartFetcher, which travel the other way and are refused.

A broker without a coordinator (handlers built alone in tests) answers each with
COORDINATOR_NOT_AVAILABLE (ClusterMetadata still lists the brokers). The whole-request ACLs
(READ on the request's group) were checked before dispatch
(:mod:`broker_core.server.authorization`); here are the ones per topic and group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.logger import Logger

from broker_core.security.acl import ResourceType
from broker_core.server.api_helpers import listener_of
from broker_core.server.authorization import RULES, Access
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode


class CoordinationApis:
    """The APIs of the module docstring for one broker; :class:`RequestHandler` delegates to
    it. ``coordinator`` is the broker's coordinator shards (or None); ``brokers_on`` gives the
    live brokers that have a listener, with their address there (Metadata's list)."""

    log = Logger(namespace="sluice.server")

    def __init__(self, *, broker_id: int, coordinator: Any,
                 brokers_on: Callable[[str | None], list]) -> None:
        self.broker_id = broker_id
        self.coordinator = coordinator
        self.brokers_on = brokers_on

    def _no_coordinator(self, **extra: Any) -> dict:
        return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                "error_message": "this broker hosts no consumer coordinator", **extra}

    def cluster_metadata(self, header: Any, body: Any, access: Access) -> dict:
        listener = listener_of(access)
        if self.coordinator is None:
            return self._no_coordinator(coordinator_id=-1, brokers=[
                {"node_id": b.id, "host": host, "port": port}
                for b, (host, port) in self.brokers_on(listener)])
        return self.coordinator.cluster_metadata(header, body, listener=listener)

    def register_consumer(self, header: Any, body: Any, proto: Any) -> dict:
        if self.coordinator is None:
            return self._no_coordinator()
        return self.coordinator.register_consumer(header, body, proto)

    def commit_offsets(self, header: Any, body: Any, access: Access) -> Any:
        if self.coordinator is None:
            return self._no_coordinator(partitions=[])
        # The group's READ was checked before dispatch; each topic needs READ too (Kafka's
        # OffsetCommit).
        rule = RULES[ApiKey.FETCH]
        return self.coordinator.commit_offsets(
            header, body, principal=str(access.security.principal),
            topic_allowed=lambda topic: access.allows_topic(rule, topic))

    def unregister_consumer(self, header: Any, body: Any, access: Access) -> Any:
        if self.coordinator is None:
            return self._no_coordinator(partitions=[])
        # As CommitOffsets: the final offsets of a topic need READ on it.
        rule = RULES[ApiKey.FETCH]
        return self.coordinator.unregister_consumer(
            header, body, principal=str(access.security.principal),
            topic_allowed=lambda topic: access.allows_topic(rule, topic))

    def describe_consumer_groups(self, header: Any, body: Any, access: Access) -> dict:
        """Groups the principal may not DESCRIBE are left out of an all-groups answer and
        answered GROUP_AUTHORIZATION_FAILED, with nothing about them, when named."""
        if self.coordinator is None:
            return self._no_coordinator(groups=[])
        answer = self.coordinator.describe_consumer_groups(header, body)
        if access.unrestricted or answer.get("error_code"):
            return answer
        rule = RULES[ApiKey.DESCRIBE_CONSUMER_GROUPS]
        groups = []
        for g in answer["groups"]:
            if access.allows(rule.operation, ResourceType.GROUP, g["group_id"]):
                groups.append(g)
            elif body.groups is not None:
                groups.append({"group_id": g["group_id"], "error_code": int(rule.error),
                               "state": "dead", "generation_id": -1, "rebalance_failures": 0,
                               "members": [], "offsets": []})
        return {**answer, "groups": groups}

    def coordinator_only(self, header: Any, body: Any) -> dict:
        """Ping / StopFetcher / StartFetcher travel from the coordinator to a consumer on its
        channel; a broker that receives one was sent it by mistake."""
        name = ApiKey(header.api_key).name
        self.log.info("refused {api} sent to broker {b}: a coordinator-to-consumer request",
                      api=name, b=self.broker_id)
        return {"error_code": int(ErrorCode.INVALID_REQUEST),
                "consumer_id": getattr(body, "consumer_id", "") or "",
                "error_message": f"{name} is sent by the consumer coordinator to a consumer on "
                                 "its coordinator channel; a broker does not accept it"}
