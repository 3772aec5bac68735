"""The API registry and the request/response entry points: advertised versions, refusals that
carry the header, trailing bytes, and error responses."""

from __future__ import annotations

import struct

import pytest

from broker_core.wire import apis
from broker_core.wire.apis import SUPPORTED, ApiKey, Request
from broker_core.wire.errors import (
    EncodeError,
    ErrorCode,
    MalformedFrame,
    ProtocolError,
    UnknownApiKey,
    UnsupportedVersion,
)
from broker_core.wire.header import RequestHeader
from broker_core.wire.schema import Struct
from tests.support.wire_samples import populated


def test_api_key_numbers_are_kafkas():
    expected = {"PRODUCE": 0, "FETCH": 1, "LIST_OFFSETS": 2, "METADATA": 3, "LEADER_AND_ISR": 4,
                "STOP_REPLICA": 5, "UPDATE_METADATA": 6, "CONTROLLED_SHUTDOWN": 7,
                "OFFSET_COMMIT": 8, "OFFSET_FETCH": 9, "FIND_COORDINATOR": 10,
                "API_VERSIONS": 18, "CREATE_TOPICS": 19, "DELETE_TOPICS": 20,
                "OFFSET_FOR_LEADER_EPOCH": 23, "CREATE_PARTITIONS": 37, "ALTER_CONFIGS": 33,
                "DELETE_GROUPS": 42, "INCREMENTAL_ALTER_CONFIGS": 44, "OFFSET_DELETE": 47,
                "DESCRIBE_QUORUM": 55,
                "ALTER_PARTITION": 56, "CLUSTER_METADATA": 1000, "REGISTER_CONSUMER": 1001,
                "PING": 1002, "STOP_FETCHER": 1003, "START_FETCHER": 1004,
                "COMMIT_OFFSETS": 1005, "DESCRIBE_CONSUMER_GROUPS": 1006,
                "UNREGISTER_CONSUMER": 1008}
    assert {k: int(ApiKey[k]) for k in expected} == expected


def test_served_versions():
    served = {k.name: (s.min_version, s.max_version, s.flexible_min_version)
              for k, s in SUPPORTED.items()}
    assert served == {
        "API_VERSIONS": (0, 3, 3), "METADATA": (1, 12, 9), "PRODUCE": (3, 9, 9),
        "FETCH": (4, 12, 12), "LIST_OFFSETS": (1, 7, 6),
        # Kafka's group protocol (docs/coordinator.md, "Kafka consumer groups").
        "OFFSET_COMMIT": (2, 8, 8), "OFFSET_FETCH": (1, 8, 6), "FIND_COORDINATOR": (0, 4, 3),
        "JOIN_GROUP": (0, 9, 6), "HEARTBEAT": (0, 4, 4), "LEAVE_GROUP": (0, 5, 4),
        "SYNC_GROUP": (0, 5, 4), "DESCRIBE_GROUPS": (0, 5, 5), "LIST_GROUPS": (0, 5, 3),
        "DELETE_GROUPS": (0, 2, 2), "OFFSET_DELETE": (0, 0, None),
        "CREATE_TOPICS": (2, 7, 5),
        "DELETE_TOPICS": (1, 5, 4), "INIT_PRODUCER_ID": (0, 4, 2),
        "CREATE_PARTITIONS": (0, 3, 2),
        "DESCRIBE_CONFIGS": (1, 4, 4), "ALTER_CONFIGS": (0, 2, 2),
        "INCREMENTAL_ALTER_CONFIGS": (0, 1, 1), "DESCRIBE_ACLS": (0, 3, 2), "CREATE_ACLS": (0, 3, 2),
        "DELETE_ACLS": (0, 3, 2),
        "LEADER_AND_ISR": (5, 5, 5), "STOP_REPLICA": (3, 3, 3), "UPDATE_METADATA": (7, 7, 7),
        "OFFSET_FOR_LEADER_EPOCH": (3, 3, None), "CONTROLLED_SHUTDOWN": (3, 3, 3),
        "ALTER_PARTITION": (0, 1, 0), "BROKER_HEARTBEAT": (0, 0, 0),
        "CLUSTER_METADATA": (0, 1, 0), "REGISTER_CONSUMER": (0, 1, 0), "PING": (0, 0, 0),
        "STOP_FETCHER": (0, 0, 0), "START_FETCHER": (0, 0, 0), "COMMIT_OFFSETS": (0, 1, 0),
        "DESCRIBE_CONSUMER_GROUPS": (0, 0, 0), "UNREGISTER_CONSUMER": (0, 0, 0),
        "DESCRIBE_USER_SCRAM_CREDENTIALS": (0, 0, 0), "ALTER_USER_SCRAM_CREDENTIALS": (0, 0, 0),
        # The cluster administration APIs (broker_core.server.cluster_admin).
        "DELETE_RECORDS": (0, 2, 2), "DESCRIBE_LOG_DIRS": (1, 4, 2), "ELECT_LEADERS": (0, 2, 2),
        "ALTER_PARTITION_REASSIGNMENTS": (0, 1, 0), "LIST_PARTITION_REASSIGNMENTS": (0, 0, 0),
        "DESCRIBE_CLUSTER": (0, 2, 0),
        # SaslHandshake v0 (raw tokens outside Kafka requests) is advertised, refused when sent.
        "SASL_HANDSHAKE": (0, 1, None), "SASL_AUTHENTICATE": (0, 2, 2),
    }
    assert SUPPORTED[ApiKey.LEADER_AND_ISR].name == "LeaderAndIsr"
    assert apis.advertised_versions([ApiKey.PRODUCE]) == [
        {"api_key": 0, "min_version": 3, "max_version": 9}]


