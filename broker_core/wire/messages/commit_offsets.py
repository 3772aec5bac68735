"""CommitOffsets (Sluice key 1005, seed 001 §13 "active CommitOffset"): a consumer commits the
offsets of partitions it owns, now, instead of waiting for the next Ping. It is sent on an
ordinary connection to the coordinator (the coordinator channel carries only coordinator-sent
requests, so the two directions never interleave on it). The coordinator accepts offsets only for
partitions the consumer owns and writes them to ZooKeeper before it answers."""

from __future__ import annotations

from typing import Any

from broker_core.wire.messages.group_types import OFFSETS
from broker_core.wire.schema import INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0"
FLEXIBLE = "0+"

REQUEST = Message("CommitOffsetsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING),
    Field("consumer_id", STRING),
    Field("offsets", OFFSETS),
])

RESPONSE = Message("CommitOffsetsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("partitions", Array(Schema("SluiceCommitResult", [
        Field("topic", STRING),
        Field("partition", INT32),
        Field("error_code", INT16),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code)}
