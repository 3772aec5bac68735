"""Voter reassignment in the node: AlterVotersRequest handling, the leader's
single-member steps with observer promotion, resigning to be removed last, NOT_FOLLOWER for a
removed voter, and DescribeQuorum."""

from __future__ import annotations

from broker_core.raft import LogEntry, QuorumState, Role, VoterAssignment
from broker_core.raft.messages import (
    NO_LEADER,
    NOT_FOLLOWER,
    AlterVotersRequest,
    AlterVotersResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    ReplicaState,
    VoteResponse,
)
from broker_core.wire.errors import ErrorCode
from tests.support.raft_nodes import CLUSTER, CONFIG, answer, env, fetch, follower, make_node, sent

ADMIN = 100


def assignment(voters, target=None) -> VoterAssignment:
    return VoterAssignment(CLUSTER, tuple(voters), None if target is None else tuple(target))


def committed_leader(voters=(1, 2, 3), node_id=1, entries=None):
    """Leader ``node_id`` of epoch 2 whose LeaderChange (offset 1) is committed."""
    persisted = QuorumState(CLUSTER, -1, 2, node_id, -1, tuple(voters))
    node = make_node(node_id=node_id, voters=voters,
                     entries=entries or [(1, assignment(voters))], persisted=persisted)
    peer = sorted(set(voters) - {node_id})[0]
    node.receive(env(peer, node_id, VoteResponse(ErrorCode.NONE, -1, 2, True)), 1.0)
    end = node.log.end_offset()
    node.receive(fetch(peer, node_id, 2, end, 2), 2.0)
    assert node.role is Role.LEADER and node.high_watermark == end
    return node


def alter(node, target, now=3.0, timeout_ms=60_000, correlation_id=7):
    return node.receive(env(ADMIN, node.node_id, AlterVotersRequest(target, timeout_ms),
                            correlation_id), now)


def answers(fx) -> list[AlterVotersResponse]:
    return [e.message for e in sent(fx, AlterVotersResponse, to=ADMIN)]


def assignments(fx) -> list[VoterAssignment]:
    return [e.payload for e in fx.appended if isinstance(e.payload, VoterAssignment)]


# ---------------------------------------------------------------------- the request


def test_a_non_leader_answers_not_leader_naming_the_leader_it_knows():
    node, _ = follower([], leader=2, epoch=5, node_id=1)
    fx = alter(node, (1, 2, 4))
    assert answers(fx) == [AlterVotersResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 5)]
    assert not fx.appended


def test_the_leader_writes_the_target_and_answers_only_once_it_is_committed():
    node = committed_leader()
    fx = alter(node, (1, 2, 4))
    assert assignments(fx) == [assignment((1, 2, 3), (1, 2, 4))]
    assert answers(fx) == []
    fx = node.receive(fetch(2, 1, 2, 3, 2), 4.0)
    assert node.high_watermark == 3
    (reply,) = sent(fx, AlterVotersResponse, to=ADMIN)
    assert reply.correlation_id == 7
    assert reply.message == AlterVotersResponse(ErrorCode.NONE, 1, 2)


def test_resubmitting_the_same_target_writes_nothing_and_answers_with_the_same_commit():
    node = committed_leader()
    alter(node, (1, 2, 4), correlation_id=7)
    fx = alter(node, (4, 2, 1), now=3.5, correlation_id=8)
    assert fx.appended == [] and answers(fx) == []
    fx = node.receive(fetch(2, 1, 2, 3, 2), 4.0)
    assert sorted(e.correlation_id for e in sent(fx, AlterVotersResponse)) == [7, 8]
    fx = alter(node, (1, 2, 4), now=5.0, correlation_id=9)  # committed already: at once
    assert fx.appended == [] and answers(fx) == [AlterVotersResponse(ErrorCode.NONE, 1, 2)]


def test_asking_for_the_current_voters_with_no_reassignment_is_answered_at_once():
    node = committed_leader()
    fx = alter(node, (3, 2, 1))
    assert fx.appended == [] and answers(fx) == [AlterVotersResponse(ErrorCode.NONE, 1, 2)]


