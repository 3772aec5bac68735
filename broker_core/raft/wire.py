"""The quorum's messages on the wire: :mod:`broker_core.raft.messages` values to the codec's
request and response bodies and back.

Kafka's quorum APIs carry a list of topics, each with a list of partitions, because one raft
client could host several partitions. Sluice's quorum replicates exactly one, the metadata log,
named as Kafka names it: topic :data:`METADATA_TOPIC` (``__cluster_metadata``), partition
:data:`METADATA_PARTITION` (0). Encoding wraps a message's flat fields in a one-topic,
one-partition list; decoding requires exactly that list and raises :class:`UnexpectedPartitions`
for anything else.

Versions (:data:`VERSIONS`): Vote v0, BeginQuorumEpoch v0, EndQuorumEpoch v0 (KIP-595's),
Fetch v12, the first Fetch with KIP-595's ``ClusterId``, ``LastFetchedEpoch``,
``DivergingEpoch`` and ``CurrentLeader`` (and KIP-630's ``SnapshotId``) and the highest one
Sluice serves, and FetchSnapshot v0 (KIP-630). A fetch response's ``snapshot_id`` is ``None``
exactly when the tagged field is absent; a FetchSnapshot response's chunk travels as its
``UnalignedRecords`` bytes, which are the snapshot file's own bytes, not record batches.

Error codes. A response's single ``error_code`` travels where Kafka puts it: the errors about the
request as a whole (:data:`TOP_LEVEL_ERRORS`: ``INCONSISTENT_CLUSTER_ID``, ``INVALID_REQUEST``)
in the top-level field, every other one in the partition; the other field then holds NONE. The
partition is always written, so its leader fields survive an error. Decoding prefers a non-NONE
top-level code; a response with a top-level error and no partitions (as Kafka's quorum sends)
decodes with no leader known. A code this codec does not know decodes as
``UNKNOWN_SERVER_ERROR``, as Kafka's clients read one.

Records. A :class:`~broker_core.raft.messages.FetchResponse` carries log entries; mapping them to
RecordBatch v2 bytes is the storage adapter's job (not built yet), so the fetch functions take
the mapping as arguments and, without one, carry only responses with no entries.

Invariant, checked by the tests: for every message ``m``, decoding the encoding of ``m`` gives
back ``m``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from broker_core.raft.entries import LogEntry
from broker_core.raft.messages import (
    NO_LEADER,
    AlterVotersRequest,
    AlterVotersResponse,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    ReplicaState,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from broker_core.raft.snapshots import SnapshotId
from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import EncodeError, ErrorCode, ProtocolError

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0

#: The version each quorum API is sent at.
VERSIONS: dict[ApiKey, int] = {
    ApiKey.VOTE: 0,
    ApiKey.BEGIN_QUORUM_EPOCH: 0,
    ApiKey.END_QUORUM_EPOCH: 0,
    ApiKey.FETCH: 12,
    ApiKey.FETCH_SNAPSHOT: 0,  # KIP-630
    # Admin APIs (docs/design.md#voter-reassignment): DescribeQuorum v1 (KIP-836's timestamps) and
    # AlterPartitionReassignments v0 carrying the target voters.
    ApiKey.DESCRIBE_QUORUM: 1,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
}

#: Errors that speak for the whole request and so travel in the top-level ``error_code``.
TOP_LEVEL_ERRORS = frozenset({ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.INVALID_REQUEST})

#: What a quorum fetch asks for: wait for at least one byte (up to ``max_wait_ms``), and up to
#: 8 MiB per response, Kafka's default for its metadata fetches.
FETCH_MIN_BYTES = 1
FETCH_MAX_BYTES = 8 * 1024 * 1024

EntriesToRecords = Callable[[tuple[LogEntry, ...]], bytes]
RecordsToEntries = Callable[[memoryview | bytes], tuple[LogEntry, ...]]

_REQUEST_KEYS: dict[type, ApiKey] = {
    VoteRequest: ApiKey.VOTE,
    BeginQuorumEpochRequest: ApiKey.BEGIN_QUORUM_EPOCH,
    EndQuorumEpochRequest: ApiKey.END_QUORUM_EPOCH,
    FetchRequest: ApiKey.FETCH,
    FetchSnapshotRequest: ApiKey.FETCH_SNAPSHOT,
    DescribeQuorumRequest: ApiKey.DESCRIBE_QUORUM,
    AlterVotersRequest: ApiKey.ALTER_PARTITION_REASSIGNMENTS,
}
_RESPONSE_KEYS: dict[type, ApiKey] = {
    VoteResponse: ApiKey.VOTE,
    BeginQuorumEpochResponse: ApiKey.BEGIN_QUORUM_EPOCH,
    EndQuorumEpochResponse: ApiKey.END_QUORUM_EPOCH,
    FetchResponse: ApiKey.FETCH,
    FetchSnapshotResponse: ApiKey.FETCH_SNAPSHOT,
    DescribeQuorumResponse: ApiKey.DESCRIBE_QUORUM,
    AlterVotersResponse: ApiKey.ALTER_PARTITION_REASSIGNMENTS,
}


class UnexpectedPartitions(ProtocolError):
    """A well-formed quorum message that does not hold exactly the metadata partition
    (``__cluster_metadata``-0) once, or a fetch response with entries and no way to read them."""


def api_key_of(message: Request | Response) -> ApiKey:
    """The api key a quorum message travels under."""
    key = _REQUEST_KEYS.get(type(message)) or _RESPONSE_KEYS.get(type(message))
    if key is None:
        raise TypeError(f"{type(message).__name__} is not a quorum message")
    return key


# -- error codes ------------------------------------------------------------------------------


def _error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _split_error(error: ErrorCode) -> tuple[int, int]:
    """``(top_level, partition)`` codes for a message's single ``error_code``."""
    if error in TOP_LEVEL_ERRORS:
        return int(error), int(ErrorCode.NONE)
    return int(ErrorCode.NONE), int(error)


