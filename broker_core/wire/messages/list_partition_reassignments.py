"""ListPartitionReassignments (key 46, KIP-455), v0 (flexible): the partition reassignments in
progress (of the partitions named, or all with a null ``topics``): each partition's current
replicas (the original and the target together while it moves), and those being added and
removed."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0"
FLEXIBLE = "0+"

REQUEST = Message("ListPartitionReassignmentsRequest", versions=VERSIONS, flexible=FLEXIBLE,
                  fields=[
    Field("timeout_ms", INT32, default=60_000),
    Field("topics", Array(Schema("ListPartitionReassignmentsTopics", [
        Field("name", STRING),
        Field("partition_indexes", Array(INT32)),
    ])), nullable="0+"),
])

RESPONSE = Message("ListPartitionReassignmentsResponse", versions=VERSIONS, flexible=FLEXIBLE,
                   fields=[
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("topics", Array(Schema("OngoingTopicReassignment", [
        Field("name", STRING),
        Field("partitions", Array(Schema("OngoingPartitionReassignment", [
            Field("partition_index", INT32),
            Field("replicas", Array(INT32)),
            Field("adding_replicas", Array(INT32)),
            Field("removing_replicas", Array(INT32)),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code), "topics": []}
