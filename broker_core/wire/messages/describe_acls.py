"""DescribeAcls (key 29), v0-3 (v2+ flexible): the ACL bindings a filter matches.

A null name, principal or host matches any; pattern type MATCH (v1+) matches every pattern
that covers the named resource. v0 has no pattern type: it means LITERAL."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-3"
FLEXIBLE = "2+"

REQUEST = Message("DescribeAclsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("resource_type_filter", INT8),
    Field("resource_name_filter", STRING, nullable="0+"),
    Field("pattern_type_filter", INT8, "1+", default=3),
    Field("principal_filter", STRING, nullable="0+"),
    Field("host_filter", STRING, nullable="0+"),
    Field("operation", INT8),
    Field("permission_type", INT8),
])

RESPONSE = Message("DescribeAclsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("resources", Array(Schema("DescribeAclsResource", [
        Field("resource_type", INT8),
        Field("resource_name", STRING),
        Field("pattern_type", INT8, "1+", default=3),
        Field("acls", Array(Schema("AclDescription", [
            Field("principal", STRING),
            Field("host", STRING),
            Field("operation", INT8),
            Field("permission_type", INT8),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(error_code), "resources": []}
