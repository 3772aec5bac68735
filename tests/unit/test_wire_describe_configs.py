"""DescribeConfigs (key 32) on the wire: every served version round-trips, the bytes match
Kafka's documented layout (built by hand), kafka-python 3.x agrees with the schema in both
directions, and error responses name every resource of the request."""

from __future__ import annotations

import pytest

from broker_core.wire import apis
from broker_core.wire.apis import SUPPORTED, ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import describe_configs as dc
from broker_core.wire.primitives import Reader
from tests.support.wire_bytes import (
    NO_TAGS,
    compact_string,
    i8,
    i16,
    i32,
    request_header_v1,
    request_header_v2,
    string,
)
from tests.support.wire_samples import populated

SPEC = SUPPORTED[ApiKey.DESCRIBE_CONFIGS]
VERSIONS = list(range(SPEC.min_version, SPEC.max_version + 1))


def test_served_range_covers_the_clients():
    # librdkafka (kcat, confluent-kafka) sends v1 (it asks for v0-1); kafka-python 3 up to v4.
    assert (SPEC.min_version, SPEC.max_version, SPEC.flexible_min_version) == (1, 4, 4)
    assert int(ApiKey.DESCRIBE_CONFIGS) == 32


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("side", ["request", "response"])
def test_round_trip(side, version, nulls):
    msg = SPEC.request if side == "request" else SPEC.response
    value = populated(msg, version, msg.is_flexible(version), nulls=nulls)
    data = msg.to_bytes(value, version)
    decoded = msg.from_bytes(data, version)
    assert decoded == msg.build(value)
    assert msg.to_bytes(decoded, version) == data


@pytest.mark.parametrize("version", VERSIONS)
def test_round_trip_through_the_entry_points(version):
    body = {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None},
                          {"resource_type": 4, "resource_name": "1",
                           "configuration_keys": ["log.dirs"]}],
            "include_synonyms": True}
    req = apis.decode_request(b"".join(apis.encode_request(32, version, 5, "c", body)))
    assert [(r.resource_type, r.resource_name, r.configuration_keys)
            for r in req.body.resources] == [(2, "t", None), (4, "1", ["log.dirs"])]
    assert req.body.include_synonyms is True


# -- known bytes ---------------------------------------------------------------------------------


def test_v1_request_known_bytes():
    frame = (
        request_header_v1(32, 1, 9, "kcat")
        + i32(1)                                  # resources: int32 count
        + i8(2) + string("orders")                #   TOPIC "orders"
        + i32(-1)                                 #   configuration_keys: null
        + b"\x01"                                 # include_synonyms
    )
    req = apis.decode_request(frame)
    r = req.body.resources[0]
    assert (r.resource_type, r.resource_name, r.configuration_keys) == (2, "orders", None)
    assert req.body.include_synonyms is True
    assert b"".join(apis.encode_request(32, 1, 9, "kcat", req.body)) == frame


def test_v4_request_known_bytes():
    frame = (
        request_header_v2(32, 4, 9, "cli")
        + b"\x02"                                 # resources: compact count 1
        + i8(4) + compact_string("1")             #   BROKER "1"
        + b"\x02" + compact_string("log.dirs")    #   configuration_keys: ["log.dirs"]
        + NO_TAGS
        + b"\x00"                                 # include_synonyms
        + b"\x01"                                 # include_documentation
        + NO_TAGS
    )
    req = apis.decode_request(frame)
    assert req.body.resources[0].configuration_keys == ["log.dirs"]
    assert req.body.include_documentation is True
    assert b"".join(apis.encode_request(32, 4, 9, "cli", req.body)) == frame


def _v1_response_body() -> dict:
    return {"throttle_time_ms": 0, "results": [{
        "error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t",
        "configs": [{"name": "retention.ms", "value": "60000", "read_only": False,
                     "config_source": 1, "is_sensitive": False,
                     "synonyms": [{"name": "retention.ms", "value": "60000", "source": 1}]}]}]}


