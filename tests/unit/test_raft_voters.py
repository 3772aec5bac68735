"""Voter assignments (the design's VoterAssignmentMessage): act on the latest appended one,
persist committed ones, revert when a truncation removes one, single-member changes only."""

from __future__ import annotations

import pytest

from broker_core.raft import InMemoryRaftLog, LogEntry, QuorumState, Role, VoterAssignment
from broker_core.raft.messages import (
    BeginQuorumEpochRequest,
    DivergingEpoch,
    FetchRequest,
    VoteRequest,
    VoteResponse,
)
from broker_core.raft.voter_set import VoterChangeRejected, VoterSetHistory
from broker_core.wire.errors import ErrorCode
from tests.support.raft_nodes import (
    CLUSTER,
    answer,
    env,
    fetch,
    follower,
    make_node,
    sent,
    vote,
)


def assignment(*voters: int) -> VoterAssignment:
    return VoterAssignment(CLUSTER, tuple(voters))


# ---------------------------------------------------------------------- the history alone


def test_history_acts_on_appended_and_persists_only_committed_assignments():
    history = VoterSetHistory(-1, {1, 2, 3})
    assert history.appended([LogEntry(0, 1, b"x"), LogEntry(1, 1, assignment(1, 2))])
    assert history.voters == {1, 2} and history.committed_voters == {1, 2, 3}
    assert not history.committed(1)  # offset 1 is not below the high watermark 1
    assert history.committed(2)
    assert (history.applied_offset, history.committed_voters) == (1, {1, 2})


def test_history_reverts_when_the_assignment_is_truncated():
    history = VoterSetHistory(-1, {1, 2, 3})
    history.appended([LogEntry(4, 2, assignment(1, 2, 3, 4))])
    assert history.truncated(4)
    assert history.voters == {1, 2, 3}
    with pytest.raises(ValueError, match="committed voter assignment"):
        VoterSetHistory(7, {1}).truncated(7)


def test_history_recovers_uncommitted_assignments_by_scanning_the_log():
    log = InMemoryRaftLog([LogEntry(0, 1, assignment(1, 2, 3)), LogEntry(1, 1, b"x"),
                           LogEntry(2, 1, assignment(1, 2))])
    history = VoterSetHistory.recover(0, (1, 2, 3), None, log)
    assert history.voters == {1, 2} and history.applied_offset == 0 and history.has_pending


@pytest.mark.parametrize("proposed, problem", [
    ((1, 4, 5), "more than one voter"),
    ((2, 4), "more than one voter"),
    ((2, 3), "cannot remove itself"),
])
def test_only_safe_single_member_changes_are_accepted(proposed, problem):
    history = VoterSetHistory(-1, {1, 2, 3})
    with pytest.raises(VoterChangeRejected, match=problem):
        history.check_change(assignment(*proposed), leader_id=1)
    history.check_change(assignment(1, 2), leader_id=1)
    history.check_change(assignment(1, 2, 3, 4), leader_id=1)


# ---------------------------------------------------------------------- followers and observers


def test_a_follower_acts_on_an_appended_assignment_before_it_commits():
    node, cid = follower([], node_id=3)
    fx = answer(node, cid, records=(LogEntry(0, 5, assignment(1, 2)),), high_watermark=0)
    assert node.voters == {1, 2} and node.role is Role.OBSERVER  # removed: it observes now
    assert node.leader_id == 2 and sent(fx, FetchRequest, to=2)  # and keeps fetching
    assert fx.quorum_state is None  # nothing committed changed: nothing to persist


def test_a_committed_assignment_is_persisted_with_its_offset():
    node, cid = follower([], node_id=3)
    fx = answer(node, cid, records=(LogEntry(0, 5, assignment(1, 2, 3, 4)),), high_watermark=1)
    assert fx.quorum_state is not None
    assert (fx.quorum_state.applied_offset, fx.quorum_state.current_voters) == (0, (1, 2, 3, 4))


def test_truncating_an_uncommitted_assignment_restores_the_voters_before_it():
    node, cid = follower([(1, b"a")], node_id=3)
    fx = answer(node, cid, records=(LogEntry(1, 4, assignment(1, 2)),))
    assert node.role is Role.OBSERVER
    cid = sent(fx, FetchRequest)[0].correlation_id
    fx = answer(node, cid, diverging_epoch=DivergingEpoch(1, 1))
    assert fx.truncated_to == 1
    assert node.voters == {1, 2, 3} and node.role is Role.FOLLOWER and node.leader_id == 2


