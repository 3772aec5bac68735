"""IncrementalAlterConfigs (key 44), v0-1 (v1+ flexible): change single keys of a resource's
dynamic configs (KIP-339).

``config_operation`` takes :class:`OpType` numbers; APPEND and SUBTRACT apply to list-typed
keys only.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from broker_core.wire.schema import BOOL, INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-1"
FLEXIBLE = "1+"


class OpType(IntEnum):
    """Kafka's ``AlterConfigOp.OpType`` numbers."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


REQUEST = Message("IncrementalAlterConfigsRequest", versions=VERSIONS, flexible=FLEXIBLE,
                  fields=[
    Field("resources", Array(Schema("AlterConfigsResource", [
        Field("resource_type", INT8),
        Field("resource_name", STRING),
        Field("configs", Array(Schema("AlterableConfig", [
            Field("name", STRING),
            Field("config_operation", INT8),
            Field("value", STRING, nullable="0+"),
        ]))),
    ]))),
    Field("validate_only", BOOL),
])

RESPONSE = Message("IncrementalAlterConfigsResponse", versions=VERSIONS, flexible=FLEXIBLE,
                   fields=[
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
