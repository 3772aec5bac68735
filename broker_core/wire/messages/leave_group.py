"""LeaveGroup (key 13), v0-5 (v4+ flexible): members leave a classic group at once instead
of waiting for their session to expire.

v0-2 name one ``member_id``; v3 a list of ``members`` (each with a ``group_instance_id``,
static membership, KIP-345: a member may be named by its instance id alone) answered one by
one; v5 adds a ``reason`` per member."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-5"
FLEXIBLE = "4+"

REQUEST = Message("LeaveGroupRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING),
    Field("member_id", STRING, "0-2"),
    Field("members", Array(Schema("MemberIdentity", [
        Field("member_id", STRING),
        Field("group_instance_id", STRING, nullable="3+", default=None),
        Field("reason", STRING, "5+", nullable="5+", default=None, ignorable=True),
    ])), "3+"),
])

RESPONSE = Message("LeaveGroupResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "1+", ignorable=True),
    Field("error_code", INT16),
    Field("members", Array(Schema("MemberResponse", [
        Field("member_id", STRING),
        Field("group_instance_id", STRING, nullable="3+"),
        Field("error_code", INT16),
    ])), "3+"),
])


def members_of(version: int, request: Any) -> list[tuple[str, str | None]]:
    """(member id, group instance id) of every member the request names."""
    if version < 3:
        return [(request.member_id, None)]
    return [(m.member_id, m.group_instance_id) for m in request.members or []]


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(error_code), "members": []}
