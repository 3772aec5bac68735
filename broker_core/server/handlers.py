"""Request dispatch: the one entry point of a broker's client listeners, from a decoded request
to its response body.

:class:`RequestHandler` authorizes each request (the gates of
:mod:`broker_core.server.authorization`: the closed control plane, the user APIs, the
whole-request ACLs), then hands it to the API's handler, with the connection or its
:class:`~broker_core.server.authorization.Access` when the API needs them. The handlers live
in one module per family of APIs, to which the dispatch table delegates:

- :mod:`~broker_core.server.metadata_apis`: ApiVersions, Metadata;
- :mod:`~broker_core.server.data_apis`: Produce, Fetch, ListOffsets;
- :mod:`~broker_core.server.control_apis`: the inter-broker APIs (LeaderAndIsr, StopReplica,
  UpdateMetadata, AlterPartition, ControlledShutdown, BrokerHeartbeat, OffsetForLeaderEpoch);
- :mod:`~broker_core.server.topic_admin_apis`: CreateTopics, DeleteTopics, CreatePartitions;
- :mod:`~broker_core.server.acl_apis`: DescribeAcls, CreateAcls, DeleteAcls;
- :mod:`~broker_core.server.cluster_admin`, :mod:`~broker_core.server.group_apis`,
  :mod:`~broker_core.server.producer_ids`;
- :mod:`~broker_core.server.config_admin` and :mod:`~broker_core.server.describe_configs`,
  through three adapters here that give them the connection's ACL questions;
- :mod:`~broker_core.server.user_admin`, whose two handlers are mixed into the handler;
- :mod:`~broker_core.server.coordination_apis`: Sluice's consumer-coordination APIs.

Handlers never touch sockets or bytes (the protocol does) and never block: anything that waits
(a long-poll fetch, an acks=all produce, a topic creation waiting for the controller) returns a
Deferred. Errors a client can act on are answered with Kafka's error codes, per partition where the
protocol allows it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core.metadata_cache import MetadataCache
from broker_core.replica.manager import ReplicaManager
from broker_core.security.acl import CLUSTER_NAME, AclOperation, Authorizer
from broker_core.security.principal import plaintext
from broker_core.server.acl_apis import AclApis
from broker_core.server.authorization import (
    RULES,
    USER_ADMIN,
    Access,
    Scope,
    is_control_plane,
    may_manage_users,
)
from broker_core.server.cluster_admin import ClusterAdminApis
from broker_core.server.config_admin import ConfigAdmin, config_refusal
from broker_core.server.control_apis import ControlApis
from broker_core.server.coordination_apis import CoordinationApis
from broker_core.server.data_apis import DataApis
from broker_core.server.describe_configs import describe_configs
from broker_core.server.group_apis import GROUP_APIS, GroupApis
from broker_core.server.metadata_apis import MetadataApis
from broker_core.server.metadata_waits import MetadataWaits
from broker_core.server.producer_ids import InitProducerIdApi, ProducerIdManager
from broker_core.server.topic_admin_apis import TopicAdminApis
from broker_core.server.user_admin import UserAdminApis
from broker_core.wire.apis import SUPPORTED, ApiKey
from broker_core.wire.errors import ErrorCode

#: APIs whose handler also gets the connection (RegisterConsumer turns it into a channel; the
#: user APIs check its principal).
_WITH_CONNECTION = frozenset({ApiKey.REGISTER_CONSUMER, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                              ApiKey.ALTER_USER_SCRAM_CREDENTIALS})
#: APIs whose handler checks ACLs per topic or group and so gets the connection's
#: :class:`~broker_core.server.authorization.Access`.
_WITH_ACCESS = frozenset({
    ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA,
    ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS,
    ApiKey.CREATE_PARTITIONS, ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.COMMIT_OFFSETS,
    ApiKey.UNREGISTER_CONSUMER, ApiKey.DESCRIBE_CONSUMER_GROUPS, ApiKey.API_VERSIONS,
    ApiKey.CLUSTER_METADATA, ApiKey.DELETE_RECORDS, ApiKey.DESCRIBE_CLUSTER,
    ApiKey.INIT_PRODUCER_ID, *GROUP_APIS})


class RequestHandler(UserAdminApis):
    """Dispatches decoded requests of one broker; see the module docstring."""

    log = Logger(namespace="sluice.server")

    def __init__(
        self,
        *,
        broker_id: int,
        config: Any,
        cache: MetadataCache,
        replicas: ReplicaManager,
        store: Any,
        clock: Any,
        broker_epoch: Callable[[], int],
        cluster_id: str = "sluice",
        on_metadata_update: Callable[[set[str]], None] | None = None,
        load_topic_configs: Callable[[set[str]], Awaitable[None]] | None = None,
        controller: Any = None,
        when_registered: Callable[[], defer.Deferred] | None = None,
        coordinator: Any = None,
        authorizer: Authorizer | None = None,
        control_plane_closed: bool = False,
        super_users: frozenset[str] = frozenset(),
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.cache = cache
        self.store = store
        #: The cluster id as Metadata and DescribeCluster answer it; the broker sets it once it
        #: has read it from the metadata store.
        self.cluster_id = cluster_id
        #: The ACLs (broker_core.security.acl); None: no authorizer, every client may do
        #: everything but the control plane (Kafka without ``authorizer.class.name``).
        self.authorizer = authorizer
        #: When on, the control plane (broker_core.server.authorization.CONTROL_PLANE and a
        #: follower's Fetch and OffsetForLeaderEpoch) is served only to connections that proved
        #: the cluster credential. Every broker turns it on (its brokers log in to each other);
        #: off only for handlers built alone in tests.
        self.control_plane_closed = control_plane_closed
        #: ``super.users``: without an authorizer, the principals (besides brokers) that may
        #: use the user APIs (broker_core.server.authorization.may_manage_users).
        self.super_users = super_users
        #: Fired after every UpdateMetadata; Metadata and the topic APIs wait on it.
        self.metadata_waits = MetadataWaits(clock)
        self.metadata_apis = MetadataApis(config=config, cache=cache, store=store,
                                          waits=self.metadata_waits,
                                          cluster_id=lambda: self.cluster_id,
                                          serves=lambda key: key in self._dispatch)
        self.data_apis = DataApis(replicas)
        self.control_apis = ControlApis(
            replicas=replicas, cache=cache, waits=self.metadata_waits, broker_epoch=broker_epoch,
            when_registered=when_registered, load_topic_configs=load_topic_configs,
            on_metadata_update=on_metadata_update, controller=controller)
        self.topic_admin_apis = TopicAdminApis(config=config, cache=cache, store=store,
                                               waits=self.metadata_waits)
        self.acl_apis = AclApis(store=store, authorizer=authorizer)
        self.coordination_apis = CoordinationApis(broker_id=broker_id, coordinator=coordinator,
                                                  brokers_on=self.metadata_apis.brokers_on)
        self.producer_ids = InitProducerIdApi(ProducerIdManager(store, broker_id))
        #: Reassignment, elections, log dirs, DeleteRecords, DescribeCluster.
        self.cluster_admin = ClusterAdminApis(store=store, replicas=replicas, cache=cache,
                                              clock=clock,
                                              cluster_id=lambda: self.cluster_id,
                                              brokers_on=self.metadata_apis.brokers_on)
        self.config_admin = ConfigAdmin(store, config)
        self.group_apis = GroupApis(coordinator, cache)
        self._dispatch = self._dispatch_table()

    def _dispatch_table(self) -> dict[ApiKey, Callable[..., Any]]:
        """Each served API's handler (the delegates built in ``__init__``)."""
        meta, data, control = self.metadata_apis, self.data_apis, self.control_apis
        topics, acls, admin = self.topic_admin_apis, self.acl_apis, self.cluster_admin
        coordination, groups = self.coordination_apis, self.group_apis
        return {
            ApiKey.API_VERSIONS: meta.api_versions,
            ApiKey.METADATA: meta.metadata,
            ApiKey.PRODUCE: data.produce,
            ApiKey.FETCH: data.fetch,
            ApiKey.LIST_OFFSETS: data.list_offsets,
            # Kafka's group protocol (8-16): broker_core.server.group_apis.
            ApiKey.OFFSET_COMMIT: groups.offset_commit,
            ApiKey.OFFSET_FETCH: groups.offset_fetch,
            ApiKey.FIND_COORDINATOR: groups.find_coordinator,
            ApiKey.JOIN_GROUP: groups.join_group,
            ApiKey.HEARTBEAT: groups.heartbeat,
            ApiKey.LEAVE_GROUP: groups.leave_group,
            ApiKey.SYNC_GROUP: groups.sync_group,
            ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
            ApiKey.LIST_GROUPS: groups.list_groups,
            ApiKey.CREATE_TOPICS: topics.create_topics,
            ApiKey.DELETE_TOPICS: topics.delete_topics,
            ApiKey.DELETE_RECORDS: admin.delete_records,
            ApiKey.INIT_PRODUCER_ID: self.producer_ids.init_producer_id,
            ApiKey.CREATE_PARTITIONS: topics.create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.DESCRIBE_ACLS: acls.describe_acls,
            ApiKey.CREATE_ACLS: acls.create_acls,
            ApiKey.DELETE_ACLS: acls.delete_acls,
            ApiKey.DESCRIBE_LOG_DIRS: admin.describe_log_dirs,
            ApiKey.DELETE_GROUPS: groups.delete_groups,
            ApiKey.ELECT_LEADERS: admin.elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: admin.alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: admin.list_partition_reassignments,
            ApiKey.OFFSET_DELETE: groups.offset_delete,
            ApiKey.LEADER_AND_ISR: control.leader_and_isr,
            ApiKey.STOP_REPLICA: control.stop_replica,
            ApiKey.UPDATE_METADATA: control.update_metadata,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: control.offset_for_leader_epoch,
            ApiKey.ALTER_PARTITION: control.alter_partition,
            ApiKey.CONTROLLED_SHUTDOWN: control.controlled_shutdown,
            ApiKey.BROKER_HEARTBEAT: control.broker_heartbeat,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
            ApiKey.DESCRIBE_CLUSTER: admin.describe_cluster,
            # Sluice's consumer coordination (docs/coordinator.md).
            ApiKey.CLUSTER_METADATA: coordination.cluster_metadata,
            ApiKey.REGISTER_CONSUMER: coordination.register_consumer,
            ApiKey.COMMIT_OFFSETS: coordination.commit_offsets,
            ApiKey.UNREGISTER_CONSUMER: coordination.unregister_consumer,
            ApiKey.DESCRIBE_CONSUMER_GROUPS: coordination.describe_consumer_groups,
            ApiKey.PING: coordination.coordinator_only,
            ApiKey.STOP_FETCHER: coordination.coordinator_only,
            ApiKey.START_FETCHER: coordination.coordinator_only,
        }

    def __call__(self, request: Any, proto: Any) -> Any:
        """Authorize (broker_core.server.authorization's gates), then dispatch."""
        header, body = request.header, request.body
        key = header.api_key
        handler = self._dispatch.get(key)
        if handler is None:
            raise NotImplementedError(f"api {key} has no handler")
        security = getattr(proto, "security", None)
        if security is None:  # a connection without a listener (in-process tools)
            security = plaintext()
        control = is_control_plane(key, body)
        if control and self.control_plane_closed and not security.is_broker:
            return self._refuse(header, body, security, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                "the control plane is served to brokers only")
        access = Access(self.authorizer, security)
        if key in USER_ADMIN and not may_manage_users(access, RULES[key].operation,
                                                      self.super_users):
            return self._refuse(header, body, security, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                "the SCRAM users are managed by brokers and super users only")
        if not access.unrestricted and not control:
            rule = RULES.get(key)
            if rule is not None and rule.scope is not Scope.RESOURCES:
                name = CLUSTER_NAME if rule.scope is Scope.CLUSTER else body.group_id
                if not access.allows(rule.operation, rule.resource_type, name):
                    return self._refuse(header, body, security, rule.error,
                                        f"{rule.operation.name} on {name} is not allowed")
        if key in _WITH_CONNECTION:
            return handler(header, body, proto)
        if key in _WITH_ACCESS:
            return handler(header, body, access)
        return handler(header, body)

    def _refuse(self, header: Any, body: Any, security: Any, error: ErrorCode,
                why: str) -> dict:
        """The API's error response carrying ``error``: the request is not handled."""
        name = ApiKey(header.api_key).name
        self.log.info("refused {api} from {who}: {why}", api=name, who=security, why=why)
        answer = SUPPORTED[ApiKey(header.api_key)].error_body(header.api_version, body,
                                                              int(error))
        if answer is None:  # pragma: no cover - every served API has an error body
            raise RuntimeError(f"{name} has no error response")
        return answer

    def authorize_cluster(self, proto: Any, operation: str) -> bool:
        """Whether ``proto``'s principal may do ``operation`` (``"ALTER"``, ``"DESCRIBE"``)
        on the CLUSTER resource for the user APIs (``__call__`` has already asked the same
        before dispatch, so this is the handler's own guard, not a second policy)."""
        security = getattr(proto, "security", None)
        if security is None:
            return False
        return may_manage_users(Access(self.authorizer, security), AclOperation[operation],
                                self.super_users)

    # -- configs (broker_core.server.config_admin, describe_configs) ------------------------------

    async def describe_configs(self, header: Any, body: Any, access: Access) -> dict:
        return await describe_configs(body, version=header.api_version, store=self.store,
                                      broker_config=self.config, broker_id=self.broker_id,
                                      refuse=config_refusal(access, AclOperation.DESCRIBE_CONFIGS))

    async def alter_configs(self, header: Any, body: Any, access: Access) -> dict:
        return await self.config_admin.alter_configs(
            body, config_refusal(access, AclOperation.ALTER_CONFIGS))

    async def incremental_alter_configs(self, header: Any, body: Any, access: Access) -> dict:
        return await self.config_admin.incremental_alter_configs(
            body, config_refusal(access, AclOperation.ALTER_CONFIGS))