def _join_error(top_level: int, partition: int) -> ErrorCode:
    return _error_code(top_level if top_level != ErrorCode.NONE else partition)


# -- the one partition ------------------------------------------------------------------------


def _wrap(partition: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"topic_name": METADATA_TOPIC,
             "partitions": [{"partition_index": METADATA_PARTITION, **partition}]}]


def _the_partition(topics: Any, topic_field: str = "topic_name",
                   index_field: str = "partition_index") -> Any:
    """The metadata partition of a decoded topic list; anything but exactly that one raises."""
    if (len(topics) != 1 or getattr(topics[0], topic_field) != METADATA_TOPIC
            or len(topics[0].partitions) != 1
            or getattr(topics[0].partitions[0], index_field) != METADATA_PARTITION):
        found = [(getattr(t, topic_field), [getattr(p, index_field) for p in t.partitions])
                 for t in topics]
        raise UnexpectedPartitions(
            f"a quorum message must name {METADATA_TOPIC}-{METADATA_PARTITION} alone, not {found}")
    return topics[0].partitions[0]


def _leader_response_partition(body: Any) -> Any | None:
    """The partition of a Vote/BeginQuorumEpoch/EndQuorumEpoch response, or ``None`` when a
    top-level error came with no partitions."""
    if body.error_code != ErrorCode.NONE and not body.topics:
        return None
    return _the_partition(body.topics)


# -- requests ---------------------------------------------------------------------------------


def request_body(message: Request) -> dict[str, Any]:
    """The codec's request body (at :data:`VERSIONS`) for a quorum request."""
    if isinstance(message, VoteRequest):
        return {"cluster_id": message.cluster_id, "topics": _wrap({
            "candidate_epoch": message.candidate_epoch,
            "candidate_id": message.candidate_id,
            "last_offset_epoch": message.last_offset_epoch,
            "last_offset": message.last_offset})}
    if isinstance(message, BeginQuorumEpochRequest):
        return {"cluster_id": message.cluster_id, "topics": _wrap({
            "leader_id": message.leader_id, "leader_epoch": message.leader_epoch})}
    if isinstance(message, EndQuorumEpochRequest):
        return {"cluster_id": message.cluster_id, "topics": _wrap({
            "leader_id": message.leader_id, "leader_epoch": message.leader_epoch,
            "preferred_successors": list(message.preferred_successors)})}
    if isinstance(message, FetchRequest):
        return {
            "cluster_id": message.cluster_id,
            "replica_id": message.replica_id,
            "max_wait_ms": message.max_wait_ms,
            "min_bytes": FETCH_MIN_BYTES,
            "max_bytes": FETCH_MAX_BYTES,
            "topics": [{"topic": METADATA_TOPIC, "partitions": [{
                "partition": METADATA_PARTITION,
                "current_leader_epoch": message.current_leader_epoch,
                "fetch_offset": message.fetch_offset,
                "last_fetched_epoch": message.last_fetched_epoch,
                "partition_max_bytes": FETCH_MAX_BYTES,
            }]}],
        }
    if isinstance(message, FetchSnapshotRequest):
        return {
            "cluster_id": message.cluster_id,
            "replica_id": message.replica_id,
            "max_bytes": message.max_bytes,
            "topics": [{"name": METADATA_TOPIC, "partitions": [{
                "partition": METADATA_PARTITION,
                "current_leader_epoch": message.current_leader_epoch,
                "snapshot_id": _snapshot_id(message.snapshot_id),
                "position": message.position,
            }]}],
        }
    if isinstance(message, DescribeQuorumRequest | AlterVotersRequest):
        return _admin_request_body(message)
    raise TypeError(f"{type(message).__name__} is not a quorum request")


