"""OffsetForLeaderEpoch (key 23), v3 only (not flexible): a follower asks the leader where a
leader epoch ends (docs/design.md#leader-epochs), to truncate its log before fetching."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "3"
FLEXIBLE = "4+"

# replica_id -2: "a debugging client", Kafka's default; -1: a consumer; >= 0: a follower.
REQUEST = Message("OffsetForLeaderEpochRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("replica_id", INT32, "3+", default=-2, ignorable=True),
    Field("topics", Array(Schema("OffsetForLeaderTopic", [
        Field("topic", STRING),
        Field("partitions", Array(Schema("OffsetForLeaderPartition", [
            Field("partition", INT32),
            Field("current_leader_epoch", INT32, "2+", default=-1, ignorable=True),
            Field("leader_epoch", INT32),
        ]))),
    ]))),
])

RESPONSE = Message("OffsetForLeaderEpochResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "2+", ignorable=True),
    Field("topics", Array(Schema("OffsetForLeaderTopicResult", [
        Field("topic", STRING),
        Field("partitions", Array(Schema("EpochEndOffset", [
            Field("error_code", INT16),
            Field("partition", INT32),
            Field("leader_epoch", INT32, "1+", default=-1, ignorable=True),
            Field("end_offset", INT64, default=-1),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    if request is None:
        return None
    return {"topics": [
        {"topic": t.topic, "partitions": [
            {"error_code": int(error_code), "partition": p.partition} for p in t.partitions]}
        for t in request.topics]}
