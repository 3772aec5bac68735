"""CreateAcls (key 30), v0-3 (v2+ flexible): store ACL bindings, one result per creation in
request order. v0 has no pattern type: it means LITERAL."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-3"
FLEXIBLE = "2+"

REQUEST = Message("CreateAclsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("creations", Array(Schema("AclCreation", [
        Field("resource_type", INT8),
        Field("resource_name", STRING),
        Field("resource_pattern_type", INT8, "1+", default=3),
        Field("principal", STRING),
        Field("host", STRING),
        Field("operation", INT8),
        Field("permission_type", INT8),
    ]))),
])

RESPONSE = Message("CreateAclsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("results", Array(Schema("AclCreationResult", [
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    if request is None:
        return None
    return {"throttle_time_ms": 0, "results": [
        {"error_code": int(error_code), "error_message": None} for _ in request.creations]}
