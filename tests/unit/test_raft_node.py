"""RaftNode, one handler and one transition at a time, with scripted messages and time.

Every test builds its subject with :func:`make_node` and talks to it through envelopes, the way
a driver would; nothing here runs a network.
"""

from __future__ import annotations

import pytest

from broker_core.raft import (
    IllegalStateTransition,
    LeaderChange,
    LogEntry,
    NotLeaderError,
    QuorumState,
    RaftConfig,
    RaftConfigError,
    RaftNode,
    RaftSafetyError,
    Role,
    VoterAssignment,
)
from broker_core.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from broker_core.wire.errors import ErrorCode
from tests.support.raft_nodes import (
    CLUSTER,
    answer,
    elect,
    env,
    fetch,
    follower,
    make_node,
    sent,
    vote,
)
from tests.support.raft_nodes import CONFIG as RAFT_CONFIG

# ---------------------------------------------------------------------- start and elections


def test_a_fresh_voter_starts_unattached_in_epoch_zero():
    node = make_node()
    assert (node.role, node.epoch, node.leader_id, node.voted_id) == (Role.UNATTACHED, 0, -1, -1)
    assert node.next_deadline() == 1500.0  # T * (1 + 0.5)


def test_election_timeout_is_randomised_within_t_and_2t():
    assert make_node(rng_value=0.0).next_deadline() == 1000.0
    assert make_node(rng_value=0.999).next_deadline() == pytest.approx(1999.0)


def test_nothing_happens_before_the_election_timeout():
    node = make_node()
    fx = node.tick(1499.0)
    assert fx.messages == [] and fx.quorum_state is None and node.role is Role.UNATTACHED


def test_election_timeout_makes_a_candidate_that_persists_its_vote_and_asks_the_others():
    node = make_node(entries=[(1, b"a"), (2, b"b")])
    fx = node.tick(1500.0)
    assert (node.role, node.epoch, node.voted_id) == (Role.CANDIDATE, 1, 1)
    assert fx.quorum_state is not None
    assert (fx.quorum_state.leader_epoch, fx.quorum_state.voted_id) == (1, 1)
    requests = sent(fx, VoteRequest)
    assert sorted(e.destination for e in requests) == [2, 3]
    assert requests[0].message == VoteRequest(CLUSTER, 1, 1, last_offset_epoch=2, last_offset=2)


def test_a_single_voter_elects_itself_and_writes_the_bootstrap_voters_first():
    node = make_node(voters=(1,))
    fx = node.tick(1500.0)
    assert node.role is Role.LEADER and node.epoch == 1
    assert [t.to_role for t in fx.transitions] == [Role.CANDIDATE, Role.LEADER]
    assert [e.payload for e in fx.appended] == [
        VoterAssignment(CLUSTER, (1,)),
        LeaderChange(leader_id=1, voters=(1,), granting_voters=(1,))]
    assert node.high_watermark == 2 and fx.high_watermark == 2 and fx.flush_log


def test_candidate_with_a_majority_leads_appends_leader_change_and_announces_itself():
    node = make_node(entries=[(1, b"a")])
    fx = elect(node)
    assert node.role is Role.LEADER and node.leader_id == 1
    assert [e.payload for e in fx.appended] == [LeaderChange(1, (1, 2, 3), (1, 2))]
    assert fx.appended[0].offset == 1 and fx.appended[0].epoch == 1
    assert sorted(e.destination for e in sent(fx, BeginQuorumEpochRequest)) == [2, 3]
    assert fx.quorum_state is not None and fx.quorum_state.leader_id == 1


def test_candidate_without_a_majority_stands_again_in_the_next_epoch():
    node = make_node()
    node.tick(1500.0)
    node.receive(env(2, 1, VoteResponse(ErrorCode.NONE, -1, 1, False)), 1600.0)
    assert node.role is Role.CANDIDATE
    fx = node.tick(1500.0 + 1500.0)
    assert (node.role, node.epoch) == (Role.CANDIDATE, 2)
    assert len(sent(fx, VoteRequest)) == 2


