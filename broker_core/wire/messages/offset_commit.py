"""OffsetCommit (key 8), v2-8 (v8 flexible): a Kafka client commits a group's offsets.

A member of a classic group commits with its ``generation_id_or_member_epoch`` and
``member_id``; a client that assigns partitions itself commits with generation -1 and no
member id while the group has no members (Kafka allows both). v2-4 carry
``retention_time_ms`` (ignored: offsets are kept until the group's are deleted); v6 adds
``committed_leader_epoch`` (kept with the offset); v7 ``group_instance_id`` (static membership,
KIP-345)."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "2-8"
FLEXIBLE = "8+"

REQUEST = Message("OffsetCommitRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING),
    Field("generation_id_or_member_epoch", INT32, "1+", default=-1, ignorable=True),
    Field("member_id", STRING, "1+", ignorable=True),
    Field("group_instance_id", STRING, "7+", nullable="7+", default=None),
    Field("retention_time_ms", INT64, "2-4", default=-1, ignorable=True),
    Field("topics", Array(Schema("OffsetCommitRequestTopic", [
        Field("name", STRING),
        Field("partitions", Array(Schema("OffsetCommitRequestPartition", [
            Field("partition_index", INT32),
            Field("committed_offset", INT64),
            Field("committed_leader_epoch", INT32, "6+", default=-1, ignorable=True),
            Field("commit_timestamp", INT64, "1", default=-1),
            Field("committed_metadata", STRING, nullable="0+"),
        ]))),
    ]))),
])

RESPONSE = Message("OffsetCommitResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "3+", ignorable=True),
    Field("topics", Array(Schema("OffsetCommitResponseTopic", [
        Field("name", STRING),
        Field("partitions", Array(Schema("OffsetCommitResponsePartition", [
            Field("partition_index", INT32),
            Field("error_code", INT16),
        ]))),
    ]))),
])


def every_partition(request: Any, error_code: int) -> list[dict]:
    """The answer's ``topics`` with ``error_code`` for every partition the request names."""
    return [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": int(error_code)}
        for p in t.partitions or []]} for t in request.topics or []]


def error_body(version: int, request: Any, error_code: int) -> dict:
    topics = every_partition(request, error_code) if request is not None else []
    return {"throttle_time_ms": 0, "topics": topics}
