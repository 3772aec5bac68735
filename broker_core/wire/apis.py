"""The API registry and the codec's entry points for whole requests and responses.

``SUPPORTED`` says which APIs Sluice serves and at which versions (what ApiVersions advertises).
The ranges let kcat/librdkafka 2.x, confluent-kafka 2.x and kafka-python 2.x/3.x negotiate a
version they speak, and stop below versions that name topics only by id (Fetch 13+, DeleteTopics
6+), since Sluice keeps no topic ids. The inter-broker APIs are served at exactly the version
Sluice brokers send (AlterPartition at both v0 and v1). ``docs/protocol.md`` explains each choice.
``DEFINED`` holds APIs the codec encodes and decodes but no broker serves or advertises yet (the
Raft quorum's, KIP-595).

The entry points work on frames *without* the 4-byte size prefix (see
:mod:`broker_core.wire.framing`) and return/accept chunk lists, so large record data is never
joined or copied on the way out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from types import ModuleType
from typing import Any

from broker_core.wire.errors import (
    EncodeError,
    ErrorCode,
    MalformedFrame,
    ProtocolError,
    UnknownApiKey,
    UnsupportedVersion,
)
from broker_core.wire.header import (
    REQUEST_IDS,
    RequestHeader,
    read_request_header,
    read_response_header,
    request_header_version,
    response_header_version,
    write_request_header,
    write_response_header,
)
from broker_core.wire.messages import (
    alter_configs,
    alter_partition,
    alter_partition_reassignments,
    alter_user_scram_credentials,
    api_versions,
    broker_heartbeat,
    cluster_metadata,
    commit_offsets,
    controlled_shutdown,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_consumer_groups,
    describe_groups,
    describe_log_dirs,
    describe_user_scram_credentials,
    discover_brokers,
    elect_leaders,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    metadata,
    metadata_quorum,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    ping,
    produce,
    quorum,
    register_consumer,
    sasl_authenticate,
    sasl_handshake,
    start_fetcher,
    stop_fetcher,
    stop_replica,
    sync_group,
    unregister_consumer,
    update_metadata,
)
from broker_core.wire.primitives import Reader, Writer
from broker_core.wire.schema import Message, Struct


class ApiKey(IntEnum):
    """Kafka's API keys (``ApiKeys.java``), and Sluice-only APIs from 1000 up.

    Ping, StopFetcher and StartFetcher travel coordinator → consumer on a coordinator channel;
    a broker never serves them as requests (it answers INVALID_REQUEST)."""

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
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CLIENT_METRICS_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    # Sluice's own APIs (consumer coordination), from 1000 up.
    CLUSTER_METADATA = 1000
    REGISTER_CONSUMER = 1001
    PING = 1002
    STOP_FETCHER = 1003
    START_FETCHER = 1004
    COMMIT_OFFSETS = 1005
    DESCRIBE_CONSUMER_GROUPS = 1006
    # The metadata quorum's gossip, served by the metadata quorum's listener only.
    DISCOVER_BROKERS = 1007
    # A consumer leaving its group (Kafka's LeaveGroup), consumer → coordinator.
    UNREGISTER_CONSUMER = 1008
    # The metadata quorum's client APIs (quorum listener only).
    METADATA_WRITE = 1020
    SESSION_HEARTBEAT = 1021


ErrorBody = Callable[[int, Any, int], dict | None]

#: Keys from here up are Sluice's own APIs (consumer coordination, docs/design.md#shared-decisions).
SLUICE_API_KEYS_FROM = 1000


@dataclass(frozen=True)
class ApiSpec:
    """One served API. Invariant: ``request`` and ``response`` are valid over exactly
    ``min_version..max_version``, and ``flexible_min_version`` is where both turn flexible
    (``None`` when no served version is).

    ``error_body(version, request_body_or_None, error_code)`` builds the response body that
    reports an error for a request that could not be handled, or returns ``None`` when the API
    cannot carry one.
    """

    key: ApiKey
    name: str
    min_version: int
    max_version: int
    flexible_min_version: int | None
    request: Message
    response: Message
    error_body: ErrorBody | None = None

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return self.flexible_min_version is not None and version >= self.flexible_min_version


def spec_from_module(key: ApiKey, module: ModuleType | Any) -> ApiSpec:
    """An :class:`ApiSpec` from a ``messages`` module (or an object with the same attributes:
    ``REQUEST``, ``RESPONSE``, ``error_body``), checking that request and response agree on
    their versions."""
    req: Message = module.REQUEST
    resp: Message = module.RESPONSE
    if (req.min_version, req.max_version) != (resp.min_version, resp.max_version):
        raise ValueError(f"{key.name}: request and response version ranges differ")
    if req.flexible_versions != resp.flexible_versions:
        raise ValueError(f"{key.name}: request and response flexible versions differ")
    flex = req.flexible_min_version
    if flex is not None and flex > req.max_version:
        flex = None
    elif flex is not None:
        flex = max(flex, req.min_version)
    name = "".join(w.capitalize() for w in key.name.split("_"))
    return ApiSpec(key, name, req.min_version, req.max_version, flex, req, resp,
                   getattr(module, "error_body", None))


SUPPORTED: dict[ApiKey, ApiSpec] = {}


def register(spec: ApiSpec) -> None:
    """Add (or replace) a served API. Used at import for Kafka's APIs and by later modules for
    Sluice's own APIs (keys from 1000 up)."""
    SUPPORTED[spec.key] = spec


