"""Ping (Sluice key 1002; Kafka's later "heartbeat"): coordinator → consumer on the
coordinator channel. The consumer answers with the next offset to consume of every partition it
owns when it commits automatically; ``offsets`` is null when it does not (the
design leaves those fields out)."""

from __future__ import annotations

from typing import Any

from broker_core.wire.messages.group_types import OFFSETS
from broker_core.wire.schema import INT16, INT32, STRING, Field, Message

VERSIONS = "0"
FLEXIBLE = "0+"

REQUEST = Message("PingRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("consumer_id", STRING),
    Field("num_retries", INT32),
])

RESPONSE = Message("PingResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("consumer_id", STRING),
    Field("offsets", OFFSETS, nullable="0+"),
    # Sluice addition, tagged so either side may leave it out: why a request was refused
    # (a broker that receives a coordinator-only request says so here).
    Field("error_message", STRING, nullable="0+", tag=0),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code),
            "consumer_id": getattr(request, "consumer_id", "") or ""}
