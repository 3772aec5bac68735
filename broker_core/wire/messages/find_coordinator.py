"""FindCoordinator (key 10), v0-4 (v3+ flexible): which broker coordinates a group.

v1 adds ``key_type`` (0: a group, 1: a transaction; Sluice coordinates groups only); v4 asks
for several keys at once (``coordinator_keys``) and answers one ``coordinators`` entry each,
where v0-3 answer one coordinator at the top level."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0-4"
FLEXIBLE = "3+"

KEY_TYPE_GROUP = 0

REQUEST = Message("FindCoordinatorRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("key", STRING, "0-3"),
    Field("key_type", INT8, "1+", default=0),
    Field("coordinator_keys", Array(STRING), "4+"),
])

RESPONSE = Message("FindCoordinatorResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "1+", ignorable=True),
    Field("error_code", INT16, "0-3"),
    Field("error_message", STRING, "1-3", nullable="1-3", ignorable=True),
    Field("node_id", INT32, "0-3"),
    Field("host", STRING, "0-3"),
    Field("port", INT32, "0-3"),
    Field("coordinators", Array(Schema("Coordinator", [
        Field("key", STRING),
        Field("node_id", INT32),
        Field("host", STRING),
        Field("port", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="4+", ignorable=True),
    ])), "4+"),
])


def keys_of(version: int, request: Any) -> list[str]:
    """The keys a request asks about (one before v4)."""
    return list(request.coordinator_keys or []) if version >= 4 else [request.key]


def error_body(version: int, request: Any, error_code: int) -> dict:
    if version >= 4:
        keys = keys_of(version, request) if request is not None else []
        return {"throttle_time_ms": 0, "coordinators": [
            {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": int(error_code),
             "error_message": None} for k in keys]}
    return {"throttle_time_ms": 0, "error_code": int(error_code), "error_message": None,
            "node_id": -1, "host": "", "port": -1}