def test_candidate_resends_vote_requests_only_to_voters_that_did_not_answer():
    node = make_node()
    node.tick(1500.0)
    node.receive(env(2, 1, VoteResponse(ErrorCode.NONE, -1, 1, False)), 1501.0)
    fx = node.tick(1520.0)
    assert [e.destination for e in sent(fx, VoteRequest)] == [3]


def test_candidate_steps_down_on_a_newer_epoch_in_a_vote_response():
    node = make_node()
    node.tick(1500.0)
    node.receive(env(2, 1, VoteResponse(ErrorCode.FENCED_LEADER_EPOCH, 3, 4, False)), 1501.0)
    assert (node.role, node.epoch, node.leader_id) == (Role.FOLLOWER, 4, 3)


def test_vote_responses_from_an_older_candidacy_do_not_count():
    node = make_node()
    node.tick(1500.0)
    node.tick(3000.0)  # epoch 2 now
    node.receive(env(2, 1, VoteResponse(ErrorCode.NONE, -1, 1, True)), 3001.0)
    assert node.role is Role.CANDIDATE and node.epoch == 2


# ---------------------------------------------------------------------- granting votes


def test_grants_an_up_to_date_candidate_and_persists_the_vote_before_answering():
    node = make_node(entries=[(1, b"a")])
    fx = node.receive(env(2, 1, vote(2, epoch=1, last_epoch=1, last_offset=1)), 10.0)
    assert (node.role, node.epoch, node.voted_id) == (Role.VOTED, 1, 2)
    assert fx.quorum_state is not None and fx.quorum_state.voted_id == 2
    (answer,) = sent(fx, VoteResponse)
    assert answer.message == VoteResponse(ErrorCode.NONE, -1, 1, True)
    assert answer.correlation_id == 99


@pytest.mark.parametrize("last_epoch, last_offset", [(1, 1), (2, 1), (0, 5)])
def test_refuses_a_candidate_whose_log_is_behind(last_epoch, last_offset):
    node = make_node(entries=[(1, b"a"), (2, b"b")])  # last epoch 2, end offset 2
    fx = node.receive(env(2, 1, vote(2, 3, last_epoch, last_offset)), 10.0)
    assert sent(fx, VoteResponse)[0].message.vote_granted is False
    assert node.voted_id == -1 and node.role is Role.UNATTACHED and node.epoch == 3


def test_grants_a_longer_log_of_the_same_last_epoch_and_a_newer_last_epoch():
    node = make_node(entries=[(1, b"a"), (2, b"b")])
    assert sent(node.receive(env(2, 1, vote(2, 3, 2, 3)), 1.0), VoteResponse)[0].message.vote_granted
    node = make_node(entries=[(1, b"a"), (2, b"b")])
    assert sent(node.receive(env(2, 1, vote(2, 3, 3, 1)), 1.0), VoteResponse)[0].message.vote_granted


def test_one_vote_per_epoch_and_the_same_answer_to_a_resent_request():
    node = make_node()
    node.receive(env(2, 1, vote(2, 1)), 1.0)
    second = node.receive(env(3, 1, vote(3, 1)), 2.0)
    assert sent(second, VoteResponse)[0].message.vote_granted is False
    again = node.receive(env(2, 1, vote(2, 1)), 3.0)
    assert sent(again, VoteResponse)[0].message.vote_granted is True
    assert node.voted_id == 2 and again.quorum_state is None  # nothing new to persist


def test_refuses_a_candidate_of_an_older_epoch_with_fenced_leader_epoch():
    node = make_node()
    node.receive(env(2, 1, vote(2, 5)), 1.0)
    fx = node.receive(env(3, 1, vote(3, 4)), 2.0)
    assert sent(fx, VoteResponse)[0].message == VoteResponse(
        ErrorCode.FENCED_LEADER_EPOCH, -1, 5, False)


