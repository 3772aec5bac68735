"""SaslHandshake (key 17), v0-1: the client names its SASL mechanism; the answer lists the
enabled ones.

v0 means the SASL tokens then travel as raw frames; v1 (KIP-152) means they travel in
SaslAuthenticate requests. The codec knows both; brokers serve v1 only (see ``wire.apis``).
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, STRING, Array, Field, Message

VERSIONS = "0-1"
FLEXIBLE = "none"

REQUEST = Message("SaslHandshakeRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("mechanism", STRING),
])

RESPONSE = Message("SaslHandshakeResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("mechanisms", Array(STRING)),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code), "mechanisms": []}
