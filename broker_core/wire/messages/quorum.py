"""The Raft quorum's APIs (KIP-595): Vote (key 52), BeginQuorumEpoch (53), EndQuorumEpoch (54)
and DescribeQuorum (55), each at the versions KIP-595 defined, and KIP-630's FetchSnapshot (59).

- Vote v0, flexible from v0.
- BeginQuorumEpoch v0 and EndQuorumEpoch v0, not flexible (Kafka makes them flexible from v1).
- DescribeQuorum v0-1, flexible from v0 (v1, KIP-836, adds the two fetch timestamps), plus
  Sluice's tagged ``target_voters`` (the design's TargetVoters).
- FetchSnapshot v0, flexible from v0 (v1, KIP-853, adds directory ids and endpoints).

The later versions (KIP-853's directory ids and leader endpoints, DescribeQuorum v2's nodes and
error messages) are left out: Sluice's quorum identifies voters by node id alone.

These are *defined, not served*: :mod:`broker_core.wire.apis` registers them in ``DEFINED``,
not ``SUPPORTED``, so the codec encodes and decodes them but ApiVersions never advertises them
and a broker answers one as an unknown api key. Every request carries Kafka's topic/partition
lists; Sluice's metadata quorum fills them with its one partition
(:mod:`broker_core.raft.wire`).
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import (
    BOOL,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    Array,
    Field,
    Message,
    Schema,
)

VOTE_VERSIONS = "0"
VOTE_FLEXIBLE = "0+"
BEGIN_QUORUM_EPOCH_VERSIONS = "0"
BEGIN_QUORUM_EPOCH_FLEXIBLE = "1+"
END_QUORUM_EPOCH_VERSIONS = "0"
END_QUORUM_EPOCH_FLEXIBLE = "1+"
DESCRIBE_QUORUM_VERSIONS = "0-1"
DESCRIBE_QUORUM_FLEXIBLE = "0+"
FETCH_SNAPSHOT_VERSIONS = "0"
FETCH_SNAPSHOT_FLEXIBLE = "0+"

#: The tag of DescribeQuorum's ``target_voters`` (a Sluice-only tagged field; Sluice's own
#: numbers start at 1000, as its api keys and error codes do).
TARGET_VOTERS_TAG = 1000


def _topics(name: str, partition_fields: list[Field]) -> Field:
    """Kafka's ``topics [topic_name, partitions [partition_index, ...]]`` wrapper."""
    return Field("topics", Array(Schema(f"{name}Topic", [
        Field("topic_name", STRING),
        Field("partitions", Array(Schema(f"{name}Partition", [
            Field("partition_index", INT32),
            *partition_fields,
        ]))),
    ])))


def _leader_answer() -> list[Field]:
    """The per-partition answer Vote, BeginQuorumEpoch and EndQuorumEpoch share: the
    responder's error and its view of the leader (-1: none known)."""
    return [
        Field("error_code", INT16),
        Field("leader_id", INT32, default=-1),
        Field("leader_epoch", INT32, default=-1),
    ]


# -- Vote (52) --------------------------------------------------------------------------------

VOTE_REQUEST = Message("VoteRequest", versions=VOTE_VERSIONS, flexible=VOTE_FLEXIBLE, fields=[
    Field("cluster_id", STRING, nullable="0+"),
    _topics("VoteRequest", [
        Field("candidate_epoch", INT32),
        Field("candidate_id", INT32),
        Field("last_offset_epoch", INT32),
        Field("last_offset", INT64),
    ]),
])

VOTE_RESPONSE = Message("VoteResponse", versions=VOTE_VERSIONS, flexible=VOTE_FLEXIBLE, fields=[
    Field("error_code", INT16),
    _topics("VoteResponse", [*_leader_answer(), Field("vote_granted", BOOL)]),
])


# -- BeginQuorumEpoch (53) --------------------------------------------------------------------