def test_resubmitting_the_current_voters_cancels_the_reassignment():
    node = committed_leader()
    alter(node, (4, 5, 6))
    fx = alter(node, (1, 2, 3), now=3.5, correlation_id=8)
    assert assignments(fx) == [assignment((1, 2, 3))]
    assert node.target_voters is None
    fx = alter(node, None, now=3.6, correlation_id=9)  # null Replicas: the same, nothing new
    assert fx.appended == []
    fx = node.receive(fetch(2, 1, 2, 4, 2), 4.0)
    assert sorted(e.correlation_id for e in sent(fx, AlterVotersResponse)) == [7, 8, 9]


def test_a_bad_target_is_refused():
    node = committed_leader()
    for target in [(), (1, 1, 2), (-3, 1)]:
        fx = alter(node, target)
        assert answers(fx) == [AlterVotersResponse(ErrorCode.INVALID_REPLICA_ASSIGNMENT, 1, 2)]
        assert fx.appended == []


def test_a_pending_request_times_out_or_is_answered_not_leader_when_the_leader_resigns():
    node = committed_leader()
    alter(node, (1, 2, 4), timeout_ms=100, correlation_id=7)
    assert node.next_deadline() <= 103.0
    fx = node.tick(103.0)
    assert answers(fx) == [AlterVotersResponse(ErrorCode.REQUEST_TIMED_OUT, 1, 2)]
    alter(node, (1, 2, 4), now=104.0, correlation_id=8)
    fx = node.resign(105.0)
    assert answers(fx) == [AlterVotersResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, NO_LEADER, 2)]


# ---------------------------------------------------------------------- the steps


def test_the_leader_adds_a_new_voter_only_once_it_has_caught_up():
    node = committed_leader()
    alter(node, (1, 2, 4))
    fx = node.receive(fetch(2, 1, 2, 3, 2), 4.0)  # the target commits
    assert assignments(fx) == []  # 4 has never fetched: wait
    fx = node.receive(fetch(4, 1, 2, 0, 0), 5.0)  # far behind
    assert assignments(fx) == []
    fx = node.receive(fetch(4, 1, 2, 3, 2), 6.0)  # at the leader's log end
    assert assignments(fx) == [assignment((1, 2, 3, 4), (1, 2, 4))]
    assert node.voters == {1, 2, 3, 4}


def test_an_observer_behind_for_longer_than_an_election_timeout_is_not_promoted():
    node = committed_leader()
    node.receive(fetch(4, 1, 2, 2, 2), 2.5)  # caught up at 2.5
    alter(node, (1, 2, 4))
    later = 2.5 + CONFIG.election_timeout_ms + 1
    fx = node.receive(fetch(2, 1, 2, 3, 2), later)
    assert node.high_watermark == 3 and assignments(fx) == []


def test_the_whole_reassignment_then_not_follower_for_the_removed_voter():
    node = committed_leader()
    alter(node, (1, 2, 4))
    node.receive(fetch(2, 1, 2, 3, 2), 4.0)
    node.receive(fetch(4, 1, 2, 3, 2), 5.0)  # adds 4 at offset 3
    node.receive(fetch(2, 1, 2, 4, 2), 6.0)
    fx = node.receive(fetch(4, 1, 2, 4, 2), 7.0)  # commits it; then removes 3 (offset 4)
    assert assignments(fx) == [assignment((1, 2, 4), (1, 2, 4))]
    # The removal counts at once: 1 and 2 are a majority of (1, 2, 4) and commit it.
    fx = node.receive(fetch(2, 1, 2, 5, 2), 8.0)
    assert assignments(fx) == [assignment((1, 2, 4))]  # done: the target is cleared
    node.receive(fetch(2, 1, 2, 6, 2), 10.0)
    assert node.high_watermark == 6 and node.target_voters is None

    # 3 still holds only what it had before its removal: told once, then served as usual.
    fx = node.receive(fetch(3, 1, 2, 4, 2), 12.0)
    (reply,) = sent(fx, FetchResponse, to=3)
    assert reply.message == FetchResponse(NOT_FOLLOWER, 1, 2, 6)
    fx = node.receive(fetch(3, 1, 2, 4, 2), 13.0)
    assert sent(fx, FetchResponse, to=3)[0].message.records[0].offset == 4


