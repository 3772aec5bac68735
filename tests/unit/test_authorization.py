"""The request handler's authorization table and per-connection access
(``broker_core.server.authorization``): which requests are the control plane, who is
unrestricted, the CREATE rule of topic creation, and the authorized-operations bit fields."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker_core.security.acl import (
    AccessEntry,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from broker_core.security.principal import Principal, plaintext
from broker_core.server.authorization import (
    CONTROL_PLANE,
    RULES,
    UNCHECKED,
    USER_ADMIN,
    Access,
    authorized_operations,
    cluster_authorized_operations,
    is_control_plane,
    may_manage_users,
)
from broker_core.wire.apis import SUPPORTED, ApiKey

Op, RT = AclOperation, ResourceType


@pytest.mark.parametrize("api", sorted(CONTROL_PLANE))
def test_control_plane_apis_are_control_plane_whatever_the_body(api):
    assert is_control_plane(api, SimpleNamespace())


@pytest.mark.parametrize("api", [ApiKey.FETCH, ApiKey.OFFSET_FOR_LEADER_EPOCH])
def test_a_followers_requests_are_control_plane_a_consumers_are_not(api):
    assert is_control_plane(api, SimpleNamespace(replica_id=0))
    assert is_control_plane(api, SimpleNamespace(replica_id=3))
    assert not is_control_plane(api, SimpleNamespace(replica_id=-1))
    assert not is_control_plane(api, SimpleNamespace(replica_id=-2))


def test_every_served_api_is_classified_once():
    groups = [set(RULES), set(CONTROL_PLANE), set(UNCHECKED)]
    served = set(SUPPORTED)
    assert set().union(*groups) == served
    assert sum(len(g) for g in groups) == len(served)


def alice_conn():
    sec = plaintext(peer_host="10.0.0.5")
    sec.authenticate(Principal("User", "alice"))
    return sec


def test_no_authorizer_and_broker_connections_are_unrestricted():
    assert Access(None, alice_conn()).allows(Op.DELETE, RT.TOPIC, "t")
    broker = plaintext()
    broker.authenticate(Principal("User", "__sluice_broker"), is_broker=True)
    assert Access(Authorizer(), broker).allows(Op.ALTER, RT.CLUSTER, "kafka-cluster")
    assert not Access(Authorizer(), alice_conn()).allows(Op.READ, RT.TOPIC, "t")


def test_access_asks_with_the_connections_principal_and_host():
    a = Authorizer()
    a.replace_resource(ResourcePattern(RT.TOPIC, PatternType.LITERAL, "t"), [
        AccessEntry("User:alice", "10.0.0.5", Op.READ, AclPermission.ALLOW)])
    assert Access(a, alice_conn()).allows_topic(RULES[ApiKey.FETCH], "t")
    elsewhere = plaintext(peer_host="10.0.0.6")
    elsewhere.authenticate(Principal("User", "alice"))
    assert not Access(a, elsewhere).allows_topic(RULES[ApiKey.FETCH], "t")


def test_topic_creation_needs_create_on_the_cluster_or_the_topic():
    a = Authorizer()
    access = Access(a, alice_conn())
    assert not access.may_create_topic("t")
    a.replace_resource(ResourcePattern(RT.TOPIC, PatternType.PREFIXED, "team-"), [
        AccessEntry("User:alice", "*", Op.CREATE, AclPermission.ALLOW)])
    assert access.may_create_topic("team-x") and not access.may_create_topic("t")
    a.replace_resource(ResourcePattern(RT.CLUSTER, PatternType.LITERAL, "kafka-cluster"), [
        AccessEntry("User:alice", "*", Op.CREATE, AclPermission.ALLOW)])
    assert access.may_create_topic("t")


def test_without_an_authorizer_only_brokers_and_super_users_manage_users():
    """An open cluster (no ACLs) must not let an anonymous client set the password of the
    user it wants to become, list the users or fill the user table."""
    anonymous = plaintext(peer_host="10.0.0.9")
    broker = plaintext()
    broker.authenticate(Principal("User", "__sluice_broker"), is_broker=True)
    supers = frozenset({"User:admin"})
    admin = plaintext()
    admin.authenticate(Principal("User", "admin"))
    for op in (Op.DESCRIBE, Op.ALTER):
        assert not may_manage_users(Access(None, anonymous), op, supers)
        assert not may_manage_users(Access(None, alice_conn()), op, supers)
        assert may_manage_users(Access(None, broker), op, frozenset())
        assert may_manage_users(Access(None, admin), op, supers)
    # With an authorizer, its answer (super.users are its own).
    assert not may_manage_users(Access(Authorizer(), alice_conn()), Op.ALTER, supers)
    assert may_manage_users(Access(Authorizer(super_users=["User:alice"]), alice_conn()),
                            Op.ALTER, frozenset())
    assert USER_ADMIN == {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                          ApiKey.ALTER_USER_SCRAM_CREDENTIALS}


@pytest.mark.parametrize("api", sorted(USER_ADMIN))
def test_the_handler_refuses_the_user_apis_to_an_anonymous_client_without_acls(api):
    """Refused before the handler runs: the store (None here) is never touched."""
    from broker_core.server.handlers import RequestHandler
    from broker_core.wire.errors import ErrorCode

    handler = RequestHandler(broker_id=1, config=None, cache=None, replicas=None, store=None,
                             clock=None, broker_epoch=lambda: 0,
                             super_users=frozenset({"User:admin"}))
    header = SimpleNamespace(api_key=api, api_version=0, correlation_id=1)
    body = SimpleNamespace(users=None, deletions=[], upsertions=[
        SimpleNamespace(name="admin", mechanism=2, iterations=4096, salt=b"s" * 16,
                        salted_password=b"p" * 64)])
    proto = SimpleNamespace(security=plaintext(peer_host="10.0.0.9"))
    answer = handler(SimpleNamespace(header=header, body=body), proto)
    assert isinstance(answer, dict)
    if api == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        assert [r["error_code"] for r in answer["results"]] == [
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    else:
        assert answer["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # The handler's own guard agrees.
    assert not handler.authorize_cluster(proto, "ALTER")


# -- authorized operations ---------------------------------------------------------------------------

def bits(*ops: AclOperation) -> int:
    return sum(1 << int(op) for op in ops)


#: Every operation Kafka reports per resource type, as the bit fields a Kafka broker without an
#: authorizer answers (READ is code 3: bit 3 is 8).
ALL_TOPIC, ALL_GROUP, ALL_CLUSTER = 3576, 328, 8096


def test_without_an_authorizer_every_reported_operation_is_authorized():
    access = Access(None, alice_conn())
    assert authorized_operations(access, RT.TOPIC, "t", True) == ALL_TOPIC == bits(
        Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS)
    assert authorized_operations(access, RT.GROUP, "g", True) == ALL_GROUP == bits(
        Op.READ, Op.DELETE, Op.DESCRIBE)
    assert cluster_authorized_operations(access, True) == ALL_CLUSTER == bits(
        Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE)


def test_not_asked_is_int32_min_whoever_asks():
    for access in (Access(None, alice_conn()), Access(Authorizer(), alice_conn())):
        assert authorized_operations(access, RT.TOPIC, "t", False) == -2**31
        assert authorized_operations(access, RT.GROUP, "g", False) == -2**31
        assert cluster_authorized_operations(access, False) == -2**31


def test_the_bits_are_exactly_the_operations_the_acls_allow():
    a = Authorizer()
    access = Access(a, alice_conn())
    assert authorized_operations(access, RT.TOPIC, "t", True) == 0
    a.replace_resource(ResourcePattern(RT.TOPIC, PatternType.PREFIXED, "t"), [
        AccessEntry("User:alice", "*", Op.WRITE, AclPermission.ALLOW),
        AccessEntry("User:alice", "*", Op.ALTER_CONFIGS, AclPermission.ALLOW)])
    # WRITE implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS (as Kafka's authorizer).
    assert authorized_operations(access, RT.TOPIC, "t", True) == bits(
        Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)
    a.replace_resource(ResourcePattern(RT.TOPIC, PatternType.LITERAL, "t"), [
        AccessEntry("User:alice", "*", Op.DESCRIBE_CONFIGS, AclPermission.DENY)])
    assert authorized_operations(access, RT.TOPIC, "t", True) == bits(
        Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS)
    a.replace_resource(ResourcePattern(RT.GROUP, PatternType.LITERAL, "g"), [
        AccessEntry("User:alice", "*", Op.ALL, AclPermission.ALLOW)])
    assert authorized_operations(access, RT.GROUP, "g", True) == ALL_GROUP
    assert authorized_operations(access, RT.GROUP, "other", True) == 0
    # Operations on the cluster are answered only to who may DESCRIBE it, as Kafka.
    a.replace_resource(ResourcePattern(RT.CLUSTER, PatternType.LITERAL, "kafka-cluster"), [
        AccessEntry("User:alice", "*", Op.IDEMPOTENT_WRITE, AclPermission.ALLOW)])
    assert cluster_authorized_operations(access, True) == 0
    a.replace_resource(ResourcePattern(RT.CLUSTER, PatternType.LITERAL, "kafka-cluster"), [
        AccessEntry("User:alice", "*", Op.IDEMPOTENT_WRITE, AclPermission.ALLOW),
        AccessEntry("User:alice", "*", Op.DESCRIBE, AclPermission.ALLOW)])
    assert cluster_authorized_operations(access, True) == bits(Op.IDEMPOTENT_WRITE, Op.DESCRIBE)
    # A super user and a broker connection: everything.
    assert cluster_authorized_operations(
        Access(Authorizer(super_users=["User:alice"]), alice_conn()), True) == ALL_CLUSTER
    broker = plaintext()
    broker.authenticate(Principal("User", "__sluice_broker"), is_broker=True)
    assert authorized_operations(Access(a, broker), RT.TOPIC, "x", True) == ALL_TOPIC
