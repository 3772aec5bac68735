"""The newer versions of two cluster administration APIs: AlterPartitionReassignments v1
(KIP-860's ``allow_replication_factor_change``) and DescribeCluster v2 (KIP-1073's fenced
brokers), on the in-memory store with no controller acting, through the codec both ways; and
the quorum listener, which keeps AlterPartitionReassignments at v0."""

from __future__ import annotations

import pytest

from broker_core import metadata_paths as paths
from broker_core.raft.listener_admin import ADMIN_VERSIONS
from broker_core.server.cluster_admin import ClusterAdminApis
from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import alter_partition_reassignments, describe_cluster
from tests.support.controller_harness import make, run
from tests.support.memory_store import MemoryStore
from tests.support.wire_bytes import (
    NO_TAGS,
    compact_string,
    i8,
    i16,
    i32,
    joined,
    request_header_v2,
)


@pytest.fixture
def store():
    """Brokers 1-3; topic ``t`` with partitions 0-2 on all three."""
    s, _, _, _ = make(partitions=3, store=MemoryStore())
    return s


class Header:
    def __init__(self, version: int) -> None:
        self.api_version = version


class Endpoint:
    def __init__(self, broker_id: int) -> None:
        self.id, self.rack = broker_id, None


class Cache:
    controller_id = 2


class Security:
    listener = "PLAINTEXT"


class Access:
    security = Security()


def admin(store) -> ClusterAdminApis:
    return ClusterAdminApis(
        store=store, replicas=None, cache=Cache(), clock=None, cluster_id=lambda: "c",
        brokers_on=lambda listener: [(Endpoint(i), ("127.0.0.1", 9090 + i)) for i in (1, 2, 3)])


def pending(store) -> dict:
    v = store.nodes.get(paths.REASSIGN_PARTITIONS)
    return {} if v is None else paths.PartitionReassignment.from_bytes(v[0]).partitions


def reassign(store, version: int, targets: dict, **flags):
    """One AlterPartitionReassignments request at ``version``, encoded and decoded as on the
    wire both ways: the decoded response."""
    body = {"topics": [{"name": "t", "partitions": [
        {"partition_index": p, "replicas": r} for p, r in targets.items()]}], **flags}
    frame = b"".join(apis.encode_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, 1,
                                         "admin", body))
    request = apis.decode_request(frame)
    answer = run(admin(store).alter_partition_reassignments(request.header, request.body))
    out = b"".join(apis.encode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, 1,
                                        answer))
    return apis.decode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, out)[1]


def codes(resp) -> dict:
    return {p.partition_index: (ErrorCode(p.error_code).name, p.error_message)
            for t in resp.responses for p in t.partitions}


def test_v1_refuses_a_change_of_replication_factor_per_partition_when_not_allowed(store):
    resp = reassign(store, 1, {0: [3, 2], 1: [2, 3, 1], 2: [1, 2, 3]},
                    allow_replication_factor_change=False)
    assert resp.error_code == 0 and resp.allow_replication_factor_change is False
    found = codes(resp)
    assert found[0] == ("INVALID_REPLICATION_FACTOR",
                        "t-0: the target has 2 replicas, the partition 3, and the request "
                        "does not allow a change of replication factor")
    assert found[1] == found[2] == ("NONE", None)
    # The refused partition is not written; the others (same size, any order) are.
    assert pending(store) == {("t", 1): [2, 3, 1], ("t", 2): [1, 2, 3]}


def test_the_size_compared_is_the_one_before_an_ongoing_reassignment(store):
    # Allowed: t-0 moving from three replicas to one.
    assert codes(reassign(store, 1, {0: [1]})) == {0: ("NONE", None)}
    # A new target for it is measured against the three it had, not the one it moves to.
    resp = reassign(store, 1, {0: [2]}, allow_replication_factor_change=False)
    assert codes(resp)[0][0] == "INVALID_REPLICATION_FACTOR"
    assert codes(reassign(store, 1, {0: [3, 2, 1]}, allow_replication_factor_change=False)) \
        == {0: ("NONE", None)}
    assert pending(store) == {("t", 0): [3, 2, 1]}


def test_v1_allowing_the_change_and_v0_behave_as_before(store):
    resp = reassign(store, 1, {0: [3]}, allow_replication_factor_change=True)
    assert codes(resp) == {0: ("NONE", None)} and resp.allow_replication_factor_change
    assert codes(reassign(store, 0, {1: [2]})) == {1: ("NONE", None)}
    assert pending(store) == {("t", 0): [3], ("t", 1): [2]}


def test_the_earlier_checks_come_first_and_a_cancel_has_no_size(store):
    resp = reassign(store, 1, {0: [1, 1], 1: [], 2: None},
                    allow_replication_factor_change=False)
    assert {p: c for p, (c, _) in codes(resp).items()} == {
        0: "INVALID_REPLICA_ASSIGNMENT", 1: "INVALID_REPLICA_ASSIGNMENT",
        2: "NO_REASSIGNMENT_IN_PROGRESS"}
    assert pending(store) == {}