def _snapshot_id(snapshot_id: SnapshotId) -> dict[str, int]:
    return {"end_offset": snapshot_id.end_offset, "epoch": snapshot_id.epoch}


def request_from_body(api_key: int, body: Any) -> Request:
    """The quorum request a decoded body holds. Raises :class:`UnexpectedPartitions` when the
    body does not name the metadata partition alone."""
    if api_key == ApiKey.VOTE:
        p = _the_partition(body.topics)
        return VoteRequest(body.cluster_id, p.candidate_epoch, p.candidate_id,
                           p.last_offset_epoch, p.last_offset)
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        p = _the_partition(body.topics)
        return BeginQuorumEpochRequest(body.cluster_id, p.leader_id, p.leader_epoch)
    if api_key == ApiKey.END_QUORUM_EPOCH:
        p = _the_partition(body.topics)
        return EndQuorumEpochRequest(body.cluster_id, p.leader_id, p.leader_epoch,
                                     tuple(p.preferred_successors))
    if api_key == ApiKey.FETCH:
        p = _the_partition(body.topics, "topic", "partition")
        return FetchRequest(body.cluster_id, body.replica_id, p.current_leader_epoch,
                            p.fetch_offset, p.last_fetched_epoch, body.max_wait_ms)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        p = _the_partition(body.topics, "name", "partition")
        return FetchSnapshotRequest(
            body.cluster_id, body.replica_id, p.current_leader_epoch,
            SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch), p.position,
            body.max_bytes)
    if api_key in (ApiKey.DESCRIBE_QUORUM, ApiKey.ALTER_PARTITION_REASSIGNMENTS):
        return _admin_request_from_body(api_key, body)
    raise ValueError(f"api key {api_key} is not a quorum api")


# -- responses --------------------------------------------------------------------------------


def _no_entries(entries: tuple[LogEntry, ...]) -> bytes:
    if entries:
        raise EncodeError("a fetch response with entries needs an entries_to_records mapping "
                          "(the storage adapter's)")
    return b""


def _no_records(records: memoryview | bytes) -> tuple[LogEntry, ...]:
    if len(records):
        raise UnexpectedPartitions("a fetch response with records needs a records_to_entries "
                                   "mapping (the storage adapter's)")
    return ()


def response_body(message: Response, *,
                  entries_to_records: EntriesToRecords = _no_entries) -> dict[str, Any]:
    """The codec's response body (at :data:`VERSIONS`) for a quorum response.

    ``entries_to_records`` turns a fetch response's entries into RecordBatch bytes; the default
    accepts only an empty tuple (and raises :class:`EncodeError` otherwise).
    """
    top, part = _split_error(message.error_code)
    if isinstance(message, VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse):
        partition: dict[str, Any] = {"error_code": part, "leader_id": message.leader_id,
                                     "leader_epoch": message.leader_epoch}
        if isinstance(message, VoteResponse):
            partition["vote_granted"] = message.vote_granted
        return {"error_code": top, "topics": _wrap(partition)}
    if isinstance(message, FetchResponse):
        partition = {
            "partition_index": METADATA_PARTITION,
            "error_code": part,
            "high_watermark": message.high_watermark,
            "current_leader": {"leader_id": message.leader_id,
                               "leader_epoch": message.leader_epoch},
            "records": entries_to_records(message.records),
        }
        if message.diverging_epoch is not None:
            partition["diverging_epoch"] = {"epoch": message.diverging_epoch.epoch,
                                            "end_offset": message.diverging_epoch.end_offset}
        if message.snapshot_id is not None:
            partition["snapshot_id"] = _snapshot_id(message.snapshot_id)
        return {"error_code": top, "session_id": 0,
                "responses": [{"topic": METADATA_TOPIC, "partitions": [partition]}]}
    if isinstance(message, FetchSnapshotResponse):
        return {"error_code": top, "topics": [{"name": METADATA_TOPIC, "partitions": [{
            "index": METADATA_PARTITION,
            "error_code": part,
            "snapshot_id": _snapshot_id(message.snapshot_id),
            "current_leader": {"leader_id": message.leader_id,
                               "leader_epoch": message.leader_epoch},
            "size": message.size,
            "position": message.position,
            "unaligned_records": message.data,
        }]}]}
    if isinstance(message, DescribeQuorumResponse | AlterVotersResponse):
        return _admin_response_body(message)
    raise TypeError(f"{type(message).__name__} is not a quorum response")


