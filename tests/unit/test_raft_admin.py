"""The admin client's retry rules for DescribeQuorum and AlterPartitionReassignments."""

from __future__ import annotations

import pytest

from broker_core.raft.admin import AdminAction, Step, next_action, retry_backoff
from broker_core.raft.messages import NO_LEADER, AlterVotersResponse, DescribeQuorumResponse
from broker_core.wire.errors import ErrorCode

RESPONSES = [DescribeQuorumResponse, AlterVotersResponse]


def act(response, attempt=1, elapsed_ms=0.0, timeout_ms=60_000.0):
    return next_action(response, attempt=attempt, elapsed_ms=elapsed_ms, timeout_ms=timeout_ms)


@pytest.mark.parametrize("kind", RESPONSES)
def test_success_goes_to_the_application(kind):
    assert act(kind(ErrorCode.NONE, 1, 3)) == AdminAction(Step.DONE)


@pytest.mark.parametrize("kind", RESPONSES)
def test_not_leader_naming_a_leader_resends_there_at_once(kind):
    assert act(kind(ErrorCode.NOT_LEADER_OR_FOLLOWER, 4, 9)) == AdminAction(
        Step.SEND_TO, ErrorCode.NOT_LEADER_OR_FOLLOWER, node_id=4)


@pytest.mark.parametrize("kind", RESPONSES)
def test_no_known_leader_backs_off_and_discovers_it_again(kind):
    action = act(kind(ErrorCode.NOT_LEADER_OR_FOLLOWER, NO_LEADER, 9), attempt=3)
    assert action == AdminAction(Step.DISCOVER, ErrorCode.NOT_LEADER_OR_FOLLOWER, None, 400.0)


def test_no_answer_or_a_timed_out_reassignment_is_sent_again():
    assert act(None, attempt=1).step is Step.DISCOVER
    assert act(AlterVotersResponse(ErrorCode.REQUEST_TIMED_OUT, 1, 3)) == AdminAction(
        Step.DISCOVER, ErrorCode.REQUEST_TIMED_OUT, None, 100.0)


@pytest.mark.parametrize("error", [ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                   ErrorCode.INVALID_REQUEST, ErrorCode.UNKNOWN_SERVER_ERROR])
def test_other_errors_fail(error):
    assert act(AlterVotersResponse(error, 1, 3)) == AdminAction(Step.FAIL, error)


def test_no_retry_starts_after_the_overall_timeout():
    assert act(None, attempt=4, elapsed_ms=59_500.0) == AdminAction(
        Step.FAIL, ErrorCode.REQUEST_TIMED_OUT)
    assert act(DescribeQuorumResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 3),
               elapsed_ms=60_000.0).step is Step.FAIL
    assert act(None, attempt=4, elapsed_ms=59_000.0).step is Step.DISCOVER


def test_backoff_doubles_up_to_its_cap():
    assert [retry_backoff(n) for n in (1, 2, 3, 4, 5, 60)] == [100, 200, 400, 800, 1000, 1000]
    with pytest.raises(ValueError):
        retry_backoff(0)