def test_a_newer_epoch_resets_the_vote():
    node = make_node()
    node.receive(env(2, 1, vote(2, 1)), 1.0)
    fx = node.receive(env(3, 1, vote(3, 2)), 2.0)
    assert sent(fx, VoteResponse)[0].message.vote_granted is True
    assert (node.epoch, node.voted_id) == (2, 3)


def test_a_follower_with_a_leader_refuses_votes_in_its_epoch():
    node = make_node()
    node.receive(env(2, 1, BeginQuorumEpochRequest(CLUSTER, 2, 1)), 1.0)
    fx = node.receive(env(3, 1, vote(3, 1, 5, 5)), 2.0)
    assert sent(fx, VoteResponse)[0].message == VoteResponse(ErrorCode.NONE, 2, 1, False)


def test_a_leader_moves_to_a_newer_epoch_on_a_vote_request_and_may_vote():
    node = make_node()
    elect(node)
    fx = node.receive(env(2, 1, vote(2, 2, 1, 5)), 1600.0)
    assert (node.role, node.epoch, node.voted_id) == (Role.VOTED, 2, 2)
    assert [t.to_role for t in fx.transitions] == [Role.UNATTACHED, Role.VOTED]


def test_a_vote_request_from_another_cluster_is_refused():
    node = make_node()
    fx = node.receive(env(2, 1, VoteRequest("other", 1, 2, 0, 0)), 1.0)
    assert sent(fx, VoteResponse)[0].message.error_code is ErrorCode.INCONSISTENT_CLUSTER_ID
    assert node.epoch == 0


# ---------------------------------------------------------------------- begin / end epoch


def test_begin_quorum_epoch_makes_a_follower_that_fetches_from_the_leader():
    node = make_node(entries=[(1, b"a")])
    fx = node.receive(env(2, 1, BeginQuorumEpochRequest(CLUSTER, 2, 3)), 5.0)
    assert (node.role, node.epoch, node.leader_id) == (Role.FOLLOWER, 3, 2)
    assert fx.quorum_state is not None and fx.quorum_state.leader_id == 2
    assert sent(fx, BeginQuorumEpochResponse)[0].message == BeginQuorumEpochResponse(
        ErrorCode.NONE, 2, 3)
    (request,) = sent(fx, FetchRequest, to=2)
    assert request.message == FetchRequest(CLUSTER, 1, 3, fetch_offset=1, last_fetched_epoch=1,
                                           max_wait_ms=500)


def test_begin_quorum_epoch_of_an_older_epoch_is_fenced():
    node = make_node()
    node.receive(env(2, 1, vote(2, 4)), 1.0)
    fx = node.receive(env(3, 1, BeginQuorumEpochRequest(CLUSTER, 3, 2)), 2.0)
    assert sent(fx, BeginQuorumEpochResponse)[0].message.error_code is \
        ErrorCode.FENCED_LEADER_EPOCH
    assert node.role is Role.VOTED


def test_a_voter_that_voted_for_another_follows_the_winner():
    node = make_node()
    node.receive(env(2, 1, vote(2, 1)), 1.0)
    node.receive(env(3, 1, BeginQuorumEpochRequest(CLUSTER, 3, 1)), 2.0)
    assert (node.role, node.leader_id, node.voted_id) == (Role.FOLLOWER, 3, 2)


def test_end_quorum_epoch_brings_the_first_preferred_successor_forward():
    first, second = make_node(node_id=2, rng_value=0.0), make_node(node_id=3, rng_value=0.0)
    for node in (first, second):
        node.receive(env(1, node.node_id, BeginQuorumEpochRequest(CLUSTER, 1, 1)), 0.0)
        node.receive(env(1, node.node_id, EndQuorumEpochRequest(CLUSTER, 1, 1, (2, 3))), 10.0)
    # retry backoff 20 ms * 2^position, plus up to 20 ms of jitter (0 here)
    assert first.next_deadline() == 30.0 and second.next_deadline() == 50.0
    first.tick(30.0)
    assert (first.role, first.epoch) == (Role.CANDIDATE, 2)


# ---------------------------------------------------------------------- fetch: leader side


