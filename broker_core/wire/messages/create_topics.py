"""CreateTopics (key 19), v2-7 (v5+ flexible)."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import (
    BOOL,
    INT8,
    INT16,
    INT32,
    STRING,
    UUID,
    Array,
    Field,
    Message,
    Schema,
)

VERSIONS = "2-7"
FLEXIBLE = "5+"

REQUEST = Message("CreateTopicsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("topics", Array(Schema("CreatableTopic", [
        Field("name", STRING),
        # -1 = the broker default (or: see ``assignments``).
        Field("num_partitions", INT32),
        Field("replication_factor", INT16),
        Field("assignments", Array(Schema("CreatableReplicaAssignment", [
            Field("partition_index", INT32),
            Field("broker_ids", Array(INT32)),
        ]))),
        Field("configs", Array(Schema("CreatableTopicConfig", [
            Field("name", STRING),
            Field("value", STRING, nullable="0+"),
        ]))),
    ]))),
    Field("timeout_ms", INT32, default=60000),
    Field("validate_only", BOOL, "1+"),
])

RESPONSE = Message("CreateTopicsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "2+", ignorable=True),
    Field("topics", Array(Schema("CreatableTopicResult", [
        Field("name", STRING),
        Field("topic_id", UUID, "7+", ignorable=True),
        Field("error_code", INT16),
        Field("error_message", STRING, "1+", nullable="0+", ignorable=True),
        Field("topic_config_error_code", INT16, "5+", tag=0, ignorable=True),
        Field("num_partitions", INT32, "5+", default=-1, ignorable=True),
        Field("replication_factor", INT16, "5+", default=-1, ignorable=True),
        Field("configs", Array(Schema("CreatableTopicConfigs", [
            Field("name", STRING, "5+"),
            Field("value", STRING, "5+", nullable="5+"),
            Field("read_only", BOOL, "5+"),
            Field("config_source", INT8, "5+", default=-1, ignorable=True),
            Field("is_sensitive", BOOL, "5+"),
        ])), "5+", nullable="5+", ignorable=True),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    if request is None:
        return None
    return {"topics": [{"name": t.name, "error_code": int(error_code)}
                       for t in request.topics]}
