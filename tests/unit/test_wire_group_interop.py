"""Kafka's group APIs against an independent reading of Kafka's specs, kafka-python 3.x's
protocol classes: every version Sluice serves, requests kafka-python builds decode here to
the fields it set, and responses encoded here decode in kafka-python."""

from __future__ import annotations

import struct

import pytest

from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.messages.leave_group import members_of
from broker_core.wire.messages.offset_fetch import groups_of

kp_consumer = pytest.importorskip(
    "kafka.protocol.consumer", reason="kafka-python 3.x protocol classes are not installed")
kp_metadata = pytest.importorskip("kafka.protocol.metadata")
kp_admin = pytest.importorskip("kafka.protocol.admin")


def kp_frame(request, correlation_id=7) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="kafka-python")
    return bytes(request.encode(header=True))


def versions(key):
    s = apis.SUPPORTED[key]
    return range(s.min_version, s.max_version + 1)


def decode_kp(cls, key: ApiKey, version: int, body: dict):
    data = b"".join(apis.encode_response(int(key), version, 9, body))
    resp = cls.decode(data, version=version, header=True)
    assert resp.header.correlation_id == 9
    return resp


@pytest.mark.parametrize("version", versions(ApiKey.FIND_COORDINATOR))
def test_find_coordinator(version):
    R = kp_metadata.FindCoordinatorRequest[version]
    kwargs = {"coordinator_keys": ["g1", "g2"]} if version >= 4 else {"key": "g1"}
    if version >= 1:
        kwargs["key_type"] = 0
    body = apis.decode_request(kp_frame(R(**kwargs))).body
    if version >= 4:
        assert body.coordinator_keys == ["g1", "g2"]
        answer = {"coordinators": [{"key": "g1", "node_id": 2, "host": "h", "port": 9092,
                                    "error_code": 0, "error_message": None}]}
    else:
        assert body.key == "g1"
        answer = {"error_code": 0, "error_message": None, "node_id": 2, "host": "h",
                  "port": 9092}
    resp = decode_kp(kp_metadata.FindCoordinatorResponse, ApiKey.FIND_COORDINATOR, version,
                     answer)
    got = resp.coordinators[0] if version >= 4 else resp
    assert (got.node_id, got.host, got.port) == (2, "h", 9092)


@pytest.mark.parametrize("version", versions(ApiKey.JOIN_GROUP))
def test_join_group(version):
    R = kp_consumer.JoinGroupRequest[version]
    P = kp_consumer.JoinGroupRequest.JoinGroupRequestProtocol
    body = apis.decode_request(kp_frame(R(
        group_id="g", session_timeout_ms=6000, rebalance_timeout_ms=30000, member_id="m-1",
        group_instance_id=None, protocol_type="consumer",
        protocols=[P(name="range", metadata=b"\x00\x01"), P(name="roundrobin", metadata=b"")],
        reason="starting"))).body
    assert (body.group_id, body.session_timeout_ms, body.member_id, body.protocol_type) == (
        "g", 6000, "m-1", "consumer")
    assert [(p.name, bytes(p.metadata)) for p in body.protocols] == [
        ("range", b"\x00\x01"), ("roundrobin", b"")]
    if version >= 1:
        assert body.rebalance_timeout_ms == 30000
    resp = decode_kp(kp_consumer.JoinGroupResponse, ApiKey.JOIN_GROUP, version, {
        "error_code": 0, "generation_id": 3, "protocol_type": "consumer",
        "protocol_name": "range", "leader": "m-1", "member_id": "m-1",
        "members": [{"member_id": "m-1", "group_instance_id": None, "metadata": b"md"}]})
    assert (resp.generation_id, resp.protocol_name, resp.leader, resp.member_id) == (
        3, "range", "m-1", "m-1")
    assert [(m.member_id, bytes(m.metadata)) for m in resp.members] == [("m-1", b"md")]


