"""The quorum's messages on the wire: the KIP-595 schemas (broker_core.wire.messages.quorum),
the translation from the raft core's values (broker_core.raft.wire), byte strings built by hand
from Kafka's field order, bad frames, and ApiVersions staying as it was."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.raft import wire
from broker_core.raft.entries import LogEntry
from broker_core.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from broker_core.raft.snapshots import SnapshotId
from broker_core.security.principal import Principal, plaintext
from broker_core.server.authorization import Access
from broker_core.server.handlers import RequestHandler
from broker_core.wire import apis
from broker_core.wire.apis import DEFINED, SUPPORTED, ApiKey
from broker_core.wire.errors import (
    EncodeError,
    ErrorCode,
    MalformedFrame,
    ProtocolError,
    UnknownApiKey,
)
from broker_core.wire.messages import quorum
from tests.support.wire_bytes import (
    NO_TAGS,
    compact_string,
    i16,
    i32,
    i64,
    joined,
    request_header_v1,
    request_header_v2,
    string,
)

QUORUM_KEYS = (ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
               ApiKey.DESCRIBE_QUORUM)

# -- strategies -------------------------------------------------------------------------------

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
non_negative_int32s = st.integers(0, 2**31 - 1)
cluster_ids = st.text(max_size=40)
error_codes = st.sampled_from(list(ErrorCode))

vote_requests = st.builds(VoteRequest, cluster_ids, int32s, int32s, int32s, int64s)
vote_responses = st.builds(VoteResponse, error_codes, int32s, int32s, st.booleans())
begin_requests = st.builds(BeginQuorumEpochRequest, cluster_ids, int32s, int32s)
begin_responses = st.builds(BeginQuorumEpochResponse, error_codes, int32s, int32s)
end_requests = st.builds(EndQuorumEpochRequest, cluster_ids, int32s, int32s,
                         st.lists(int32s, max_size=8).map(tuple))
end_responses = st.builds(EndQuorumEpochResponse, error_codes, int32s, int32s)
fetch_requests = st.builds(FetchRequest, cluster_ids, int32s, int32s, int64s, int32s, int32s)
# A diverging epoch names a real epoch and offset (>= 0); -1/-1 is the wire's "absent".
diverging_epochs = st.none() | st.builds(DivergingEpoch, non_negative_int32s,
                                         st.integers(0, 2**63 - 1))
# A snapshot id in a fetch response is a real one (>= 0); -1/-1 is the wire's "absent".
snapshot_ids = st.builds(SnapshotId, st.integers(0, 2**63 - 1), non_negative_int32s)
fetch_responses = st.builds(FetchResponse, error_codes, int32s, int32s, int64s, diverging_epochs,
                            st.just(()), st.none() | snapshot_ids)
any_snapshot_ids = st.builds(SnapshotId, int64s, int32s)
fetch_snapshot_requests = st.builds(FetchSnapshotRequest, cluster_ids, int32s, int32s,
                                    any_snapshot_ids, int64s, int32s)
fetch_snapshot_responses = st.builds(FetchSnapshotResponse, error_codes, int32s, int32s,
                                     any_snapshot_ids, int64s, int64s, st.binary(max_size=64))

requests = (vote_requests | begin_requests | end_requests | fetch_requests
            | fetch_snapshot_requests)
responses = (vote_responses | begin_responses | end_responses | fetch_responses
             | fetch_snapshot_responses)


# -- round trips ------------------------------------------------------------------------------


@given(requests, int32s)
def test_every_request_round_trips_through_bytes(message, correlation_id):
    frame = joined(wire.encode_request(message, correlation_id, "node-1"))
    assert wire.decode_request(frame) == (correlation_id, message)


@given(responses, int32s)
def test_every_response_round_trips_through_bytes(message, correlation_id):
    frame = joined(wire.encode_response(message, correlation_id))
    assert wire.decode_response(wire.api_key_of(message), frame) == (correlation_id, message)


@given(requests)
def test_request_bodies_name_the_metadata_partition_alone(message):
    key = wire.api_key_of(message)
    body = (DEFINED.get(key) or SUPPORTED[key]).request.build(wire.request_body(message))
    topic_field, partition_field = {ApiKey.FETCH: ("topic", "partition"),
                                    ApiKey.FETCH_SNAPSHOT: ("name", "partition")}.get(
        key, ("topic_name", "partition_index"))
    [topic] = body.topics
    assert getattr(topic, topic_field) == "__cluster_metadata"
    [partition] = topic.partitions
    assert getattr(partition, partition_field) == 0


def test_a_fetch_snapshot_request_is_kafkas_bytes():
    # FetchSnapshotRequest v0 (flexible, KIP-630), field by field in Kafka's order: ReplicaId,
    # MaxBytes, Topics [Name, Partitions [Partition, CurrentLeaderEpoch, SnapshotId
    # [EndOffset, Epoch], Position]], then the tagged ClusterId (tag 0).
    message = FetchSnapshotRequest("c1", 2, 7, SnapshotId(1000, 6), 4096, 65536)
    cluster = compact_string("c1")
    expected = joined([
        request_header_v2(ApiKey.FETCH_SNAPSHOT, 0, 11, "n"),
        i32(2), i32(65536),
        bytes([2]), compact_string("__cluster_metadata"),
        bytes([2]), i32(0), i32(7), i64(1000), i32(6), NO_TAGS, i64(4096), NO_TAGS,
        NO_TAGS,
        bytes([1, 0, len(cluster)]), cluster,
    ])
    assert joined(wire.encode_request(message, 11, "n")) == expected
    assert wire.decode_request(expected) == (11, message)


def test_a_fetch_response_names_the_snapshot_in_kafkas_tagged_field():
    response = FetchResponse(ErrorCode.NONE, 1, 4, 500, snapshot_id=SnapshotId(400, 3))
    body = wire.response_body(response)
    assert body["responses"][0]["partitions"][0]["snapshot_id"] == {"end_offset": 400,
                                                                    "epoch": 3}
    frame = joined(wire.encode_response(response, 5))
    assert wire.decode_response(ApiKey.FETCH, frame) == (5, response)
    plain = joined(wire.encode_response(FetchResponse(ErrorCode.NONE, 1, 4, 500), 5))
    assert wire.decode_response(ApiKey.FETCH, plain)[1].snapshot_id is None


def test_errors_about_the_whole_request_travel_at_top_level():
    body = wire.response_body(VoteResponse(ErrorCode.INCONSISTENT_CLUSTER_ID, 2, 5, False))
    assert body["error_code"] == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert body["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    body = wire.response_body(BeginQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, 2, 5))
    assert body["error_code"] == ErrorCode.NONE
    assert body["topics"][0]["partitions"][0]["error_code"] == ErrorCode.FENCED_LEADER_EPOCH


def test_a_top_level_error_without_partitions_decodes_with_no_leader():
    # What Kafka's quorum sends for a cluster id mismatch: the error and no topics.
    for key, expected in [
        (ApiKey.VOTE, VoteResponse(ErrorCode.INCONSISTENT_CLUSTER_ID, NO_LEADER, -1, False)),
        (ApiKey.BEGIN_QUORUM_EPOCH,
         BeginQuorumEpochResponse(ErrorCode.INCONSISTENT_CLUSTER_ID, NO_LEADER, -1)),
        (ApiKey.END_QUORUM_EPOCH,
         EndQuorumEpochResponse(ErrorCode.INCONSISTENT_CLUSTER_ID, NO_LEADER, -1)),
    ]:
        frame = joined(apis.encode_response(
            key, 0, 3, {"error_code": int(ErrorCode.INCONSISTENT_CLUSTER_ID), "topics": []}))
        assert wire.decode_response(key, frame) == (3, expected)


def test_an_unknown_error_code_decodes_as_unknown_server_error():
    frame = joined(apis.encode_response(ApiKey.BEGIN_QUORUM_EPOCH, 0, 1, {
        "error_code": 0, "topics": [{"topic_name": "__cluster_metadata", "partitions": [
            {"partition_index": 0, "error_code": 32000, "leader_id": 1, "leader_epoch": 4}]}]}))
    assert wire.decode_response(ApiKey.BEGIN_QUORUM_EPOCH, frame)[1] == \
        BeginQuorumEpochResponse(ErrorCode.UNKNOWN_SERVER_ERROR, 1, 4)


def test_fetch_entries_travel_through_the_given_mapping():
    entries = (LogEntry(5, 2, b"a"), LogEntry(6, 2, b"bc"))

    def to_records(es):
        return b"".join(struct.pack(">qiH", e.offset, e.epoch, len(e.payload)) + e.payload
                        for e in es)

    def to_entries(data):
        data, out, pos = bytes(data), [], 0
        while pos < len(data):
            offset, epoch, n = struct.unpack_from(">qiH", data, pos)
            pos += 14
            out.append(LogEntry(offset, epoch, data[pos:pos + n]))
            pos += n
        return tuple(out)

    message = FetchResponse(ErrorCode.NONE, 1, 2, 7, None, entries)
    frame = joined(wire.encode_response(message, 4, entries_to_records=to_records))
    assert wire.decode_response(ApiKey.FETCH, frame, records_to_entries=to_entries) == \
        (4, message)
    with pytest.raises(EncodeError, match="entries_to_records"):
        wire.encode_response(message, 4)
    with pytest.raises(wire.UnexpectedPartitions, match="records_to_entries"):
        wire.decode_response(ApiKey.FETCH, frame)


# -- known bytes ------------------------------------------------------------------------------

METADATA_TOPIC_COMPACT = compact_string("__cluster_metadata")


def test_vote_request_v0_known_bytes():
    # Header v2; ClusterId (compact nullable string), Topics [TopicName, Partitions
    # [PartitionIndex, CandidateEpoch, CandidateId, LastOffsetEpoch, LastOffset]], all flexible.
    expected = (request_header_v2(52, 0, 77, "n3")
                + compact_string("abc")
                + b"\x02" + METADATA_TOPIC_COMPACT
                + b"\x02" + i32(0) + i32(6) + i32(3) + i32(5) + i64(41) + NO_TAGS
                + NO_TAGS
                + NO_TAGS)
    message = VoteRequest("abc", candidate_epoch=6, candidate_id=3, last_offset_epoch=5,
                          last_offset=41)
    assert joined(wire.encode_request(message, 77, "n3")) == expected
    assert wire.decode_request(expected) == (77, message)


def test_vote_request_v0_null_cluster_id_is_a_zero_length_byte():
    body = quorum.VOTE_REQUEST.to_bytes({"cluster_id": None, "topics": []}, 0)
    assert body == b"\x00" + b"\x01" + NO_TAGS
    assert quorum.VOTE_REQUEST.from_bytes(body, 0).cluster_id is None


def test_vote_response_v0_known_bytes():
    # Response header v1 (correlation id, tags); ErrorCode, Topics [TopicName, Partitions
    # [PartitionIndex, ErrorCode, LeaderId, LeaderEpoch, VoteGranted]].
    expected = (i32(9) + NO_TAGS
                + i16(0)
                + b"\x02" + METADATA_TOPIC_COMPACT
                + b"\x02" + i32(0) + i16(0) + i32(3) + i32(6) + b"\x01" + NO_TAGS
                + NO_TAGS
                + NO_TAGS)
    message = VoteResponse(ErrorCode.NONE, leader_id=3, leader_epoch=6, vote_granted=True)
    assert joined(wire.encode_response(message, 9)) == expected
    assert wire.decode_response(ApiKey.VOTE, expected) == (9, message)


def test_begin_quorum_epoch_request_v0_is_not_flexible():
    # Header v1; ClusterId (int16-length string), Topics as int32-counted arrays, no tags.
    expected = (request_header_v1(53, 0, 5, "n1")
                + string("abc")
                + i32(1) + string("__cluster_metadata")
                + i32(1) + i32(0) + i32(1) + i32(8))
    message = BeginQuorumEpochRequest("abc", leader_id=1, leader_epoch=8)
    assert joined(wire.encode_request(message, 5, "n1")) == expected
    assert wire.decode_request(expected) == (5, message)


def test_end_quorum_epoch_request_v0_known_bytes():
    expected = (request_header_v1(54, 0, 6, "n1")
                + string("abc")
                + i32(1) + string("__cluster_metadata")
                + i32(1) + i32(0) + i32(1) + i32(8) + i32(2) + i32(3) + i32(2))
    message = EndQuorumEpochRequest("abc", leader_id=1, leader_epoch=8,
                                    preferred_successors=(3, 2))
    assert joined(wire.encode_request(message, 6, "n1")) == expected
    assert wire.decode_request(expected) == (6, message)


def test_describe_quorum_v0_and_v1():
    request = {"topics": [{"topic_name": "__cluster_metadata",
                           "partitions": [{"partition_index": 0}]}]}
    expected = (request_header_v2(55, 0, 2, "admin")
                + b"\x02" + METADATA_TOPIC_COMPACT + b"\x02" + i32(0) + NO_TAGS + NO_TAGS
                + NO_TAGS)
    assert joined(apis.encode_request(ApiKey.DESCRIBE_QUORUM, 0, 2, "admin", request)) == \
        expected
    assert apis.decode_request(expected, defined=True).body == \
        quorum.DESCRIBE_QUORUM_REQUEST.build(request)

    voter = {"replica_id": 1, "log_end_offset": 40, "last_fetch_timestamp": 1700,
             "last_caught_up_timestamp": 1699}
    response = {"error_code": 0, "topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0, "error_code": 0, "leader_id": 1, "leader_epoch": 3,
         "high_watermark": 40, "current_voters": [voter, {**voter, "replica_id": 2}],
         "observers": [{"replica_id": 7, "log_end_offset": -1}]}]}]}
    for version in (0, 1):
        frame = joined(apis.encode_response(ApiKey.DESCRIBE_QUORUM, version, 8, response))
        corr, body = apis.decode_response(ApiKey.DESCRIBE_QUORUM, version, frame)
        [p] = body.topics[0].partitions
        assert (corr, p.high_watermark, [v.replica_id for v in p.current_voters]) == \
            (8, 40, [1, 2])
        # v0 has no timestamps (ignorable: dropped); v1 keeps them.
        assert p.current_voters[0].last_fetch_timestamp == (1700 if version else -1)
        assert p.observers[0].last_caught_up_timestamp == -1


# -- bad frames -------------------------------------------------------------------------------

SAMPLES = [
    VoteRequest("abc", 6, 3, 5, 41),
    BeginQuorumEpochRequest("abc", 1, 8),
    EndQuorumEpochRequest("abc", 1, 8, (3, 2)),
    FetchRequest("abc", 2, 8, 40, 7, 500),
]
RESPONSE_SAMPLES = [
    VoteResponse(ErrorCode.NONE, 3, 6, True),
    BeginQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, 3, 6),
    EndQuorumEpochResponse(ErrorCode.NONE, 3, 6),
    FetchResponse(ErrorCode.NONE, 3, 6, 40, DivergingEpoch(5, 33)),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_truncated_request_raises_malformed_frame(message):
    frame = joined(wire.encode_request(message, 1, "n1"))
    for n in range(len(frame)):
        with pytest.raises(MalformedFrame):
            wire.decode_request(frame[:n])


@pytest.mark.parametrize("message", RESPONSE_SAMPLES, ids=lambda m: type(m).__name__)
def test_every_truncated_or_padded_response_raises_malformed_frame(message):
    key = wire.api_key_of(message)
    frame = joined(wire.encode_response(message, 1))
    for n in range(len(frame)):
        with pytest.raises(MalformedFrame):
            wire.decode_response(key, frame[:n])
    with pytest.raises(MalformedFrame, match="unexpected bytes"):
        wire.decode_response(key, frame + b"\x00")


def test_a_vote_request_with_a_huge_array_count_is_malformed_not_a_memory_error():
    frame = request_header_v2(52, 0, 1, "n1") + compact_string("abc") + b"\xff\xff\xff\xff\x0f"
    with pytest.raises(MalformedFrame):
        wire.decode_request(frame)


@pytest.mark.parametrize("topics", [
    [],
    [{"topic_name": "orders", "partitions": [{"partition_index": 0}]}],
    [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 1}]}],
    [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0},
                                                         {"partition_index": 0}]}],
    [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}] * 2,
])
def test_a_request_for_anything_but_the_metadata_partition_is_refused(topics):
    frame = joined(apis.encode_request(ApiKey.BEGIN_QUORUM_EPOCH, 0, 1, "n1",
                                       {"cluster_id": "abc", "topics": topics}))
    with pytest.raises(wire.UnexpectedPartitions) as e:
        wire.decode_request(frame)
    assert isinstance(e.value, ProtocolError)


def test_a_non_quorum_request_is_refused():
    frame = joined(apis.encode_request(ApiKey.METADATA, 1, 1, "n1", {"topics": None}))
    with pytest.raises(wire.UnexpectedPartitions, match="not a quorum request"):
        wire.decode_request(frame)


# -- registered, not advertised ---------------------------------------------------------------

# What ApiVersions advertised before the quorum's APIs were defined: (key, min, max).
ADVERTISED = [(0, 3, 9), (1, 4, 12), (2, 1, 7), (3, 1, 12), (4, 5, 5), (5, 3, 3), (6, 7, 7),
              (7, 3, 3),
              # Kafka's group protocol: OffsetCommit..ListGroups (8-16).
              (8, 2, 8), (9, 1, 8), (10, 0, 4), (11, 0, 9), (12, 0, 4), (13, 0, 5), (14, 0, 5),
              (15, 0, 5), (16, 0, 5),
              (17, 0, 1), (18, 0, 3), (19, 2, 7), (20, 1, 5),
              (21, 0, 2),  # DeleteRecords
              (22, 0, 4),  # InitProducerId
              (23, 3, 3), (29, 0, 3), (30, 0, 3),
              (31, 0, 3), (32, 1, 4), (33, 0, 2),
              (35, 1, 4),  # DescribeLogDirs
              (36, 0, 2), (37, 0, 3),
              (42, 0, 2),  # DeleteGroups
              (43, 0, 2), (44, 0, 1), (45, 0, 1), (46, 0, 0),
              (47, 0, 0),  # OffsetDelete
              (50, 0, 0), (51, 0, 0),  # the SCRAM user APIs
              (56, 0, 1),
              (60, 0, 2),  # DescribeCluster
              (63, 0, 0)]
#: What a client (any connection but a broker's) is shown: no control-plane API.
ADVERTISED_TO_CLIENTS = [e for e in ADVERTISED if e[0] not in (4, 5, 6, 7, 56, 63)]
# ClusterMetadata (1000) is served at v0-v1 (v1: the group whose shard's coordinator is asked
# for), RegisterConsumer (1001) at v0-v1 (v1: the session id the leave needs) and
# CommitOffsets (1005) too (v1: the session id that proves the commit is the member's own);
# 1007 is the quorum's own DiscoverBrokers; UnregisterConsumer (1008) is a consumer's leave.
SLUICE_OWN = [(k, 0, 1 if k in (1000, 1001, 1005) else 0) for k in range(1000, 1007)] + [(1008, 0, 0)]


def test_quorum_apis_are_defined_at_kip_595_versions():
    versions = {k: (s.min_version, s.max_version, s.flexible_min_version)
                for k, s in DEFINED.items()}
    assert versions == {ApiKey.VOTE: (0, 0, 0), ApiKey.BEGIN_QUORUM_EPOCH: (0, 0, None),
                        ApiKey.END_QUORUM_EPOCH: (0, 0, None),
                        ApiKey.DESCRIBE_QUORUM: (0, 1, 0),
                        ApiKey.FETCH_SNAPSHOT: (0, 0, 0),  # KIP-630
                        # (AlterPartitionReassignments, the voters' change, is served by
                        # client listeners too, as Kafka's: it is in SUPPORTED.)
                        ApiKey.DISCOVER_BROKERS: (0, 0, 0),  # Sluice's quorum gossip
                        # The metadata quorum's client APIs, served on the quorum listener.
                        ApiKey.METADATA_WRITE: (0, 0, 0), ApiKey.SESSION_HEARTBEAT: (0, 0, 0)}
    assert not set(DEFINED) & set(SUPPORTED)


def test_api_versions_advertises_what_it_did_before():
    handler = RequestHandler(broker_id=1, config=None, cache=None, replicas=None, store=None,
                             clock=None, broker_epoch=lambda: 0)
    client = plaintext()
    answer = handler.metadata_apis.api_versions(None, None, Access(None, client))
    assert [(e["api_key"], e["min_version"], e["max_version"])
            for e in answer["api_keys"]] == ADVERTISED_TO_CLIENTS
    broker = plaintext()
    broker.authenticate(Principal("User", "__sluice_broker"), is_broker=True)
    answer = handler.metadata_apis.api_versions(None, None, Access(None, broker))
    assert [(e["api_key"], e["min_version"], e["max_version"])
            for e in answer["api_keys"]] == ADVERTISED
    assert [(e["api_key"], e["min_version"], e["max_version"])
            for e in apis.advertised_versions()] == ADVERTISED + SLUICE_OWN
    theirs = [type("K", (), {"api_key": k, "min_version": 0, "max_version": 5})
              for k in QUORUM_KEYS]
    assert not set(apis.common_versions(theirs)) & set(QUORUM_KEYS)


def test_a_broker_still_answers_quorum_requests_as_unknown():
    frame = joined(wire.encode_request(VoteRequest("abc", 6, 3, 5, 41), 12, "n3"))
    with pytest.raises(UnknownApiKey) as e:
        apis.decode_request(frame)
    assert (e.value.header.api_key, e.value.header.correlation_id) == (52, 12)


replica_states = st.fixed_dictionaries({
    "replica_id": int32s, "log_end_offset": int64s,
    "last_fetch_timestamp": int64s, "last_caught_up_timestamp": int64s})


@given(st.fixed_dictionaries({
    "error_code": st.sampled_from([int(c) for c in ErrorCode]),
    "topics": st.lists(st.fixed_dictionaries({
        "topic_name": st.text(max_size=20),
        "partitions": st.lists(st.fixed_dictionaries({
            "partition_index": int32s, "error_code": st.sampled_from([int(c) for c in ErrorCode]),
            "leader_id": int32s, "leader_epoch": int32s, "high_watermark": int64s,
            "current_voters": st.lists(replica_states, max_size=5),
            "observers": st.lists(replica_states, max_size=3),
        }), max_size=2),
    }), max_size=2),
}))
def test_describe_quorum_v1_response_round_trips(body):
    frame = joined(apis.encode_response(ApiKey.DESCRIBE_QUORUM, 1, 5, body))
    assert apis.decode_response(ApiKey.DESCRIBE_QUORUM, 1, frame) == \
        (5, quorum.DESCRIBE_QUORUM_RESPONSE.build(body))


@pytest.mark.parametrize("key", QUORUM_KEYS, ids=lambda k: k.name)
def test_error_bodies_answer_every_requested_partition(key):
    spec = DEFINED[key]
    request = spec.request.build({"topics": [{"topic_name": "__cluster_metadata",
                                              "partitions": [{"partition_index": 0}]}]})
    for version in range(spec.min_version, spec.max_version + 1):
        body = spec.response.build(spec.error_body(version, request, ErrorCode.INVALID_REQUEST))
        assert body.error_code == ErrorCode.INVALID_REQUEST
        assert [p.error_code for p in body.topics[0].partitions] == [ErrorCode.INVALID_REQUEST]
        spec.response.to_bytes(body, version)
        assert spec.response.build(spec.error_body(version, None, 35)).topics == []


@pytest.mark.parametrize("key, request_body, response_body", [
    (ApiKey.METADATA_WRITE, {"node_id": 2, "command": b'{"v":1}'},
     {"error_code": 0, "error_message": None, "leader_id": 1, "offset": 41}),
    (ApiKey.SESSION_HEARTBEAT, {"node_id": 3, "session_id": 1 << 40},
     {"error_code": 25, "error_message": "session 7 is not live", "leader_id": 1}),
])
def test_the_metadata_quorum_client_apis_round_trip(key, request_body, response_body):
    request = apis.decode_request(b"".join(apis.encode_request(key, 0, 9, "c", request_body)),
                                  defined=True)
    assert {k: getattr(request.body, k) for k in request_body} == request_body
    _, response = apis.decode_response(
        key, 0, b"".join(apis.encode_response(key, 0, 9, response_body)))
    assert {k: getattr(response, k) for k in response_body} == response_body