def leader_with_log(entries, node_id: int = 1, epoch: int | None = None) -> RaftNode:
    """Leader of ``epoch`` (default: the last epoch in ``entries`` + 1), through a restart as
    a candidate of that epoch and one granted vote."""
    if epoch is None:
        epoch = (entries[-1][0] if entries else 0) + 1
    persisted = QuorumState(CLUSTER, -1, epoch, node_id, -1, (1, 2, 3))
    node = make_node(node_id=node_id, entries=entries, persisted=persisted)
    assert node.role is Role.CANDIDATE
    node.receive(env(2, node_id, VoteResponse(ErrorCode.NONE, -1, epoch, True)), 1.0)
    assert node.role is Role.LEADER
    return node


def test_leader_answers_a_matching_fetch_with_its_entries_and_high_watermark():
    node = leader_with_log([(1, b"a"), (1, b"b")])  # epoch 2, LeaderChange at offset 2
    fx = node.receive(fetch(2, 1, 2, offset=1, last_epoch=1), 2.0)
    (answer,) = sent(fx, FetchResponse)
    assert answer.correlation_id == 99 and answer.message.error_code is ErrorCode.NONE
    assert [e.offset for e in answer.message.records] == [1, 2]
    assert answer.message.diverging_epoch is None


@pytest.mark.parametrize("offset, last_epoch, diverging", [
    (3, 1, DivergingEpoch(1, 2)),  # the fetcher has more of epoch 1 than the leader
    (2, 0, DivergingEpoch(0, 0)),  # an epoch the leader never had below its first
    (4, 3, DivergingEpoch(2, 5)),  # epoch 3 unknown to the leader: its largest below is 2
])
def test_leader_answers_a_diverging_fetch_with_the_epoch_and_where_it_ends(offset, last_epoch,
                                                                            diverging):
    # leader log: epochs 1 1 2 2 2, then its own LeaderChange in epoch 4 at offset 5
    node = leader_with_log([(1, b"a"), (1, b"b"), (2, b"c"), (2, b"d"), (2, b"e")], epoch=4)
    fx = node.receive(fetch(2, 1, 4, offset, last_epoch), 2.0)
    (answer,) = sent(fx, FetchResponse)
    assert answer.message.diverging_epoch == diverging and answer.message.records == ()


@pytest.mark.parametrize("fetch_epoch, error", [(1, ErrorCode.FENCED_LEADER_EPOCH),
                                                (9, ErrorCode.UNKNOWN_LEADER_EPOCH)])
def test_leader_refuses_fetches_from_other_epochs(fetch_epoch, error):
    node = leader_with_log([(1, b"a")])
    fx = node.receive(fetch(2, 1, fetch_epoch, 1, 1), 2.0)
    assert sent(fx, FetchResponse)[0].message.error_code is error


def test_a_non_leader_answers_fetches_with_not_leader_and_the_leader_it_knows():
    node = make_node(node_id=3)
    node.receive(env(2, 3, BeginQuorumEpochRequest(CLUSTER, 2, 4)), 1.0)
    fx = node.receive(fetch(1, 3, 4, 0, 0), 2.0)
    assert sent(fx, FetchResponse)[0].message == FetchResponse(
        ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_id=2, leader_epoch=4, high_watermark=-1)


def test_commit_needs_a_majority_and_an_entry_of_the_leaders_epoch():
    # Offsets 0-1 are from epoch 1; the leader's epoch 2 starts at offset 2 (LeaderChange).
    node = leader_with_log([(1, b"a"), (1, b"b")])
    assert node.high_watermark == 0
    # Voter 2 holds both epoch-1 entries: a majority has them, but they are not the leader's.
    node.receive(fetch(2, 1, 2, offset=2, last_epoch=1), 2.0)
    assert node.high_watermark == 0
    # Voter 2 now holds the LeaderChange too: it and everything before it commit.
    fx = node.receive(fetch(2, 1, 2, offset=3, last_epoch=2), 3.0)
    assert node.high_watermark == 3 and fx.high_watermark == 3