def test_a_leader_that_is_the_last_voter_to_remove_resigns():
    node = committed_leader()
    alter(node, (2, 3))
    fx = node.receive(fetch(2, 1, 2, 3, 2), 4.0)
    assert node.role is Role.RESIGNED and node.voters == {1, 2, 3}
    assert {e.destination for e in sent(fx, EndQuorumEpochRequest)} == {2, 3}


def test_a_new_leader_carries_on_with_the_target_it_finds_in_its_log():
    entries = [(1, assignment((1, 2, 3))), (1, assignment((1, 2, 3), (2, 3)))]
    node = committed_leader(node_id=2, entries=entries)
    # Elected with the target committed below its LeaderChange (offset 2), now at HW 3:
    # the old leader 1 is an ordinary voter to remove.
    assert node.voters == {2, 3}
    assert node.log.read(3, 1)[0].payload == assignment((2, 3), (2, 3))


def test_a_removed_follower_told_not_follower_observes_until_its_log_has_the_removal():
    node, cid = follower([(1, assignment((1, 2, 3)))], leader=2, epoch=5, node_id=3)
    fx = node.receive(env(2, 3, FetchResponse(NOT_FOLLOWER, 2, 5, 4), cid), 3.0)
    assert node.role is Role.OBSERVER and not node.is_voter and node.voters == {1, 2, 3}
    (request,) = sent(fx, FetchRequest, to=2)
    records = (LogEntry(1, 5, b"x"), LogEntry(2, 5, assignment((1, 2))), LogEntry(3, 5, b"y"))
    answer(node, request.correlation_id, now=4.0, records=records, high_watermark=4)
    assert node.role is Role.OBSERVER and node.voters == {1, 2}
    assert node.is_voter is False and node.high_watermark == 4


def test_a_stale_not_follower_ends_once_the_log_says_it_is_a_voter_again():
    node, cid = follower([(1, assignment((1, 2, 3)))], leader=2, epoch=5, node_id=3)
    fx = node.receive(env(2, 3, FetchResponse(NOT_FOLLOWER, 2, 5, 3), cid), 3.0)
    (request,) = sent(fx, FetchRequest, to=2)
    records = (LogEntry(1, 5, assignment((1, 2))), LogEntry(2, 5, assignment((1, 2, 3))))
    answer(node, request.correlation_id, now=4.0, records=records)
    assert node.role is Role.FOLLOWER and node.is_voter


# ---------------------------------------------------------------------- DescribeQuorum


def test_describe_quorum_at_the_leader_shows_voters_target_and_observers():
    node = committed_leader()
    node.receive(fetch(7, 1, 2, 1, 1), 2.5)  # an observer, behind
    alter(node, (1, 2, 7))
    fx = node.receive(env(ADMIN, 1, DescribeQuorumRequest(), 11), 3.0)
    (reply,) = sent(fx, DescribeQuorumResponse, to=ADMIN)
    assert reply.correlation_id == 11
    assert reply.message == DescribeQuorumResponse(
        ErrorCode.NONE, 1, 2, 2,
        current_voters=(ReplicaState(1, 3, 3, 3), ReplicaState(2, 2, 2, 2), ReplicaState(3)),
        target_voters=(ReplicaState(1, 3, 3, 3), ReplicaState(2, 2, 2, 2),
                       ReplicaState(7, 1, 2, -1)),
        observers=(ReplicaState(7, 1, 2, -1),))


def test_caught_up_time_is_the_previous_fetch_when_the_replica_reached_that_log_end():
    node = committed_leader()
    node.receive(fetch(7, 1, 2, 2, 2), 10.0)  # at the log end (2): caught up at 10
    node.propose(b"a", 11.0)
    node.propose(b"b", 12.0)
    node.receive(fetch(7, 1, 2, 2, 2), 20.0)  # end 4 now: behind, last caught up still 10
    node.propose(b"c", 21.0)
    node.receive(fetch(7, 1, 2, 4, 2), 30.0)  # reached the end as of its fetch at 20
    assert node.describe_quorum().observers == (ReplicaState(7, 4, 30, 20),)


def test_describe_quorum_elsewhere_names_the_known_leader():
    node, _ = follower([], leader=2, epoch=5, node_id=1)
    fx = node.receive(env(ADMIN, 1, DescribeQuorumRequest(), 11), 3.0)
    assert sent(fx, DescribeQuorumResponse)[0].message == DescribeQuorumResponse(
        ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 5)
