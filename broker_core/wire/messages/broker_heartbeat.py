"""BrokerHeartbeat (key 63), v0 only (flexible): a broker tells the active controller it is
alive and reachable over the network (Kafka's KRaft heartbeat, KIP-631). The controller fences a
broker it has not heard from for ``broker.session.timeout.ms`` (docs/replication.md, "Fencing").

Sluice keeps Kafka's v0 layout; ``current_metadata_offset``, ``want_fence`` and
``want_shut_down`` are sent as -1 / false and not acted on (the metadata reaches brokers by
UpdateMetadata, and shutdown goes through ControlledShutdown). ``is_caught_up`` and
``should_shut_down`` are always answered false.
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, INT16, INT32, INT64, Field, Message

VERSIONS = "0"
FLEXIBLE = "0+"

REQUEST = Message("BrokerHeartbeatRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("broker_id", INT32),
    Field("broker_epoch", INT64, default=-1),
    Field("current_metadata_offset", INT64),
    Field("want_fence", BOOL),
    Field("want_shut_down", BOOL),
])

RESPONSE = Message("BrokerHeartbeatResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("is_caught_up", BOOL, default=False),
    Field("is_fenced", BOOL, default=True),
    Field("should_shut_down", BOOL),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(error_code), "is_caught_up": False,
            "is_fenced": True, "should_shut_down": False}
