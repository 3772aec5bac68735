"""The request handler's authorization table and per-connection access
(``broker_core.server.authorization``): which requests are the control plane, who is
unrestricted, and the CREATE rule of topic creation."""

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
    Access,
    is_control_plane,
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
