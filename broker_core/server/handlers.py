"""Request dispatch: one method per API, turning decoded requests into response bodies.

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

from broker_core import acl_store, topic_admin
from broker_core.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState
from broker_core.security.acl import (
    CLUSTER_NAME,
    AclFilter,
    AclOperation,
    Authorizer,
    InvalidAcl,
    ResourceType,
    binding,
    group_by_pattern,
)
from broker_core.security.principal import plaintext
from broker_core.server.authentication import ANSWERED_BY_THE_GATE
from broker_core.server.authorization import (
    CONTROL_PLANE,
    RULES,
    USER_ADMIN,
    Access,
    Scope,
    authorized_operations,
    cluster_authorized_operations,
    is_control_plane,
    may_manage_users,
)
from broker_core.server.cluster_admin import ClusterAdminApis
from broker_core.server.config_admin import ConfigAdmin, config_refusal
from broker_core.server.describe_configs import describe_configs
from broker_core.server.group_apis import GROUP_APIS, GroupApis
from broker_core.server.producer_ids import InitProducerIdApi, ProducerIdManager
from broker_core.server.protocol import NO_RESPONSE
from broker_core.server.user_admin import UserAdminApis
from broker_core.wire.apis import SLUICE_API_KEYS_FROM, SUPPORTED, ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import metadata as metadata_messages

#: The type of a Metadata response topic's ``partitions``: pre-encoded per topic and version.
_METADATA_PARTITIONS = (metadata_messages.RESPONSE.field_map["topics"].type
                        .element.field_map["partitions"].type)

#: Longest a Metadata request waits for a just-started broker's first UpdateMetadata. It must
#: outlast the wait for a crashed predecessor's ZooKeeper session to expire before this broker
#: can register (up to a session timeout, 18 s by default): answering earlier with the cold,
#: empty cache is what makes clients drop every connection and re-send written requests.
METADATA_WARMUP_MS = 30000


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
_TOPIC_DENIED = "TOPIC_AUTHORIZATION_FAILED"


def _code(name: str | None) -> int:
    return 0 if name is None else int(ErrorCode[name])


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
        self.replicas = replicas
        self.store = store
        self.clock = clock
        self.broker_epoch = broker_epoch
        self.cluster_id = cluster_id
        self.on_metadata_update = on_metadata_update
        #: Reads the configs of topics the broker does not know yet; LeaderAndIsr awaits it.
        self.load_topic_configs = load_topic_configs
        self.controller = controller
        self.when_registered = when_registered
        #: The consumer coordinator (coordinator.service.CoordinatorService); None: this broker
        #: hosts none and answers its APIs with COORDINATOR_NOT_AVAILABLE.
        self.coordinator = coordinator
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
        self.producer_ids = InitProducerIdApi(ProducerIdManager(store, broker_id))
        self._metadata_waiters: list[tuple[Callable[[], bool], defer.Deferred]] = []
        #: Reassignment, elections, log dirs, DeleteRecords, DescribeCluster.
        self.cluster_admin = ClusterAdminApis(store=store, replicas=replicas, cache=cache,
                                              clock=clock,
                                              cluster_id=lambda: self.cluster_id,
                                              brokers_on=self._brokers_on)
        admin = self.cluster_admin
        self.config_admin = ConfigAdmin(store, config)
        self.group_apis = GroupApis(coordinator, cache)
        self._dispatch = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            # Kafka's group protocol (8-16): broker_core.server.group_apis.
            ApiKey.OFFSET_COMMIT: self.group_apis.offset_commit,
            ApiKey.OFFSET_FETCH: self.group_apis.offset_fetch,
            ApiKey.FIND_COORDINATOR: self.group_apis.find_coordinator,
            ApiKey.JOIN_GROUP: self.group_apis.join_group,
            ApiKey.HEARTBEAT: self.group_apis.heartbeat,
            ApiKey.LEAVE_GROUP: self.group_apis.leave_group,
            ApiKey.SYNC_GROUP: self.group_apis.sync_group,
            ApiKey.DESCRIBE_GROUPS: self.group_apis.describe_groups,
            ApiKey.LIST_GROUPS: self.group_apis.list_groups,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.DELETE_RECORDS: admin.delete_records,
            ApiKey.INIT_PRODUCER_ID: self.producer_ids.init_producer_id,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.DESCRIBE_ACLS: self.describe_acls,
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
            ApiKey.DESCRIBE_LOG_DIRS: admin.describe_log_dirs,
            ApiKey.DELETE_GROUPS: self.group_apis.delete_groups,
            ApiKey.ELECT_LEADERS: admin.elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: admin.alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: admin.list_partition_reassignments,
            ApiKey.OFFSET_DELETE: self.group_apis.offset_delete,
            ApiKey.LEADER_AND_ISR: self.leader_and_isr,
            ApiKey.STOP_REPLICA: self.stop_replica,
            ApiKey.UPDATE_METADATA: self.update_metadata,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            ApiKey.ALTER_PARTITION: self.alter_partition,
            ApiKey.CONTROLLED_SHUTDOWN: self.controlled_shutdown,
            ApiKey.BROKER_HEARTBEAT: self.broker_heartbeat,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
            ApiKey.DESCRIBE_CLUSTER: admin.describe_cluster,
            # Sluice's consumer coordination (docs/coordinator.md).
            ApiKey.CLUSTER_METADATA: self.cluster_metadata,
            ApiKey.REGISTER_CONSUMER: self.register_consumer,
            ApiKey.COMMIT_OFFSETS: self.commit_offsets,
            ApiKey.UNREGISTER_CONSUMER: self.unregister_consumer,
            ApiKey.DESCRIBE_CONSUMER_GROUPS: self.describe_consumer_groups,
            ApiKey.PING: self.coordinator_only,
            ApiKey.STOP_FETCHER: self.coordinator_only,
            ApiKey.START_FETCHER: self.coordinator_only,
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

    # -- consumer coordination (docs/design.md#the-consumer-coordinator) --------------------------

    def _no_coordinator(self, **extra: Any) -> dict:
        return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                "error_message": "this broker hosts no consumer coordinator", **extra}

    def cluster_metadata(self, header: Any, body: Any, access: Access) -> dict:
        listener = _listener_of(access)
        if self.coordinator is None:
            return self._no_coordinator(coordinator_id=-1, brokers=[
                {"node_id": b.id, "host": host, "port": port}
                for b, (host, port) in self._brokers_on(listener)])
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

    # -- ApiVersions ------------------------------------------------------------------------------

    def api_versions(self, header: Any, body: Any, access: Access) -> dict:
        # Sluice-only APIs (1000 up) are left out: Kafka clients need not see them; the
        # control plane is shown to brokers only. SASL's are answered before the handler, on
        # every listener (as Kafka lists them).
        hidden = () if access.security.is_broker else CONTROL_PLANE
        return {
            "error_code": 0,
            "api_keys": [
                {"api_key": int(k), "min_version": s.min_version, "max_version": s.max_version}
                for k, s in sorted(SUPPORTED.items())
                if (k in self._dispatch or k in ANSWERED_BY_THE_GATE)
                and k < SLUICE_API_KEYS_FROM and k not in hidden
            ],
            "throttle_time_ms": 0,
        }

    # -- Metadata ---------------------------------------------------------------------------------

    def _brokers_on(self, listener: str | None) -> list[tuple[BrokerEndpoint, tuple[str, int]]]:
        """The live brokers that have ``listener``, with their address there, by id (Kafka
        leaves a broker without the listener out of the answer)."""
        found = []
        for b in sorted(self.cache.brokers.values(), key=lambda b: b.id):
            address = b.address(listener)
            if address is not None:
                found.append((b, address))
        return found

    async def metadata(self, header: Any, body: Any, access: Access) -> dict:
        """Kafka's Metadata, answered for the listener the request came on: the brokers'
        addresses on that listener; a partition whose leader lacks it gets
        LISTENER_NOT_FOUND. Only topics the principal may DESCRIBE are listed."""
        listener = _listener_of(access)
        if self.cache.controller_epoch < 0:
            # Just started: no UpdateMetadata yet, so the cache knows no brokers. An empty broker
            # list makes clients drop their connections to every broker, failing (and with
            # librdkafka re-sending) requests that were already written; wait for the
            # controller's first update instead (it follows our registration at once).
            await self._wait_metadata(lambda: self.cache.controller_epoch >= 0,
                                      METADATA_WARMUP_MS)
        requested = body.topics
        names: list[str]
        describe = RULES[ApiKey.METADATA]
        if requested is None:
            # Only the topics the principal may DESCRIBE (Kafka's all-topics answer).
            names = [t for t in sorted(self.cache.topics) if access.allows_topic(describe, t)]
        else:
            names = [t.name for t in requested if t.name is not None]
        auto = (header.api_version < 4 or body.allow_auto_topic_creation) and \
            self.config.auto_create_topics_enable
        version = header.api_version
        # Only for the topics described (as Kafka: a refused or unknown one is INT32_MIN).
        topic_operations_asked = version >= 8 and body.include_topic_authorized_operations
        topics = []
        for name in names:
            parts = self.cache.topics.get(name)
            described = access.allows_topic(describe, name)
            if parts is None:
                creatable = auto and access.may_create_topic(name)
                if not described and not creatable:
                    # Whether it exists is not told to whom may not DESCRIBE it.
                    topics.append(self._topic_denied_metadata(name))
                    continue
                topics.append(await self._unknown_topic_metadata(name, creatable))
                continue
            if not described:
                topics.append(self._topic_denied_metadata(name))
                continue
            topics.append({
                "error_code": 0,
                "name": name,
                "is_internal": False,
                # Encoded once per topic and version until the topic or the live brokers change:
                # during a failover clients ask for every partition many times a second.
                "partitions": self.cache.derived(
                    name, ("metadata", version, listener),
                    lambda parts=parts: _METADATA_PARTITIONS.pre_encode(
                        [self._partition_metadata(i, st, listener)
                         for i, st in sorted(parts.items())],
                        version, metadata_messages.RESPONSE.is_flexible(version))),
                "topic_authorized_operations": authorized_operations(
                    access, ResourceType.TOPIC, name, topic_operations_asked),
            })
        return {
            "throttle_time_ms": 0,
            "brokers": [{"node_id": b.id, "host": host, "port": port, "rack": b.rack}
                        for b, (host, port) in self._brokers_on(listener)],
            "cluster_id": self.cluster_id,
            "controller_id": self.cache.controller_id,
            "topics": topics,
            # v8-v10 only (later versions ask DescribeCluster).
            "cluster_authorized_operations": cluster_authorized_operations(
                access, 8 <= version <= 10 and body.include_cluster_authorized_operations),
        }

    def _partition_metadata(self, index: int, st: PartitionState, listener: str | None) -> dict:
        error = 0
        leader = self.cache.brokers.get(st.leader)
        if st.leader < 0 or leader is None:
            error = int(ErrorCode.LEADER_NOT_AVAILABLE)
        elif leader.address(listener) is None:
            # Kafka's answer: the leader is alive but a client of this listener cannot reach it.
            error, leader = int(ErrorCode.LISTENER_NOT_FOUND), None
        return {
            "error_code": error,
            "partition_index": index,
            "leader_id": st.leader if leader is not None else -1,
            "leader_epoch": st.leader_epoch,
            "replica_nodes": list(st.replicas),
            "isr_nodes": list(st.isr),
            "offline_replicas": [r for r in st.replicas if r not in self.cache.brokers],
        }

    @staticmethod
    def _topic_denied_metadata(name: str) -> dict:
        return {"name": name, "is_internal": False, "partitions": [],
                "topic_authorized_operations": -2147483648,
                "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)}

    async def _unknown_topic_metadata(self, name: str, auto_create: bool) -> dict:
        entry = {"name": name, "is_internal": False, "partitions": [],
                 "topic_authorized_operations": -2147483648}
        if not auto_create:
            return {**entry, "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
        try:
            await topic_admin.create_topic(
                self.store, name, self.config.num_partitions,
                self.config.default_replication_factor, {})
            self.log.info("auto-created topic {t}", t=name)
            code = ErrorCode.LEADER_NOT_AVAILABLE  # clients retry until the leaders are known
        except topic_admin.TopicExists:
            code = ErrorCode.LEADER_NOT_AVAILABLE
        except topic_admin.TopicAdminError as e:
            self.log.info("auto-creation of topic {t} refused: {e}", t=name, e=e)
            code = ErrorCode(e.error_code)
        except Exception as e:  # ZooKeeper unreachable and the like
            self.log.warn("auto-creation of topic {t} failed: {e}", t=name, e=e)
            code = ErrorCode.LEADER_NOT_AVAILABLE
        return {**entry, "error_code": int(code)}

    # -- Produce ----------------------------------------------------------------------------------

    def produce(self, header: Any, body: Any, access: Access) -> Any:
        acks = body.acks
        if acks not in (0, 1, -1):
            return self._produce_response(body, {}, "INVALID_REQUIRED_ACKS")
        if body.transactional_id is not None:
            return self._produce_response(body, {}, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        denied = self._denied_topics(access, ApiKey.PRODUCE, (t.name for t in body.topic_data))
        entries = [(t.name, p.index, p.records) for t in body.topic_data for p in t.partition_data
                   if t.name not in denied]
        d = self.replicas.append(acks, body.timeout_ms, entries)
        if acks == 0:
            return NO_RESPONSE
        d.addCallback(lambda results: self._produce_response(body, results, None, denied))
        return d

    @staticmethod
    def _denied_topics(access: Access, api: ApiKey, topics: Any) -> frozenset[str]:
        """The topics of a request the connection may not act on as ``api`` requires."""
        if access.unrestricted:
            return frozenset()
        rule = RULES[api]
        return frozenset(t for t in set(topics) if not access.allows_topic(rule, t))

    def _produce_response(self, body: Any, results: dict, all_error: str | None,
                          denied: frozenset[str] = frozenset()) -> dict:
        responses = []
        for t in body.topic_data:
            parts = []
            for p in t.partition_data:
                r = results.get((t.name, p.index))
                error = (_TOPIC_DENIED if t.name in denied else all_error) if r is None \
                    else r.error
                parts.append({
                    "index": p.index,
                    "error_code": _code(error),
                    "base_offset": -1 if r is None else r.base_offset,
                    "log_append_time_ms": -1 if r is None else r.log_append_time_ms,
                    "log_start_offset": -1 if r is None else r.log_start_offset,
                    "record_errors": [] if r is None else [
                        {"batch_index": i, "batch_index_error_message": m}
                        for i, m in r.record_errors],
                    "error_message": None if r is None else r.message,
                })
            responses.append({"name": t.name, "partition_responses": parts})
        return {"responses": responses, "throttle_time_ms": 0}

    # -- Fetch ------------------------------------------------------------------------------------

    def fetch(self, header: Any, body: Any, access: Access) -> Any:
        # replica_id >= 0: a follower (our own brokers); -1: a consumer.
        requests = []
        for t in body.topics:
            for p in t.partitions:
                requests.append((t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                                 p.current_leader_epoch))
        forgotten = [(t.topic, index) for t in body.forgotten_topics_data
                     for index in t.partitions]
        # KIP-227: an incremental request names only what changed; the session supplies the
        # rest, and the answer leaves out partitions with nothing new.
        ctx = self.replicas.fetch_sessions.context(body.replica_id, body.session_id,
                                                   body.session_epoch, requests, forgotten)
        if ctx.error is not None:
            return {"throttle_time_ms": 0, "error_code": _code(ctx.error), "session_id": 0,
                    "responses": []}
        # READ per topic, over every partition of the session (not only those this request
        # names): an ACL removed mid-session takes effect at the next fetch. A follower's
        # fetch was authorized as a whole before dispatch.
        entries = ctx.entries
        denied: frozenset[str] = frozenset()
        if body.replica_id < 0:
            denied = self._denied_topics(access, ApiKey.FETCH, (e[0] for e in entries))
        if denied:
            entries = [e for e in entries if e[0] not in denied]
        # A follower reports its log starts (the partitions it names), for DeleteRecords.
        starts = [] if body.replica_id < 0 else [
            (t.topic, p.partition, p.log_start_offset) for t in body.topics
            for p in t.partitions if p.log_start_offset >= 0]
        d = self.replicas.fetch(entries, max_wait_ms=body.max_wait_ms,
                                min_bytes=body.min_bytes, max_bytes=body.max_bytes,
                                replica_id=body.replica_id, follower_log_starts=starts)
        if denied:
            from broker_core.replica.manager import FetchResult
            refused = [(e[0], e[1], FetchResult(error=_TOPIC_DENIED)) for e in ctx.entries
                       if e[0] in denied]
            d.addCallback(lambda results: [*results, *refused])
        d.addCallback(lambda results: self._fetch_response(ctx.select(results), ctx.session_id))
        return d

    def _fetch_response(self, results: list, session_id: int = 0) -> dict:
        topics: list[dict] = []
        index: dict[str, dict] = {}
        for topic, partition, r in results:
            entry = index.get(topic)
            if entry is None:
                entry = index[topic] = {"topic": topic, "partitions": []}
                topics.append(entry)
            entry["partitions"].append({
                "partition_index": partition,
                "error_code": _code(r.error),
                "high_watermark": r.high_watermark,
                "last_stable_offset": r.high_watermark,
                "log_start_offset": r.log_start_offset,
                "aborted_transactions": [],
                "preferred_read_replica": -1,
                "records": r.records,
            })
        # Session id 0 (consumers, sessionless followers) tells the client to send full fetch
        # requests every time (broker_core.replica.fetch_session).
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": session_id,
                "responses": topics}

    # -- ListOffsets ------------------------------------------------------------------------------

    def list_offsets(self, header: Any, body: Any, access: Access) -> dict:
        denied = self._denied_topics(access, ApiKey.LIST_OFFSETS, (t.name for t in body.topics))
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                if t.name in denied:
                    error, ts, offset, epoch = _TOPIC_DENIED, -1, -1, -1
                else:
                    error, ts, offset, epoch = self.replicas.list_offset(
                        t.name, p.partition_index, p.timestamp)
                entry = {"partition_index": p.partition_index, "error_code": _code(error),
                         "timestamp": ts, "offset": offset, "old_style_offsets": []}
                if header.api_version >= 4:  # leader_epoch is not in v1-v3 (nor ignorable)
                    entry["leader_epoch"] = epoch
                parts.append(entry)
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # -- topic administration ---------------------------------------------------------------------

    async def create_topics(self, header: Any, body: Any, access: Access) -> dict:
        results = []
        created = []
        for t in body.topics:
            entry = {"name": t.name, "error_code": 0, "error_message": None,
                     "topic_config_error_code": 0, "num_partitions": -1,
                     "replication_factor": -1, "configs": []}
            assignment = None
            if t.assignments:
                assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            partitions = t.num_partitions if t.num_partitions != -1 else self.config.num_partitions
            rf = t.replication_factor if t.replication_factor != -1 else \
                self.config.default_replication_factor
            if not access.may_create_topic(t.name):
                entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                entry["error_message"] = "CREATE on the cluster or on this topic is not allowed"
                results.append(entry)
                continue
            try:
                result = await topic_admin.create_topic(
                    self.store, t.name, partitions, rf, {c.name: c.value for c in t.configs},
                    assignment=assignment, validate_only=body.validate_only)
                entry["num_partitions"] = len(result)
                entry["replication_factor"] = len(next(iter(result.values()))) if result else rf
                if not body.validate_only:
                    created.append(t.name)
            except topic_admin.TopicAdminError as e:
                entry["error_code"], entry["error_message"] = int(e.error_code), str(e)
            except Exception as e:
                self.log.failure("CreateTopics {t} failed", t=t.name)
                entry["error_code"] = int(ErrorCode.UNKNOWN_SERVER_ERROR)
                entry["error_message"] = f"could not create topic: {e}"
            results.append(entry)
        if created and body.timeout_ms > 0:
            # Like Kafka, answer once the controller has published leaders for the new topics
            # (or the timeout passes: the topics still get created).
            await self._wait_metadata(
                lambda: all(t in self.cache.topics and all(
                    s.leader >= 0 for s in self.cache.topics[t].values()) for t in created),
                body.timeout_ms)
        return {"throttle_time_ms": 0, "topics": results}

    async def delete_topics(self, header: Any, body: Any, access: Access) -> dict:
        names = list(body.topic_names)
        denied = self._denied_topics(access, ApiKey.DELETE_TOPICS, names)
        results = []
        deleted = []
        for name in names:
            entry = {"name": name, "error_code": 0, "error_message": None}
            if name in denied:
                entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                entry["error_message"] = "DELETE on this topic is not allowed"
            elif not self.config.delete_topic_enable:
                entry["error_code"] = int(ErrorCode.TOPIC_DELETION_DISABLED)
                entry["error_message"] = "delete.topic.enable is false on this broker"
            else:
                try:
                    await topic_admin.delete_topic(self.store, name)
                    deleted.append(name)
                except topic_admin.TopicAdminError as e:
                    entry["error_code"], entry["error_message"] = int(e.error_code), str(e)
            results.append(entry)
        if deleted and body.timeout_ms > 0:
            await self._wait_metadata(lambda: not any(t in self.cache.topics for t in deleted),
                                      body.timeout_ms)
        return {"throttle_time_ms": 0, "responses": results}

    async def create_partitions(self, header: Any, body: Any, access: Access) -> dict:
        results = []
        waits = []
        denied = self._denied_topics(access, ApiKey.CREATE_PARTITIONS,
                                     (t.name for t in body.topics))
        for t in body.topics:
            entry = {"name": t.name, "error_code": 0, "error_message": None}
            if t.name in denied:
                entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                entry["error_message"] = "ALTER on this topic is not allowed"
                results.append(entry)
                continue
            assignment = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            try:
                await topic_admin.add_partitions(self.store, t.name, t.count, assignment,
                                                 validate_only=body.validate_only)
                if not body.validate_only:
                    waits.append((t.name, t.count))
            except topic_admin.TopicAdminError as e:
                entry["error_code"], entry["error_message"] = int(e.error_code), str(e)
            results.append(entry)
        if waits and body.timeout_ms > 0:
            await self._wait_metadata(
                lambda: all(len(self.cache.topics.get(n, {})) >= c for n, c in waits),
                body.timeout_ms)
        return {"throttle_time_ms": 0, "results": results}

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

    # -- ACLs (Kafka's DescribeAcls / CreateAcls / DeleteAcls) ------------------------------------

    def _security_disabled(self) -> str:
        return "no authorizer is configured on this broker (authorizer.enabled=false)"

    def describe_acls(self, header: Any, body: Any) -> dict:
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.SECURITY_DISABLED),
                    "error_message": self._security_disabled(), "resources": []}
        try:
            f = AclFilter.from_wire(body.resource_type_filter, body.pattern_type_filter,
                                    body.resource_name_filter, body.principal_filter,
                                    body.host_filter, body.operation, body.permission_type)
        except InvalidAcl as e:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": str(e), "resources": []}
        resources = [
            {"resource_type": int(p.resource_type), "resource_name": p.name,
             "pattern_type": int(p.pattern_type),
             "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                       "permission_type": int(e.permission)} for e in entries]}
            for p, entries in group_by_pattern(self.authorizer.matching(f)).items()]
        if header.api_version == 0:  # v0 cannot say a pattern is PREFIXED
            resources = [r for r in resources if r["pattern_type"] == 3]
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "resources": resources}

    async def create_acls(self, header: Any, body: Any) -> dict:
        results: list[dict] = []
        valid = []
        for c in body.creations:
            if self.authorizer is None:
                results.append({"error_code": int(ErrorCode.SECURITY_DISABLED),
                                "error_message": self._security_disabled()})
                continue
            try:
                valid.append(binding(c.resource_type, c.resource_pattern_type, c.resource_name,
                                     c.principal, c.host, c.operation, c.permission_type))
            except InvalidAcl as e:
                results.append({"error_code": int(ErrorCode.INVALID_REQUEST),
                                "error_message": str(e)})
                continue
            results.append({"error_code": 0, "error_message": None})
        if valid:
            try:
                await acl_store.create_acls(self.store, valid)
                self.log.info("ACLs created: {acls}", acls="; ".join(str(b) for b in valid))
            except Exception as e:
                self.log.failure("CreateAcls failed")
                for r in results:
                    if r["error_code"] == 0:
                        r["error_code"] = int(ErrorCode.UNKNOWN_SERVER_ERROR)
                        r["error_message"] = f"the ACLs could not be stored: {e}"
        return {"throttle_time_ms": 0, "results": results}

    async def delete_acls(self, header: Any, body: Any) -> dict:
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": int(ErrorCode.SECURITY_DISABLED),
                 "error_message": self._security_disabled(), "matching_acls": []}
                for _ in body.filters]}
        filters: list[AclFilter | None] = []
        errors: list[str | None] = []
        for f in body.filters:
            try:
                filters.append(AclFilter.from_wire(
                    f.resource_type_filter, f.pattern_type_filter, f.resource_name_filter,
                    f.principal_filter, f.host_filter, f.operation, f.permission_type))
                errors.append(None)
            except InvalidAcl as e:
                filters.append(None)
                errors.append(str(e))
        good = [f for f in filters if f is not None]
        try:
            deleted = iter(await acl_store.delete_acls(self.store, good))
        except Exception as e:
            self.log.failure("DeleteAcls failed")
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                 "error_message": f"the ACLs could not be deleted: {e}", "matching_acls": []}
                for _ in body.filters]}
        out = []
        for f, error in zip(filters, errors, strict=True):
            if f is None:
                out.append({"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": error,
                            "matching_acls": []})
                continue
            gone = next(deleted)
            if gone:
                self.log.info("ACLs deleted: {acls}", acls="; ".join(str(b) for b in gone))
            out.append({"error_code": 0, "error_message": None, "matching_acls": [
                {"error_code": 0, "error_message": None,
                 "resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
                 "pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
                 "host": b.entry.host, "operation": int(b.entry.operation),
                 "permission_type": int(b.entry.permission)} for b in gone]})
        return {"throttle_time_ms": 0, "filter_results": out}

    def _wait_metadata(self, condition: Callable[[], bool], timeout_ms: int) -> defer.Deferred:
        """Fires (with None) when ``condition()`` holds after a metadata update, or on timeout."""
        d: defer.Deferred = defer.Deferred()
        if condition():
            d.callback(None)
            return d
        entry = (condition, d)
        self._metadata_waiters.append(entry)

        def expire() -> None:
            if entry in self._metadata_waiters:
                self._metadata_waiters.remove(entry)
                d.callback(None)

        call = self.clock.callLater(timeout_ms / 1000.0, expire)
        d.addBoth(lambda r: (call.active() and call.cancel(), r)[1])
        return d

    def _metadata_changed(self) -> None:
        for entry in list(self._metadata_waiters):
            condition, d = entry
            if condition():
                self._metadata_waiters.remove(entry)
                d.callback(None)

    # -- controller → broker (docs/design.md#controller-commands) ---------------------------------

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
            return {"error_code": _code(result), "topics": []}
        errors = [{"partition_index": p, "error_code": _code(e)}
                  for (_, p), e in result.items() if e is not None]
        return {"error_code": 0, "topics": [{"partition_errors": errors}] if errors else []}

    async def stop_replica(self, header: Any, body: Any) -> dict:
        if await self._stale_broker_epoch(body):
            return {"error_code": int(ErrorCode.STALE_BROKER_EPOCH), "partition_errors": []}
        parts = [(t.topic_name, s.partition_index, s.delete_partition)
                 for t in body.topic_states for s in t.partition_states]
        result = self.replicas.apply_stop_replica(body.controller_epoch, parts)
        if isinstance(result, str):
            return {"error_code": _code(result), "partition_errors": []}
        return {"error_code": 0, "partition_errors": [
            {"topic_name": t, "partition_index": p, "error_code": _code(e)}
            for (t, p), e in result.items()]}

    # -- replication -------------------------------------------------------------------------------

    def offset_for_leader_epoch(self, header: Any, body: Any, access: Access) -> dict:
        """The leader-generation request: where does ``leader_epoch`` end in the leader's
        log? Answered only by the leader, at the epoch the follower believes current."""
        denied = self._denied_topics(access, ApiKey.OFFSET_FOR_LEADER_EPOCH,
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
                    parts.append({"error_code": _code(error), "partition": p.partition,
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
            return {"throttle_time_ms": 0, "error_code": _code(top), "topics": []}
        topics: dict[str, list[dict]] = {}
        for (topic, index), (error, decision) in results.items():
            entry = {"partition_index": index, "error_code": _code(error), "leader_id": -1,
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
        return {"throttle_time_ms": 0, "error_code": _code(error), "is_caught_up": False,
                "is_fenced": fenced, "should_shut_down": False}

    async def controlled_shutdown(self, header: Any, body: Any) -> dict:
        """A broker about to stop asks the controller (this broker, if active) to move its
        leaderships away; the answer lists the partitions it still leads."""
        if self.controller is None:
            top, remaining = "NOT_CONTROLLER", []
        else:
            top, remaining = await self.controller.controlled_shutdown(body.broker_id,
                                                                       body.broker_epoch)
        return {"error_code": _code(top), "remaining_partitions": [
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
        self._metadata_changed()
        return {"error_code": 0}


def _listener_of(proto: Any) -> str | None:
    """The listener a request came on, from its connection or its
    :class:`~broker_core.server.authorization.Access` (None without either: the inter-broker
    view)."""
    security = getattr(proto, "security", None)
    return None if security is None else security.listener