def test_an_added_observer_becomes_a_follower_of_the_leader_it_fetches_from():
    node = make_node(node_id=4)
    assert node.role is Role.OBSERVER
    fx = node.receive(env(2, 4, BeginQuorumEpochRequest(CLUSTER, 2, 5)), 1.0)
    cid = sent(fx, FetchRequest)[0].correlation_id
    answer(node, cid, records=(LogEntry(0, 5, assignment(1, 2, 3, 4)),))
    assert node.role is Role.FOLLOWER and node.epoch == 5


def test_a_restart_finds_the_uncommitted_assignment_again():
    entries = [LogEntry(0, 1, assignment(1, 2, 3)), LogEntry(1, 1, assignment(1, 2, 3, 4))]
    persisted = QuorumState(CLUSTER, 2, 1, -1, 0, (1, 2, 3))
    node = make_node(node_id=4, entries=entries, persisted=persisted)
    assert node.voters == {1, 2, 3, 4} and node.role is Role.FOLLOWER


def test_an_observer_votes_so_that_a_just_added_voter_can_help_elect():
    # Voter 1's log makes {1, 4} the voters; 4 has not fetched that assignment yet.
    node = make_node(node_id=4, voters=(1,))
    assert node.role is Role.OBSERVER
    fx = node.receive(env(1, 4, vote(1, 3, 2, 7)), 1.0)
    assert sent(fx, VoteResponse)[0].message.vote_granted
    assert (node.role, node.voted_id) == (Role.OBSERVER, 1) and fx.quorum_state.voted_id == 1


def test_a_voter_grants_a_candidate_that_is_not_a_voter_in_its_own_log():
    # The candidate's log may hold the assignment that made it a voter; ours may not (yet).
    node = make_node(node_id=1, voters=(1, 2, 3))
    fx = node.receive(env(6, 1, vote(6, 4, 3, 9)), 1.0)
    assert sent(fx, VoteResponse)[0].message.vote_granted


# ---------------------------------------------------------------------- the leader


def committed_leader():
    """Leader 1 of epoch 2 (voters 1-3) whose LeaderChange is committed."""
    persisted = QuorumState(CLUSTER, -1, 2, 1, -1, (1, 2, 3))
    node = make_node(entries=[(1, assignment(1, 2, 3))], persisted=persisted)
    node.receive(env(2, 1, VoteResponse(ErrorCode.NONE, -1, 2, True)), 1.0)
    node.receive(fetch(2, 1, 2, 2, 2), 2.0)
    assert node.role is Role.LEADER and node.high_watermark == 2
    return node


def test_a_leader_refuses_a_change_before_it_committed_its_own_epoch():
    persisted = QuorumState(CLUSTER, -1, 2, 1, -1, (1, 2, 3))
    node = make_node(entries=[(1, b"a")], persisted=persisted)
    node.receive(env(2, 1, VoteResponse(ErrorCode.NONE, -1, 2, True)), 1.0)
    with pytest.raises(VoterChangeRejected, match="not committed an entry of epoch 2"):
        node.propose(assignment(1, 2), 2.0)


def test_an_added_voter_counts_at_once_and_is_told_of_the_epoch():
    node = committed_leader()
    fx = node.propose(assignment(1, 2, 3, 4), 3.0)
    assert node.voters == {1, 2, 3, 4}
    assert [e.destination for e in sent(fx, BeginQuorumEpochRequest)] == [3, 4]
    node.receive(fetch(2, 1, 2, 3, 2), 4.0)
    assert node.high_watermark == 2  # 2 of 4 is not a majority any more
    node.receive(fetch(4, 1, 2, 3, 2), 5.0)
    assert node.high_watermark == 3
    assert fx.quorum_state is None  # persisted with the next step, once committed


def test_a_removal_shrinks_the_majority_at_once():
    node = committed_leader()
    node.propose(assignment(1, 2), 3.0)
    node.receive(fetch(3, 1, 2, 3, 2), 4.0)
    assert node.high_watermark == 2  # voter 3 no longer counts
    node.receive(fetch(2, 1, 2, 3, 2), 5.0)
    assert node.high_watermark == 3