for _key, _module in [
    (ApiKey.PRODUCE, produce),
    (ApiKey.FETCH, fetch),
    (ApiKey.LIST_OFFSETS, list_offsets),
    (ApiKey.METADATA, metadata),
    (ApiKey.LEADER_AND_ISR, leader_and_isr),
    (ApiKey.STOP_REPLICA, stop_replica),
    (ApiKey.UPDATE_METADATA, update_metadata),
    (ApiKey.CONTROLLED_SHUTDOWN, controlled_shutdown),
    (ApiKey.OFFSET_COMMIT, offset_commit),
    (ApiKey.OFFSET_FETCH, offset_fetch),
    (ApiKey.FIND_COORDINATOR, find_coordinator),
    (ApiKey.JOIN_GROUP, join_group),
    (ApiKey.HEARTBEAT, heartbeat),
    (ApiKey.LEAVE_GROUP, leave_group),
    (ApiKey.SYNC_GROUP, sync_group),
    (ApiKey.DESCRIBE_GROUPS, describe_groups),
    (ApiKey.LIST_GROUPS, list_groups),
    (ApiKey.API_VERSIONS, api_versions),
    (ApiKey.CREATE_TOPICS, create_topics),
    (ApiKey.DELETE_TOPICS, delete_topics),
    (ApiKey.DELETE_RECORDS, delete_records),
    (ApiKey.INIT_PRODUCER_ID, init_producer_id),
    (ApiKey.DESCRIBE_ACLS, describe_acls),
    (ApiKey.CREATE_ACLS, create_acls),
    (ApiKey.DELETE_ACLS, delete_acls),
    (ApiKey.DESCRIBE_CONFIGS, describe_configs),
    (ApiKey.ALTER_CONFIGS, alter_configs),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, offset_for_leader_epoch),
    (ApiKey.DESCRIBE_LOG_DIRS, describe_log_dirs),
    (ApiKey.CREATE_PARTITIONS, create_partitions),
    (ApiKey.DELETE_GROUPS, delete_groups),
    (ApiKey.ELECT_LEADERS, elect_leaders),
    # Partition reassignment on the client listeners; the quorum listener serves the same
    # schema as its voter change (broker_core.raft.listener_admin), with its own handler.
    (ApiKey.ALTER_PARTITION_REASSIGNMENTS, alter_partition_reassignments),
    (ApiKey.LIST_PARTITION_REASSIGNMENTS, list_partition_reassignments),
    (ApiKey.OFFSET_DELETE, offset_delete),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, incremental_alter_configs),
    (ApiKey.ALTER_PARTITION, alter_partition),
    (ApiKey.DESCRIBE_CLUSTER, describe_cluster),
    (ApiKey.BROKER_HEARTBEAT, broker_heartbeat),
    (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, describe_user_scram_credentials),
    (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, alter_user_scram_credentials),
    (ApiKey.CLUSTER_METADATA, cluster_metadata),
    (ApiKey.REGISTER_CONSUMER, register_consumer),
    (ApiKey.PING, ping),
    (ApiKey.STOP_FETCHER, stop_fetcher),
    (ApiKey.START_FETCHER, start_fetcher),
    (ApiKey.COMMIT_OFFSETS, commit_offsets),
    (ApiKey.DESCRIBE_CONSUMER_GROUPS, describe_consumer_groups),
    (ApiKey.UNREGISTER_CONSUMER, unregister_consumer),
]:
    register(spec_from_module(_key, _module))