def response_from_body(api_key: int, body: Any, *,
                       records_to_entries: RecordsToEntries = _no_records) -> Response:
    """The quorum response a decoded body holds.

    A fetch response's ``diverging_epoch`` is ``None`` when the tagged field is absent (Kafka's
    default, epoch and end offset -1); ``records_to_entries`` reads its records, the default
    accepting only none.
    """
    if api_key in (ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH):
        p = _leader_response_partition(body)
        error = _join_error(body.error_code, ErrorCode.NONE if p is None else p.error_code)
        leader_id = NO_LEADER if p is None else p.leader_id
        leader_epoch = -1 if p is None else p.leader_epoch
        if api_key == ApiKey.VOTE:
            return VoteResponse(error, leader_id, leader_epoch,
                                False if p is None else p.vote_granted)
        if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
            return BeginQuorumEpochResponse(error, leader_id, leader_epoch)
        return EndQuorumEpochResponse(error, leader_id, leader_epoch)
    if api_key == ApiKey.FETCH:
        p = _the_partition(body.responses, "topic", "partition_index")
        d = p.diverging_epoch
        diverging = (None if (d.epoch, d.end_offset) == (-1, -1)
                     else DivergingEpoch(d.epoch, d.end_offset))
        records = p.records
        sid = p.snapshot_id  # absent: Kafka's default, -1 and -1
        snapshot_id = (None if (sid.end_offset, sid.epoch) == (-1, -1)
                       else SnapshotId(sid.end_offset, sid.epoch))
        return FetchResponse(
            _join_error(body.error_code, p.error_code), p.current_leader.leader_id,
            p.current_leader.leader_epoch, p.high_watermark, diverging,
            () if records is None else records_to_entries(records), snapshot_id)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        if body.error_code != ErrorCode.NONE and not body.topics:
            return FetchSnapshotResponse(_error_code(body.error_code), NO_LEADER, -1,
                                         SnapshotId(-1, -1))
        p = _the_partition(body.topics, "name", "index")
        return FetchSnapshotResponse(
            _join_error(body.error_code, p.error_code), p.current_leader.leader_id,
            p.current_leader.leader_epoch,
            SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch), p.size, p.position,
            bytes(p.unaligned_records))
    if api_key in (ApiKey.DESCRIBE_QUORUM, ApiKey.ALTER_PARTITION_REASSIGNMENTS):
        return _admin_response_from_body(api_key, body)
    raise ValueError(f"api key {api_key} is not a quorum api")


# -- admin APIs: DescribeQuorum (55) and AlterPartitionReassignments (45) -----------------------
#
# DescribeQuorum carries the design's TargetVoters in Sluice's tagged ``target_voters`` field.
# AlterPartitionReassignments has no leader fields; the leader the answering node knows travels
# in the partition's ``error_message`` as ``"leader 3, epoch 7"`` (``"no leader known, epoch 7"``),
# which a person reading a Kafka tool's output can act on and which decodes back exactly. A
# request naming anything but ``__cluster_metadata``-0 raises :class:`UnexpectedPartitions`; the
# driver answers it with the API's ``error_body`` (the same error on every partition named).

_LEADER_MESSAGE = re.compile(r"(?:leader (-?\d+)|no leader known), epoch (-?\d+)")


def _leader_message(leader_id: int, leader_epoch: int) -> str:
    who = "no leader known" if leader_id == NO_LEADER else f"leader {leader_id}"
    return f"{who}, epoch {leader_epoch}"


def _leader_from_message(message: str | None) -> tuple[int, int]:
    match = _LEADER_MESSAGE.fullmatch(message or "")
    if match is None:
        return NO_LEADER, -1
    leader = NO_LEADER if match.group(1) is None else int(match.group(1))
    return leader, int(match.group(2))


def _replica_states(states: tuple[ReplicaState, ...]) -> list[dict[str, int]]:
    return [{"replica_id": r.replica_id, "log_end_offset": r.log_end_offset,
             "last_fetch_timestamp": r.last_fetch_ms,
             "last_caught_up_timestamp": r.last_caught_up_ms} for r in states]


def _replica_states_from(structs: Any) -> tuple[ReplicaState, ...]:
    return tuple(ReplicaState(r.replica_id, r.log_end_offset, r.last_fetch_timestamp,
                              r.last_caught_up_timestamp) for r in structs)


