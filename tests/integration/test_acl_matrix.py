"""The ACL matrix: for every API a broker serves, a principal the ACLs allow and one they do not,
against a real in-process broker (ZooKeeper mode) with ``authorizer.enabled=true``; each
refusal carries Kafka's error code and changes nothing. Then the closed control plane (every
broker's, since brokers log in to each other): every control-plane API (and a follower's
Fetch) is refused to a client even when an ACL grants it CLUSTER_ACTION, and the partition
and its ISR stay as they were; a broker connection is served.

Test seam (until SASL sets principals on real logins): :func:`connect_as` opens a real
connection and then sets the principal on the broker's side of it, through the broker's
``factory.connections`` and ``ConnectionSecurity.authenticate`` (the call a SASL or TLS
handshake makes). Nothing in the broker knows about it.
"""

from __future__ import annotations

import pytest
import pytest_twisted

from broker_core import metadata_paths as paths
from broker_core.security.acl import (
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from broker_core.security.principal import Principal
from broker_core.server.authentication import ANSWERED_BY_THE_GATE
from broker_core.server.authorization import CONTROL_PLANE, RULES, UNCHECKED
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import Record, build_batch
from tests.support.cluster import (
    call,
    connect,
    coordinates,
    eventually,
    running_brokers,
    shard_service,
)

Op, RT = AclOperation, ResourceType
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


@pytest.fixture
def broker(zk_hosts, tmp_path):
    for brokers in running_brokers(zk_hosts, tmp_path, 1, authorizer_enabled="true",
                                   super_users="User:admin"):
        yield brokers[0]


async def connect_as(broker, principal: str, *, is_broker: bool = False):
    """A real connection whose broker side carries ``principal`` (the module's test seam)."""
    proto = await connect(broker)
    port = proto.transport.getHost().port
    server = await eventually(lambda: next(
        (p for p in broker.factory.connections if p.transport.getPeer().port == port), None),
        what="the broker's side of the connection")
    server.security.authenticate(Principal.parse(principal), is_broker=is_broker)
    return proto


async def call_as(broker, principal: str, api: int, version: int, body, *,
                  is_broker: bool = False):
    proto = await connect_as(broker, principal, is_broker=is_broker)
    try:
        return await proto.request(api, version, body)
    finally:
        proto.transport.loseConnection()


async def grant(broker, principal: str, *acls) -> None:
    """CreateAcls as the super user; waits until the broker's cache holds them."""
    creations = [{"resource_type": int(rt), "resource_name": name,
                  "resource_pattern_type": int(PatternType.LITERAL), "principal": principal,
                  "host": "*", "operation": int(op), "permission_type": int(AclPermission.ALLOW)}
                 for rt, name, op in acls]
    resp = await call_as(broker, "User:admin", ApiKey.CREATE_ACLS, 3, {"creations": creations})
    assert [r.error_code for r in resp.results] == [0] * len(acls)
    for rt, name, op in acls:
        await eventually(lambda rt=rt, name=name, op=op: broker.authorizer.authorize(
            principal, "127.0.0.1", op, rt, name), what=f"{principal} {op.name} {name}")


async def create_topic(broker, name: str) -> None:
    """One partition, as the super user; waits for its leader."""
    resp = await call_as(broker, "User:admin", ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []}], "timeout_ms": 10000, "validate_only": False})
    assert resp.topics[0].error_code == 0, resp
    await eventually(lambda: broker.replicas.get_partition(name, 0) is not None
                     and broker.replicas.get_partition(name, 0).is_leader,
                     what=f"{name} led by the broker")


def batch() -> bytes:
    return build_batch([Record(b"k", b"v", [], 1000)])


def log_end(broker, topic: str) -> int:
    return broker.replicas.get_partition(topic, 0).log.log_end_offset


def produce_body(topic: str) -> dict:
    return {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch()}]}]}


