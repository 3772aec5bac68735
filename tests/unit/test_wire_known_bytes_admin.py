"""The cluster administration APIs' codec against byte strings built by hand from Kafka's
documented layouts (struct.pack): DeleteRecords v0, ElectLeaders v0/v1, DescribeCluster v0,
ListPartitionReassignments v0, DescribeLogDirs v1, DeleteGroups v0/v2 and OffsetDelete v0."""

from __future__ import annotations

from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from tests.support.wire_bytes import (
    NO_TAGS,
    compact_string,
    i8,
    i16,
    i32,
    i64,
    joined,
    request_header_v1,
    request_header_v2,
    string,
)


def test_delete_records_v0_request_and_response():
    frame = (request_header_v1(ApiKey.DELETE_RECORDS, 0, 5, "adm")
             + i32(1) + string("t")                     # topics[0].name
             + i32(1) + i32(2) + i64(40)                # partitions: 2 up to offset 40
             + i32(30000))                              # timeout_ms
    body = apis.decode_request(frame).body
    assert [(t.name, [(p.partition_index, p.offset) for p in t.partitions])
            for t in body.topics] == [("t", [(2, 40)])]
    assert body.timeout_ms == 30000
    assert joined(apis.encode_request(ApiKey.DELETE_RECORDS, 0, 5, "adm", body)) == frame
    expected = (i32(5) + i32(0)                          # correlation id, throttle
                + i32(1) + string("t") + i32(1)
                + i32(2) + i64(40) + i16(0))             # partition, low watermark, error
    answer = {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 2, "low_watermark": 40, "error_code": 0}]}]}
    assert joined(apis.encode_response(ApiKey.DELETE_RECORDS, 0, 5, answer)) == expected


def test_elect_leaders_v0_has_no_type_and_v1_has_one():
    v0 = (request_header_v1(ApiKey.ELECT_LEADERS, 0, 1, "adm")
          + i32(-1)                                      # topic_partitions: null (all)
          + i32(60000))
    body = apis.decode_request(v0).body
    assert body.topic_partitions is None and body.timeout_ms == 60000
    v1 = (request_header_v1(ApiKey.ELECT_LEADERS, 1, 2, "adm")
          + i8(1)                                        # election_type: UNCLEAN
          + i32(1) + string("t") + i32(1) + i32(0)       # t: [0]
          + i32(1000))
    body = apis.decode_request(v1).body
    assert (body.election_type, body.topic_partitions[0].topic,
            list(body.topic_partitions[0].partitions)) == (1, "t", [0])
    # The v0 answer has no top-level error code.
    expected = (i32(1) + i32(0) + i32(1) + string("t") + i32(1)
                + i32(0) + i16(84) + i16(-1))            # partition 0, ELECTION_NOT_NEEDED, null
    answer = {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
        {"topic": "t", "partition_result": [
            {"partition_id": 0, "error_code": 84, "error_message": None}]}]}
    assert joined(apis.encode_response(ApiKey.ELECT_LEADERS, 0, 1, answer)) == expected


def test_describe_cluster_v0_response_is_flexible():
    expected = (i32(9) + NO_TAGS                         # correlation id, header v1 tags
                + i32(0) + i16(0) + b"\x00"              # throttle, error, null message
                + compact_string("cid") + i32(2)         # cluster id, controller
                + bytes([1 + 1])                         # one broker
                + i32(2) + compact_string("h") + i32(9092) + b"\x00" + NO_TAGS
                + i32(-2147483648) + NO_TAGS)
    answer = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
              "cluster_id": "cid", "controller_id": 2,
              "brokers": [{"broker_id": 2, "host": "h", "port": 9092, "rack": None}]}
    assert joined(apis.encode_response(ApiKey.DESCRIBE_CLUSTER, 0, 9, answer)) == expected
    _, decoded = apis.decode_response(ApiKey.DESCRIBE_CLUSTER, 0, expected)
    assert [(b.broker_id, b.host, b.port) for b in decoded.brokers] == [(2, "h", 9092)]


def test_list_partition_reassignments_v0_request_for_everything():
    frame = (request_header_v2(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 3, "adm")
             + i32(10000) + b"\x00" + NO_TAGS)          # timeout, topics: null
    body = apis.decode_request(frame).body
    assert body.timeout_ms == 10000 and body.topics is None


def test_describe_log_dirs_v1_response():
    expected = (i32(4) + i32(0)                          # correlation id, throttle (no error)
                + i32(1) + i16(0) + string("/d")         # one directory, fine
                + i32(1) + string("t") + i32(1)
                + i32(0) + i64(123) + i64(0) + b"\x00")  # partition 0: 123 bytes, no lag
    answer = {"throttle_time_ms": 0, "error_code": 0, "results": [
        {"error_code": 0, "log_dir": "/d", "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "partition_size": 123, "offset_lag": 0,
             "is_future_key": False}]}], "total_bytes": 10, "usable_bytes": 5}]}
    assert joined(apis.encode_response(ApiKey.DESCRIBE_LOG_DIRS, 1, 4, answer)) == expected


def test_delete_groups_v0_and_v2():
    v0 = request_header_v1(ApiKey.DELETE_GROUPS, 0, 3, "adm") + i32(2) + string("a") + string("b")
    assert apis.decode_request(v0).body.groups_names == ["a", "b"]
    v2 = (request_header_v2(ApiKey.DELETE_GROUPS, 2, 4, "adm")
          + b"\x02" + compact_string("a") + NO_TAGS)     # compact array of one, body tags
    assert apis.decode_request(v2).body.groups_names == ["a"]
    answer = {"throttle_time_ms": 0, "results": [{"group_id": "a", "error_code": 68}]}
    assert joined(apis.encode_response(ApiKey.DELETE_GROUPS, 0, 3, answer)) == (
        i32(3) + i32(0) + i32(1) + string("a") + i16(68))
    assert joined(apis.encode_response(ApiKey.DELETE_GROUPS, 2, 4, answer)) == (
        i32(4) + NO_TAGS + i32(0) + b"\x02" + compact_string("a") + i16(68) + NO_TAGS
        + NO_TAGS)


def test_offset_delete_v0():
    frame = (request_header_v1(ApiKey.OFFSET_DELETE, 0, 6, "adm")
             + string("g") + i32(1) + string("t") + i32(2) + i32(0) + i32(5))
    body = apis.decode_request(frame).body
    assert (body.group_id, body.topics[0].name,
            [p.partition_index for p in body.topics[0].partitions]) == ("g", "t", [0, 5])
    answer = {"error_code": 0, "throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 86}]}]}
    assert joined(apis.encode_response(ApiKey.OFFSET_DELETE, 0, 6, answer)) == (
        i32(6) + i16(0) + i32(0) + i32(1) + string("t") + i32(1) + i32(0) + i16(86))
