"""DescribeGroups (key 15), v0-5 (v5 flexible): state, protocol and members of groups.

Members' metadata and assignments are shown while the group is Stable (mid-rebalance they are
not settled, as in Kafka). v3 adds ``include_authorized_operations`` (when false the answer
carries Kafka's "not provided", INT32_MIN); v4 each member's ``group_instance_id`` (null for a
dynamic member)."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, BYTES, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-5"
FLEXIBLE = "5+"

#: Kafka's "authorized operations not provided".
OPERATIONS_NOT_PROVIDED = -2147483648

REQUEST = Message("DescribeGroupsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("groups", Array(STRING)),
    Field("include_authorized_operations", BOOL, "3+"),
])

RESPONSE = Message("DescribeGroupsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "1+", ignorable=True),
    Field("groups", Array(Schema("DescribedGroup", [
        Field("error_code", INT16),
        Field("group_id", STRING),
        Field("group_state", STRING),
        Field("protocol_type", STRING),
        Field("protocol_data", STRING),
        Field("members", Array(Schema("DescribedGroupMember", [
            Field("member_id", STRING),
            Field("group_instance_id", STRING, "4+", nullable="4+", default=None,
                  ignorable=True),
            Field("client_id", STRING),
            Field("client_host", STRING),
            Field("member_metadata", BYTES),
            Field("member_assignment", BYTES),
        ]))),
        Field("authorized_operations", INT32, "3+", default=OPERATIONS_NOT_PROVIDED),
    ]))),
])


def dead_group(group_id: str, error_code: int = 0) -> dict:
    """The answer for a group the coordinator does not have (Kafka: state Dead, no error)."""
    return {"error_code": int(error_code), "group_id": group_id, "group_state": "Dead",
            "protocol_type": "", "protocol_data": "", "members": [],
            "authorized_operations": OPERATIONS_NOT_PROVIDED}


def error_body(version: int, request: Any, error_code: int) -> dict:
    names = list(request.groups or []) if request is not None else []
    return {"throttle_time_ms": 0, "groups": [dead_group(g, error_code) for g in names]}
