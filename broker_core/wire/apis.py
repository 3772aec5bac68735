"""The API registry: which Kafka APIs Sluice serves, at which versions, and the request/response
entry points of the codec.

The advertised ranges are chosen so that kcat (librdkafka 2.0), confluent-kafka 2.x and
kafka-python negotiate versions they support, while staying below versions that identify topics
only by id (Fetch 13+, DeleteTopics 6+) since topic ids are not kept yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from broker_core.wire import messages as m
from broker_core.wire.errors import (
    ErrorCode,
    MalformedFrame,
    ProtocolError,
    UnknownApiKey,
    UnsupportedVersion,
)
from broker_core.wire.header import (
    RequestHeader,
    read_request_header,
    read_response_header,
    response_header_flexible,
    write_request_header,
    write_response_header,
)
from broker_core.wire.primitives import Reader, Writer
from broker_core.wire.schema import Message, Struct


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    CREATE_PARTITIONS = 37
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56


@dataclass(frozen=True)
class ApiSpec:
    key: ApiKey
    min_version: int
    max_version: int
    request: Message
    response: Message

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


SUPPORTED: dict[ApiKey, ApiSpec] = {
    s.key: s for s in [
        ApiSpec(ApiKey.PRODUCE, 3, 9, m.PRODUCE_REQUEST, m.PRODUCE_RESPONSE),
        ApiSpec(ApiKey.FETCH, 4, 12, m.FETCH_REQUEST, m.FETCH_RESPONSE),
        ApiSpec(ApiKey.LIST_OFFSETS, 1, 7, m.LIST_OFFSETS_REQUEST, m.LIST_OFFSETS_RESPONSE),
        ApiSpec(ApiKey.METADATA, 1, 12, m.METADATA_REQUEST, m.METADATA_RESPONSE),
        ApiSpec(ApiKey.LEADER_AND_ISR, 5, 5, m.LEADER_AND_ISR_REQUEST, m.LEADER_AND_ISR_RESPONSE),
        ApiSpec(ApiKey.STOP_REPLICA, 3, 3, m.STOP_REPLICA_REQUEST, m.STOP_REPLICA_RESPONSE),
        ApiSpec(ApiKey.UPDATE_METADATA, 7, 7, m.UPDATE_METADATA_REQUEST,
                m.UPDATE_METADATA_RESPONSE),
        ApiSpec(ApiKey.API_VERSIONS, 0, 3, m.API_VERSIONS_REQUEST, m.API_VERSIONS_RESPONSE),
        ApiSpec(ApiKey.CREATE_TOPICS, 2, 7, m.CREATE_TOPICS_REQUEST, m.CREATE_TOPICS_RESPONSE),
        ApiSpec(ApiKey.DELETE_TOPICS, 1, 5, m.DELETE_TOPICS_REQUEST, m.DELETE_TOPICS_RESPONSE),
        ApiSpec(ApiKey.CREATE_PARTITIONS, 0, 3, m.CREATE_PARTITIONS_REQUEST,
                m.CREATE_PARTITIONS_RESPONSE),
    ]
}


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Struct


def _flexible(api_key: int, version: int) -> bool:
    spec = SUPPORTED.get(api_key)  # type: ignore[call-overload]
    return spec is not None and spec.request.is_flexible(version)


def decode_request(frame: bytes | memoryview) -> Request:
    """Decode one request frame (without its size prefix).

    Raises :class:`UnknownApiKey` / :class:`UnsupportedVersion` carrying the header, so the caller
    can answer, and :class:`MalformedFrame` for anything else wrong (including trailing bytes).
    """
    r = Reader(frame)
    try:
        api_key = r.int16()
        api_version = r.int16()
        correlation_id = r.int32()
    except MalformedFrame:
        raise MalformedFrame("frame too short for a request header") from None
    spec = SUPPORTED.get(api_key)  # type: ignore[call-overload]
    if spec is None:
        header = RequestHeader(api_key, api_version, correlation_id, None)
        raise UnknownApiKey(header, f"unknown api key {api_key}")
    if not spec.supports(api_version):
        r2 = Reader(frame, 8)
        try:
            client_id = r2.string(nullable=True, compact=False)
        except ProtocolError:
            client_id = None
        header = RequestHeader(api_key, api_version, correlation_id, client_id)
        raise UnsupportedVersion(
            header, f"{spec.key.name} v{api_version} is not supported "
                    f"(v{spec.min_version}-v{spec.max_version} are)")
    r.pos = 0
    header = read_request_header(r, _flexible)
    try:
        body = spec.request.decode(r, api_version)
    except ProtocolError:
        raise
    except (ValueError, OverflowError, IndexError) as e:
        raise MalformedFrame(f"bad {spec.key.name} v{api_version} request: {e}") from None
    if r.remaining():
        raise MalformedFrame(f"{r.remaining()} trailing bytes after {spec.key.name} request")
    return Request(header, body)


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> list[bytes]:
    spec = SUPPORTED[ApiKey(api_key)]
    w = Writer()
    write_request_header(w, RequestHeader(api_key, api_version, correlation_id, client_id),
                         spec.request.is_flexible(api_version))
    spec.request.encode(body, api_version, w)
    return w.getvalue()


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any
                    ) -> list[bytes]:
    spec = SUPPORTED[ApiKey(api_key)]
    w = Writer()
    flexible = spec.response.is_flexible(api_version)
    write_response_header(w, correlation_id, response_header_flexible(api_key, flexible))
    spec.response.encode(body, api_version, w)
    return w.getvalue()


def decode_response(api_key: int, api_version: int, frame: bytes | memoryview
                    ) -> tuple[int, Struct]:
    spec = SUPPORTED[ApiKey(api_key)]
    r = Reader(frame)
    flexible = spec.response.is_flexible(api_version)
    correlation_id = read_response_header(r, response_header_flexible(api_key, flexible))
    try:
        body = spec.response.decode(r, api_version)
    except ProtocolError:
        raise
    except (ValueError, OverflowError, IndexError) as e:
        raise MalformedFrame(f"bad {spec.key.name} v{api_version} response: {e}") from None
    if r.remaining():
        raise MalformedFrame(f"{r.remaining()} trailing bytes after {spec.key.name} response")
    return correlation_id, body


def api_versions_body(error_code: int = 0) -> dict:
    return {
        "error_code": error_code,
        "api_keys": [{"api_key": int(k), "min_version": s.min_version,
                      "max_version": s.max_version} for k, s in sorted(SUPPORTED.items())],
        "throttle_time_ms": 0,
    }


def error_response(header: RequestHeader, error_code: ErrorCode) -> list[bytes] | None:
    """A response carrying ``error_code`` for a request we cannot otherwise answer.

    ApiVersions with an unsupported version gets a v0 response listing our versions (KIP-511).
    For other APIs the request body is unknown, so there is no well-formed per-partition answer:
    return ``None`` and let the caller close the connection, as Kafka does.
    """
    if header.api_key == ApiKey.API_VERSIONS:
        w = Writer()
        write_response_header(w, header.correlation_id, False)
        m.API_VERSIONS_RESPONSE.encode(api_versions_body(int(error_code)), 0, w)
        return w.getvalue()
    return None
