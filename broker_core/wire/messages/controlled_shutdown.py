"""ControlledShutdown (key 7), v3 only (flexible): a broker asks the controller to move
leadership away before it stops; the answer lists the partitions it still leads."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "3"
FLEXIBLE = "3+"

REQUEST = Message("ControlledShutdownRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("broker_id", INT32),
    Field("broker_epoch", INT64, "2+", default=-1, ignorable=True),
])

RESPONSE = Message("ControlledShutdownResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("remaining_partitions", Array(Schema("RemainingPartition", [
        Field("topic_name", STRING),
        Field("partition_index", INT32),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code)}
