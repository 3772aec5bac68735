"""SaslAuthenticate (key 36), v0-2 (KIP-152): one round of a SASL exchange, the mechanism's
token each way. v1 adds the session lifetime (KIP-368; Sluice answers 0: no re-authentication),
v2 is flexible.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BYTES, INT16, INT64, STRING, Field, Message

VERSIONS = "0-2"
FLEXIBLE = "2+"

REQUEST = Message("SaslAuthenticateRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("auth_bytes", BYTES),
])

RESPONSE = Message("SaslAuthenticateResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("auth_bytes", BYTES),
    Field("session_lifetime_ms", INT64, "1+", ignorable=True),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code), "error_message": None, "auth_bytes": b"",
            "session_lifetime_ms": 0}