def test_one_follower_of_four_is_not_a_majority_of_five():
    persisted = QuorumState(CLUSTER, -1, 2, 1, -1, (1, 2, 3, 4, 5))
    node = make_node(voters=(1, 2, 3, 4, 5), persisted=persisted, entries=[(1, b"x")])
    for voter in (2, 3):
        node.receive(env(voter, 1, VoteResponse(ErrorCode.NONE, -1, 2, True)), 1.0)
    assert node.role is Role.LEADER  # its LeaderChange is offset 1
    node.receive(fetch(2, 1, 2, 2, 2), 2.0)
    assert node.high_watermark == 0  # leader and voter 2: two of five
    node.receive(fetch(3, 1, 2, 2, 2), 3.0)
    assert node.high_watermark == 2


def test_a_fetch_with_nothing_new_is_held_until_an_entry_is_proposed():
    node = leader_with_log([(1, b"a")])
    node.receive(fetch(2, 1, 2, 2, 2, max_wait=500, correlation_id=1), 2.0)  # hw moves to 2
    fx = node.receive(fetch(2, 1, 2, 2, 2, max_wait=500, correlation_id=2), 3.0)
    assert sent(fx, FetchResponse) == [] and node.next_deadline() <= 503.0
    fx = node.propose(b"new", 4.0)
    (answer,) = sent(fx, FetchResponse)
    assert answer.correlation_id == 2 and [e.payload for e in answer.message.records] == [b"new"]


def test_a_held_fetch_is_answered_empty_when_its_wait_expires():
    node = leader_with_log([(1, b"a")])
    node.receive(fetch(2, 1, 2, 2, 2, max_wait=500, correlation_id=1), 2.0)
    node.receive(fetch(2, 1, 2, 2, 2, max_wait=500, correlation_id=2), 3.0)
    assert sent(node.tick(502.0), FetchResponse) == []
    (answer,) = sent(node.tick(503.0), FetchResponse)
    assert answer.message.records == () and answer.correlation_id == 2


def test_propose_on_a_non_leader_names_the_known_leader():
    node = make_node()
    node.receive(env(2, 1, BeginQuorumEpochRequest(CLUSTER, 2, 1)), 1.0)
    with pytest.raises(NotLeaderError, match="known leader: 2") as info:
        node.propose(b"x", 2.0)
    assert (info.value.leader_id, info.value.epoch) == (2, 1)


def test_propose_appends_an_entry_of_the_leaders_epoch():
    node = leader_with_log([(1, b"a")])
    fx = node.propose(b"p", 5.0)
    assert fx.proposed == LogEntry(2, 2, b"p") and fx.appended == [fx.proposed]
    assert fx.flush_log


# ---------------------------------------------------------------------- fetch: follower side


def test_follower_appends_fetched_entries_and_takes_the_high_watermark_up_to_its_log_end():
    node, cid = follower([(1, b"a")])
    fx = answer(node, cid, records=(LogEntry(1, 2, b"b"), LogEntry(2, 2, b"c")), high_watermark=9)
    assert [e.offset for e in fx.appended] == [1, 2] and fx.flush_log
    assert node.high_watermark == 3 == fx.high_watermark  # capped at its own log end
    (next_fetch,) = sent(fx, FetchRequest)
    assert next_fetch.message.fetch_offset == 3 and next_fetch.message.last_fetched_epoch == 2


def test_follower_truncates_to_the_end_of_the_common_epoch_and_fetches_again():
    node, cid = follower([(1, b"a"), (1, b"b"), (3, b"c"), (3, b"d")])
    # The leader has epoch 3 ending at offset 3: our offset 3 is not the leader's.
    fx = answer(node, cid, diverging_epoch=DivergingEpoch(3, 3), high_watermark=2)
    assert fx.truncated_to == 3 and node.log.end_offset() == 3
    assert node.high_watermark == 0  # a diverging answer says nothing about commits
    assert sent(fx, FetchRequest)[0].message.fetch_offset == 3