def test_v0_cannot_carry_the_flag():
    # A v0 request has no such field: encoding one that says false is an error, not a
    # silent change of meaning (Kafka's client refuses it the same way).
    with pytest.raises(Exception, match="allow_replication_factor_change"):
        apis.encode_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1, "admin",
                            {"allow_replication_factor_change": False, "topics": []})


def describe(version: int, **flags):
    body = {"include_cluster_authorized_operations": False, **flags}
    frame = b"".join(apis.encode_request(ApiKey.DESCRIBE_CLUSTER, version, 1, "a", body))
    request = apis.decode_request(frame)
    answer = admin(None).describe_cluster(request.header, request.body, Access())
    out = b"".join(apis.encode_response(ApiKey.DESCRIBE_CLUSTER, version, 1, answer))
    return apis.decode_response(ApiKey.DESCRIBE_CLUSTER, version, out)[1]


@pytest.mark.parametrize("include_fenced", [False, True])
def test_describe_cluster_v2_names_every_broker_unfenced(include_fenced):
    resp = describe(2, include_fenced_brokers=include_fenced)
    assert resp.error_code == 0 and resp.controller_id == 2
    assert [(b.broker_id, b.port, b.is_fenced) for b in resp.brokers] == [
        (1, 9091, False), (2, 9092, False), (3, 9093, False)]
    assert [(b.broker_id, b.port) for b in describe(1).brokers] == [
        (b.broker_id, b.port) for b in resp.brokers]


def test_describe_cluster_v2_still_refuses_controller_endpoints():
    resp = describe(2, endpoint_type=describe_cluster.ENDPOINT_CONTROLLERS,
                    include_fenced_brokers=True)
    assert resp.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE and resp.brokers == []


def test_the_quorum_listener_keeps_reassignments_at_v0():
    assert ADMIN_VERSIONS[ApiKey.ALTER_PARTITION_REASSIGNMENTS] == (0, 0)
    spec = apis.SUPPORTED[ApiKey.ALTER_PARTITION_REASSIGNMENTS]
    assert (spec.min_version, spec.max_version) == (0, 1)
    assert alter_partition_reassignments.REQUEST.max_version == 1


def test_describe_cluster_v2_bytes_as_kafka_lays_them_out():
    frame = (request_header_v2(ApiKey.DESCRIBE_CLUSTER, 2, 4, "adm")
             + b"\x00" + i8(1) + b"\x01" + NO_TAGS)     # no ops, brokers, include fenced
    body = apis.decode_request(frame).body
    assert (body.endpoint_type, body.include_fenced_brokers) == (1, True)
    expected = (i32(4) + NO_TAGS
                + i32(0) + i16(0) + b"\x00" + i8(1)      # throttle, error, null message, type
                + compact_string("cid") + i32(2) + bytes([1 + 1])
                + i32(2) + compact_string("h") + i32(9092) + b"\x00"   # no rack
                + b"\x00" + NO_TAGS                      # is_fenced false
                + i32(-2147483648) + NO_TAGS)
    answer = {"error_code": 0, "endpoint_type": 1, "cluster_id": "cid", "controller_id": 2,
              "brokers": [{"broker_id": 2, "host": "h", "port": 9092, "is_fenced": False}]}
    assert joined(apis.encode_response(ApiKey.DESCRIBE_CLUSTER, 2, 4, answer)) == expected


def test_alter_partition_reassignments_v1_bytes_as_kafka_lays_them_out():
    frame = (request_header_v2(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, 6, "adm")
             + i32(30000) + b"\x00"                      # timeout, allow: false
             + bytes([1 + 1]) + compact_string("t")      # one topic
             + bytes([1 + 1]) + i32(0) + bytes([2 + 1]) + i32(2) + i32(3) + NO_TAGS
             + NO_TAGS + NO_TAGS)
    body = apis.decode_request(frame).body
    assert body.allow_replication_factor_change is False
    assert list(body.topics[0].partitions[0].replicas) == [2, 3]
    assert joined(apis.encode_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, 6, "adm",
                                      body)) == frame
    expected = (i32(6) + NO_TAGS + i32(0) + b"\x00"      # throttle, allow echoed: false
                + i16(0) + b"\x00" + b"\x01" + NO_TAGS)  # error, null message, no topics
    answer = {"allow_replication_factor_change": False, "error_code": 0, "responses": []}
    assert joined(apis.encode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, 6,
                                       answer)) == expected


def test_an_error_answer_at_v1_echoes_the_flag():
    frame = b"".join(apis.encode_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, 3, "a", {
        "allow_replication_factor_change": False,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]}))
    out = b"".join(apis.error_response(apis.decode_request(frame),
                                       ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    _, resp = apis.decode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, out)
    assert resp.allow_replication_factor_change is False
    assert [p.error_code for p in resp.responses[0].partitions] == [
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
