"""StartFetcher (Sluice key 1004): coordinator → consumer at the end of a
rebalance: the partitions each of the consumer's streams ("threads") now owns, with the offset to
start from, and the brokers of the cluster so the consumer can find partition leaders without
asking. ``generation_id`` counts the group's completed rebalances (a Sluice addition, so a member's
state can be observed and compared across members)."""

from __future__ import annotations

from typing import Any

from broker_core.wire.messages.group_types import BROKERS, OFFSETS
from broker_core.wire.schema import INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "0"
FLEXIBLE = "0+"

REQUEST = Message("StartFetcherRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("consumer_id", STRING),
    Field("generation_id", INT32),
    Field("ownership", Array(Schema("SluiceThreadOwnership", [
        Field("consumer_thread_id", STRING),
        Field("partitions", OFFSETS),
    ]))),
    Field("brokers", BROKERS),
])

RESPONSE = Message("StartFetcherResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("consumer_id", STRING),
    # Sluice addition, tagged so either side may leave it out: why a request was refused
    # (a broker that receives a coordinator-only request says so here).
    Field("error_message", STRING, nullable="0+", tag=0),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code),
            "consumer_id": getattr(request, "consumer_id", "") or ""}