def fetch_body(topic: str, replica_id: int = -1) -> dict:
    return {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": []}


@pytest_twisted.ensureDeferred
async def test_every_served_api_has_a_rule_or_is_deliberately_unchecked(broker):
    # What the handler dispatches, and SASL's APIs, which the connection's authentication
    # gate answers before any handler.
    served = set(broker.handler._dispatch) | ANSWERED_BY_THE_GATE
    assert served == set(RULES) | CONTROL_PLANE | UNCHECKED, "an API without a rule"
    assert not set(RULES) & UNCHECKED and not set(RULES) & CONTROL_PLANE


@pytest_twisted.ensureDeferred
async def test_topic_apis_allow_the_granted_principal_and_refuse_the_other(broker):
    await create_topic(broker, "t")
    await create_topic(broker, "doomed")
    mallory = "User:mallory"

    # Produce: WRITE on the topic.
    await grant(broker, "User:writer", (RT.TOPIC, "t", Op.WRITE))
    before = log_end(broker, "t")
    resp = await call_as(broker, mallory, ApiKey.PRODUCE, 8, produce_body("t"))
    assert resp.responses[0].partition_responses[0].error_code == TOPIC_DENIED
    assert log_end(broker, "t") == before
    resp = await call_as(broker, "User:writer", ApiKey.PRODUCE, 8, produce_body("t"))
    assert resp.responses[0].partition_responses[0].error_code == 0
    assert log_end(broker, "t") == before + 1

    # Fetch (a consumer's): READ on the topic.
    await grant(broker, "User:reader", (RT.TOPIC, "t", Op.READ))
    resp = await call_as(broker, mallory, ApiKey.FETCH, 12, fetch_body("t"))
    part = resp.responses[0].partitions[0]
    assert part.error_code == TOPIC_DENIED and not part.records
    resp = await call_as(broker, "User:reader", ApiKey.FETCH, 12, fetch_body("t"))
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0 and part.records

    # ListOffsets and OffsetForLeaderEpoch: DESCRIBE (implied by READ).
    body = {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
    resp = await call_as(broker, mallory, ApiKey.LIST_OFFSETS, 7, body)
    assert resp.topics[0].partitions[0].error_code == TOPIC_DENIED
    resp = await call_as(broker, "User:reader", ApiKey.LIST_OFFSETS, 7, body)
    assert resp.topics[0].partitions[0].error_code == 0
    assert resp.topics[0].partitions[0].offset == before + 1
    body = {"replica_id": -1, "topics": [{"topic": "t", "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}
    resp = await call_as(broker, mallory, ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, body)
    assert resp.topics[0].partitions[0].error_code == TOPIC_DENIED
    resp = await call_as(broker, "User:reader", ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, body)
    assert resp.topics[0].partitions[0].error_code == 0

    # Metadata: only DESCRIBE-able topics are listed; a named one is refused; auto-creation
    # needs CREATE.
    resp = await call_as(broker, mallory, ApiKey.METADATA, 12, {"topics": None})
    assert resp.topics == []
    resp = await call_as(broker, mallory, ApiKey.METADATA, 12, {
        "topics": [{"name": "t"}, {"name": "auto-x"}], "allow_auto_topic_creation": True})
    assert [(t.name, t.error_code) for t in resp.topics] == [("t", TOPIC_DENIED),
                                                             ("auto-x", TOPIC_DENIED)]
    resp = await call_as(broker, "User:reader", ApiKey.METADATA, 12, {"topics": None})
    assert [(t.name, t.error_code) for t in resp.topics] == [("t", 0)]
    assert "auto-x" not in broker.cache.topics

    # CreateTopics: CREATE on the topic (or the cluster).
    await grant(broker, "User:creator", (RT.TOPIC, "fresh", Op.CREATE))
    body = {"topics": [{"name": "fresh", "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}], "timeout_ms": 10000,
            "validate_only": False}
    resp = await call_as(broker, mallory, ApiKey.CREATE_TOPICS, 7, body)
    assert resp.topics[0].error_code == TOPIC_DENIED
    assert await broker.store.exists("/brokers/topics/fresh") is None
    resp = await call_as(broker, "User:creator", ApiKey.CREATE_TOPICS, 7, body)
    assert resp.topics[0].error_code == 0

    # CreatePartitions: ALTER on the topic.
    await grant(broker, "User:alterer", (RT.TOPIC, "t", Op.ALTER))
    body = {"topics": [{"name": "t", "count": 2, "assignments": None}], "timeout_ms": 10000,
            "validate_only": False}
    resp = await call_as(broker, mallory, ApiKey.CREATE_PARTITIONS, 3, body)
    assert resp.results[0].error_code == TOPIC_DENIED
    assert len(broker.cache.topics["t"]) == 1
    resp = await call_as(broker, "User:alterer", ApiKey.CREATE_PARTITIONS, 3, body)
    assert resp.results[0].error_code == 0

    # DescribeConfigs: DESCRIBE_CONFIGS on the topic; a broker's on the cluster.
    await grant(broker, "User:auditor", (RT.TOPIC, "t", Op.DESCRIBE_CONFIGS),
                (RT.CLUSTER, "kafka-cluster", Op.DESCRIBE_CONFIGS))
    body = {"resources": [
        {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False}
    resp = await call_as(broker, mallory, ApiKey.DESCRIBE_CONFIGS, 4, body)
    assert [(r.error_code, r.configs) for r in resp.results] == [(TOPIC_DENIED, []),
                                                                 (CLUSTER_DENIED, [])]
    resp = await call_as(broker, "User:auditor", ApiKey.DESCRIBE_CONFIGS, 4, body)
    assert [r.error_code for r in resp.results] == [0, 0] and resp.results[0].configs

    # AlterConfigs / IncrementalAlterConfigs: ALTER_CONFIGS on the topic; a broker's on the
    # cluster. A refusal writes nothing.
    await grant(broker, "User:configurer", (RT.TOPIC, "t", Op.ALTER_CONFIGS),
                (RT.CLUSTER, "kafka-cluster", Op.ALTER_CONFIGS))
    alter = {"resources": [
        {"resource_type": 2, "resource_name": "t",
         "configs": [{"name": "retention.ms", "value": "60000"}]},
        {"resource_type": 4, "resource_name": "",
         "configs": [{"name": "log.retention.bytes", "value": "1000000"}]}],
        "validate_only": False}
    incremental = {"resources": [
        {"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "segment.ms", "config_operation": 0, "value": "60000"}]},
        {"resource_type": 4, "resource_name": "1", "configs": [
            {"name": "min.insync.replicas", "config_operation": 0, "value": "1"}]}],
        "validate_only": False}
    for api, version, request in ((ApiKey.ALTER_CONFIGS, 2, alter),
                                  (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, incremental)):
        resp = await call_as(broker, mallory, api, version, request)
        assert [(r.error_code, r.error_message) for r in resp.responses] == [
            (TOPIC_DENIED, "ALTER_CONFIGS on this resource is not allowed"),
            (CLUSTER_DENIED, "ALTER_CONFIGS on this resource is not allowed")]
        # DESCRIBE_CONFIGS alone does not allow altering.
        resp = await call_as(broker, "User:auditor", api, version, request)
        assert [r.error_code for r in resp.responses] == [TOPIC_DENIED, CLUSTER_DENIED]
    assert paths.TopicConfig.from_bytes(
        (await broker.store.get("/config/topics/t"))[0]).config == {}
    assert await broker.store.exists("/config/brokers/<default>") is None
    assert await broker.store.exists("/config/brokers/1") is None
    for api, version, request in ((ApiKey.ALTER_CONFIGS, 2, alter),
                                  (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, incremental)):
        resp = await call_as(broker, "User:configurer", api, version, request)
        assert [r.error_code for r in resp.responses] == [0, 0]
    assert paths.TopicConfig.from_bytes(
        (await broker.store.get("/config/topics/t"))[0]).config == {
            "retention.ms": "60000", "segment.ms": "60000"}  # incremental keeps the first
    assert await broker.store.exists("/config/brokers/1") is not None

    # DeleteTopics: DELETE on the topic.
    await grant(broker, "User:deleter", (RT.TOPIC, "doomed", Op.DELETE))
    body = {"topic_names": ["doomed"], "timeout_ms": 10000}
    resp = await call_as(broker, mallory, ApiKey.DELETE_TOPICS, 5, body)
    assert resp.responses[0].error_code == TOPIC_DENIED
    assert await broker.store.exists("/admin/delete_topics/doomed") is None
    assert await broker.store.exists("/brokers/topics/doomed") is not None
    resp = await call_as(broker, "User:deleter", ApiKey.DELETE_TOPICS, 5, body)
    assert resp.responses[0].error_code == 0


@pytest_twisted.ensureDeferred
async def test_init_producer_id_needs_idempotent_write_or_write_on_some_topic(broker):
    await grant(broker, "User:idempotent", (RT.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE))
    await grant(broker, "User:writer", (RT.TOPIC, "some-topic", Op.WRITE))
    await grant(broker, "User:reader", (RT.TOPIC, "some-topic", Op.READ))
    body = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
            "producer_epoch": -1}
    ids = []
    for who in ("User:idempotent", "User:writer"):
        resp = await call_as(broker, who, ApiKey.INIT_PRODUCER_ID, 4, body)
        assert (resp.error_code, resp.producer_epoch) == (0, 0)
        ids.append(resp.producer_id)
    assert ids[0] >= 0 and ids[1] == ids[0] + 1
    for who in ("User:mallory", "User:reader"):
        resp = await call_as(broker, who, ApiKey.INIT_PRODUCER_ID, 4, body)
        assert (resp.error_code, resp.producer_id) == (CLUSTER_DENIED, -1)
    # A refusal claims no ids: the next allowed producer gets the next one.
    resp = await call_as(broker, "User:writer", ApiKey.INIT_PRODUCER_ID, 4, body)
    assert resp.producer_id == ids[1] + 1


@pytest_twisted.ensureDeferred
async def test_acl_apis_need_describe_or_alter_on_the_cluster(broker):
    await grant(broker, "User:acl-reader", (RT.CLUSTER, "kafka-cluster", Op.DESCRIBE))
    await grant(broker, "User:acl-admin", (RT.CLUSTER, "kafka-cluster", Op.ALTER))
    describe = {"resource_type_filter": 1, "resource_name_filter": None,
                "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                "operation": 1, "permission_type": 1}
    resp = await call_as(broker, "User:mallory", ApiKey.DESCRIBE_ACLS, 3, describe)
    assert resp.error_code == CLUSTER_DENIED and resp.resources == []
    resp = await call_as(broker, "User:acl-reader", ApiKey.DESCRIBE_ACLS, 3, describe)
    assert resp.error_code == 0
    assert {(r.resource_name, a.principal) for r in resp.resources for a in r.acls} == {
        ("kafka-cluster", "User:acl-reader"), ("kafka-cluster", "User:acl-admin")}

    creation = {"creations": [{"resource_type": 2, "resource_name": "t",
                               "resource_pattern_type": 3, "principal": "User:mallory",
                               "host": "*", "operation": int(Op.ALL), "permission_type": 3}]}
    resp = await call_as(broker, "User:mallory", ApiKey.CREATE_ACLS, 3, creation)
    assert resp.results[0].error_code == CLUSTER_DENIED
    assert await broker.store.exists("/acls/Topic/literal/t") is None
    resp = await call_as(broker, "User:acl-admin", ApiKey.CREATE_ACLS, 3, creation)
    assert resp.results[0].error_code == 0
    assert await broker.store.exists("/acls/Topic/literal/t") is not None

    delete = {"filters": [{**describe, "resource_type_filter": 2}]}
    resp = await call_as(broker, "User:mallory", ApiKey.DELETE_ACLS, 3, delete)
    assert resp.filter_results[0].error_code == CLUSTER_DENIED
    assert await broker.store.exists("/acls/Topic/literal/t") is not None
    resp = await call_as(broker, "User:acl-admin", ApiKey.DELETE_ACLS, 3, delete)
    assert resp.filter_results[0].error_code == 0
    assert [a.resource_name for a in resp.filter_results[0].matching_acls] == ["t"]
    assert await broker.store.exists("/acls/Topic/literal/t") is None


@pytest_twisted.ensureDeferred
async def test_cluster_admin_apis_need_cluster_or_topic_acls(broker):
    """DescribeLogDirs, ListPartitionReassignments: DESCRIBE on the cluster (DescribeCluster:
    nothing, as in Kafka);
    AlterPartitionReassignments, ElectLeaders: ALTER on the cluster; DeleteRecords: DELETE on
    the topic. Each refusal changes nothing."""
    await create_topic(broker, "t")
    for _ in range(2):
        resp = await call_as(broker, "User:admin", ApiKey.PRODUCE, 8, produce_body("t"))
        assert resp.responses[0].partition_responses[0].error_code == 0
    await grant(broker, "User:viewer", (RT.CLUSTER, "kafka-cluster", Op.DESCRIBE))
    await grant(broker, "User:operator", (RT.CLUSTER, "kafka-cluster", Op.ALTER))
    await grant(broker, "User:pruner", (RT.TOPIC, "t", Op.DELETE))
    mallory = "User:mallory"

    # DescribeCluster is answered to anyone, as Kafka does (Metadata tells the same).
    body = {"include_cluster_authorized_operations": False, "endpoint_type": 1}
    for principal in (mallory, "User:viewer"):
        resp = await call_as(broker, principal, ApiKey.DESCRIBE_CLUSTER, 1, body)
        assert resp.error_code == 0 and [b.broker_id for b in resp.brokers] == [1]

    resp = await call_as(broker, mallory, ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    assert resp.error_code == CLUSTER_DENIED and resp.results == []
    # v1 has no error field: Kafka's answer, no directories.
    resp = await call_as(broker, mallory, ApiKey.DESCRIBE_LOG_DIRS, 1, {"topics": None})
    assert resp.results == []
    resp = await call_as(broker, "User:viewer", ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    assert resp.error_code == 0
    assert [t.name for r in resp.results for t in r.topics] == ["t"]

    resp = await call_as(broker, mallory, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                         {"timeout_ms": 10000, "topics": None})
    assert resp.error_code == CLUSTER_DENIED
    resp = await call_as(broker, "User:viewer", ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                         {"timeout_ms": 10000, "topics": None})
    assert resp.error_code == 0 and resp.topics == []

    # Reassigning to the same replica: accepted (and done at once) for the operator only.
    body = {"timeout_ms": 10000, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]}
    for who in (mallory, "User:viewer"):
        resp = await call_as(broker, who, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
        assert resp.error_code == CLUSTER_DENIED
        assert [p.error_code for p in resp.responses[0].partitions] == [CLUSTER_DENIED]
        assert await broker.store.exists("/admin/reassign_partitions") is None
    resp = await call_as(broker, "User:operator", ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
    assert resp.error_code == 0
    assert [p.error_code for p in resp.responses[0].partitions] == [0]

    async def reassignment_done() -> bool:
        return await broker.store.exists("/admin/reassign_partitions") is None

    await eventually(reassignment_done, what="the controller done with the reassignment")

    body = {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}],
            "timeout_ms": 10000}
    resp = await call_as(broker, mallory, ApiKey.ELECT_LEADERS, 2, body)
    assert resp.error_code == CLUSTER_DENIED
    assert [p.error_code for p in resp.replica_election_results[0].partition_result] == [
        CLUSTER_DENIED]
    resp = await call_as(broker, mallory, ApiKey.ELECT_LEADERS, 0, body)  # no top-level code
    assert [p.error_code for p in resp.replica_election_results[0].partition_result] == [
        CLUSTER_DENIED]
    resp = await call_as(broker, "User:operator", ApiKey.ELECT_LEADERS, 2, body)
    assert resp.error_code == 0
    assert [p.error_code for p in resp.replica_election_results[0].partition_result] == [
        ErrorCode.ELECTION_NOT_NEEDED]

    log = broker.replicas.get_partition("t", 0).log
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 1}]}],
            "timeout_ms": 10000}
    resp = await call_as(broker, mallory, ApiKey.DELETE_RECORDS, 2, body)
    assert resp.topics[0].partitions[0].error_code == TOPIC_DENIED
    assert log.log_start_offset == 0
    resp = await call_as(broker, "User:pruner", ApiKey.DELETE_RECORDS, 2, body)
    assert (resp.topics[0].partitions[0].error_code,
            resp.topics[0].partitions[0].low_watermark) == (0, 1)
    assert log.log_start_offset == 1


@pytest_twisted.ensureDeferred
async def test_coordinator_apis_need_group_acls(broker):
    await eventually(lambda: coordinates(broker, "g"), what="the coordinator of g elected")
    await create_topic(broker, "t")
    await grant(broker, "User:member", (RT.GROUP, "g", Op.READ), (RT.TOPIC, "t", Op.READ))
    await grant(broker, "User:viewer", (RT.GROUP, "g", Op.DESCRIBE))
    register = {"group_id": "g", "consumer_id": "c1",
                "topic_count": '{"version":1,"pattern":"static","subscription":{"t":1}}',
                "auto_commit": False, "auto_offset_reset": "smallest",
                "session_timeout_ms": 30000}
    resp = await call_as(broker, "User:mallory", ApiKey.REGISTER_CONSUMER, 1, register)
    assert resp.error_code == GROUP_DENIED
    assert "g" not in shard_service(broker).registries.groups
    member = await connect_as(broker, "User:member")
    try:
        resp = await member.request(ApiKey.REGISTER_CONSUMER, 1, register)
        assert resp.error_code == 0
        session_id = resp.session_id
        assert "c1" in shard_service(broker).registries.groups["g"].members

        # CommitOffsets: GROUP READ first; then only the member itself, on its session.
        commit = {"group_id": "g", "consumer_id": "c1", "session_id": session_id,
                  "offsets": [{"topic": "t", "partition": 0, "offset": 0}]}
        resp = await call_as(broker, "User:mallory", ApiKey.COMMIT_OFFSETS, 1, commit)
        assert resp.error_code == GROUP_DENIED
        # Another principal with READ on the group, even knowing the session id, is refused.
        await grant(broker, "User:other", (RT.GROUP, "g", Op.READ))
        resp = await call_as(broker, "User:other", ApiKey.COMMIT_OFFSETS, 1, commit)
        assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        resp = await call_as(broker, "User:member", ApiKey.COMMIT_OFFSETS, 1, commit)
        assert resp.error_code == 0

        # DescribeConsumerGroups: DESCRIBE on the group; member ids only for those who may.
        resp = await call_as(broker, "User:mallory", ApiKey.DESCRIBE_CONSUMER_GROUPS, 0,
                             {"groups": ["g"]})
        assert resp.groups[0].error_code == GROUP_DENIED and resp.groups[0].members == []
        resp = await call_as(broker, "User:mallory", ApiKey.DESCRIBE_CONSUMER_GROUPS, 0,
                             {"groups": None})
        assert resp.groups == []
        resp = await call_as(broker, "User:viewer", ApiKey.DESCRIBE_CONSUMER_GROUPS, 0,
                             {"groups": ["g"]})
        assert resp.groups[0].error_code == 0
        assert [m.consumer_id for m in resp.groups[0].members] == ["c1"]

        # UnregisterConsumer: GROUP READ, then the member's own session.
        leave = {"group_id": "g", "consumer_id": "c1", "session_id": session_id, "offsets": []}
        resp = await call_as(broker, "User:mallory", ApiKey.UNREGISTER_CONSUMER, 0, leave)
        assert resp.error_code == GROUP_DENIED
        resp = await call_as(broker, "User:other", ApiKey.UNREGISTER_CONSUMER, 0, leave)
        assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert "c1" in shard_service(broker).registries.groups["g"].members
        # The member's own leave: each final offset needs READ on its topic, as a commit's
        # (no READ on "u": refused as such, before asking whether the member owns it).
        leave["offsets"] = [{"topic": "u", "partition": 0, "offset": 5}]
        resp = await call_as(broker, "User:member", ApiKey.UNREGISTER_CONSUMER, 0, leave)
        assert resp.error_code == 0
        assert [(p.topic, p.error_code) for p in resp.partitions] == [("u", TOPIC_DENIED)]
        assert ("u", 0) not in shard_service(broker).registries.groups["g"].offsets
    finally:
        member.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_kafka_group_apis_need_group_acls(broker):
    """Kafka's group protocol: READ on the group to take part (OffsetCommit also READ on each
    topic), DESCRIBE on the group to find its coordinator, fetch its offsets (and DESCRIBE on
    each topic), describe or list it. Refusals change nothing."""
    await eventually(lambda: coordinates(broker, "kg"), what="the coordinator of kg elected")
    await create_topic(broker, "t")
    await grant(broker, "User:member", (RT.GROUP, "kg", Op.READ), (RT.TOPIC, "t", Op.READ))
    await grant(broker, "User:viewer", (RT.GROUP, "kg", Op.DESCRIBE),
                (RT.TOPIC, "t", Op.DESCRIBE))
    mallory, groups = "User:mallory", shard_service(broker, "kg").kafka.groups

    find = {"key_type": 0, "coordinator_keys": ["kg"]}
    resp = await call_as(broker, mallory, ApiKey.FIND_COORDINATOR, 4, find)
    assert [(c.error_code, c.node_id) for c in resp.coordinators] == [(GROUP_DENIED, -1)]
    resp = await call_as(broker, "User:viewer", ApiKey.FIND_COORDINATOR, 4, find)
    assert [(c.error_code, c.node_id) for c in resp.coordinators] == [(0, broker.broker_id)]

    join = {"group_id": "kg", "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"m"}]}
    resp = await call_as(broker, mallory, ApiKey.JOIN_GROUP, 3, join)
    assert resp.error_code == GROUP_DENIED and groups.get("kg") is None
    member = await connect_as(broker, "User:member")
    try:
        # Answered after the group's initial rebalance delay.
        resp = await member.request(ApiKey.JOIN_GROUP, 3, join)
        assert (resp.error_code, resp.generation_id) == (0, 1)
        mid = resp.member_id
        sync = {"group_id": "kg", "generation_id": 1, "member_id": mid,
                "assignments": [{"member_id": mid, "assignment": b"x"}]}
        resp = await call_as(broker, mallory, ApiKey.SYNC_GROUP, 3, sync)
        assert resp.error_code == GROUP_DENIED and groups.get("kg").state.value != "Stable"
        resp = await member.request(ApiKey.SYNC_GROUP, 3, sync)
        assert (resp.error_code, bytes(resp.assignment)) == (0, b"x")

        beat = {"group_id": "kg", "generation_id": 1, "member_id": mid}
        resp = await call_as(broker, mallory, ApiKey.HEARTBEAT, 3, beat)
        assert resp.error_code == GROUP_DENIED
        resp = await member.request(ApiKey.HEARTBEAT, 3, beat)
        assert resp.error_code == 0

        part = [{"partition_index": 0, "committed_offset": 0, "committed_metadata": None}]
        commit = {"group_id": "kg", "generation_id_or_member_epoch": 1, "member_id": mid,
                  "topics": [{"name": "t", "partitions": part},
                             {"name": "u", "partitions": part}]}
        resp = await call_as(broker, mallory, ApiKey.OFFSET_COMMIT, 8, commit)
        assert [p.error_code for t in resp.topics for p in t.partitions] == [GROUP_DENIED] * 2
        assert "kg" not in shard_service(broker, "kg").registries.groups  # nothing written
        resp = await member.request(ApiKey.OFFSET_COMMIT, 8, commit)
        assert [(t.name, t.partitions[0].error_code) for t in resp.topics] == [
            ("t", 0), ("u", TOPIC_DENIED)]

        fetch = {"groups": [{"group_id": "kg", "topics": [
            {"name": "t", "partition_indexes": [0]}]}], "require_stable": False}
        resp = await call_as(broker, mallory, ApiKey.OFFSET_FETCH, 8, fetch)
        assert resp.groups[0].error_code == GROUP_DENIED and resp.groups[0].topics == []
        resp = await call_as(broker, "User:viewer", ApiKey.OFFSET_FETCH, 8, fetch)
        p = resp.groups[0].topics[0].partitions[0]
        assert (resp.groups[0].error_code, p.error_code, p.committed_offset) == (0, 0, 0)

        resp = await call_as(broker, mallory, ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["kg"]})
        assert resp.groups[0].error_code == GROUP_DENIED and resp.groups[0].members == []
        resp = await call_as(broker, "User:viewer", ApiKey.DESCRIBE_GROUPS, 5,
                             {"groups": ["kg"]})
        assert (resp.groups[0].group_state, [m.member_id for m in resp.groups[0].members]) \
            == ("Stable", [mid])
        resp = await call_as(broker, mallory, ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        assert resp.error_code == 0 and resp.groups == []
        resp = await call_as(broker, "User:viewer", ApiKey.LIST_GROUPS, 4,
                             {"states_filter": []})
        assert [g.group_id for g in resp.groups] == ["kg"]

        leave = {"group_id": "kg", "members": [{"member_id": mid}]}
        resp = await call_as(broker, mallory, ApiKey.LEAVE_GROUP, 4, leave)
        assert resp.error_code == GROUP_DENIED and mid in groups.get("kg").members
        resp = await member.request(ApiKey.LEAVE_GROUP, 4, leave)
        assert resp.error_code == 0 and [m.error_code for m in resp.members] == [0]
        assert not groups.get("kg").members
    finally:
        member.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_group_deletion_apis_need_delete_on_the_group(broker):
    """DeleteGroups needs DELETE on each group; OffsetDelete DELETE on its group and READ on
    each topic. Refusals change nothing."""
    await eventually(lambda: coordinates(broker, "g"), what="the coordinator of g elected")
    await create_topic(broker, "t")
    await grant(broker, "User:deleter", (RT.GROUP, "dg", Op.DELETE), (RT.TOPIC, "t", Op.READ))
    await grant(broker, "User:halfway", (RT.GROUP, "dg", Op.DELETE))
    mallory, store = "User:mallory", broker.coordinator.store
    commit = {"group_id": "dg", "generation_id_or_member_epoch": -1, "member_id": "",
              "topics": [{"name": "t", "partitions": [
                  {"partition_index": 0, "committed_offset": 3, "committed_metadata": None}]}]}
    resp = await call_as(broker, "User:admin", ApiKey.OFFSET_COMMIT, 8, commit)
    assert resp.topics[0].partitions[0].error_code == 0
    offset = paths.consumer_offset("dg", "t", 0)

    delete_offsets = {"group_id": "dg", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0}]}]}
    resp = await call_as(broker, mallory, ApiKey.OFFSET_DELETE, 0, delete_offsets)
    assert (resp.error_code, resp.topics) == (GROUP_DENIED, [])
    resp = await call_as(broker, "User:halfway", ApiKey.OFFSET_DELETE, 0, delete_offsets)
    assert (resp.error_code, resp.topics[0].partitions[0].error_code) == (0, TOPIC_DENIED)
    assert await store.exists(offset) is not None
    resp = await call_as(broker, "User:deleter", ApiKey.OFFSET_DELETE, 0, delete_offsets)
    assert (resp.error_code, resp.topics[0].partitions[0].error_code) == (0, 0)
    assert await store.exists(offset) is None

    resp = await call_as(broker, mallory, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["dg"]})
    assert [(r.group_id, r.error_code) for r in resp.results] == [("dg", GROUP_DENIED)]
    assert await store.exists(paths.consumer_group("dg")) is not None
    resp = await call_as(broker, "User:deleter", ApiKey.DELETE_GROUPS, 2,
                         {"groups_names": ["dg"]})
    assert [(r.group_id, r.error_code) for r in resp.results] == [("dg", 0)]
    assert await store.exists(paths.consumer_group("dg")) is None


@pytest_twisted.ensureDeferred
async def test_unchecked_apis_answer_anyone(broker):
    await eventually(lambda: coordinates(broker, "g"), what="the coordinator of g elected")
    resp = await call_as(broker, "User:mallory", ApiKey.API_VERSIONS, 3,
                         {"client_software_name": "t", "client_software_version": "1"})
    keys = {k.api_key for k in resp.api_keys}
    assert resp.error_code == 0 and ApiKey.METADATA in keys
    assert not keys & {4, 5, 6, 7, 56, 63}  # the control plane is not shown to clients
    resp = await call_as(broker, "User:mallory", ApiKey.CLUSTER_METADATA, 1, {"group_id": "g"})
    assert resp.error_code == 0
    resp = await call_as(broker, "User:mallory", ApiKey.PING, 0,
                         {"consumer_id": "x", "num_retries": 0})
    assert resp.error_code == ErrorCode.INVALID_REQUEST


def op_bits(*ops: AclOperation) -> int:
    return sum(1 << int(op) for op in ops)


NOT_ASKED = -2**31


@pytest_twisted.ensureDeferred
async def test_authorized_operations_are_exactly_the_granted_ones(broker):
    """DescribeGroups v3+, DescribeCluster and Metadata v8+ answer, when asked, the
    operations the principal may do (bit n: operation code n); implied operations count
    (WRITE implies DESCRIBE); the cluster's are 0 to who may not DESCRIBE it."""
    await eventually(lambda: coordinates(broker, "og"), what="the coordinator of og elected")
    await create_topic(broker, "ops")
    await grant(broker, "User:ops", (RT.TOPIC, "ops", Op.WRITE),
                (RT.TOPIC, "ops", Op.DESCRIBE_CONFIGS), (RT.GROUP, "og", Op.DESCRIBE),
                (RT.GROUP, "og", Op.DELETE), (RT.CLUSTER, "kafka-cluster", Op.DESCRIBE),
                (RT.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE))
    await grant(broker, "User:little", (RT.TOPIC, "ops", Op.READ), (RT.GROUP, "og", Op.READ),
                (RT.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE))
    topic_ops = op_bits(Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS)
    group_ops = op_bits(Op.DESCRIBE, Op.DELETE)
    cluster_ops = op_bits(Op.DESCRIBE, Op.IDEMPOTENT_WRITE)
    everything = (3576, 328, 8096)  # topic, group, cluster: every reported operation

    async def seen(principal: str, asked: bool) -> tuple:
        md = await call_as(broker, principal, ApiKey.METADATA, 9, {
            "topics": [{"name": "ops"}], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": asked,
            "include_topic_authorized_operations": asked})
        groups = await call_as(broker, principal, ApiKey.DESCRIBE_GROUPS, 5, {
            "groups": ["og"], "include_authorized_operations": asked})
        cluster = await call_as(broker, principal, ApiKey.DESCRIBE_CLUSTER, 0, {
            "include_cluster_authorized_operations": asked})
        (g,) = groups.groups
        return (md.topics[0].error_code, md.topics[0].topic_authorized_operations,
                g.error_code, g.authorized_operations, md.cluster_authorized_operations,
                cluster.cluster_authorized_operations)

    assert await seen("User:ops", True) == (0, topic_ops, 0, group_ops, cluster_ops,
                                            cluster_ops)
    # READ implies DESCRIBE; no DESCRIBE on the cluster: its operations are 0.
    assert await seen("User:little", True) == (0, op_bits(Op.READ, Op.DESCRIBE), 0,
                                               op_bits(Op.READ, Op.DESCRIBE), 0, 0)
    assert await seen("User:admin", True) == (0, everything[0], 0, everything[1],
                                              everything[2], everything[2])
    # Refused resources carry no operations; not asked: INT32_MIN for everyone.
    assert await seen("User:mallory", True) == (TOPIC_DENIED, NOT_ASKED, GROUP_DENIED,
                                                NOT_ASKED, 0, 0)
    assert await seen("User:ops", False) == (0, NOT_ASKED, 0, NOT_ASKED, NOT_ASKED,
                                             NOT_ASKED)


# -- the control plane -------------------------------------------------------------------------


def control_requests(broker) -> list[tuple[int, int, dict]]:
    """One request per control-plane API, each one that would change state if served: stop
    and delete the partition, make it leaderless, move every broker away, shrink the ISR."""
    epoch = broker.registration_epoch
    leader_state = {"partition_index": 0, "controller_epoch": 99, "leader": -1,
                    "leader_epoch": 99, "isr": [], "partition_epoch": 99, "replicas": [1]}
    return [
        (ApiKey.STOP_REPLICA, 3, {"controller_id": 1, "controller_epoch": 99,
                                  "broker_epoch": epoch, "topic_states": [
                                      {"topic_name": "t", "partition_states": [
                                          {"partition_index": 0, "leader_epoch": 99,
                                           "delete_partition": True}]}]}),
        (ApiKey.LEADER_AND_ISR, 5, {"controller_id": 1, "controller_epoch": 99,
                                    "broker_epoch": epoch, "type": 1, "topic_states": [
                                        {"topic_name": "t", "partition_states": [leader_state]}],
                                    "live_leaders": []}),
        (ApiKey.UPDATE_METADATA, 7, {"controller_id": 1, "controller_epoch": 99,
                                     "broker_epoch": epoch, "topic_states": [],
                                     "live_brokers": [{"id": 1, "endpoints": [
                                         {"port": 1, "host": "attacker.example",
                                          "security_protocol": 0}], "rack": None}]}),
        (ApiKey.CONTROLLED_SHUTDOWN, 3, {"broker_id": 1, "broker_epoch": -1}),
        (ApiKey.ALTER_PARTITION, 1, {"broker_id": 1, "broker_epoch": epoch, "topics": [
            {"topic_name": "t", "partitions": [{"partition_index": 0, "leader_epoch": 0,
                                                "new_isr": [1], "partition_epoch": 0}]}]}),
        (ApiKey.BROKER_HEARTBEAT, 0, {"broker_id": 1, "broker_epoch": epoch,
                                      "current_metadata_offset": 0, "want_fence": False,
                                      "want_shut_down": False}),
        (ApiKey.FETCH, 12, fetch_body("t", replica_id=2)),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": 2, "topics": [
            {"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                           "leader_epoch": 0}]}]}),
    ]


def refusal(api: int, resp) -> int:
    """The error a control-plane answer carries (OffsetForLeaderEpoch has it per partition)."""
    if api == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        (code,) = {p.error_code for t in resp.topics for p in t.partitions}
        return code
    return resp.error_code


def partition_state(broker):
    p = broker.replicas.get_partition("t", 0)
    st = broker.cache.topics["t"][0]
    return (p is not None and p.is_leader, st.leader, st.leader_epoch, tuple(st.isr),
            sorted((b.id, b.host, b.port) for b in broker.cache.brokers.values()),
            (broker.config.log_dirs, ))


@pytest_twisted.ensureDeferred
async def test_a_broker_connection_is_not_asked_about_acls(broker):
    # A connection that logged in with the cluster login (over the real SASL exchange, on
    # this PLAINTEXT listener) is a broker's: its follower Fetch is served whatever the ACLs
    # say (the replica of the topic created above became leader through the controller's
    # LeaderAndIsr, sent on such a connection).
    await create_topic(broker, "t")
    resp = await call(broker, ApiKey.FETCH, 12, fetch_body("t", 1), as_broker=True)
    assert resp.error_code == 0
    assert resp.responses[0].partitions[0].error_code == 0


@pytest_twisted.ensureDeferred
async def test_the_closed_control_plane_refuses_every_client_and_changes_nothing(broker):
    await create_topic(broker, "t")
    assert broker.handler.control_plane_closed  # every broker's: brokers log in to each other
    # Even a super user and a principal granted CLUSTER_ACTION are clients, not brokers.
    await grant(broker, "User:ops", (RT.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION))
    before = partition_state(broker)
    for who in ("User:mallory", "User:ops", "User:admin"):
        for api, version, body in control_requests(broker):
            resp = await call_as(broker, who, api, version, body)
            assert refusal(api, resp) == CLUSTER_DENIED, (who, ApiKey(api).name)
    assert partition_state(broker) == before
    assert broker.replicas.get_partition("t", 0) is not None
    # A broker connection is served (here: a heartbeat for an unknown broker is answered by
    # the controller, not refused at the gate).
    resp = await call_as(broker, "User:__sluice_broker", ApiKey.BROKER_HEARTBEAT, 0, {
        "broker_id": 7, "broker_epoch": 1, "current_metadata_offset": 0, "want_fence": False,
        "want_shut_down": False}, is_broker=True)
    assert resp.error_code != CLUSTER_DENIED
    proto = await connect_as(broker, "User:__sluice_broker", is_broker=True)
    try:
        resp = await proto.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "b",
                                                            "client_software_version": "1"})
        assert {4, 5, 6, 7, 56, 63} <= {k.api_key for k in resp.api_keys}
    finally:
        proto.transport.loseConnection()
