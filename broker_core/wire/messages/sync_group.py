"""SyncGroup (key 14), v0-5 (v4+ flexible): a member of a classic group asks for its
assignment; the leader's request carries everyone's (opaque bytes).

v3 adds ``group_instance_id`` (static membership, KIP-345); v5 ``protocol_type`` and
``protocol_name`` on both sides (checked against the group's when given)."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BYTES, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-5"
FLEXIBLE = "4+"

REQUEST = Message("SyncGroupRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING),
    Field("generation_id", INT32),
    Field("member_id", STRING),
    Field("group_instance_id", STRING, "3+", nullable="3+", default=None),
    Field("protocol_type", STRING, "5+", nullable="5+", default=None, ignorable=True),
    Field("protocol_name", STRING, "5+", nullable="5+", default=None, ignorable=True),
    Field("assignments", Array(Schema("SyncGroupRequestAssignment", [
        Field("member_id", STRING),
        Field("assignment", BYTES),
    ]))),
])

RESPONSE = Message("SyncGroupResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "1+", ignorable=True),
    Field("error_code", INT16),
    Field("protocol_type", STRING, "5+", nullable="5+", default=None, ignorable=True),
    Field("protocol_name", STRING, "5+", nullable="5+", default=None, ignorable=True),
    Field("assignment", BYTES),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(error_code), "assignment": b""}
