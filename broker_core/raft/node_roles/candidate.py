"""Elections for :class:`~broker_core.raft.node.RaftNode`: the candidate's vote collection
(VoteRequest out, VoteResponse in, winning) and every node's answer to a VoteRequest.

Invariants:

- a node votes at most once per epoch, and its vote is persisted (the quorum state of the
  step's Effects) before the response granting it leaves;
- a vote is granted only to a candidate whose log is at least as up to date as ours;
- only votes from the candidate's own voters count towards its majority;
- a :class:`Candidacy` is part of the role state, so a vote from an older candidacy never
  counts in a newer one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker_core.raft.commit import majority_size
from broker_core.raft.entries import LeaderChange, VoterAssignment
from broker_core.raft.log import IRaftLog
from broker_core.raft.messages import NO_LEADER, Envelope, VoteRequest, VoteResponse
from broker_core.raft.node_roles.leader import ReplicaProgress
from broker_core.raft.roles import Role
from broker_core.wire.errors import ErrorCode

if TYPE_CHECKING:
    from broker_core.raft.node import RaftNode

NO_ID = -1  # no vote (the quorum state's ``voted_id``)


@dataclass(slots=True)
class Candidacy:
    """A candidate's collection of votes in its epoch."""

    granted: set[int] = field(default_factory=set)  # voters that granted their vote
    answered: set[int] = field(default_factory=set)  # who replied (no resend to them)

    def enter(self, node: RaftNode, initial: bool) -> None:
        """Stand: vote for ourselves and ask the others. ``initial`` (a restarted candidate)
        only arms the resend timer, due at once."""
        self.granted = {node.node_id}
        self.answered = {node.node_id}
        if initial:
            node._rs.next_resend_ms = node._now
        else:
            request_votes(node)
            maybe_win(node)


def log_is_up_to_date(log: IRaftLog, last_epoch: int, end_offset: int) -> bool:
    return (last_epoch, end_offset) >= (log.last_epoch(), log.end_offset())


def request_votes(node: RaftNode) -> None:
    request = VoteRequest(cluster_id=node.cluster_id, candidate_epoch=node._epoch,
                          candidate_id=node.node_id,
                          last_offset_epoch=node.log.last_epoch(),
                          last_offset=node.log.end_offset())
    # Rivals that are no voters by our log hear of our candidacy too. Two candidates with
    # different voter sets (one log lacks an assignment) where only one asks the other
    # stay in lock step: the one asked is always an epoch ahead when the other's request
    # arrives, and refuses, having voted for itself. Hearing our epoch lets random timeouts
    # put the other ahead (the simulation found a quorum stuck so). Their votes count only
    # if they are our voters.
    #
    # A candidate that keeps losing asks every node its log ever named as a voter: a voter
    # removed while it was away, whose log lacks the removal, otherwise only asks nodes
    # that may all be observers now; it would stand forever, and drag those observers into
    # epochs the real quorum never reaches. The quorum hears of it (one election's cost,
    # as without pre-vote), names it a rival, and tells it of the next leader.
    asked = node._voters | node._rivals
    if node._lost_candidacies:
        asked |= node._history.known
    for voter in sorted(asked - node._rs.candidacy.answered - {node.node_id}):
        node._send(voter, request)
    node._schedule_resend()


def maybe_win(node: RaftNode) -> None:
    """Lead once a majority of our voters granted their vote: append the LeaderChange (and,
    for a cluster's first leader, the bootstrap voters) and announce the epoch."""
    votes = node._rs.candidacy
    voters = node._voters
    if node._role is Role.CANDIDATE and len(votes.granted & voters) >= majority_size(
            len(voters)):
        granted = tuple(sorted(votes.granted & voters))
        rivals = node._rivals - voters
        node._transition(Role.LEADER, node._epoch, leader_id=node.node_id)
        # Rivals hear of the win as they heard of the candidacy: one that is no voter by
        # our log (a removed voter lacking its removal) otherwise never learns of a leader,
        # never fetches its removal, and keeps standing in the next epoch.
        for rival in rivals:
            node._rs.leader.progress.setdefault(rival, ReplicaProgress(announce=True))
        if node.log.end_offset() == 0:
            # The first leader of a cluster writes the bootstrap voters down, so
            # the quorum no longer depends on ``quorum.voters`` once this commits.
            node._append_as_leader(VoterAssignment(node.cluster_id,
                                                   tuple(sorted(node._voters))))
        node._append_as_leader(LeaderChange(leader_id=node.node_id,
                                            voters=tuple(sorted(node._voters)),
                                            granting_voters=granted))
        node._rs.leader.send_begin_epoch(node)


def handle_vote_request(node: RaftNode, env: Envelope, req: VoteRequest) -> None:
    """Any node's answer to a candidate (see the module docstring for the rules)."""
    if req.cluster_id != node.cluster_id:
        node._reply(env, node._vote_response(ErrorCode.INCONSISTENT_CLUSTER_ID, False))
        return
    if req.candidate_epoch < node._epoch:
        node._reply(env, node._vote_response(ErrorCode.FENCED_LEADER_EPOCH, False))
        return
    if req.candidate_epoch > node._epoch:
        node._observe_epoch(req.candidate_epoch, NO_LEADER)
    # The vote does not depend on whether the candidate (or this node) is a voter by this
    # node's log. The design asks voters to reject non-voters, but our log may lack the
    # assignment that made the candidate a voter, and then no one can win: the simulation
    # found a quorum {1, 2} whose node 1 still had an uncommitted {1, 3, 6} from an older
    # epoch, so it refused 2, while 3 and 6 (more up to date) refused 1. Raft's own rule
    # (thesis §4.1: servers vote without consulting their configuration) is safe because
    # a vote only counts in the candidate's configuration, and the log check below keeps
    # a removed node, which lacks its own removal, from winning. Observers vote for the
    # same reason: a just-added voter may not hold its assignment yet.
    granted = False
    if node._voted_id != NO_ID:
        granted = node._voted_id == req.candidate_id  # a resent request: same answer
    elif (node._role in (Role.UNATTACHED, Role.OBSERVER) and node._leader_id == NO_LEADER
          and log_is_up_to_date(node.log, req.last_offset_epoch, req.last_offset)):
        voted_role = Role.VOTED if node._role is Role.UNATTACHED else Role.OBSERVER
        node._transition(voted_role, node._epoch, voted_id=req.candidate_id)
        granted = True
    if not granted and req.candidate_id not in node._voters:
        node._rivals.add(req.candidate_id)
    node._reply(env, node._vote_response(ErrorCode.NONE, granted))


def handle_vote_response(node: RaftNode, env: Envelope, resp: VoteResponse) -> None:
    if resp.error_code is ErrorCode.INCONSISTENT_CLUSTER_ID:
        return
    if resp.leader_epoch > node._epoch:
        node._observe_epoch(resp.leader_epoch, resp.leader_id)
        return
    if resp.leader_epoch < node._epoch or node._role is not Role.CANDIDATE:
        return  # an answer to an older candidacy
    if resp.leader_id != NO_LEADER:
        node._observe_epoch(resp.leader_epoch, resp.leader_id)
        return
    votes = node._rs.candidacy
    votes.answered.add(env.source)
    if resp.error_code is ErrorCode.NONE and resp.vote_granted:
        votes.granted.add(env.source)
        maybe_win(node)