def test_follower_truncation_when_it_lacks_the_leaders_epoch_takes_several_rounds():
    node, cid = follower([(1, b"a"), (2, b"b"), (4, b"c")])
    # Leader: epochs 1, 3. It answers our epoch 4 with its epoch 3 ending at 5.
    fx = answer(node, cid, diverging_epoch=DivergingEpoch(3, 5))
    # We have no epoch 3; our largest below it is 2, which ends where our epoch 4 starts.
    assert fx.truncated_to == 2
    cid = sent(fx, FetchRequest)[0].correlation_id
    fx = answer(node, cid, diverging_epoch=DivergingEpoch(1, 1))
    assert fx.truncated_to == 1 and node.log.end_offset() == 1


def test_follower_truncation_to_epoch_zero_means_nothing_in_common():
    node, cid = follower([(1, b"a"), (1, b"b")])
    fx = answer(node, cid, diverging_epoch=DivergingEpoch(0, 0))
    assert fx.truncated_to == 0 and node.log.end_offset() == 0


def test_follower_refuses_to_truncate_below_its_high_watermark():
    node, cid = follower([(1, b"a")])
    fx = answer(node, cid, records=(LogEntry(1, 5, b"b"),), high_watermark=2)
    assert node.high_watermark == 2
    cid = sent(fx, FetchRequest)[0].correlation_id
    with pytest.raises(RaftSafetyError, match="below the high watermark 2"):
        answer(node, cid, diverging_epoch=DivergingEpoch(0, 0))


def test_a_late_or_duplicated_fetch_response_is_ignored():
    node, cid = follower([(1, b"a")])
    answer(node, cid, records=(LogEntry(1, 5, b"b"),))
    fx = answer(node, cid, diverging_epoch=DivergingEpoch(0, 0))  # the same id again
    assert fx.truncated_to is None and node.log.end_offset() == 2


def test_a_fetch_error_is_retried_after_the_backoff():
    node, cid = follower([])
    fx = node.receive(env(2, 1, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 5, -1), cid),
                      2.0)
    assert sent(fx, FetchRequest) == []
    assert sent(node.tick(21.0), FetchRequest) == []
    assert len(sent(node.tick(22.0), FetchRequest)) == 1


def test_an_unanswered_fetch_is_sent_again_after_the_request_timeout():
    node, _ = follower([])
    assert sent(node.tick(1000.0), FetchRequest) == []  # sent at t=1
    assert len(sent(node.tick(1001.0), FetchRequest)) == 1


def test_a_fetch_response_naming_a_newer_epoch_moves_the_follower_there():
    node, cid = follower([])
    fx = node.receive(env(2, 1, FetchResponse(ErrorCode.FENCED_LEADER_EPOCH, 3, 7, -1), cid), 2.0)
    assert (node.role, node.epoch, node.leader_id) == (Role.FOLLOWER, 7, 3)
    assert sent(fx, FetchRequest, to=3)


# ---------------------------------------------------------------------- timeouts


def test_a_follower_that_hears_nothing_for_the_fetch_timeout_stands():
    node, cid = follower([])
    answer(node, cid, now=100.0)  # a successful answer restarts the fetch timer
    assert node.tick(2099.0).transitions == []
    fx = node.tick(2100.0)
    assert (node.role, node.epoch) == (Role.CANDIDATE, 6) and sent(fx, VoteRequest)


def test_a_leader_that_a_majority_stopped_fetching_from_resigns_and_says_so():
    node = leader_with_log([(1, b"a")])  # leader since t=1
    node.receive(fetch(2, 1, 2, 2, 2), 1500.0)
    assert node.tick(3499.0).transitions == []  # voter 2's fetch at 1500 still counts
    fx = node.tick(3500.0)
    assert node.role is Role.RESIGNED and node.epoch == 2
    ends = sent(fx, EndQuorumEpochRequest)
    assert sorted(e.destination for e in ends) == [2, 3]
    assert ends[0].message.preferred_successors == (2, 3)  # 2 replicated more than 3
    with pytest.raises(NotLeaderError):
        node.propose(b"late", 3501.0)


