"""AlterConfigs (33) and IncrementalAlterConfigs (44) on the wire: every served version
round-trips, the bytes match Kafka's documented layout (built by hand), kafka-python 3.x agrees
with the schemas in both directions, and error responses name every resource."""

from __future__ import annotations

import pytest

from broker_core.wire import apis
from broker_core.wire.apis import SUPPORTED, ApiKey
from broker_core.wire.errors import ErrorCode
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

ALTER = SUPPORTED[ApiKey.ALTER_CONFIGS]
INCREMENTAL = SUPPORTED[ApiKey.INCREMENTAL_ALTER_CONFIGS]
CASES = [(s, v) for s in (ALTER, INCREMENTAL) for v in range(s.min_version, s.max_version + 1)]


def test_served_ranges():
    assert (ALTER.min_version, ALTER.max_version, ALTER.flexible_min_version) == (0, 2, 2)
    assert (INCREMENTAL.min_version, INCREMENTAL.max_version,
            INCREMENTAL.flexible_min_version) == (0, 1, 1)


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize("spec, version", CASES, ids=[f"{s.name}-v{v}" for s, v in CASES])
@pytest.mark.parametrize("side", ["request", "response"])
def test_round_trip(side, spec, version, nulls):
    msg = spec.request if side == "request" else spec.response
    value = populated(msg, version, msg.is_flexible(version), nulls=nulls)
    data = msg.to_bytes(value, version)
    assert msg.to_bytes(msg.from_bytes(data, version), version) == data


def test_alter_configs_v0_request_known_bytes():
    frame = (
        request_header_v1(33, 0, 5, "kp")
        + i32(1)                                            # resources
        + i8(2) + string("orders")                          #   TOPIC "orders"
        + i32(2)                                            #   configs
        + string("retention.ms") + string("60000")
        + string("cleanup.policy") + i16(-1)                #   value null: back to default
        + b"\x01"                                           # validate_only
    )
    req = apis.decode_request(frame)
    (r,) = req.body.resources
    assert (r.resource_type, r.resource_name) == (2, "orders")
    assert [(c.name, c.value) for c in r.configs] == [("retention.ms", "60000"),
                                                       ("cleanup.policy", None)]
    assert req.body.validate_only is True
    assert b"".join(apis.encode_request(33, 0, 5, "kp", req.body)) == frame


def test_incremental_v1_request_known_bytes():
    frame = (
        request_header_v2(44, 1, 6, "rdkafka")
        + b"\x02"                                           # resources: compact count 1
        + i8(4) + compact_string("")                        #   BROKER "" (cluster default)
        + b"\x03"                                           #   configs: 2
        + compact_string("log.retention.ms") + i8(0) + compact_string("1000") + NO_TAGS
        + compact_string("min.insync.replicas") + i8(1) + b"\x00" + NO_TAGS  # DELETE, null
        + NO_TAGS
        + b"\x00"                                           # validate_only
        + NO_TAGS
    )
    req = apis.decode_request(frame)
    (r,) = req.body.resources
    assert [(c.name, c.config_operation, c.value) for c in r.configs] == [
        ("log.retention.ms", 0, "1000"), ("min.insync.replicas", 1, None)]
    assert b"".join(apis.encode_request(44, 1, 6, "rdkafka", req.body)) == frame


@pytest.mark.parametrize("key", [33, 44])
def test_v0_response_known_bytes(key):
    body = {"throttle_time_ms": 0, "responses": [
        {"error_code": 40, "error_message": "bad", "resource_type": 2, "resource_name": "t"}]}
    expected = (i32(8) + i32(0) + i32(1) + i16(40) + string("bad") + i8(2) + string("t"))
    assert b"".join(apis.encode_response(key, 0, 8, body)) == expected


@pytest.mark.parametrize("key", [33, 44])
def test_error_body_answers_every_resource(key):
    cfg = {"name": "x", "value": "1"} | ({"config_operation": 0} if key == 44 else {})
    frame = b"".join(apis.encode_request(key, 0, 4, "c", {"resources": [
        {"resource_type": 2, "resource_name": "a", "configs": [cfg]},
        {"resource_type": 4, "resource_name": "7", "configs": []}], "validate_only": False}))
    request = apis.decode_request(frame)
    data = b"".join(apis.error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR))
    _, body = apis.decode_response(key, 0, data)
    assert [(r.error_code, r.resource_type, r.resource_name) for r in body.responses] == [
        (ErrorCode.UNKNOWN_SERVER_ERROR, 2, "a"), (ErrorCode.UNKNOWN_SERVER_ERROR, 4, "7")]


# -- kafka-python 3.x, an independent reading of Kafka's specs ---------------------------------------

kp = pytest.importorskip("kafka.protocol.admin.configs",
                         reason="kafka-python 3.x protocol classes are not installed")


@pytest.mark.parametrize("version", [0, 1, 2])
def test_kafka_python_alter_request_decodes(version):
    R = kp.AlterConfigsRequest
    Res = R.AlterConfigsResource
    req = R[version](resources=[Res(resource_type=2, resource_name="t", configs=[
        Res.AlterableConfig(name="retention.ms", value="5")])], validate_only=False)
    req.with_header(correlation_id=3, client_id="kp")
    got = apis.decode_request(bytes(req.encode(header=True)))
    assert (got.header.api_key, got.header.api_version) == (33, version)
    assert [(c.name, c.value) for c in got.body.resources[0].configs] == [("retention.ms", "5")]


@pytest.mark.parametrize("version", [0, 1])
def test_kafka_python_incremental_request_decodes(version):
    R = kp.IncrementalAlterConfigsRequest
    Res = R.AlterConfigsResource
    req = R[version](resources=[Res(resource_type=2, resource_name="t", configs=[
        Res.AlterableConfig(name="cleanup.policy", config_operation=2, value="delete")])],
        validate_only=True)
    req.with_header(correlation_id=3, client_id="kp")
    got = apis.decode_request(bytes(req.encode(header=True)))
    (c,) = got.body.resources[0].configs
    assert (c.name, c.config_operation, c.value) == ("cleanup.policy", 2, "delete")
    assert got.body.validate_only is True


@pytest.mark.parametrize("key, cls, version", [(33, "AlterConfigsResponse", v) for v in (0, 1, 2)]
                         + [(44, "IncrementalAlterConfigsResponse", v) for v in (0, 1)])
def test_responses_decode_in_kafka_python(key, cls, version):
    body = {"throttle_time_ms": 0, "responses": [
        {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "t"}]}
    data = b"".join(apis.encode_response(key, version, 13, body))
    resp = getattr(kp, cls).decode(data, version=version, header=True)
    (r,) = resp.responses
    assert (r.error_code, r.resource_type, r.resource_name) == (0, 2, "t")