def _header(key, version, correlation_id, client_id=b"\x00\x02me"):
    return struct.pack(">hhi", key, version, correlation_id) + client_id


def test_unknown_api_key_carries_the_header():
    with pytest.raises(UnknownApiKey) as e:
        apis.decode_request(_header(999, 0, 4242) + b"whatever")
    assert e.value.header == RequestHeader(999, 0, 4242, "me")
    assert "4242" in str(e.value)


def test_unsupported_version_carries_the_header():
    with pytest.raises(UnsupportedVersion) as e:
        apis.decode_request(_header(0, 2, 17))  # Produce v2 is below what we serve
    assert (e.value.header.api_key, e.value.header.api_version,
            e.value.header.correlation_id, e.value.header.client_id) == (0, 2, 17, "me")
    with pytest.raises(UnsupportedVersion) as e:  # a broken client id does not hide it
        apis.decode_request(_header(1, 99, 18, b"\x00\x09x"))
    assert e.value.header.correlation_id == 18 and e.value.header.client_id is None


def test_short_frames_are_malformed_and_trailing_request_bytes_ignored():
    with pytest.raises(MalformedFrame, match="too short"):
        apis.decode_request(b"\x00\x12\x00")
    good = b"".join(apis.encode_request(ApiKey.METADATA, 1, 1, "c", {"topics": None}))
    assert apis.decode_request(good).body.topics is None
    # Kafka brokers ignore bytes after a complete request body; so do we.
    assert apis.decode_request(good + b"\x00").body.topics is None
    # What librdkafka 2.x sends for "all topics" at Metadata v12 (three bytes too many).
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    req = apis.decode_request(frame)
    assert req.header.client_id == "rdkafka" and req.body.topics is None
    resp = b"".join(apis.encode_response(ApiKey.METADATA, 1, 1, {}))
    with pytest.raises(MalformedFrame, match="unexpected bytes"):
        apis.decode_response(ApiKey.METADATA, 1, resp + b"!")


def test_local_misuse_raises_encode_and_protocol_errors():
    with pytest.raises(EncodeError, match="Produce v2"):
        apis.encode_request(ApiKey.PRODUCE, 2, 1, None, {})
    with pytest.raises(EncodeError):
        apis.encode_response(999, 0, 1, {})
    with pytest.raises(ProtocolError):
        apis.decode_response(ApiKey.FETCH, 3, b"\x00\x00\x00\x01")


