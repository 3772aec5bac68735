"""Interop with an independent implementation: kafka-python 3.x's protocol classes.

Requests kafka-python builds must decode with Sluice's codec to the expected fields, and
responses Sluice encodes must decode with kafka-python. kafka-python 3 generates its classes
from Kafka's JSON specs, so this checks the schemas here against a second reading of them.
"""

from __future__ import annotations

import pytest

from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode, UnsupportedVersion

kp_metadata = pytest.importorskip(
    "kafka.protocol.metadata", reason="kafka-python 3.x protocol classes are not installed")
kp_producer = pytest.importorskip("kafka.protocol.producer")
kp_consumer = pytest.importorskip("kafka.protocol.consumer")
ApiVersionsRequest = kp_metadata.ApiVersionsRequest
ApiVersionsResponse = kp_metadata.ApiVersionsResponse
MetadataRequest = kp_metadata.MetadataRequest
MetadataResponse = kp_metadata.MetadataResponse
ProduceRequest = kp_producer.ProduceRequest
ProduceResponse = kp_producer.ProduceResponse
FetchRequest = kp_consumer.FetchRequest
FetchResponse = kp_consumer.FetchResponse


def kp_frame(request, correlation_id=7, client_id="kafka-python") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True))


def versions(key):
    s = apis.SUPPORTED[key]
    return range(s.min_version, s.max_version + 1)


@pytest.mark.parametrize("version", versions(ApiKey.API_VERSIONS))
def test_api_versions_request(version):
    kwargs = {}
    if version >= 3:
        kwargs = {"client_software_name": "kafka-python", "client_software_version": "3.0"}
    req = apis.decode_request(kp_frame(ApiVersionsRequest[version](**kwargs)))
    assert (req.header.api_key, req.header.api_version, req.header.correlation_id,
            req.header.client_id) == (18, version, 7, "kafka-python")
    if version >= 3:
        assert req.body.client_software_name == "kafka-python"
        assert req.body.client_software_version == "3.0"


@pytest.mark.parametrize("version", versions(ApiKey.API_VERSIONS))
def test_api_versions_response_decodes_in_kafka_python(version):
    body = {"error_code": 0, "api_keys": apis.advertised_versions(), "throttle_time_ms": 3}
    data = b"".join(apis.encode_response(18, version, 9, body))
    resp = ApiVersionsResponse.decode(data, version=version, header=True)
    assert resp.header.correlation_id == 9
    assert {(k.api_key, k.min_version, k.max_version) for k in resp.api_keys} == {
        (e["api_key"], e["min_version"], e["max_version"]) for e in apis.advertised_versions()}
    if version >= 1:
        assert resp.throttle_time_ms == 3


def test_kafka_pythons_newest_api_versions_request_is_negotiated_down_kip_511():
    frame = kp_frame(ApiVersionsRequest[ApiVersionsRequest.max_version](
        client_software_name="kafka-python", client_software_version="3.0"))
    with pytest.raises(UnsupportedVersion) as e:
        apis.decode_request(frame)
    data = b"".join(apis.error_response(e.value.header, ErrorCode.UNSUPPORTED_VERSION))
    resp = ApiVersionsResponse.decode(data, version=ApiVersionsRequest.max_version, header=True)
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.max_version) for k in resp.api_keys] == [(18, 3)]


@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
def test_metadata_request(version):
    topics = [MetadataRequest.MetadataRequestTopic(name=n) for n in ("a", "b")]
    kwargs = {"topics": topics}
    if version >= 4:
        kwargs["allow_auto_topic_creation"] = False
    req = apis.decode_request(kp_frame(MetadataRequest[version](**kwargs)))
    assert [t.name for t in req.body.topics] == ["a", "b"]
    if version >= 4:
        assert req.body.allow_auto_topic_creation is False
    every = apis.decode_request(kp_frame(MetadataRequest[version](topics=None)))
    assert every.body.topics is None


@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
def test_metadata_response_decodes_in_kafka_python(version):
    body = {"brokers": [{"node_id": 1, "host": "b1", "port": 9092, "rack": "r1"}],
            "cluster_id": "sluice", "controller_id": 1,
            "topics": [{"error_code": 0, "name": "t", "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 4,
                 "replica_nodes": [1], "isr_nodes": [1]}]}]}
    data = b"".join(apis.encode_response(3, version, 10, body))
    resp = MetadataResponse.decode(data, version=version, header=True)
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(1, "b1", 9092)]
    t = resp.topics[0]
    assert t.name == "t" and t.partitions[0].leader_id == 1
    assert t.partitions[0].isr_nodes == [1]
    if version >= 2:
        assert resp.cluster_id == "sluice"
    if version >= 7:
        assert t.partitions[0].leader_epoch == 4


@pytest.mark.parametrize("version", versions(ApiKey.PRODUCE))
def test_produce_request(version):
    batch = b"\x00" * 61 + b"opaque-record-batch"
    req = ProduceRequest[version](
        transactional_id=None, acks=-1, timeout_ms=1500,
        topic_data=[ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=3, records=batch)])])
    decoded = apis.decode_request(kp_frame(req)).body
    assert (decoded.transactional_id, decoded.acks, decoded.timeout_ms) == (None, -1, 1500)
    p = decoded.topic_data[0].partition_data[0]
    assert decoded.topic_data[0].name == "t" and p.index == 3
    assert bytes(p.records) == batch


@pytest.mark.parametrize("version", versions(ApiKey.PRODUCE))
def test_produce_response_decodes_in_kafka_python(version):
    body = {"responses": [{"name": "t", "partition_responses": [
        {"index": 3, "error_code": 0, "base_offset": 42, "log_start_offset": 0}]}]}
    data = b"".join(apis.encode_response(0, version, 11, body))
    resp = ProduceResponse.decode(data, version=version, header=True)
    p = resp.responses[0].partition_responses[0]
    assert (p.index, p.error_code, p.base_offset) == (3, 0, 42)


@pytest.mark.parametrize("version", versions(ApiKey.FETCH))
def test_fetch_request(version):
    req = FetchRequest[version](
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[FetchRequest.FetchTopic(topic="t", partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=2, current_leader_epoch=-1, fetch_offset=99, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=4096)])])
    body = apis.decode_request(kp_frame(req)).body
    p = body.topics[0].partitions[0]
    assert (body.replica_id, body.max_wait_ms, body.min_bytes) == (-1, 500, 1)
    assert body.topics[0].topic == "t"
    assert (p.partition, p.fetch_offset, p.partition_max_bytes) == (2, 99, 4096)


@pytest.mark.parametrize("version", versions(ApiKey.FETCH))
def test_fetch_response_decodes_in_kafka_python(version):
    batch = b"\x01" * 70
    body = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 2, "error_code": 0, "high_watermark": 100,
         "last_stable_offset": 100, "log_start_offset": 0, "records": batch}]}]}
    data = b"".join(apis.encode_response(1, version, 12, body))
    resp = FetchResponse.decode(data, version=version, header=True)
    p = resp.responses[0].partitions[0]
    assert resp.responses[0].topic == "t"
    assert (p.partition_index, p.high_watermark) == (2, 100)
    assert bytes(p.records) == batch
