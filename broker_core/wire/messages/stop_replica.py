"""StopReplica (key 5), v3 only (flexible): the controller tells a broker to stop serving (and
maybe delete) partitions. Fields of v0-2 are listed for completeness."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "3"
FLEXIBLE = "2+"

REQUEST = Message("StopReplicaRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("controller_id", INT32),
    Field("controller_epoch", INT32),
    Field("broker_epoch", INT64, "1+", default=-1, ignorable=True),
    Field("delete_partitions", BOOL, "0-2"),
    Field("ungrouped_partitions", Array(Schema("StopReplicaPartitionV0", [
        Field("topic_name", STRING, "0"),
        Field("partition_index", INT32, "0"),
    ])), "0"),
    Field("topics", Array(Schema("StopReplicaTopicV1", [
        Field("name", STRING, "1-2"),
        Field("partition_indexes", Array(INT32), "1-2"),
    ])), "1-2"),
    Field("topic_states", Array(Schema("StopReplicaTopicState", [
        Field("topic_name", STRING, "3+"),
        Field("partition_states", Array(Schema("StopReplicaPartitionState", [
            Field("partition_index", INT32, "3+"),
            Field("leader_epoch", INT32, "3+", default=-1),
            Field("delete_partition", BOOL, "3+"),
        ])), "3+"),
    ])), "3+"),
])

RESPONSE = Message("StopReplicaResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("partition_errors", Array(Schema("StopReplicaPartitionError", [
        Field("topic_name", STRING),
        Field("partition_index", INT32),
        Field("error_code", INT16),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code)}
