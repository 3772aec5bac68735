"""ClusterMetadata (Sluice key 1000): any broker answers with the id of the consumer
coordinator and the brokers of the cluster. ``coordinator_id`` is -1 (with
COORDINATOR_NOT_AVAILABLE) while no coordinator is elected."""

from __future__ import annotations

from typing import Any

from broker_core.wire.messages.group_types import BROKERS
from broker_core.wire.schema import INT16, INT32, STRING, Field, Message

VERSIONS = "0"
FLEXIBLE = "0+"

REQUEST = Message("ClusterMetadataRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[])

RESPONSE = Message("ClusterMetadataResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("coordinator_id", INT32, default=-1),
    Field("brokers", BROKERS),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code)}
