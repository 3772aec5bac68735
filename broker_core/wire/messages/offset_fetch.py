"""OffsetFetch (key 9), v1-8 (v6+ flexible): a group's committed offsets.

v2 makes ``topics`` nullable (null: every partition the group has an offset for) and adds a
top-level ``error_code``; v5 ``committed_leader_epoch`` (the committed one, -1 when none); v7
``require_stable`` (there are no transactional offsets, so every offset is stable); v8 asks
for several groups at once, each answered with its own error code."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "1-8"
FLEXIBLE = "6+"

_PARTITION_ANSWER = [
    Field("partition_index", INT32),
    Field("committed_offset", INT64),
    Field("committed_leader_epoch", INT32, "5+", default=-1, ignorable=True),
    Field("metadata", STRING, nullable="0+"),
    Field("error_code", INT16),
]

REQUEST = Message("OffsetFetchRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING, "0-7"),
    Field("topics", Array(Schema("OffsetFetchRequestTopic", [
        Field("name", STRING),
        Field("partition_indexes", Array(INT32)),
    ])), "0-7", nullable="2-7"),
    Field("groups", Array(Schema("OffsetFetchRequestGroup", [
        Field("group_id", STRING),
        Field("topics", Array(Schema("OffsetFetchRequestTopics", [
            Field("name", STRING),
            Field("partition_indexes", Array(INT32)),
        ])), nullable="8+"),
    ])), "8+"),
    Field("require_stable", BOOL, "7+", default=False),
])

RESPONSE = Message("OffsetFetchResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "3+", ignorable=True),
    Field("topics", Array(Schema("OffsetFetchResponseTopic", [
        Field("name", STRING),
        Field("partitions", Array(Schema("OffsetFetchResponsePartition", _PARTITION_ANSWER))),
    ])), "0-7"),
    Field("error_code", INT16, "2-7", default=0, ignorable=True),
    Field("groups", Array(Schema("OffsetFetchResponseGroup", [
        Field("group_id", STRING),
        Field("topics", Array(Schema("OffsetFetchResponseTopics", [
            Field("name", STRING),
            Field("partitions", Array(Schema("OffsetFetchResponsePartitions",
                                             _PARTITION_ANSWER))),
        ]))),
        Field("error_code", INT16, default=0),
    ])), "8+"),
])


def groups_of(version: int, request: Any) -> list[tuple[str, list[tuple[str, list[int]]] | None]]:
    """(group id, [(topic, partitions)] or None for "all") of every group the request names."""
    def topics(ts: Any) -> list[tuple[str, list[int]]] | None:
        return None if ts is None else [(t.name, list(t.partition_indexes or [])) for t in ts]

    if version >= 8:
        return [(g.group_id, topics(g.topics)) for g in request.groups or []]
    return [(request.group_id, topics(request.topics))]


def error_body(version: int, request: Any, error_code: int) -> dict:
    if version >= 8:
        groups = groups_of(version, request) if request is not None else []
        return {"throttle_time_ms": 0, "groups": [
            {"group_id": gid, "topics": [], "error_code": int(error_code)}
            for gid, _ in groups]}
    if version >= 2:
        return {"throttle_time_ms": 0, "topics": [], "error_code": int(error_code)}
    # v1 has no top-level error code: every partition asked about carries it.
    topics = [] if request is None else [
        {"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "",
             "error_code": int(error_code)} for p in t.partition_indexes or []]}
        for t in request.topics or []]
    return {"throttle_time_ms": 0, "topics": topics}