def test_a_second_change_waits_for_the_first_to_commit():
    node = committed_leader()
    node.propose(assignment(1, 2, 3, 4), 3.0)
    with pytest.raises(VoterChangeRejected, match="not committed yet"):
        node.propose(assignment(1, 2, 3, 4, 5), 4.0)


def test_a_change_for_another_cluster_is_refused():
    node = committed_leader()
    with pytest.raises(VoterChangeRejected, match="cluster 'other'"):
        node.propose(VoterAssignment("other", (1, 2)), 3.0)


def test_an_empty_reassignment_target_is_refused():
    with pytest.raises(VoterChangeRejected, match="at least one voter"):
        VoterSetHistory(-1, {1, 2, 3}).check_change(VoterAssignment(CLUSTER, (1, 2, 3), ()), 1)


def test_a_change_of_the_target_alone_may_follow_an_uncommitted_assignment():
    history = VoterSetHistory(-1, {1, 2, 3})
    history.appended([LogEntry(0, 1, assignment(1, 2, 3, 4))])
    history.check_change(VoterAssignment(CLUSTER, (1, 2, 3, 4), (2, 3, 4)), leader_id=1)
    with pytest.raises(VoterChangeRejected, match="not committed yet"):
        history.check_change(assignment(1, 2, 3), leader_id=1)


def test_a_candidate_tells_a_rival_outside_its_voter_set_of_its_next_candidacy():
    # Node 1's log (voters 1, 3) lacks the assignment that made 2 a voter. 2 asks 1 in the
    # epoch 1 already stands in and is refused; when 1 stands again it asks 2 too, so 2
    # learns the epoch and its own timer can put it ahead (lock step otherwise).
    node = make_node(node_id=1, voters=(1, 3))
    node.tick(1500.0)
    assert node.role is Role.CANDIDATE and node.epoch == 1
    fx = node.receive(env(2, 1, vote(2, 1, 5, 9)), 1501.0)
    assert not sent(fx, VoteResponse)[0].message.vote_granted
    fx = node.tick(3100.0)
    assert node.epoch == 2
    assert sorted(e.destination for e in sent(fx, VoteRequest)) == [2, 3]
    # Its vote does not count: 1 needs 3.
    node.receive(env(2, 1, VoteResponse(ErrorCode.NONE, -1, 2, True)), 3101.0)
    assert node.role is Role.CANDIDATE
    # Once a leader is known, the rivals are forgotten.
    node.receive(env(3, 1, BeginQuorumEpochRequest(CLUSTER, 3, 2)), 3102.0)
    fx = node.tick(9000.0)
    assert node.role is Role.CANDIDATE and node.epoch == 3
    assert [e.destination for e in sent(fx, VoteRequest)] == [3]


def test_a_new_leader_announces_itself_to_its_rivals_too():
    # A removed voter lacking its removal only learns of the leader this way, then fetches
    # the removal; otherwise it would stand again and again.
    node = make_node(node_id=1, voters=(1, 2, 3))
    node.tick(1500.0)
    node.receive(env(6, 1, vote(6, 1, 0, 0)), 1501.0)  # 6 is no voter by 1's log
    fx = node.receive(env(2, 1, VoteResponse(ErrorCode.NONE, -1, 1, True)), 1502.0)
    assert node.role is Role.LEADER
    assert sorted(e.destination for e in sent(fx, BeginQuorumEpochRequest)) == [2, 3, 6]


def test_a_candidate_that_keeps_losing_asks_every_node_its_log_named():
    # Node 3's log made 6 a voter once and later removed it; after a candidacy that timed out,
    # node 3 asks 6 too (its quorum may have moved on without 3's log knowing).
    entries = [LogEntry(0, 1, assignment(1, 2, 3)), LogEntry(1, 1, assignment(1, 2, 3, 6)),
               LogEntry(2, 1, assignment(1, 2, 3))]
    node = make_node(node_id=3, entries=entries)
    fx = node.tick(1500.0)
    assert sorted(e.destination for e in sent(fx, VoteRequest)) == [1, 2]
    fx = node.tick(3000.0)  # lost: stands again
    assert node.epoch == 2
    assert sorted(e.destination for e in sent(fx, VoteRequest)) == [1, 2, 6]
