"""ClusterMetadata (Sluice key 1000): any broker answers with the id of a group's coordinator
and the brokers of the cluster. v1 names the group (``group_id``): the answer is the
coordinator of that group's shard. v0 names none: the answer is shard 0's coordinator when
the cluster has one shard, else COORDINATOR_NOT_AVAILABLE asking for v1. ``coordinator_id``
is -1 (with COORDINATOR_NOT_AVAILABLE) while no coordinator is elected."""

from __future__ import annotations

from typing import Any

from broker_core.wire.messages.group_types import BROKERS
from broker_core.wire.schema import INT16, INT32, STRING, Field, Message

VERSIONS = "0-1"
FLEXIBLE = "0+"

REQUEST = Message("ClusterMetadataRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING, "1+", nullable="1+", default=None),
])

RESPONSE = Message("ClusterMetadataResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    Field("coordinator_id", INT32, default=-1),
    Field("brokers", BROKERS),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code)}
