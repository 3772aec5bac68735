"""DeleteAcls (key 31), v0-3 (v2+ flexible): delete the ACL bindings each filter matches; per
filter, the bindings it deleted. Filters mean what DescribeAcls' filter means."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-3"
FLEXIBLE = "2+"

REQUEST = Message("DeleteAclsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("filters", Array(Schema("DeleteAclsFilter", [
        Field("resource_type_filter", INT8),
        Field("resource_name_filter", STRING, nullable="0+"),
        Field("pattern_type_filter", INT8, "1+", default=3),
        Field("principal_filter", STRING, nullable="0+"),
        Field("host_filter", STRING, nullable="0+"),
        Field("operation", INT8),
        Field("permission_type", INT8),
    ]))),
])

RESPONSE = Message("DeleteAclsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("filter_results", Array(Schema("DeleteAclsFilterResult", [
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field("matching_acls", Array(Schema("DeleteAclsMatchingAcl", [
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("pattern_type", INT8, "1+", default=3),
            Field("principal", STRING),
            Field("host", STRING),
            Field("operation", INT8),
            Field("permission_type", INT8),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    if request is None:
        return None
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": int(error_code), "error_message": None, "matching_acls": []}
        for _ in request.filters]}
