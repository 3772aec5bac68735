"""Fetch (key 1), v4-12 (v12 flexible): consumers and followers read record batches.

Versions that name topics by id only (13+) are not served. ``records`` is opaque: decoded as a
zero-copy ``memoryview``; encoded from bytes or a list of byte chunks (log slices) that are
written back to back without being joined.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import (
    INT8,
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

VERSIONS = "4-12"
FLEXIBLE = "12+"

REQUEST = Message("FetchRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("cluster_id", STRING, "12+", nullable="12+", tag=0, ignorable=True),
    Field("replica_id", INT32, "0-14", default=-1),
    Field("max_wait_ms", INT32),
    Field("min_bytes", INT32),
    Field("max_bytes", INT32, "3+", default=0x7FFFFFFF, ignorable=True),
    Field("isolation_level", INT8, "4+", ignorable=True),
    Field("session_id", INT32, "7+", ignorable=True),
    Field("session_epoch", INT32, "7+", default=-1, ignorable=True),
    Field("topics", Array(Schema("FetchTopic", [
        Field("topic", STRING, "0-12", ignorable=True),
        Field("partitions", Array(Schema("FetchPartition", [
            Field("partition", INT32),
            Field("current_leader_epoch", INT32, "9+", default=-1, ignorable=True),
            Field("fetch_offset", INT64),
            Field("last_fetched_epoch", INT32, "12+", default=-1),
            Field("log_start_offset", INT64, "5+", default=-1, ignorable=True),
            Field("partition_max_bytes", INT32),
        ]))),
    ]))),
    Field("forgotten_topics_data", Array(Schema("ForgottenTopic", [
        Field("topic", STRING, "7-12", ignorable=True),
        Field("partitions", Array(INT32), "7+"),
    ])), "7+"),
    Field("rack_id", STRING, "11+", ignorable=True),
])

EPOCH_END_OFFSET = Schema("EpochEndOffset", [
    Field("epoch", INT32, "12+", default=-1),
    Field("end_offset", INT64, "12+", default=-1),
])

RESPONSE = Message("FetchResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "1+", ignorable=True),
    Field("error_code", INT16, "7+", ignorable=True),
    Field("session_id", INT32, "7+"),
    Field("responses", Array(Schema("FetchableTopicResponse", [
        Field("topic", STRING, "0-12", ignorable=True),
        Field("partitions", Array(Schema("PartitionData", [
            Field("partition_index", INT32),
            Field("error_code", INT16),
            Field("high_watermark", INT64),
            Field("last_stable_offset", INT64, "4+", default=-1, ignorable=True),
            Field("log_start_offset", INT64, "5+", default=-1, ignorable=True),
            Field("diverging_epoch", EPOCH_END_OFFSET, "12+", tag=0),
            Field("current_leader", Schema("LeaderIdAndEpoch", [
                Field("leader_id", INT32, "12+", default=-1),
                Field("leader_epoch", INT32, "12+", default=-1),
            ]), "12+", tag=1),
            Field("snapshot_id", Schema("SnapshotId", [
                Field("end_offset", INT64, default=-1),
                Field("epoch", INT32, default=-1),
            ]), "12+", tag=2),
            Field("aborted_transactions", Array(Schema("AbortedTransaction", [
                Field("producer_id", INT64, "4+"),
                Field("first_offset", INT64, "4+"),
            ])), "4+", nullable="4+", ignorable=True),
            Field("preferred_read_replica", INT32, "11+", default=-1),
            Field("records", RECORDS, nullable="0+"),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    """Top-level ``error_code`` (v7+) and, when the request is known, the same code on every
    requested partition with no records."""
    code = int(error_code)
    if request is None:
        if version < 7:
            return None
        return {"error_code": code, "responses": []}
    return {"error_code": code, "responses": [
        {"topic": t.topic, "partitions": [
            {"partition_index": p.partition, "error_code": code, "high_watermark": -1,
             "records": None} for p in t.partitions]}
        for t in request.topics]}
