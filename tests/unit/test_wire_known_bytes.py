"""The codec against byte strings built by hand from Kafka's documented layouts (struct.pack),
so it is checked against the real wire format and not only against itself."""

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

# -- ApiVersions -------------------------------------------------------------------------------


def test_api_versions_v0_request():
    frame = request_header_v1(18, 0, 1, "kcat")  # v0 has an empty body
    req = apis.decode_request(frame)
    assert (req.header.api_key, req.header.api_version, req.header.correlation_id,
            req.header.client_id) == (18, 0, 1, "kcat")
    assert joined(apis.encode_request(18, 0, 1, "kcat", {})) == frame


def test_api_versions_v0_response():
    expected = (
        i32(1)                                  # response header v0: correlation id
        + i16(0)                                # error_code
        + i32(2)                                # api_keys: int32 count
        + i16(0) + i16(3) + i16(9)              #   Produce v3-9
        + i16(18) + i16(0) + i16(3)             #   ApiVersions v0-3
    )
    body = {"error_code": 0, "api_keys": [
        {"api_key": 0, "min_version": 3, "max_version": 9},
        {"api_key": 18, "min_version": 0, "max_version": 3}]}
    assert joined(apis.encode_response(ApiKey.API_VERSIONS, 0, 1, body)) == expected
    correlation_id, decoded = apis.decode_response(18, 0, expected)
    assert correlation_id == 1
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [
        (0, 3, 9), (18, 0, 3)]


def test_api_versions_v3_request():
    frame = (
        request_header_v2(18, 3, 7, "rdkafka")
        + compact_string("librdkafka")          # client_software_name
        + compact_string("2.0.2")               # client_software_version
        + NO_TAGS                               # body tagged fields
    )
    req = apis.decode_request(frame)
    assert req.header.correlation_id == 7
    assert req.body.client_software_name == "librdkafka"
    assert req.body.client_software_version == "2.0.2"
    assert joined(apis.encode_request(18, 3, 7, "rdkafka", req.body)) == frame


def test_api_versions_v3_response_keeps_header_v0_and_writes_tagged_fields():
    expected = (
        i32(7)                                  # header v0 even though v3 is flexible
        + i16(0)                                # error_code
        + bytes([1 + 1])                        # api_keys: compact array of 1
        + i16(3) + i16(1) + i16(12) + NO_TAGS   #   Metadata v1-12, entry's own tagged fields
        + i32(0)                                # throttle_time_ms
        + bytes([2])                            # tagged fields: two of them, by tag
        + bytes([1, 8]) + i64(5)                #   tag 1 finalized_features_epoch, 8 bytes
        + bytes([3, 1, 1])                      #   tag 3 zk_migration_ready = true, 1 byte
    )
    body = {"error_code": 0, "api_keys": [{"api_key": 3, "min_version": 1, "max_version": 12}],
            "throttle_time_ms": 0, "finalized_features_epoch": 5, "zk_migration_ready": True}
    assert joined(apis.encode_response(18, 3, 7, body)) == expected
    _, decoded = apis.decode_response(18, 3, expected)
    assert decoded.finalized_features_epoch == 5 and decoded.zk_migration_ready is True
    assert decoded.supported_features == []  # absent tag: default


# -- Metadata v1 -------------------------------------------------------------------------------


def test_metadata_v1_request_named_and_all_topics():
    named = request_header_v1(3, 1, 2, "c") + i32(2) + string("a") + string("b")
    assert [t.name for t in apis.decode_request(named).body.topics] == ["a", "b"]
    everything = request_header_v1(3, 1, 3, "c") + i32(-1)  # null array: all topics
    assert apis.decode_request(everything).body.topics is None
    assert joined(apis.encode_request(3, 1, 3, "c", {"topics": None})) == everything


def test_metadata_v1_response():
    expected = (
        i32(9)                                                  # correlation id
        + i32(1)                                                # brokers
        + i32(1) + string("h1") + i32(9092) + i16(-1)           #   node 1, rack null
        + i32(1)                                                # controller_id
        + i32(1)                                                # topics
        + i16(0) + string("t") + i8(0)                          #   ok, "t", not internal
        + i32(1)                                                #   partitions
        + i16(0) + i32(0) + i32(1)                              #     p0, leader 1
        + i32(2) + i32(1) + i32(2)                              #     replicas [1, 2]
        + i32(1) + i32(1)                                       #     isr [1]
    )
    body = {
        "brokers": [{"node_id": 1, "host": "h1", "port": 9092, "rack": None}],
        "controller_id": 1,
        "topics": [{"error_code": 0, "name": "t", "is_internal": False, "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 1,
             "replica_nodes": [1, 2], "isr_nodes": [1]}]}],
    }
    assert joined(apis.encode_response(3, 1, 9, body)) == expected
    _, decoded = apis.decode_response(3, 1, expected)
    assert decoded.topics[0].partitions[0].replica_nodes == [1, 2]
    assert decoded.cluster_id is None  # not in v1: default


