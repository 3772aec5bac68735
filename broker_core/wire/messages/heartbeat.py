"""Heartbeat (key 12), v0-4 (v4 flexible): a member of a classic group proves it is alive
and learns whether the group is rebalancing (REBALANCE_IN_PROGRESS: rejoin).

v3 adds ``group_instance_id`` (static membership, KIP-345)."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, STRING, Field, Message

VERSIONS = "0-4"
FLEXIBLE = "4+"

REQUEST = Message("HeartbeatRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING),
    Field("generation_id", INT32),
    Field("member_id", STRING),
    Field("group_instance_id", STRING, "3+", nullable="3+", default=None),
])

RESPONSE = Message("HeartbeatResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "1+", ignorable=True),
    Field("error_code", INT16),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(error_code)}
