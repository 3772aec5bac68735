"""OffsetDelete (key 47), v0 (not flexible): delete a group's committed offsets of
partitions the group does not consume."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0"
FLEXIBLE = "none"

REQUEST = Message("OffsetDeleteRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING),
    Field("topics", Array(Schema("OffsetDeleteRequestTopic", [
        Field("name", STRING),
        Field("partitions", Array(Schema("OffsetDeleteRequestPartition", [
            Field("partition_index", INT32),
        ]))),
    ]))),
])

RESPONSE = Message("OffsetDeleteResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("throttle_time_ms", INT32),
    Field("topics", Array(Schema("OffsetDeleteResponseTopic", [
        Field("name", STRING),
        Field("partitions", Array(Schema("OffsetDeleteResponsePartition", [
            Field("partition_index", INT32),
            Field("error_code", INT16),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    """A whole-request refusal: the top-level error, no partition answered (Kafka's form)."""
    return {"error_code": int(error_code), "throttle_time_ms": 0, "topics": []}
