"""ListOffsets (key 2), v1-7 (v6+ flexible): the offset for a timestamp, or the earliest (-2) /
latest (-1) offset of a partition."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT8, INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "1-7"
FLEXIBLE = "6+"

REQUEST = Message("ListOffsetsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("replica_id", INT32),
    Field("isolation_level", INT8, "2+"),
    Field("topics", Array(Schema("ListOffsetsTopic", [
        Field("name", STRING),
        Field("partitions", Array(Schema("ListOffsetsPartition", [
            Field("partition_index", INT32),
            Field("current_leader_epoch", INT32, "4+", default=-1, ignorable=True),
            Field("timestamp", INT64),
            Field("max_num_offsets", INT32, "0", default=1),
        ]))),
    ]))),
])

RESPONSE = Message("ListOffsetsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "2+", ignorable=True),
    Field("topics", Array(Schema("ListOffsetsTopicResponse", [
        Field("name", STRING),
        Field("partitions", Array(Schema("ListOffsetsPartitionResponse", [
            Field("partition_index", INT32),
            Field("error_code", INT16),
            Field("old_style_offsets", Array(INT64), "0"),
            Field("timestamp", INT64, "1+", default=-1),
            Field("offset", INT64, "1+", default=-1),
            Field("leader_epoch", INT32, "4+", default=-1),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    if request is None:
        return None
    return {"topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": int(error_code)}
            for p in t.partitions]}
        for t in request.topics]}