def _admin_request_body(message: DescribeQuorumRequest | AlterVotersRequest) -> dict[str, Any]:
    if isinstance(message, DescribeQuorumRequest):
        return {"topics": _wrap({})}
    replicas = None if message.target_voters is None else list(message.target_voters)
    return {"timeout_ms": message.timeout_ms, "topics": [{"name": METADATA_TOPIC, "partitions": [
        {"partition_index": METADATA_PARTITION, "replicas": replicas}]}]}


def _admin_request_from_body(api_key: int, body: Any) -> Request:
    if api_key == ApiKey.DESCRIBE_QUORUM:
        _the_partition(body.topics)
        return DescribeQuorumRequest()
    p = _the_partition(body.topics, "name", "partition_index")
    return AlterVotersRequest(None if p.replicas is None else tuple(p.replicas), body.timeout_ms)


def _admin_response_body(message: DescribeQuorumResponse | AlterVotersResponse
                         ) -> dict[str, Any]:
    top, part = _split_error(message.error_code)
    if isinstance(message, DescribeQuorumResponse):
        target = (None if message.target_voters is None
                  else _replica_states(message.target_voters))
        return {"error_code": top, "topics": _wrap({
            "error_code": part, "leader_id": message.leader_id,
            "leader_epoch": message.leader_epoch, "high_watermark": message.high_watermark,
            "current_voters": _replica_states(message.current_voters),
            "observers": _replica_states(message.observers),
            "target_voters": target})}
    return {"error_code": top, "responses": [{"name": METADATA_TOPIC, "partitions": [
        {"partition_index": METADATA_PARTITION, "error_code": part,
         "error_message": _leader_message(message.leader_id, message.leader_epoch)}]}]}


def _admin_response_from_body(api_key: int, body: Any) -> Response:
    if api_key == ApiKey.DESCRIBE_QUORUM:
        p = _leader_response_partition(body)
        error = _join_error(body.error_code, ErrorCode.NONE if p is None else p.error_code)
        if p is None:
            return DescribeQuorumResponse(error, NO_LEADER, -1)
        target = None if p.target_voters is None else _replica_states_from(p.target_voters)
        return DescribeQuorumResponse(
            error, p.leader_id, p.leader_epoch, p.high_watermark,
            _replica_states_from(p.current_voters), target, _replica_states_from(p.observers))
    if body.error_code != ErrorCode.NONE and not body.responses:
        return AlterVotersResponse(_error_code(body.error_code), NO_LEADER, -1)
    p = _the_partition(body.responses, "name", "partition_index")
    return AlterVotersResponse(_join_error(body.error_code, p.error_code),
                               *_leader_from_message(p.error_message))


# -- whole frames -----------------------------------------------------------------------------


def encode_request(message: Request, correlation_id: int, client_id: str | None = None
                   ) -> list[bytes]:
    """A request frame (header and body as chunks, without the size prefix)."""
    key = api_key_of(message)
    return apis.encode_request(key, VERSIONS[key], correlation_id, client_id,
                               request_body(message))


def decode_request(frame: bytes | memoryview) -> tuple[int, Request]:
    """``(correlation_id, request)`` from a request frame without its size prefix. Raises the
    codec's :class:`~broker_core.wire.errors.ProtocolError` subclasses for bad bytes, and
    :class:`UnexpectedPartitions` for a non-quorum api or the wrong partitions."""
    decoded = apis.decode_request(frame, defined=True)
    key = decoded.header.api_key
    if key not in VERSIONS:
        raise UnexpectedPartitions(f"api key {key} is not a quorum request")
    return decoded.header.correlation_id, request_from_body(key, decoded.body)


def encode_response(message: Response, correlation_id: int, *,
                    entries_to_records: EntriesToRecords = _no_entries) -> list[bytes]:
    """A response frame (header and body as chunks, without the size prefix)."""
    key = api_key_of(message)
    return apis.encode_response(key, VERSIONS[key], correlation_id,
                                response_body(message, entries_to_records=entries_to_records))


def decode_response(api_key: int, frame: bytes | memoryview, *,
                    records_to_entries: RecordsToEntries = _no_records) -> tuple[int, Response]:
    """``(correlation_id, response)`` from a response frame to a quorum request of
    ``api_key``, sent at :data:`VERSIONS`."""
    if api_key not in VERSIONS:
        raise ValueError(f"api key {api_key} is not a quorum api")
    correlation_id, body = apis.decode_response(api_key, VERSIONS[ApiKey(api_key)], frame)
    return correlation_id, response_from_body(api_key, body,
                                              records_to_entries=records_to_entries)
