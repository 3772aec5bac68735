"""DeleteGroups (key 42), v0-2 (v2+ flexible): delete empty groups and their committed
offsets, one result per group named."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-2"
FLEXIBLE = "2+"

REQUEST = Message("DeleteGroupsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("groups_names", Array(STRING)),
])

RESPONSE = Message("DeleteGroupsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("results", Array(Schema("DeletableGroupResult", [
        Field("group_id", STRING),
        Field("error_code", INT16),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    if request is None:
        return None
    return {"throttle_time_ms": 0, "results": [
        {"group_id": g, "error_code": int(error_code)} for g in request.groups_names or []]}