del _key, _module

# SASL (KIP-152). SaslHandshake v0 would mean raw SASL tokens outside any Kafka request; only
# v1 (tokens inside SaslAuthenticate) is served. ApiVersions still advertises v0-1, as Kafka 3
# does: librdkafka before 2.10 (kcat's, among others) turns its SASL handshake on only when the
# broker's range includes v0, and then sends v1 whenever the range includes it. A v0 handshake
# is answered UNSUPPORTED_VERSION and closes the connection (broker_core.server.authentication).
# Both are answered by the server's protocol layer, never by a handler.
register(spec_from_module(ApiKey.SASL_HANDSHAKE, sasl_handshake))
register(spec_from_module(ApiKey.SASL_AUTHENTICATE, sasl_authenticate))

DEFINED: dict[ApiKey, ApiSpec] = {}
"""APIs the codec knows but no broker serves: the Raft quorum's (KIP-595, and KIP-630's
FetchSnapshot) and DiscoverBrokers (the quorum's gossip), served by the quorum's own
listener only. (AlterPartitionReassignments is served by both kinds of listener, so it is in
``SUPPORTED``: a partition reassignment on a client listener, a change of the voters on the
quorum listener, each with its own handler.) They are kept
apart from ``SUPPORTED`` so that ApiVersions, :func:`advertised_versions` and
:func:`common_versions` never offer them and :func:`decode_request` refuses them as unknown
unless asked with ``defined=True``. Invariant: no key is in both registries."""

for _key, _api in [
    (ApiKey.VOTE, quorum.VOTE),
    (ApiKey.BEGIN_QUORUM_EPOCH, quorum.BEGIN_QUORUM_EPOCH),
    (ApiKey.END_QUORUM_EPOCH, quorum.END_QUORUM_EPOCH),
    (ApiKey.DESCRIBE_QUORUM, quorum.DESCRIBE_QUORUM),
    (ApiKey.FETCH_SNAPSHOT, quorum.FETCH_SNAPSHOT),
    (ApiKey.DISCOVER_BROKERS, discover_brokers),
    (ApiKey.METADATA_WRITE, metadata_quorum.METADATA_WRITE),
    (ApiKey.SESSION_HEARTBEAT, metadata_quorum.SESSION_HEARTBEAT),
]:
    if _key in SUPPORTED:
        raise ValueError(f"{_key.name} is both served and only defined")
    DEFINED[_key] = spec_from_module(_key, _api)
del _key, _api


