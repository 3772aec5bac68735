"""CommitOffsets (Sluice key 1005, the coordinator's active commit): a consumer commits the
offsets of partitions it owns, now, instead of waiting for the next Ping. It is sent on an
ordinary connection to the coordinator (the coordinator channel carries only coordinator-sent
requests, so the two directions never interleave on it). The coordinator accepts offsets only for
partitions the consumer owns and writes them to ZooKeeper before it answers.

Version 1 adds ``session_id``: the one the coordinator returned in the RegisterConsumer (v1)
answer of this member's registration, proving the commit is the member's own (as
UnregisterConsumer's). A v0 commit cannot prove it and is refused with UNKNOWN_MEMBER_ID, as
is a commit naming another member or sent by another principal: a member id read from
DescribeConsumerGroups is not enough to rewrite a group's offsets."""

from __future__ import annotations

from typing import Any

from broker_core.wire.messages.group_types import OFFSETS
from broker_core.wire.schema import INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "0-1"
FLEXIBLE = "0+"

REQUEST = Message("CommitOffsetsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING),
    Field("consumer_id", STRING),
    Field("session_id", INT64, "1+"),
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