def test_v1_response_known_bytes():
    expected = (
        i32(3)                                    # response header v0: correlation id
        + i32(0)                                  # throttle_time_ms
        + i32(1)                                  # results
        + i16(0) + i16(-1)                        #   error_code, error_message null
        + i8(2) + string("t")                     #   TOPIC "t"
        + i32(1)                                  #   configs
        + string("retention.ms") + string("60000")
        + b"\x00"                                 #     read_only
        + i8(1)                                   #     config_source DYNAMIC_TOPIC_CONFIG
        + b"\x00"                                 #     is_sensitive
        + i32(1)                                  #     synonyms
        + string("retention.ms") + string("60000") + i8(1)
    )
    assert b"".join(apis.encode_response(32, 1, 3, _v1_response_body())) == expected
    cid, body = apis.decode_response(32, 1, expected)
    assert cid == 3 and body.results[0].configs[0].value == "60000"


def test_v3_response_carries_config_type_and_documentation():
    body = _v1_response_body()
    body["results"][0]["configs"][0].update(config_type=5, documentation="how long")
    data = dc.RESPONSE.to_bytes(body, 3)
    tail = i8(5) + string("how long")  # config_type, documentation close the config entry
    assert data.endswith(tail)
    assert dc.RESPONSE.from_bytes(data, 3).results[0].configs[0].config_type == 5
    # Both are ignorable: dropped silently below v3.
    assert dc.RESPONSE.to_bytes(body, 2) == dc.RESPONSE.to_bytes(_v1_response_body(), 2)


def test_error_body_answers_every_resource():
    frame = b"".join(apis.encode_request(32, 2, 4, "c", {"resources": [
        {"resource_type": 2, "resource_name": "a", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "7", "configuration_keys": []}]}))
    request = apis.decode_request(frame)
    data = b"".join(apis.error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR))
    _, body = apis.decode_response(32, 2, data)
    assert [(r.error_code, r.resource_type, r.resource_name, r.configs) for r in body.results] == [
        (ErrorCode.UNKNOWN_SERVER_ERROR, 2, "a", []), (ErrorCode.UNKNOWN_SERVER_ERROR, 4, "7", [])]
    assert apis.error_response(request.header, ErrorCode.UNKNOWN_SERVER_ERROR) is None


# -- kafka-python 3.x, an independent reading of Kafka's specs ---------------------------------------


kp_configs = pytest.importorskip("kafka.protocol.admin.configs",
                                 reason="kafka-python 3.x protocol classes are not installed")


@pytest.mark.parametrize("version", VERSIONS)
def test_kafka_python_request_decodes(version):
    R = kp_configs.DescribeConfigsRequest
    req = R[version](resources=[
        R.DescribeConfigsResource(resource_type=2, resource_name="t", configuration_keys=None),
        R.DescribeConfigsResource(resource_type=4, resource_name="3",
                                  configuration_keys=["num.partitions"])],
        include_synonyms=True)
    req.with_header(correlation_id=12, client_id="kafka-python")
    got = apis.decode_request(bytes(req.encode(header=True)))
    assert (got.header.api_key, got.header.api_version) == (32, version)
    assert [(r.resource_type, r.resource_name, r.configuration_keys)
            for r in got.body.resources] == [(2, "t", None), (4, "3", ["num.partitions"])]
    assert got.body.include_synonyms is True


@pytest.mark.parametrize("version", VERSIONS)
def test_response_decodes_in_kafka_python(version):
    data = b"".join(apis.encode_response(32, version, 13, _v1_response_body()))
    resp = kp_configs.DescribeConfigsResponse.decode(data, version=version, header=True)
    (result,) = resp.results
    assert (result.error_code, result.resource_type, result.resource_name) == (0, 2, "t")
    (c,) = result.configs
    assert (c.name, c.value, c.read_only, c.config_source, c.is_sensitive) == (
        "retention.ms", "60000", False, 1, False)
    assert [(s.name, s.value, s.source) for s in c.synonyms] == [("retention.ms", "60000", 1)]


def test_decoded_struct_holds_defaults_for_later_fields():
    data = dc.RESPONSE.to_bytes(_v1_response_body(), 1)
    c = dc.RESPONSE.decode(Reader(data), 1).results[0].configs[0]
    assert (c.config_type, c.documentation) == (0, None)
