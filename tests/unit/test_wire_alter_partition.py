"""AlterPartition (key 56, Kafka's AlterIsr), v0-1: round trips through the entry points and byte
strings built by hand from Kafka's layout (AlterPartitionRequest/Response.json, flexible from v0)."""

from __future__ import annotations

import pytest

from broker_core.wire import apis
from broker_core.wire.apis import SUPPORTED, ApiKey
from broker_core.wire.errors import EncodeError, ErrorCode
from broker_core.wire.header import RequestHeader
from tests.support.wire_bytes import NO_TAGS, compact_string, i8, i16, i32, i64, joined, request_header_v2

KEY = ApiKey.ALTER_PARTITION


def compact_int32s(values):  # compact array: uvarint(count + 1), then the int32s
    assert len(values) + 1 < 0x80
    return bytes([len(values) + 1]) + b"".join(i32(v) for v in values)


def request_body(version: int) -> dict:
    part = {"partition_index": 2, "leader_epoch": 7, "new_isr": [1, 3], "partition_epoch": 12}
    if version >= 1:
        part["leader_recovery_state"] = 0
    return {"broker_id": 1, "broker_epoch": 0x1_0000_0042, "topics": [
        {"topic_name": "orders", "partitions": [part, {**part, "partition_index": 0,
                                                       "new_isr": [1]}]},
        {"topic_name": "audit", "partitions": []}]}


def response_body(version: int) -> dict:
    part = {"partition_index": 2, "error_code": 0, "leader_id": 1, "leader_epoch": 7,
            "isr": [1, 3], "partition_epoch": 13}
    if version >= 1:
        part["leader_recovery_state"] = 0
    failed = {"partition_index": 0, "error_code": int(ErrorCode.INVALID_UPDATE_VERSION),
              "leader_id": -1, "leader_epoch": -1, "isr": [], "partition_epoch": -1}
    return {"throttle_time_ms": 0, "error_code": 0, "topics": [
        {"topic_name": "orders", "partitions": [part, failed]}]}


def test_served_versions_are_flexible_from_v0():
    spec = SUPPORTED[KEY]
    assert (spec.name, spec.min_version, spec.max_version) == ("AlterPartition", 0, 1)
    assert spec.is_flexible(0) and spec.is_flexible(1)


@pytest.mark.parametrize("version", [0, 1])
def test_request_round_trip(version):
    frame = joined(apis.encode_request(KEY, version, 41, "broker-1", request_body(version)))
    req = apis.decode_request(frame)
    assert req.header == RequestHeader(56, version, 41, "broker-1")
    assert req.body == SUPPORTED[KEY].request.build(request_body(version))
    t = req.body.topics[0]
    assert (t.topic_name, t.partitions[0].new_isr, t.partitions[0].partition_epoch) == (
        "orders", [1, 3], 12)
    assert joined(apis.encode_request(KEY, version, 41, "broker-1", req.body)) == frame


@pytest.mark.parametrize("version", [0, 1])
def test_response_round_trip(version):
    frame = joined(apis.encode_response(KEY, version, 41, response_body(version)))
    correlation_id, body = apis.decode_response(KEY, version, frame)
    assert correlation_id == 41
    assert body == SUPPORTED[KEY].response.build(response_body(version))
    assert [p.error_code for p in body.topics[0].partitions] == [
        0, ErrorCode.INVALID_UPDATE_VERSION]
    assert joined(apis.encode_response(KEY, version, 41, body)) == frame


def _request_bytes(version: int) -> bytes:
    recovery = i8(0) if version >= 1 else b""
    return (
        request_header_v2(56, version, 5, "b1")
        + i32(1)                                    # broker_id
        + i64(0x1_0000_0042)                        # broker_epoch (a czxid)
        + bytes([1 + 1])                            # topics: compact array of 1
        + compact_string("orders")                  #   topic_name
        + bytes([1 + 1])                            #   partitions: compact array of 1
        + i32(2)                                    #     partition_index
        + i32(7)                                    #     leader_epoch
        + compact_int32s([1, 3])                    #     new_isr
        + recovery                                  #     leader_recovery_state (v1+)
        + i32(12)                                   #     partition_epoch
        + NO_TAGS                                   #     partition's tagged fields
        + NO_TAGS                                   #   topic's tagged fields
        + NO_TAGS                                   # body's tagged fields
    )


@pytest.mark.parametrize("version", [0, 1])
def test_request_known_bytes(version):
    body = {"broker_id": 1, "broker_epoch": 0x1_0000_0042, "topics": [
        {"topic_name": "orders", "partitions": [
            {"partition_index": 2, "leader_epoch": 7, "new_isr": [1, 3], "partition_epoch": 12}]}]}
    frame = _request_bytes(version)
    assert joined(apis.encode_request(KEY, version, 5, "b1", body)) == frame
    req = apis.decode_request(frame)
    p = req.body.topics[0].partitions[0]
    assert (req.body.broker_id, req.body.broker_epoch) == (1, 0x1_0000_0042)
    assert (p.partition_index, p.leader_epoch, p.new_isr, p.leader_recovery_state,
            p.partition_epoch) == (2, 7, [1, 3], 0, 12)


def test_response_v1_known_bytes():
    expected = (
        i32(5) + NO_TAGS                            # response header v1: correlation id, tags
        + i32(0)                                    # throttle_time_ms
        + i16(0)                                    # error_code
        + bytes([1 + 1])                            # topics: compact array of 1
        + compact_string("orders")                  #   topic_name
        + bytes([1 + 1])                            #   partitions: compact array of 1
        + i32(2)                                    #     partition_index
        + i16(0)                                    #     error_code
        + i32(1)                                    #     leader_id
        + i32(7)                                    #     leader_epoch
        + compact_int32s([1, 3])                    #     isr
        + i8(0)                                     #     leader_recovery_state
        + i32(13)                                   #     partition_epoch (the new zkVersion)
        + NO_TAGS + NO_TAGS + NO_TAGS               # partition, topic and body tagged fields
    )
    body = {"throttle_time_ms": 0, "error_code": 0, "topics": [
        {"topic_name": "orders", "partitions": [
            {"partition_index": 2, "error_code": 0, "leader_id": 1, "leader_epoch": 7,
             "isr": [1, 3], "leader_recovery_state": 0, "partition_epoch": 13}]}]}
    assert joined(apis.encode_response(KEY, 1, 5, body)) == expected
    _, decoded = apis.decode_response(KEY, 1, expected)
    assert decoded.topics[0].partitions[0].partition_epoch == 13


def test_leader_recovery_state_only_exists_from_v1():
    body = request_body(1)
    body["topics"][0]["partitions"][0]["leader_recovery_state"] = 1
    # The request field is not ignorable in Kafka: v0 cannot say "recovering".
    with pytest.raises(EncodeError, match="leader_recovery_state"):
        apis.encode_request(KEY, 0, 1, "b", body)
    # The response field is: v0 drops it.
    resp = response_body(1)
    resp["topics"][0]["partitions"][0]["leader_recovery_state"] = 1
    v0 = joined(apis.encode_response(KEY, 0, 1, resp))
    assert v0 == joined(apis.encode_response(KEY, 0, 1, response_body(0)))


def test_error_response_carries_the_top_level_error():
    header = RequestHeader(56, 1, 9, "b2")
    frame = joined(apis.error_response(header, ErrorCode.NOT_CONTROLLER))
    correlation_id, body = apis.decode_response(KEY, 1, frame)
    assert (correlation_id, body.error_code, body.topics) == (9, ErrorCode.NOT_CONTROLLER, [])