def _known(api_key: int, defined: bool) -> ApiSpec | None:
    spec = SUPPORTED.get(api_key)  # type: ignore[call-overload]
    if spec is None and defined:
        spec = DEFINED.get(api_key)  # type: ignore[call-overload]
    return spec


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded request: its header and its body (a :class:`~broker_core.wire.schema.Struct`)."""

    header: RequestHeader
    body: Struct


_MIN_HEADER_BYTES = 8  # api_key, api_version, correlation_id


def _spec(api_key: int, api_version: int) -> ApiSpec:
    """The spec to encode/decode with locally (served or only defined); a programming error
    if this codec does not know the API."""
    spec = _known(api_key, defined=True)
    if spec is None:
        raise EncodeError(f"api key {api_key} is not served by this codec")
    if not spec.supports(api_version):
        raise EncodeError(f"{spec.name} v{api_version} is not served "
                          f"(v{spec.min_version}-v{spec.max_version} are)")
    return spec


def _peek_client_id(r: Reader) -> str | None:
    # Only to report who sent a request we will refuse; a bad client id must not hide that.
    try:
        return r.nullable_string()
    except ProtocolError:
        return None


def decode_request(frame: bytes | memoryview, *, defined: bool = False) -> Request:
    """Decode one request frame (without its size prefix).

    Only served APIs (``SUPPORTED``) are decoded unless ``defined`` is true, which also admits
    the APIs in ``DEFINED`` (for a future quorum listener and for tests).

    Raises :class:`UnknownApiKey` / :class:`UnsupportedVersion` carrying the parsed header so the
    caller can answer or log it, and :class:`MalformedFrame` for anything else wrong (bytes left
    over after a complete body are ignored, as Kafka does). Record data in the body are
    zero-copy slices of ``frame``.
    """
    r = Reader(frame)
    if r.remaining() < _MIN_HEADER_BYTES:
        raise MalformedFrame(f"a frame of {r.remaining()} bytes is too short for a request header")
    api_key, api_version, correlation_id = REQUEST_IDS.unpack_from(r.buf, 0)
    spec = _known(api_key, defined)
    if spec is None or not spec.supports(api_version):
        r.pos = REQUEST_IDS.size
        header = RequestHeader(api_key, api_version, correlation_id, _peek_client_id(r))
        if spec is None:
            raise UnknownApiKey(header)
        raise UnsupportedVersion(header, f"{spec.name} v{api_version} is not supported "
                                         f"(v{spec.min_version}-v{spec.max_version} are)")
    try:
        header = read_request_header(
            r, request_header_version(api_key, api_version, spec.is_flexible(api_version)))
    except MalformedFrame as e:
        raise e.at("request header") from None
    body = spec.request.decode(r, api_version)
    # Bytes after a complete body are ignored, as Kafka's brokers do (they never check):
    # librdkafka 2.x sends three extra bytes after an all-topics Metadata v12 request, and
    # refusing it would cut kcat and confluent-kafka off from listing topics.
    return Request(header, body)


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> list[bytes]:
    """Header plus body as chunks, without the size prefix (``framing.frame`` adds it)."""
    spec = _spec(api_key, api_version)
    w = Writer()
    write_request_header(
        w, RequestHeader(int(api_key), api_version, correlation_id, client_id),
        request_header_version(api_key, api_version, spec.is_flexible(api_version)))
    spec.request.encode(body, api_version, w)
    return w.chunks()


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any
                    ) -> list[bytes]:
    """Header plus body as chunks, without the size prefix (``framing.frame`` adds it)."""
    spec = _spec(api_key, api_version)
    w = Writer()
    write_response_header(
        w, correlation_id,
        response_header_version(api_key, api_version, spec.is_flexible(api_version)))
    spec.response.encode(body, api_version, w)
    return w.chunks()


def decode_response(api_key: int, api_version: int, frame: bytes | memoryview
                    ) -> tuple[int, Struct]:
    """Decode a response to a request sent at ``api_version``: ``(correlation_id, body)``.

    An ApiVersions response that does not parse at the requested version is parsed again as
    v0: that is how a broker that does not speak the requested version answers (KIP-511), and
    what Kafka's own clients do.
    """
    spec = _known(api_key, defined=True)
    if spec is None or not spec.supports(api_version):
        raise ProtocolError(f"cannot decode a response of api {api_key} v{api_version}: "
                            "not served by this codec")
    try:
        return _decode_response(spec, api_version, frame)
    except MalformedFrame:
        if api_key != ApiKey.API_VERSIONS or api_version == 0:
            raise
        return _decode_response(spec, 0, frame)


def _decode_response(spec: ApiSpec, api_version: int, frame: bytes | memoryview
                     ) -> tuple[int, Struct]:
    r = Reader(frame)
    hv = response_header_version(spec.key, api_version, spec.is_flexible(api_version))
    try:
        correlation_id = read_response_header(r, hv)
    except MalformedFrame as e:
        raise e.at("response header") from None
    body = spec.response.decode(r, api_version)
    if r.remaining():
        raise MalformedFrame(f"{r.remaining()} unexpected bytes after the body",
                             (f"{spec.response.name} v{api_version}",))
    return correlation_id, body


def error_response(request_header: RequestHeader | Request, error_code: int,
                   request_body: Any = None) -> list[bytes] | None:
    """A well-formed response carrying ``error_code``, or ``None`` when the API cannot carry one
    (the caller then closes the connection, as Kafka does).

    Pass the :class:`Request` (or the header and ``request_body``) when the body was decoded:
    per-partition APIs (Produce, Fetch, Metadata, ListOffsets, topic admin) then answer every
    partition/topic of the request with ``error_code``. With only a header, APIs with a
    top-level error code still answer; the others return ``None``.

    ApiVersions at a version Sluice does not serve is answered at v0 with UNSUPPORTED_VERSION
    and, as Kafka does (KIP-511), the ApiVersions entry alone, so the client can retry with a
    version it finds there.
    """
    if isinstance(request_header, Request):
        request_body = request_header.body
        header = request_header.header
    else:
        header = request_header
    code = int(error_code)
    spec = SUPPORTED.get(header.api_key)  # type: ignore[call-overload]
    if header.api_key == ApiKey.API_VERSIONS and (
            spec is None or not spec.supports(header.api_version)):
        entries = []
        if code == ErrorCode.UNSUPPORTED_VERSION and spec is not None:
            entries = [{"api_key": int(ApiKey.API_VERSIONS), "min_version": spec.min_version,
                        "max_version": spec.max_version}]
        w = Writer()
        write_response_header(w, header.correlation_id, 0)
        api_versions.RESPONSE.encode({"error_code": code, "api_keys": entries}, 0, w)
        return w.chunks()
    if spec is None or not spec.supports(header.api_version) or spec.error_body is None:
        return None
    body = spec.error_body(header.api_version, request_body, code)
    if body is None:
        return None
    return encode_response(header.api_key, header.api_version, header.correlation_id, body)


def common_versions(their_api_keys: Any) -> dict[int, int]:
    """From a peer's ApiVersions ``api_keys`` entries: for each API both sides serve, the highest
    version both speak (what a client sends everything at).

    Sluice's own APIs (keys from 1000) are served by every Sluice broker but left out of its
    ApiVersions answer, so that Kafka clients never meet them; they are taken at the version
    this codec speaks (a Kafka broker would close the connection on one, which is the error a
    Sluice client pointed at a Kafka cluster should get)."""
    versions: dict[int, int] = {int(k): s.max_version for k, s in SUPPORTED.items()
                                if k >= SLUICE_API_KEYS_FROM}
    for k in their_api_keys:
        spec = SUPPORTED.get(k.api_key)  # type: ignore[call-overload]
        if spec is None:
            continue
        best = min(k.max_version, spec.max_version)
        if best >= max(k.min_version, spec.min_version):
            versions[int(k.api_key)] = best
    return versions


def advertised_versions(keys: Any = None) -> list[dict[str, int]]:
    """ApiVersions ``api_keys`` entries for ``keys`` (default: every served API), by key."""
    chosen = SUPPORTED if keys is None else {k: SUPPORTED[k] for k in keys}
    return [{"api_key": int(k), "min_version": s.min_version, "max_version": s.max_version}
            for k, s in sorted(chosen.items())]
