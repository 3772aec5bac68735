"""What the sender does with a failed attempt: a pure function, tested with tables.

One place decides (style-anchors §13/§14): an attempt ended with a broker error code, or with no
answer at all (``code=None``: connection lost, request timed out). The batch is retried when the
error is retriable, retries are left and the retry would still start inside
``delivery.timeout.ms``; otherwise it fails for good. A retry of an error that means "your
metadata is stale" refreshes the metadata first (Kafka's ``InvalidMetadataException`` family).
"""

from __future__ import annotations

import enum

from broker_core.wire.errors import ErrorCode


class Action(enum.Enum):
    RETRY = "retry"
    RETRY_AFTER_REFRESH = "retry after a metadata refresh"
    FAIL = "fail"
    TIMEOUT = "fail: delivery.timeout.ms passed"


# Errors after which the leader we sent to may no longer be the leader: refresh before retrying.
STALE_METADATA = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.REPLICA_NOT_AVAILABLE,
})


def decide(code: ErrorCode | None, attempts: int, retries: int, now: float, created: float,
           backoff_s: float, delivery_timeout_s: float) -> Action:
    """The action after attempt number ``attempts`` (1-based) of a batch created at ``created``
    failed with ``code`` (None: no answer from the broker)."""
    if code is not None and not code.retriable:
        return Action.FAIL
    if attempts > retries:
        return Action.FAIL
    if now + backoff_s >= created + delivery_timeout_s:
        return Action.TIMEOUT
    if code is None or code in STALE_METADATA:
        return Action.RETRY_AFTER_REFRESH
    return Action.RETRY
