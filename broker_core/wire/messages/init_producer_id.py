"""InitProducerId (key 22), v0-4 (flexible from v2): a producer id and epoch for an idempotent
producer (KIP-98). v3+ (KIP-360) may name the producer's current id and epoch, asking for the
epoch to be bumped instead of a new id (a producer resetting its sequences after an
UNKNOWN_PRODUCER_ID or a timed-out batch).

``transactional_id`` non-null asks for a transactional producer; Sluice serves no
transactions and refuses it (``broker_core.server.producer_ids``).
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import INT16, INT32, INT64, STRING, Field, Message

VERSIONS = "0-4"
FLEXIBLE = "2+"

REQUEST = Message("InitProducerIdRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("transactional_id", STRING, nullable="0+"),
    Field("transaction_timeout_ms", INT32),
    Field("producer_id", INT64, "3+", default=-1, ignorable=True),
    Field("producer_epoch", INT16, "3+", default=-1, ignorable=True),
])

RESPONSE = Message("InitProducerIdResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("producer_id", INT64, default=-1),
    Field("producer_epoch", INT16),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code), "producer_id": -1, "producer_epoch": -1}