def test_api_versions_response_falls_back_to_v0_like_kafka_clients():
    v0_body = struct.pack(">ihihhh", 5, 35, 1, 18, 0, 3)  # UNSUPPORTED_VERSION, ApiVersions 0-3
    correlation_id, body = apis.decode_response(ApiKey.API_VERSIONS, 3, v0_body)
    assert correlation_id == 5 and body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.max_version) for k in body.api_keys] == [(18, 3)]


# -- error responses ------------------------------------------------------------------------


def test_api_versions_at_an_unserved_version_gets_a_v0_answer_kip_511():
    header = RequestHeader(18, 7, 99, "new-client")
    out = b"".join(apis.error_response(header, ErrorCode.UNSUPPORTED_VERSION))
    assert out == struct.pack(">ihihhh", 99, 35, 1, 18, 0, 3)


def _error_codes(value, version):
    """Every ``error_code`` field the response has at ``version``, anywhere in it."""
    if isinstance(value, Struct):
        for f in value._schema.fields:
            if not f.exists(version):
                continue
            v = getattr(value, f.name)
            if f.name == "error_code":
                yield v
            else:
                yield from _error_codes(v, version)
    elif isinstance(value, list):
        for v in value:
            yield from _error_codes(v, version)


ALL_VERSIONS = [(k, v) for k, s in sorted(SUPPORTED.items())
                for v in range(s.min_version, s.max_version + 1)]
#: Versions whose response has no error field at all: the error answer is Kafka's empty one.
NO_ERROR_FIELD = {(ApiKey.DESCRIBE_LOG_DIRS, 1), (ApiKey.DESCRIBE_LOG_DIRS, 2)}


@pytest.mark.parametrize("key,version", ALL_VERSIONS,
                         ids=[f"{k.name}-v{v}" for k, v in ALL_VERSIONS])
def test_error_response_puts_the_code_everywhere_the_request_asked_about(key, version):
    spec = SUPPORTED[key]
    body = spec.request.build(populated(spec.request, version, spec.is_flexible(version)))
    if key == ApiKey.PRODUCE:
        body.acks = 1
    request = Request(RequestHeader(key, version, 31, "c"), body)
    chunks = apis.error_response(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert chunks is not None
    correlation_id, decoded = apis.decode_response(key, version, b"".join(chunks))
    assert correlation_id == 31
    codes = list(_error_codes(decoded, version))
    if (key, version) in NO_ERROR_FIELD:
        assert codes == []
        return
    assert codes and set(codes) == {ErrorCode.NOT_LEADER_OR_FOLLOWER}


def test_error_response_without_a_body():
    # APIs with a top-level error code can answer from the header alone ...
    for key, version in [(ApiKey.FETCH, 7), (ApiKey.LEADER_AND_ISR, 5),
                         (ApiKey.API_VERSIONS, 3), (ApiKey.CONTROLLED_SHUTDOWN, 3)]:
        chunks = apis.error_response(RequestHeader(key, version, 1, None),
                                     ErrorCode.UNKNOWN_SERVER_ERROR)
        _, body = apis.decode_response(key, version, b"".join(chunks))
        assert body.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    # ... per-partition APIs cannot, and say so with None.
    for key, version in [(ApiKey.PRODUCE, 9), (ApiKey.FETCH, 6), (ApiKey.METADATA, 12)]:
        assert apis.error_response(RequestHeader(key, version, 1, None),
                                   ErrorCode.UNKNOWN_SERVER_ERROR) is None


def test_no_error_response_for_acks_zero_produce_or_unserved_versions():
    body = SUPPORTED[ApiKey.PRODUCE].request.make(acks=0, topic_data=[{"name": "t"}])
    assert apis.error_response(RequestHeader(0, 9, 1, None), ErrorCode.INVALID_RECORD,
                               body) is None
    assert apis.error_response(RequestHeader(0, 2, 1, None),
                               ErrorCode.UNSUPPORTED_VERSION) is None
    assert apis.error_response(RequestHeader(999, 0, 1, None),
                               ErrorCode.UNSUPPORTED_VERSION) is None
