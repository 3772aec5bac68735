"""The retry policy as a table: error x attempts x time -> action."""

from __future__ import annotations

import pytest

from broker_core.wire.errors import ErrorCode as E
from consumer_client.producer_retry import Action, decide

A = Action


@pytest.mark.parametrize(("code", "attempts", "retries", "now", "expected"), [
    (E.NOT_LEADER_OR_FOLLOWER, 1, 10, 0.0, A.RETRY_AFTER_REFRESH),
    (E.LEADER_NOT_AVAILABLE, 1, 10, 0.0, A.RETRY_AFTER_REFRESH),
    (E.UNKNOWN_TOPIC_OR_PARTITION, 1, 10, 0.0, A.RETRY_AFTER_REFRESH),
    (None, 1, 10, 0.0, A.RETRY_AFTER_REFRESH),  # connection lost / no answer
    (E.NOT_ENOUGH_REPLICAS, 1, 10, 0.0, A.RETRY),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, 1, 10, 0.0, A.RETRY),
    (E.REQUEST_TIMED_OUT, 1, 10, 0.0, A.RETRY),
    (E.MESSAGE_TOO_LARGE, 1, 10, 0.0, A.FAIL),
    (E.INVALID_RECORD, 1, 10, 0.0, A.FAIL),
    (E.TOPIC_AUTHORIZATION_FAILED, 1, 10, 0.0, A.FAIL),
    (E.NOT_ENOUGH_REPLICAS, 3, 2, 0.0, A.FAIL),  # out of retries
    (E.NOT_ENOUGH_REPLICAS, 3, 3, 0.0, A.RETRY),
    (E.NOT_ENOUGH_REPLICAS, 1, 10, 119.95, A.TIMEOUT),  # the retry would start too late
    (None, 1, 10, 119.95, A.TIMEOUT),
    (E.MESSAGE_TOO_LARGE, 1, 10, 119.95, A.FAIL),  # not retriable wins over timing
])
def test_decide(code, attempts, retries, now, expected):
    assert decide(code, attempts, retries, now, created=0.0, backoff_s=0.1,
                  delivery_timeout_s=120.0) is expected
