"""The quorum's admin APIs on the wire: DescribeQuorum (55, with Sluice's tagged TargetVoters)
and AlterPartitionReassignments (45, defined here for voter reassignment), mapped to
and from the Raft core's values; bytes built by hand from Kafka's field order; and the generated
codec checked against the reference implementation for every only-defined API."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.raft import wire
from broker_core.raft.messages import (
    NO_LEADER,
    AlterVotersRequest,
    AlterVotersResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ReplicaState,
)
from broker_core.wire import apis
from broker_core.wire.apis import DEFINED, ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import alter_partition_reassignments, quorum
from broker_core.wire.schema import INT16, INT64, Array, Field, Message
from tests.support.wire_bytes import NO_TAGS, compact_string, i16, i32, joined, request_header_v2
from tests.support.wire_reference import reference_decode, reference_encode
from tests.support.wire_samples import populated

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
error_codes = st.sampled_from(list(ErrorCode))
replica_states = st.builds(ReplicaState, int32s, int64s, int64s, int64s)
states = st.lists(replica_states, max_size=4).map(tuple)

alter_requests = st.builds(AlterVotersRequest, st.none() | st.lists(int32s, max_size=6).map(tuple),
                           int32s)
alter_responses = st.builds(AlterVotersResponse, error_codes, int32s, int32s)
describe_responses = st.builds(DescribeQuorumResponse, error_codes, int32s, int32s, int64s,
                               states, st.none() | states, states)
admin_requests = alter_requests | st.just(DescribeQuorumRequest())
admin_responses = alter_responses | describe_responses


@given(admin_requests, int32s)
def test_every_admin_request_round_trips_through_bytes(message, correlation_id):
    frame = joined(wire.encode_request(message, correlation_id, "admin"))
    assert wire.decode_request(frame) == (correlation_id, message)


@given(admin_responses, int32s)
def test_every_admin_response_round_trips_through_bytes(message, correlation_id):
    frame = joined(wire.encode_response(message, correlation_id))
    assert wire.decode_response(wire.api_key_of(message), frame) == (correlation_id, message)


def test_alter_partition_reassignments_request_bytes_by_hand():
    # v0, flexible: header v2; timeout_ms; topics (compact array): name, partitions:
    # partition_index, replicas (compact nullable array of int32); tagged sections.
    expected = (request_header_v2(45, 0, 4, "admin") + i32(30_000)
                + b"\x02" + compact_string("__cluster_metadata")
                + b"\x02" + i32(0) + b"\x04" + i32(4) + i32(5) + i32(6) + NO_TAGS
                + NO_TAGS + NO_TAGS)
    message = AlterVotersRequest((4, 5, 6), 30_000)
    assert joined(wire.encode_request(message, 4, "admin")) == expected
    assert wire.decode_request(expected) == (4, message)
    # Null replicas (cancel) is a compact null: 0.
    cancel = expected.replace(b"\x04" + i32(4) + i32(5) + i32(6), b"\x00")
    assert wire.decode_request(cancel) == (4, AlterVotersRequest(None, 30_000))


def test_alter_partition_reassignments_response_carries_the_leader_in_the_message():
    body = wire.response_body(AlterVotersResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 3, 7))
    [partition] = body["responses"][0]["partitions"]
    assert partition == {"partition_index": 0, "error_code": 6,
                         "error_message": "leader 3, epoch 7"}
    expected = (i32(9) + NO_TAGS + i32(0) + i16(0) + b"\x00"
                + b"\x02" + compact_string("__cluster_metadata")
                + b"\x02" + i32(0) + i16(6) + compact_string("leader 3, epoch 7") + NO_TAGS
                + NO_TAGS + NO_TAGS)
    assert joined(wire.encode_response(AlterVotersResponse(
        ErrorCode.NOT_LEADER_OR_FOLLOWER, 3, 7), 9)) == expected
    # A Kafka controller's message (or none) names no leader.
    frame = joined(apis.encode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 2, {
        "error_code": 0, "responses": [{"name": "__cluster_metadata", "partitions": [
            {"partition_index": 0, "error_code": 6, "error_message": "Not leader"}]}]}))
    assert wire.decode_response(45, frame) == (2, AlterVotersResponse(
        ErrorCode.NOT_LEADER_OR_FOLLOWER, NO_LEADER, -1))
    frame = joined(apis.encode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 2, {
        "error_code": 41, "responses": []}))
    assert wire.decode_response(45, frame) == (2, AlterVotersResponse(
        ErrorCode.NOT_CONTROLLER, NO_LEADER, -1))


@pytest.mark.parametrize("topics", [
    [{"name": "orders", "partitions": [{"partition_index": 0, "replicas": [1]}]}],
    [{"name": "__cluster_metadata", "partitions": [{"partition_index": 1, "replicas": [1]}]}],
    [{"name": "__cluster_metadata", "partitions": [{"partition_index": 0, "replicas": [1]},
                                                   {"partition_index": 3, "replicas": [1]}]}],
    [],
])
def test_a_reassignment_of_any_other_partition_is_refused(topics):
    frame = joined(apis.encode_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1, "admin",
                                       {"timeout_ms": 1000, "topics": topics}))
    with pytest.raises(wire.UnexpectedPartitions):
        wire.decode_request(frame)
    request = apis.decode_request(frame, defined=True).body
    answer = alter_partition_reassignments.error_body(0, request, ErrorCode.INVALID_REQUEST)
    assert [[p["error_code"] for p in t["partitions"]] for t in answer["responses"]] == \
        [[ErrorCode.INVALID_REQUEST] * len(t["partitions"]) for t in topics]


def test_describe_quorum_target_voters_is_a_tagged_field_absent_when_null():
    plain = DescribeQuorumResponse(ErrorCode.NONE, 1, 3, 40, (ReplicaState(1, 40, 5, 5),))
    moving = DescribeQuorumResponse(ErrorCode.NONE, 1, 3, 40, (ReplicaState(1, 40, 5, 5),),
                                    target_voters=(ReplicaState(4, 38, 4, 2),))
    a, b = joined(wire.encode_response(plain, 1)), joined(wire.encode_response(moving, 1))
    # The partition's tagged section: none for plain; one field (tag 1000) for moving.
    tag = bytes([0xE8, 0x07])  # 1000 as an unsigned varint
    assert tag not in a[-8:] and b.count(tag) == 1
    assert quorum.TARGET_VOTERS_TAG == 1000
    # A decoder without the field (Kafka's schema) reads the rest and keeps the tag unread.
    kafka = Message("DescribeQuorumResponse", versions="0-1", flexible="0+", fields=[
        Field("error_code", INT16),
        quorum._topics("KafkaDescribeQuorumResponse", [
            *quorum._leader_answer(), Field("high_watermark", INT64),
            Field("current_voters", Array(quorum.REPLICA_STATE)),
            Field("observers", Array(quorum.REPLICA_STATE))])])
    [partition] = kafka.from_bytes(b[4 + 1:], 1).topics[0].partitions  # after the header
    assert partition.high_watermark == 40 and set(partition._unknown_tags) == {1000}


def test_describe_quorum_v0_drops_the_timestamps():
    response = DescribeQuorumResponse(ErrorCode.NONE, 1, 3, 40, (ReplicaState(1, 40, 5, 5),))
    frame = joined(apis.encode_response(ApiKey.DESCRIBE_QUORUM, 0, 1,
                                        wire.response_body(response)))
    _, body = apis.decode_response(ApiKey.DESCRIBE_QUORUM, 0, frame)
    assert wire.response_from_body(55, body) == DescribeQuorumResponse(
        ErrorCode.NONE, 1, 3, 40, (ReplicaState(1, 40, -1, -1),))


DEFINED_MESSAGES = [(f"{key.name}-{kind}-v{v}", msg, v)
                    for key, spec in sorted(DEFINED.items())
                    for v in range(spec.min_version, spec.max_version + 1)
                    for kind, msg in (("req", spec.request), ("resp", spec.response))]


@pytest.mark.parametrize("sample", ["values", "nulls", "defaults"])
@pytest.mark.parametrize("msg,version", [(m, v) for _, m, v in DEFINED_MESSAGES],
                         ids=[i for i, _, _ in DEFINED_MESSAGES])
def test_generated_codec_matches_the_reference_for_defined_apis(msg, version, sample):
    flexible = msg.is_flexible(version)
    value = {} if sample == "defaults" else populated(msg, version, flexible,
                                                      nulls=sample == "nulls")
    data = msg.to_bytes(value, version)
    assert data == reference_encode(msg, value, version)
    assert msg.from_bytes(data, version) == reference_decode(msg, data, version)
