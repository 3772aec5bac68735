"""AlterConfigs (key 33), v0-2 (v2+ flexible): replace the whole set of a resource's dynamic
configs (a key left out returns to its default).

``resource_type`` takes :class:`broker_core.wire.messages.describe_configs.ResourceType`
numbers; a null ``value`` removes the key. v1 differs from v0 only in throttling behaviour.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-2"
FLEXIBLE = "2+"

REQUEST = Message("AlterConfigsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("resources", Array(Schema("AlterConfigsResource", [
        Field("resource_type", INT8),
        Field("resource_name", STRING),
        Field("configs", Array(Schema("AlterableConfig", [
            Field("name", STRING),
            Field("value", STRING, nullable="0+"),
        ]))),
    ]))),
    Field("validate_only", BOOL),
])

RESPONSE = Message("AlterConfigsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("responses", Array(Schema("AlterConfigsResourceResponse", [
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field("resource_type", INT8),
        Field("resource_name", STRING),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    if request is None:
        return None
    return {"responses": [{"error_code": int(error_code), "resource_type": r.resource_type,
                           "resource_name": r.resource_name} for r in request.resources]}
