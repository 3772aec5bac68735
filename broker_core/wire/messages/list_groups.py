"""ListGroups (key 16), v0-5 (v3+ flexible): the groups the coordinator knows.

v4 adds ``states_filter`` and each group's state; v5 ``types_filter`` and each group's type
("classic" for Kafka's group protocol)."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-5"
FLEXIBLE = "3+"

REQUEST = Message("ListGroupsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("states_filter", Array(STRING), "4+"),
    Field("types_filter", Array(STRING), "5+"),
])

RESPONSE = Message("ListGroupsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "1+", ignorable=True),
    Field("error_code", INT16),
    Field("groups", Array(Schema("ListedGroup", [
        Field("group_id", STRING),
        Field("protocol_type", STRING),
        Field("group_state", STRING, "4+", ignorable=True),
        Field("group_type", STRING, "5+", ignorable=True),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(error_code), "groups": []}
