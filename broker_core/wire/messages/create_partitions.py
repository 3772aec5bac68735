"""CreatePartitions (key 37), v0-3 (v2+ flexible): grow a topic's partition count."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-3"
FLEXIBLE = "2+"

REQUEST = Message("CreatePartitionsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("topics", Array(Schema("CreatePartitionsTopic", [
        Field("name", STRING),
        Field("count", INT32),
        # null = let the broker place the new partitions.
        Field("assignments", Array(Schema("CreatePartitionsAssignment", [
            Field("broker_ids", Array(INT32)),
        ])), nullable="0+"),
    ]))),
    Field("timeout_ms", INT32),
    Field("validate_only", BOOL),
])

RESPONSE = Message("CreatePartitionsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("results", Array(Schema("CreatePartitionsTopicResult", [
        Field("name", STRING),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    if request is None:
        return None
    return {"results": [{"name": t.name, "error_code": int(error_code)}
                        for t in request.topics]}
