"""StopFetcher (Sluice key 1003): coordinator → consumer at the start of a
rebalance. The consumer stops its fetchers, clears its queues and answers with the next offset to
consume of every partition it owned (null ``offsets`` when it does not commit automatically)."""

from __future__ import annotations

from typing import Any

from broker_core.wire.messages.group_types import OFFSETS
from broker_core.wire.schema import INT16, STRING, Field, Message

VERSIONS = "0"
FLEXIBLE = "0+"

REQUEST = Message("StopFetcherRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("consumer_id", STRING),
])

RESPONSE = Message("StopFetcherResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
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