BEGIN_QUORUM_EPOCH_REQUEST = Message(
    "BeginQuorumEpochRequest", versions=BEGIN_QUORUM_EPOCH_VERSIONS,
    flexible=BEGIN_QUORUM_EPOCH_FLEXIBLE, fields=[
        Field("cluster_id", STRING, nullable="0+"),
        _topics("BeginQuorumEpochRequest", [
            Field("leader_id", INT32),
            Field("leader_epoch", INT32),
        ]),
    ])

BEGIN_QUORUM_EPOCH_RESPONSE = Message(
    "BeginQuorumEpochResponse", versions=BEGIN_QUORUM_EPOCH_VERSIONS,
    flexible=BEGIN_QUORUM_EPOCH_FLEXIBLE, fields=[
        Field("error_code", INT16),
        _topics("BeginQuorumEpochResponse", _leader_answer()),
    ])


# -- EndQuorumEpoch (54) ----------------------------------------------------------------------

END_QUORUM_EPOCH_REQUEST = Message(
    "EndQuorumEpochRequest", versions=END_QUORUM_EPOCH_VERSIONS,
    flexible=END_QUORUM_EPOCH_FLEXIBLE, fields=[
        Field("cluster_id", STRING, nullable="0+"),
        _topics("EndQuorumEpochRequest", [
            Field("leader_id", INT32),
            Field("leader_epoch", INT32),
            # Best first; Kafka replaces this list with candidates and directory ids in v1.
            Field("preferred_successors", Array(INT32), "0", ignorable=True),
        ]),
    ])

END_QUORUM_EPOCH_RESPONSE = Message(
    "EndQuorumEpochResponse", versions=END_QUORUM_EPOCH_VERSIONS,
    flexible=END_QUORUM_EPOCH_FLEXIBLE, fields=[
        Field("error_code", INT16),
        _topics("EndQuorumEpochResponse", _leader_answer()),
    ])


# -- DescribeQuorum (55) ----------------------------------------------------------------------

REPLICA_STATE = Schema("ReplicaState", [
    Field("replica_id", INT32),
    Field("log_end_offset", INT64, default=-1),  # -1: not known to the leader
    # v1 (KIP-836), the leader's clock in milliseconds; -1 when unknown. The leader reports
    # itself as fetched and caught up at the time of the answer, as Kafka does.
    Field("last_fetch_timestamp", INT64, "1+", default=-1, ignorable=True),
    Field("last_caught_up_timestamp", INT64, "1+", default=-1, ignorable=True),
])

DESCRIBE_QUORUM_REQUEST = Message(
    "DescribeQuorumRequest", versions=DESCRIBE_QUORUM_VERSIONS,
    flexible=DESCRIBE_QUORUM_FLEXIBLE, fields=[_topics("DescribeQuorumRequest", [])])

DESCRIBE_QUORUM_RESPONSE = Message(
    "DescribeQuorumResponse", versions=DESCRIBE_QUORUM_VERSIONS,
    flexible=DESCRIBE_QUORUM_FLEXIBLE, fields=[
        Field("error_code", INT16),
        _topics("DescribeQuorumResponse", [
            *_leader_answer(),
            Field("high_watermark", INT64, default=-1),
            Field("current_voters", Array(REPLICA_STATE)),
            Field("observers", Array(REPLICA_STATE)),
            # Sluice's extension (the design's TargetVoters): where an ongoing reassignment is
            # heading, null when none is. A tagged field, so Kafka's tools skip it; its tag is
            # far above any Kafka may use for this struct.
            Field("target_voters", Array(REPLICA_STATE), nullable="0+", tag=TARGET_VOTERS_TAG,
                  ignorable=True),
        ]),
    ])


# -- FetchSnapshot (59) -----------------------------------------------------------------------
#
# KIP-630: a follower or observer whose fetch was answered with a SnapshotId pulls that
# snapshot's bytes by position. Kafka names the topic list's fields ``name`` and ``partition``
# (``index`` in the response), not ``topic_name`` / ``partition_index``.

SNAPSHOT_ID = Schema("SnapshotId", [
    Field("end_offset", INT64),
    Field("epoch", INT32),
])

