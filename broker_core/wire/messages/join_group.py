"""JoinGroup (key 11), v0-9 (v6+ flexible): a member joins a classic group (Kafka's group
protocol; docs/coordinator.md, "Kafka consumer groups").

v1 adds ``rebalance_timeout_ms`` (v0: the session timeout is the rebalance timeout); v4 lets
the coordinator answer MEMBER_ID_REQUIRED with a member id to rejoin with (KIP-394); v5 adds
``group_instance_id`` (static membership, KIP-345); v7 adds ``protocol_type`` to
the answer; v8 a ``reason``; v9 ``skip_assignment`` (always false here)."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import (
    BOOL,
    BYTES,
    INT16,
    INT32,
    STRING,
    Array,
    Field,
    Message,
    Schema,
)

VERSIONS = "0-9"
FLEXIBLE = "6+"

REQUEST = Message("JoinGroupRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING),
    Field("session_timeout_ms", INT32),
    Field("rebalance_timeout_ms", INT32, "1+", default=-1, ignorable=True),
    Field("member_id", STRING),
    Field("group_instance_id", STRING, "5+", nullable="5+", default=None),
    Field("protocol_type", STRING),
    Field("protocols", Array(Schema("JoinGroupRequestProtocol", [
        Field("name", STRING),
        Field("metadata", BYTES),
    ]))),
    Field("reason", STRING, "8+", nullable="8+", default=None, ignorable=True),
])

RESPONSE = Message("JoinGroupResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "2+", ignorable=True),
    Field("error_code", INT16),
    Field("generation_id", INT32, default=-1),
    Field("protocol_type", STRING, "7+", nullable="7+", default=None, ignorable=True),
    Field("protocol_name", STRING, nullable="7+"),
    Field("leader", STRING),
    Field("skip_assignment", BOOL, "9+", default=False),
    Field("member_id", STRING),
    Field("members", Array(Schema("JoinGroupResponseMember", [
        Field("member_id", STRING),
        Field("group_instance_id", STRING, "5+", nullable="5+", default=None, ignorable=True),
        Field("metadata", BYTES),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(error_code), "generation_id": -1,
            "protocol_type": None, "protocol_name": None if version >= 7 else "",
            "leader": "", "member_id": getattr(request, "member_id", "") or "", "members": []}