def test_a_resigned_leader_stands_in_the_next_epoch_after_its_election_timeout():
    node = leader_with_log([(1, b"a")])
    node.resign(10.0)
    assert node.role is Role.RESIGNED
    assert node.tick(1509.0).transitions == []
    node.tick(1510.0)
    assert (node.role, node.epoch) == (Role.CANDIDATE, 3)


def test_a_leader_answers_its_held_fetches_when_it_steps_down():
    node = leader_with_log([(1, b"a")])
    node.receive(fetch(2, 1, 2, 2, 2, max_wait=500, correlation_id=1), 2.0)
    node.receive(fetch(2, 1, 2, 2, 2, max_wait=500, correlation_id=2), 3.0)
    fx = node.receive(env(3, 1, vote(3, 9, 9, 9)), 4.0)
    (held,) = sent(fx, FetchResponse)
    assert held.correlation_id == 2
    assert (held.message.error_code, held.message.leader_epoch) == (
        ErrorCode.NOT_LEADER_OR_FOLLOWER, 9)


# ---------------------------------------------------------------------- restart


@pytest.mark.parametrize("leader_id, voted_id, role", [
    (1, 1, Role.RESIGNED),  # a leader never resumes leading: it lost its followers' state
    (2, -1, Role.FOLLOWER),
    (-1, 1, Role.CANDIDATE),  # keeps its vote for itself
    (-1, 3, Role.VOTED),
    (-1, -1, Role.UNATTACHED),
])
def test_a_restart_resumes_from_the_persisted_state(leader_id, voted_id, role):
    persisted = QuorumState(CLUSTER, leader_id, 4, voted_id, -1, (1, 2, 3))
    node = make_node(persisted=persisted)
    assert (node.role, node.epoch, node.leader_id, node.voted_id) == (role, 4, leader_id,
                                                                       voted_id)


def test_a_restarted_voter_does_not_vote_twice_in_its_epoch():
    node = make_node(persisted=QuorumState(CLUSTER, -1, 4, 3, -1, (1, 2, 3)))
    fx = node.receive(env(2, 1, vote(2, 4, 9, 9)), 1.0)
    assert sent(fx, VoteResponse)[0].message.vote_granted is False


def test_a_restarted_candidate_or_follower_acts_on_its_first_tick():
    node = make_node(persisted=QuorumState(CLUSTER, -1, 4, 1, -1, (1, 2, 3)))
    assert node.next_deadline() == 0.0
    assert len(sent(node.tick(0.0), VoteRequest)) == 2
    node = make_node(persisted=QuorumState(CLUSTER, 2, 4, -1, -1, (1, 2, 3)))
    assert len(sent(node.tick(0.0), FetchRequest, to=2)) == 1


def test_persisted_state_of_another_cluster_is_refused():
    with pytest.raises(ValueError, match="cluster 'other'"):
        make_node(persisted=QuorumState("other", -1, 4, -1, -1, (1, 2, 3)))


# ---------------------------------------------------------------------- the state machine's own guards


def test_the_node_refuses_to_change_its_vote_within_an_epoch():
    node = make_node()
    node.receive(env(2, 1, vote(2, 1)), 1.0)
    with pytest.raises(IllegalStateTransition, match="already voted for 2"):
        node._transition(Role.FOLLOWER, 1, leader_id=3, voted_id=3)


def test_the_node_refuses_a_second_leader_in_an_epoch():
    node = make_node()
    node.receive(env(2, 1, BeginQuorumEpochRequest(CLUSTER, 2, 1)), 1.0)
    with pytest.raises(IllegalStateTransition, match="already has leader 2"):
        node._transition(Role.OBSERVER, 1, leader_id=3)


def test_time_must_not_go_backwards():
    node = make_node(now=10.0)
    with pytest.raises(ValueError, match="backwards"):
        node.tick(9.0)


# ---------------------------------------------------------------------- observers