FETCH_SNAPSHOT_REQUEST = Message(
    "FetchSnapshotRequest", versions=FETCH_SNAPSHOT_VERSIONS, flexible=FETCH_SNAPSHOT_FLEXIBLE,
    fields=[
        Field("cluster_id", STRING, nullable="0+", default=None, tag=0),
        Field("replica_id", INT32, default=-1),  # the fetching replica
        Field("max_bytes", INT32, default=0x7FFFFFFF),  # the most bytes the answer may carry
        Field("topics", Array(Schema("FetchSnapshotTopic", [
            Field("name", STRING),
            Field("partitions", Array(Schema("FetchSnapshotPartition", [
                Field("partition", INT32),
                Field("current_leader_epoch", INT32),
                Field("snapshot_id", SNAPSHOT_ID),
                Field("position", INT64),  # the byte position in the snapshot to fetch from
            ]))),
        ]))),
    ])

FETCH_SNAPSHOT_RESPONSE = Message(
    "FetchSnapshotResponse", versions=FETCH_SNAPSHOT_VERSIONS, flexible=FETCH_SNAPSHOT_FLEXIBLE,
    fields=[
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),  # errors about the whole request
        Field("topics", Array(Schema("FetchSnapshotTopicResponse", [
            Field("name", STRING),
            Field("partitions", Array(Schema("FetchSnapshotPartitionResponse", [
                Field("index", INT32),
                Field("error_code", INT16),
                Field("snapshot_id", SNAPSHOT_ID),
                Field("current_leader", Schema("FetchSnapshotLeader", [
                    Field("leader_id", INT32, default=-1),
                    Field("leader_epoch", INT32, default=-1),
                ]), tag=0),
                Field("size", INT64),  # the whole snapshot's size in bytes
                Field("position", INT64),  # where ``unaligned_records`` starts in it
                Field("unaligned_records", RECORDS),  # the chunk, not cut at batch bounds
            ]))),
        ]))),
    ])


def _fetch_snapshot_error(request: Any, error_code: int) -> dict:
    code = int(error_code)
    topics = [] if request is None else [
        {"name": t.name, "partitions": [
            {"index": p.partition, "error_code": code, "snapshot_id": {
                "end_offset": p.snapshot_id.end_offset, "epoch": p.snapshot_id.epoch}}
            for p in t.partitions]}
        for t in request.topics]
    return {"error_code": code, "topics": topics}


def _per_partition_error(request: Any, error_code: int) -> dict:
    """A top-level ``error_code`` and, when the request is known, the same code on each of its
    partitions (so a sender matching answers to partitions finds every one)."""
    code = int(error_code)
    topics = [] if request is None else [
        {"topic_name": t.topic_name,
         "partitions": [{"partition_index": p.partition_index, "error_code": code}
                        for p in t.partitions]}
        for t in request.topics]
    return {"error_code": code, "topics": topics}


class _Api:
    """One API's schemas in the shape :func:`broker_core.wire.apis.spec_from_module` reads
    (``REQUEST``, ``RESPONSE``, ``error_body``)."""

    def __init__(self, request: Message, response: Message) -> None:
        self.REQUEST = request
        self.RESPONSE = response

    @staticmethod
    def error_body(version: int, request: Any, error_code: int) -> dict:
        return _per_partition_error(request, error_code)


VOTE = _Api(VOTE_REQUEST, VOTE_RESPONSE)
BEGIN_QUORUM_EPOCH = _Api(BEGIN_QUORUM_EPOCH_REQUEST, BEGIN_QUORUM_EPOCH_RESPONSE)
END_QUORUM_EPOCH = _Api(END_QUORUM_EPOCH_REQUEST, END_QUORUM_EPOCH_RESPONSE)
DESCRIBE_QUORUM = _Api(DESCRIBE_QUORUM_REQUEST, DESCRIBE_QUORUM_RESPONSE)


class _FetchSnapshotApi(_Api):
    @staticmethod
    def error_body(version: int, request: Any, error_code: int) -> dict:
        return _fetch_snapshot_error(request, error_code)


FETCH_SNAPSHOT = _FetchSnapshotApi(FETCH_SNAPSHOT_REQUEST, FETCH_SNAPSHOT_RESPONSE)
