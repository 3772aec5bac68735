"""Produce (key 0), v3-9 (v9 flexible): record batches in, offsets out.

``records`` is opaque RecordBatch data: decoded as a zero-copy ``memoryview`` of the request
frame, and never looked into here.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import (
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

VERSIONS = "3-9"
FLEXIBLE = "9+"

REQUEST = Message("ProduceRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("transactional_id", STRING, "3+", nullable="3+"),
    Field("acks", INT16),
    Field("timeout_ms", INT32),
    Field("topic_data", Array(Schema("TopicProduceData", [
        Field("name", STRING),
        Field("partition_data", Array(Schema("PartitionProduceData", [
            Field("index", INT32),
            Field("records", RECORDS, nullable="0+"),
        ]))),
    ]))),
])

RESPONSE = Message("ProduceResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("responses", Array(Schema("TopicProduceResponse", [
        Field("name", STRING),
        Field("partition_responses", Array(Schema("PartitionProduceResponse", [
            Field("index", INT32),
            Field("error_code", INT16),
            Field("base_offset", INT64),
            Field("log_append_time_ms", INT64, "2+", default=-1, ignorable=True),
            Field("log_start_offset", INT64, "5+", default=-1, ignorable=True),
            Field("record_errors", Array(Schema("BatchIndexAndErrorMessage", [
                Field("batch_index", INT32, "8+"),
                Field("batch_index_error_message", STRING, "8+", nullable="8+"),
            ])), "8+", ignorable=True),
            Field("error_message", STRING, "8+", nullable="8+", ignorable=True),
        ]))),
    ]))),
    Field("throttle_time_ms", INT32, "1+", ignorable=True),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    """``error_code`` for every partition of the request; ``None`` for acks=0 (Kafka sends no
    response at all then) or when the request body is unknown."""
    if request is None or request.acks == 0:
        return None
    return {"responses": [
        {"name": t.name, "partition_responses": [
            {"index": p.index, "error_code": int(error_code), "base_offset": -1}
            for p in t.partition_data]}
        for t in request.topic_data]}
