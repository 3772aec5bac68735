"""The admin client's retry rules for the quorum's admin APIs, as pure functions.

An admin client sends DescribeQuorum or AlterPartitionReassignments (the core's
:class:`~broker_core.raft.messages.AlterVotersRequest`) to the node it believes leads, and after
every answer (or none: a timeout or a lost connection) asks :func:`next_action` what to do:

- **success** (NONE): :attr:`Step.DONE`; the answer goes to the application. For a reassignment
  this means the target is committed (accepted), not that the moves are finished: DescribeQuorum
  shows their progress.
- **NOT_LEADER_OR_FOLLOWER naming a leader**: :attr:`Step.SEND_TO` that leader at once
  (retry with the new leader).
- **NOT_LEADER_OR_FOLLOWER with no leader known** (an election is on), **no answer**, or another
  retriable error: :attr:`Step.DISCOVER` after a backoff, i.e. find the leader again
  (DiscoverBrokers) and send there. A reassignment is always resent until answered:
  resubmitting the same target is idempotent at the leader, and a caller that stops retrying
  has no guarantee whether it was accepted.
- **any other error** (INVALID_REPLICA_ASSIGNMENT, ...): :attr:`Step.FAIL`, to the application.
- Every retry is bounded by the caller's overall timeout: a retry that would start after it is
  :attr:`Step.FAIL` with REQUEST_TIMED_OUT.

Backoffs double from ``retry_backoff_ms`` up to ``max_backoff_ms`` (Kafka's
``retry.backoff.ms`` / ``retry.backoff.max.ms``) with attempt number.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from broker_core.backoff import exponential_backoff
from broker_core.raft.messages import NO_LEADER, AlterVotersResponse, DescribeQuorumResponse
from broker_core.wire.errors import ErrorCode


class Step(Enum):
    DONE = "done"  # hand the answer to the application
    SEND_TO = "send to"  # resend to ``node_id`` after ``delay_ms``
    DISCOVER = "discover"  # find the leader again, then resend, after ``delay_ms``
    FAIL = "fail"  # give ``error`` to the application


@dataclass(frozen=True, slots=True)
class AdminAction:
    step: Step
    error: ErrorCode = ErrorCode.NONE
    node_id: int | None = None
    delay_ms: float = 0.0


def retry_backoff(attempt: int, retry_backoff_ms: float = 100.0,
                  max_backoff_ms: float = 1000.0) -> float:
    """The wait before retry number ``attempt`` (1 for the first retry), with Kafka's
    admin-client defaults (``retry.backoff.ms`` 100, ``retry.backoff.max.ms`` 1000)."""
    return exponential_backoff(attempt, retry_backoff_ms, max_backoff_ms)


def next_action(response: DescribeQuorumResponse | AlterVotersResponse | None, *,
                attempt: int, elapsed_ms: float, timeout_ms: float,
                retry_backoff_ms: float = 100.0, max_backoff_ms: float = 1000.0
                ) -> AdminAction:
    """What the admin client does after ``response`` (``None``: no answer came) to its attempt
    number ``attempt`` (1 for the first send), ``elapsed_ms`` after the operation began."""
    if response is not None and response.error_code is ErrorCode.NONE:
        return AdminAction(Step.DONE)
    error = ErrorCode.REQUEST_TIMED_OUT if response is None else response.error_code
    if response is not None and not error.retriable:
        return AdminAction(Step.FAIL, error)
    if (response is not None and error is ErrorCode.NOT_LEADER_OR_FOLLOWER
            and response.leader_id != NO_LEADER):
        action = AdminAction(Step.SEND_TO, error, response.leader_id)
    else:
        action = AdminAction(Step.DISCOVER, error,
                             delay_ms=retry_backoff(attempt, retry_backoff_ms, max_backoff_ms))
    if elapsed_ms + action.delay_ms >= timeout_ms:
        return AdminAction(Step.FAIL, ErrorCode.REQUEST_TIMED_OUT)
    return action
