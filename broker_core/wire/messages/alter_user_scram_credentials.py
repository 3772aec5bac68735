"""AlterUserScramCredentials (key 51, KIP-554), v0 (flexible): create, replace and delete
users' SCRAM credentials. An upsertion carries the client's salt and *salted password*
(``Hi(password, salt, iterations)``), never the password; the broker derives the stored and
server keys from it. One result per user named: each user's changes apply together or not at
all.

``mechanism`` is Kafka's ``ScramMechanism`` type (see
:mod:`~broker_core.wire.messages.describe_user_scram_credentials`).
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BYTES, INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0"
FLEXIBLE = "0+"

REQUEST = Message("AlterUserScramCredentialsRequest", versions=VERSIONS, flexible=FLEXIBLE,
                  fields=[
    Field("deletions", Array(Schema("ScramCredentialDeletion", [
        Field("name", STRING),
        Field("mechanism", INT8),
    ]))),
    Field("upsertions", Array(Schema("ScramCredentialUpsertion", [
        Field("name", STRING),
        Field("mechanism", INT8),
        Field("iterations", INT32),
        Field("salt", BYTES),
        Field("salted_password", BYTES),
    ]))),
])

RESPONSE = Message("AlterUserScramCredentialsResponse", versions=VERSIONS, flexible=FLEXIBLE,
                   fields=[
    Field("throttle_time_ms", INT32),
    Field("results", Array(Schema("AlterUserScramCredentialsResult", [
        Field("user", STRING),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    """The same error for every user the request named (Kafka's ``getErrorResponse``)."""
    users: list[str] = []
    if request is not None:
        for entry in [*request.deletions, *request.upsertions]:
            if entry.name not in users:
                users.append(entry.name)
    return {"results": [{"user": u, "error_code": int(error_code)} for u in users]}