# -- Produce v3 request --------------------------------------------------------------------------


def test_produce_v3_request_records_are_a_zero_copy_slice():
    batch = bytes(range(61)) * 3  # opaque to the codec
    frame = (
        request_header_v1(0, 3, 11, "p")
        + i16(-1)                               # transactional_id: null
        + i16(-1)                               # acks = all
        + i32(30000)                            # timeout_ms
        + i32(1) + string("t")                  # topic_data[0].name
        + i32(1) + i32(4)                       # partition_data[0].index = 4
        + i32(len(batch)) + batch               # records: int32 length + bytes
    )
    req = apis.decode_request(frame)
    body = req.body
    assert (body.transactional_id, body.acks, body.timeout_ms) == (None, -1, 30000)
    records = body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records == batch
    assert records.obj is frame  # a view into the frame, not a copy
    assert joined(apis.encode_request(0, 3, 11, "p", body)) == frame


def test_produce_v9_request_uses_compact_forms():
    frame = (
        request_header_v2(0, 9, 12, "p")
        + b"\x00"                               # transactional_id: compact null
        + i16(1) + i32(500)                     # acks, timeout_ms
        + bytes([2]) + compact_string("t")      # topic_data: 1 topic
        + bytes([2]) + i32(0)                   # partition_data: 1 partition, index 0
        + bytes([3 + 1]) + b"xyz"               # records: compact bytes
        + NO_TAGS + NO_TAGS + NO_TAGS           # partition, topic, body tagged fields
    )
    body = apis.decode_request(frame).body
    assert bytes(body.topic_data[0].partition_data[0].records) == b"xyz"
    assert joined(apis.encode_request(0, 9, 12, "p", body)) == frame


# -- Fetch v4 response --------------------------------------------------------------------------


def test_fetch_v4_response():
    batch = b"\x00" * 12 + b"batch"
    expected = (
        i32(21)                                 # correlation id
        + i32(0)                                # throttle_time_ms
        + i32(1) + string("t")                  # responses[0].topic
        + i32(1)                                # partitions
        + i32(2) + i16(0)                       #   partition 2, no error
        + i64(100) + i64(90)                    #   high_watermark, last_stable_offset
        + i32(1) + i64(7) + i64(80)             #   aborted_transactions: producer 7 at 80
        + i32(len(batch)) + batch               #   records
    )
    body = {"throttle_time_ms": 0, "responses": [{"topic": "t", "partitions": [{
        "partition_index": 2, "error_code": 0, "high_watermark": 100, "last_stable_offset": 90,
        "aborted_transactions": [{"producer_id": 7, "first_offset": 80}], "records": batch}]}]}
    assert joined(apis.encode_response(1, 4, 21, body)) == expected
    _, decoded = apis.decode_response(1, 4, expected)
    p = decoded.responses[0].partitions[0]
    assert (p.high_watermark, p.last_stable_offset, p.log_start_offset) == (100, 90, -1)
    assert bytes(p.records) == batch


def test_fetch_response_records_given_as_chunks_are_written_without_joining():
    big = b"r" * 4096
    chunks = apis.encode_response(1, 4, 1, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "records": [big, big]}]}]})
    assert sum(c is big for c in chunks) == 2
    _, decoded = apis.decode_response(1, 4, b"".join(chunks))
    assert bytes(decoded.responses[0].partitions[0].records) == big + big


# -- InitProducerId ----------------------------------------------------------------------------


def test_init_producer_id_v0_and_v4_requests_and_v4_response():
    v0 = request_header_v1(22, 0, 3, "p") + i16(-1) + i32(60000)  # null transactional id
    req = apis.decode_request(v0)
    assert (req.body.transactional_id, req.body.transaction_timeout_ms) == (None, 60000)
    assert (req.body.producer_id, req.body.producer_epoch) == (-1, -1)  # not in v0: defaults
    assert joined(apis.encode_request(22, 0, 3, "p", {"transactional_id": None,
                                                      "transaction_timeout_ms": 60000})) == v0
    v4 = (request_header_v2(22, 4, 4, "p") + b"\x00"  # compact null string
          + i32(60000) + i64(1000) + i16(2) + NO_TAGS)
    req = apis.decode_request(v4)
    assert (req.body.transactional_id, req.body.producer_id, req.body.producer_epoch) == (
        None, 1000, 2)
    response = i32(4) + NO_TAGS + i32(0) + i16(0) + i64(1000) + i16(3) + NO_TAGS
    body = {"throttle_time_ms": 0, "error_code": 0, "producer_id": 1000, "producer_epoch": 3}
    assert joined(apis.encode_response(22, 4, 4, body)) == response
