"""DeleteRecords (key 21, KIP-107), v0-v2 (flexible from v2): move partitions' log start offsets
forward; the answer is each partition's low watermark (its new log start offset).
``offset`` -1 means the high watermark."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "0-2"
FLEXIBLE = "2+"

#: ``offset`` -1: delete up to the high watermark.
HIGH_WATERMARK = -1

REQUEST = Message("DeleteRecordsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("topics", Array(Schema("DeleteRecordsTopic", [
        Field("name", STRING),
        Field("partitions", Array(Schema("DeleteRecordsPartition", [
            Field("partition_index", INT32),
            Field("offset", INT64),
        ]))),
    ]))),
    Field("timeout_ms", INT32),
])

RESPONSE = Message("DeleteRecordsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("topics", Array(Schema("DeleteRecordsTopicResult", [
        Field("name", STRING),
        Field("partitions", Array(Schema("DeleteRecordsPartitionResult", [
            Field("partition_index", INT32),
            Field("low_watermark", INT64),
            Field("error_code", INT16),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    """Every partition of the request gets ``error_code`` (the API has no top-level error)."""
    if request is None:
        return None
    code = int(error_code)
    return {"topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "low_watermark": -1, "error_code": code}
            for p in t.partitions]}
        for t in request.topics]}