@pytest.mark.parametrize("version", versions(ApiKey.SYNC_GROUP))
def test_sync_group(version):
    R = kp_consumer.SyncGroupRequest[version]
    A = kp_consumer.SyncGroupRequest.SyncGroupRequestAssignment
    body = apis.decode_request(kp_frame(R(
        group_id="g", generation_id=3, member_id="m-1", group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
        assignments=[A(member_id="m-1", assignment=b"a1")]))).body
    assert (body.group_id, body.generation_id, body.member_id) == ("g", 3, "m-1")
    assert [(a.member_id, bytes(a.assignment)) for a in body.assignments] == [("m-1", b"a1")]
    if version >= 5:
        assert (body.protocol_type, body.protocol_name) == ("consumer", "range")
    resp = decode_kp(kp_consumer.SyncGroupResponse, ApiKey.SYNC_GROUP, version, {
        "error_code": 0, "protocol_type": "consumer", "protocol_name": "range",
        "assignment": b"a1"})
    assert bytes(resp.assignment) == b"a1"


@pytest.mark.parametrize("version", versions(ApiKey.HEARTBEAT))
def test_heartbeat(version):
    R = kp_consumer.HeartbeatRequest[version]
    body = apis.decode_request(kp_frame(R(group_id="g", generation_id=3, member_id="m-1",
                                          group_instance_id=None))).body
    assert (body.group_id, body.generation_id, body.member_id) == ("g", 3, "m-1")
    resp = decode_kp(kp_consumer.HeartbeatResponse, ApiKey.HEARTBEAT, version,
                     {"error_code": 27})
    assert resp.error_code == 27


@pytest.mark.parametrize("version", versions(ApiKey.LEAVE_GROUP))
def test_leave_group(version):
    R = kp_consumer.LeaveGroupRequest[version]
    if version >= 3:
        M = kp_consumer.LeaveGroupRequest.MemberIdentity
        req = R(group_id="g", members=[M(member_id="m-1", group_instance_id=None),
                                       M(member_id="m-2", group_instance_id=None)])
    else:
        req = R(group_id="g", member_id="m-1")
    body = apis.decode_request(kp_frame(req)).body
    want = [("m-1", None), ("m-2", None)] if version >= 3 else [("m-1", None)]
    assert members_of(version, body) == want
    members = [{"member_id": "m-1", "group_instance_id": None, "error_code": 25}]
    resp = decode_kp(kp_consumer.LeaveGroupResponse, ApiKey.LEAVE_GROUP, version, {
        "error_code": 0, **({"members": members} if version >= 3 else {})})
    assert resp.error_code == 0
    if version >= 3:
        assert [(m.member_id, m.error_code) for m in resp.members] == [("m-1", 25)]


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_COMMIT))
def test_offset_commit(version):
    R = kp_consumer.OffsetCommitRequest[version]
    T = kp_consumer.OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    body = apis.decode_request(kp_frame(R(
        group_id="g", generation_id_or_member_epoch=3, member_id="m-1",
        group_instance_id=None, retention_time_ms=-1,
        topics=[T(name="t", partitions=[P(partition_index=4, committed_offset=99,
                                          committed_leader_epoch=-1, commit_timestamp=-1,
                                          committed_metadata="meta")])]))).body
    assert (body.group_id, body.generation_id_or_member_epoch, body.member_id) == ("g", 3,
                                                                                  "m-1")
    p = body.topics[0].partitions[0]
    assert (body.topics[0].name, p.partition_index, p.committed_offset,
            p.committed_metadata) == ("t", 4, 99, "meta")
    resp = decode_kp(kp_consumer.OffsetCommitResponse, ApiKey.OFFSET_COMMIT, version, {
        "topics": [{"name": "t", "partitions": [{"partition_index": 4, "error_code": 0}]}]})
    assert resp.topics[0].partitions[0].partition_index == 4


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FETCH))
def test_offset_fetch(version):
    R = kp_consumer.OffsetFetchRequest[version]
    if version >= 8:
        G = kp_consumer.OffsetFetchRequest.OffsetFetchRequestGroup
        GT = G.OffsetFetchRequestTopics
        req = R(groups=[G(group_id="g", topics=[GT(name="t", partition_indexes=[0, 1])]),
                        G(group_id="h", topics=None)], require_stable=False)
    else:
        T = kp_consumer.OffsetFetchRequest.OffsetFetchRequestTopic
        req = R(group_id="g", topics=[T(name="t", partition_indexes=[0, 1])],
                require_stable=False)
    body = apis.decode_request(kp_frame(req)).body
    want = [("g", [("t", [0, 1])])] + ([("h", None)] if version >= 8 else [])
    assert groups_of(version, body) == want
    parts = [{"partition_index": 0, "committed_offset": 42, "metadata": "",
              "error_code": 0}]
    if version >= 8:
        answer = {"groups": [{"group_id": "g", "error_code": 0,
                              "topics": [{"name": "t", "partitions": parts}]}]}
    else:
        answer = {"topics": [{"name": "t", "partitions": parts}], "error_code": 0}
    resp = decode_kp(kp_consumer.OffsetFetchResponse, ApiKey.OFFSET_FETCH, version, answer)
    topics = resp.groups[0].topics if version >= 8 else resp.topics
    assert topics[0].partitions[0].committed_offset == 42


