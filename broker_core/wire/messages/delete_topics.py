"""DeleteTopics (key 20), v1-5 (v4+ flexible). v6+ (topics by id) is not served."""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "1-5"
FLEXIBLE = "4+"

REQUEST = Message("DeleteTopicsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("topic_names", Array(STRING), "0-5", ignorable=True),
    Field("timeout_ms", INT32),
])

RESPONSE = Message("DeleteTopicsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32, "1+", ignorable=True),
    Field("responses", Array(Schema("DeletableTopicResult", [
        Field("name", STRING),
        Field("error_code", INT16),
        Field("error_message", STRING, "5+", nullable="5+", ignorable=True),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    if request is None:
        return None
    return {"responses": [{"name": n, "error_code": int(error_code)}
                          for n in request.topic_names]}
