"""The broker's side of Kafka's group APIs (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups,
OffsetDelete): the per-resource ACL
questions Kafka's ``KafkaApis`` asks, then the coordinator shards' routing to each group's
shard (:class:`coordinator.shards.ShardedKafkaGroups`, over
:class:`coordinator.kafka_groups.KafkaGroupApis`).

Whole-request checks (READ on the request's group for JoinGroup, SyncGroup, Heartbeat,
LeaveGroup and OffsetCommit; DELETE on the request's group for OffsetDelete) are made by the
handler before dispatch (:mod:`broker_core.server.authorization`); here are the ones per named
resource: FindCoordinator DESCRIBE on each group key, OffsetCommit and OffsetDelete READ on
each topic, OffsetFetch DESCRIBE on each group and topic, ListGroups DESCRIBE on the cluster
(every group) or else on each group, DescribeGroups DESCRIBE on each group (and, when asked,
the operations the principal may do on each:
:func:`~broker_core.server.authorization.authorized_operations`), DeleteGroups DELETE on each
group.

A broker without a coordinator (handlers built alone in tests) answers each API's error with
COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from typing import Any

from broker_core.security.acl import AclOperation, ResourceType
from broker_core.server.authorization import Access, authorized_operations
from broker_core.wire.apis import SUPPORTED, ApiKey
from broker_core.wire.errors import ErrorCode

Op, RT = AclOperation, ResourceType

#: The APIs served here; each handler takes (header, body, access).
GROUP_APIS = frozenset({
    ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP,
    ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS,
    ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE})


class GroupApis:
    """See the module docstring. ``coordinator`` is the broker's
    :class:`~coordinator.shards.CoordinatorShards` (or None); ``cache`` its metadata cache
    (an OffsetCommit names partitions that exist)."""

    def __init__(self, coordinator: Any, cache: Any) -> None:
        self.coordinator = coordinator
        self.cache = cache

    def _none(self, key: ApiKey, header: Any, body: Any) -> dict | None:
        if self.coordinator is not None:
            return None
        return SUPPORTED[key].error_body(header.api_version, body,
                                         int(ErrorCode.COORDINATOR_NOT_AVAILABLE))

    def find_coordinator(self, header: Any, body: Any, access: Access) -> dict:
        none = self._none(ApiKey.FIND_COORDINATOR, header, body)
        if none is not None:
            return none
        return self.coordinator.kafka.find_coordinator(
            header.api_version, body, access.security.listener,
            allowed=lambda g: access.allows(Op.DESCRIBE, RT.GROUP, g))

    def join_group(self, header: Any, body: Any, access: Access) -> Any:
        none = self._none(ApiKey.JOIN_GROUP, header, body)
        if none is not None:
            return none
        return self.coordinator.kafka.join_group(
            header.api_version, body, client_id=header.client_id or "",
            client_host=f"/{access.security.peer_host}")

    def sync_group(self, header: Any, body: Any, access: Access) -> Any:
        none = self._none(ApiKey.SYNC_GROUP, header, body)
        return none if none is not None else self.coordinator.kafka.sync_group(
            header.api_version, body)

    def heartbeat(self, header: Any, body: Any, access: Access) -> dict:
        none = self._none(ApiKey.HEARTBEAT, header, body)
        return none if none is not None else self.coordinator.kafka.heartbeat(
            header.api_version, body)

    def leave_group(self, header: Any, body: Any, access: Access) -> dict:
        none = self._none(ApiKey.LEAVE_GROUP, header, body)
        return none if none is not None else self.coordinator.kafka.leave_group(
            header.api_version, body)

    def offset_commit(self, header: Any, body: Any, access: Access) -> Any:
        none = self._none(ApiKey.OFFSET_COMMIT, header, body)
        if none is not None:
            return none
        return self.coordinator.kafka.offset_commit(
            header.api_version, body,
            topic_allowed=lambda t: access.allows(Op.READ, RT.TOPIC, t),
            partition_exists=lambda t, p: self.cache.partition(t, p) is not None)

    def offset_fetch(self, header: Any, body: Any, access: Access) -> Any:
        none = self._none(ApiKey.OFFSET_FETCH, header, body)
        if none is not None:
            return none
        return self.coordinator.kafka.offset_fetch(
            header.api_version, body,
            group_allowed=lambda g: access.allows(Op.DESCRIBE, RT.GROUP, g),
            topic_allowed=lambda t: access.allows(Op.DESCRIBE, RT.TOPIC, t))

    def list_groups(self, header: Any, body: Any, access: Access) -> dict:
        none = self._none(ApiKey.LIST_GROUPS, header, body)
        if none is not None:
            return none
        every = access.allows_cluster(Op.DESCRIBE)
        return self.coordinator.kafka.list_groups(
            header.api_version, body,
            allowed=lambda g: every or access.allows(Op.DESCRIBE, RT.GROUP, g))

    def describe_groups(self, header: Any, body: Any, access: Access) -> dict:
        """v3+ ``include_authorized_operations``: each group answered without error (an
        unknown one, ``Dead``, included, as Kafka) carries the principal's operations on it."""
        none = self._none(ApiKey.DESCRIBE_GROUPS, header, body)
        if none is not None:
            return none
        answer = self.coordinator.kafka.describe_groups(
            header.api_version, body,
            allowed=lambda g: access.allows(Op.DESCRIBE, RT.GROUP, g))
        if header.api_version >= 3 and body.include_authorized_operations:
            for g in answer["groups"]:
                if g["error_code"] == 0:
                    g["authorized_operations"] = authorized_operations(
                        access, RT.GROUP, g["group_id"], True)
        return answer

    def delete_groups(self, header: Any, body: Any, access: Access) -> Any:
        none = self._none(ApiKey.DELETE_GROUPS, header, body)
        if none is not None:
            return none
        return self.coordinator.deletion.delete_groups(
            header.api_version, body,
            allowed=lambda g: access.allows(Op.DELETE, RT.GROUP, g))

    def offset_delete(self, header: Any, body: Any, access: Access) -> Any:
        none = self._none(ApiKey.OFFSET_DELETE, header, body)
        if none is not None:
            return none
        return self.coordinator.deletion.offset_delete(
            header.api_version, body,
            topic_allowed=lambda t: access.allows(Op.READ, RT.TOPIC, t),
            partition_exists=lambda t, p: self.cache.partition(t, p) is not None)
