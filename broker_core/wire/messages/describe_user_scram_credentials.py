"""DescribeUserScramCredentials (key 50, KIP-554), v0 (flexible): which SCRAM mechanisms each
user has a credential for, and their iteration counts (never a key or a salt). A null or
empty ``users`` asks for every user that has a credential.

``mechanism`` is Kafka's ``ScramMechanism`` type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
(:data:`MECHANISM_TYPES`).
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0"
FLEXIBLE = "0+"

#: Kafka's ``ScramMechanism`` type byte → mechanism name (0 is Kafka's UNKNOWN).
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
#: The reverse of :data:`MECHANISM_TYPES`.
MECHANISM_CODES = {name: code for code, name in MECHANISM_TYPES.items()}

REQUEST = Message("DescribeUserScramCredentialsRequest", versions=VERSIONS, flexible=FLEXIBLE,
                  fields=[
    Field("users", Array(Schema("UserName", [
        Field("name", STRING),
    ])), nullable="0+"),
])

RESPONSE = Message("DescribeUserScramCredentialsResponse", versions=VERSIONS,
                   flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    # Request-level: 0 except for authorization or the store being unreachable.
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("results", Array(Schema("DescribeUserScramCredentialsResult", [
        Field("user", STRING),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field("credential_infos", Array(Schema("CredentialInfo", [
            Field("mechanism", INT8),
            Field("iterations", INT32),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code), "results": []}