@pytest.mark.parametrize("version", versions(ApiKey.LIST_GROUPS))
def test_list_groups(version):
    R = kp_admin.ListGroupsRequest[version]
    body = apis.decode_request(kp_frame(R(states_filter=["Stable"], types_filter=[]))).body
    if version >= 4:
        assert body.states_filter == ["Stable"]
    resp = decode_kp(kp_admin.ListGroupsResponse, ApiKey.LIST_GROUPS, version, {
        "error_code": 0, "groups": [{"group_id": "g", "protocol_type": "consumer",
                                     "group_state": "Stable", "group_type": "classic"}]})
    assert [(g.group_id, g.protocol_type) for g in resp.groups] == [("g", "consumer")]


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_GROUPS))
def test_describe_groups(version):
    R = kp_admin.DescribeGroupsRequest[version]
    body = apis.decode_request(kp_frame(R(groups=["g", "h"],
                                          include_authorized_operations=False))).body
    assert body.groups == ["g", "h"]
    resp = decode_kp(kp_admin.DescribeGroupsResponse, ApiKey.DESCRIBE_GROUPS, version, {
        "groups": [{"error_code": 0, "group_id": "g", "group_state": "Stable",
                    "protocol_type": "consumer", "protocol_data": "range", "members": [
                        {"member_id": "m-1", "group_instance_id": None, "client_id": "c",
                         "client_host": "/127.0.0.1", "member_metadata": b"md",
                         "member_assignment": b"as"}]}]})
    g = resp.groups[0]
    assert (g.group_id, g.group_state, g.protocol_data) == ("g", "Stable", "range")
    assert bytes(g.members[0].member_assignment) == b"as"


def test_heartbeat_v0_known_bytes():
    """HeartbeatRequest v0 written by hand from the protocol guide."""
    def s(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()
    frame = (struct.pack(">hhi", 12, 0, 5) + s("cli") + s("grp") + struct.pack(">i", 7)
             + s("m-1"))
    req = apis.decode_request(frame)
    assert (req.body.group_id, req.body.generation_id, req.body.member_id) == ("grp", 7, "m-1")
    out = b"".join(apis.encode_response(12, 0, 5, {"error_code": 25}))
    assert out == struct.pack(">ih", 5, 25)


@pytest.mark.parametrize("version", versions(ApiKey.DELETE_GROUPS))
def test_delete_groups(version):
    R = kp_admin.DeleteGroupsRequest[version]
    body = apis.decode_request(kp_frame(R(groups_names=["g", "h"]))).body
    assert body.groups_names == ["g", "h"]
    resp = decode_kp(kp_admin.DeleteGroupsResponse, ApiKey.DELETE_GROUPS, version, {
        "throttle_time_ms": 0, "results": [{"group_id": "g", "error_code": 0},
                                           {"group_id": "h", "error_code": 68}]})
    assert [(r.group_id, r.error_code) for r in resp.results] == [("g", 0), ("h", 68)]


def test_offset_delete():
    T = kp_consumer.OffsetDeleteRequest.OffsetDeleteRequestTopic
    R = kp_consumer.OffsetDeleteRequest[0]
    frame = kp_frame(R(group_id="g", topics=[T(name="t", partitions=[
        T.OffsetDeleteRequestPartition(partition_index=1),
        T.OffsetDeleteRequestPartition(partition_index=3)])]))
    body = apis.decode_request(frame).body
    assert body.group_id == "g"
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in body.topics] == [
        ("t", [1, 3])]
    resp = decode_kp(kp_consumer.OffsetDeleteResponse, ApiKey.OFFSET_DELETE, 0, {
        "error_code": 0, "throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
            {"partition_index": 1, "error_code": 0},
            {"partition_index": 3, "error_code": 86}]}]})
    assert resp.error_code == 0
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
        (1, 0), (3, 86)]