def test_an_observer_never_stands_and_asks_a_voter_who_leads():
    node = make_node(node_id=7)
    assert node.role is Role.OBSERVER
    fx = node.tick(0.0)
    (probe,) = sent(fx, FetchRequest)
    assert probe.destination == 1  # FixedRandom picks the first voter
    fx = node.receive(env(1, 7, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 3, -1),
                          probe.correlation_id), 1.0)
    assert (node.role, node.epoch, node.leader_id) == (Role.OBSERVER, 3, 2)
    assert sent(fx, FetchRequest, to=2)
    node.tick(100_000.0)
    assert node.role is Role.OBSERVER


def test_an_observer_probing_goes_back_to_its_leader_when_a_voter_names_the_same_one():
    node = make_node(node_id=7)
    fx = node.tick(0.0)
    (probe,) = sent(fx, FetchRequest)
    node.receive(env(1, 7, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 3, -1),
                     probe.correlation_id), 1.0)
    assert node.leader_id == 2
    # The leader goes quiet past the fetch timeout: the observer asks the voters again.
    now = 1.0 + RAFT_CONFIG.fetch_timeout_ms
    (probe,) = sent(node.tick(now), FetchRequest)
    assert probe.destination == 1
    # The voter names the leader the observer knows, in its epoch: back to that leader.
    node.receive(env(1, 7, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 3, -1),
                     probe.correlation_id), now + 1)
    fx = node.tick(now + 1 + RAFT_CONFIG.retry_backoff_ms)
    (fetch,) = sent(fx, FetchRequest)
    assert fetch.destination == 2


def test_the_leader_does_not_count_observers_toward_the_high_watermark():
    node = leader_with_log([(1, b"a")])  # LeaderChange at offset 1
    fx = node.receive(fetch(7, 1, 2, 2, 2), 2.0)
    assert sent(fx, FetchResponse)[0].message.diverging_epoch is None  # a matching fetch
    assert node.high_watermark == 0  # yet the observer's copy does not count
    node.receive(fetch(2, 1, 2, 2, 2), 3.0)
    assert node.high_watermark == 2


def test_learning_a_newer_epoch_mid_election_keeps_the_election_timer():
    node = make_node()
    node.tick(1500.0)  # candidate of epoch 1 until 3000
    node.receive(env(2, 1, VoteResponse(ErrorCode.FENCED_LEADER_EPOCH, -1, 4, False)), 1600.0)
    assert (node.role, node.epoch) == (Role.UNATTACHED, 4)
    assert node.next_deadline() == 3000.0  # not 1600 + 1500


def test_granting_a_vote_restarts_the_election_timer():
    node = make_node()
    node.receive(env(2, 1, vote(2, 1)), 1000.0)
    assert node.next_deadline() == 2500.0


# ---------------------------------------------------------------------- configuration


@pytest.mark.parametrize("settings, key", [
    ({"election_timeout_ms": 0}, "quorum.election.timeout.ms"),
    ({"request_timeout_ms": 500, "fetch_max_wait_ms": 500}, "quorum.request.timeout.ms"),
    ({"fetch_timeout_ms": 400, "fetch_max_wait_ms": 500, "request_timeout_ms": 600},
     "quorum.fetch.timeout.ms"),
    ({"fetch_max_wait_ms": -1}, "replica.fetch.wait.max.ms"),
])
def test_bad_settings_fail_with_the_key_named(settings, key):
    with pytest.raises(RaftConfigError, match=key):
        RaftConfig(**settings)


def test_defaults_are_kafkas():
    cfg = RaftConfig()
    assert (cfg.election_timeout_ms, cfg.fetch_timeout_ms, cfg.election_backoff_max_ms,
            cfg.request_timeout_ms, cfg.retry_backoff_ms) == (1000, 2000, 1000, 2000, 20)


def test_envelopes_know_requests_from_responses():
    assert env(1, 2, vote(1, 1)).is_request
    assert not env(2, 1, VoteResponse(ErrorCode.NONE, -1, 1, True)).is_request
