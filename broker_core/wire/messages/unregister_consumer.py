"""UnregisterConsumer (Sluice key 1008): a member leaves its group at once (Kafka's LeaveGroup).

Sent by a closing consumer on an ordinary connection to its coordinator (the coordinator channel
carries only coordinator-sent requests). It carries the member's final positions, which the
coordinator checks and writes as it does CommitOffsets' (only partitions the member owns, never
backwards, fenced by the coordinator epoch); then it removes the member, rebalances its group
and answers. The member then closes its channel.

``session_id`` is the one the coordinator returned in the RegisterConsumer (v1) answer of this
registration: a leave naming another member, or an earlier session of the same consumer id, is
refused with UNKNOWN_MEMBER_ID and changes nothing. ``offsets`` is empty for a member without
auto-commit (nothing to hand over).
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.messages.group_types import OFFSETS
from broker_core.wire.schema import INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "0"
FLEXIBLE = "0+"

REQUEST = Message("UnregisterConsumerRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING),
    Field("consumer_id", STRING),
    Field("session_id", INT64),
    Field("offsets", OFFSETS),
])

RESPONSE = Message("UnregisterConsumerResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("partitions", Array(Schema("SluiceLeaveCommitResult", [
        Field("topic", STRING),
        Field("partition", INT32),
        Field("error_code", INT16),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code)}
