"""Stepping down for :class:`~broker_core.raft.node.RaftNode` (EndQuorumEpoch, both sides):
a leader that resigns tells the voters, naming its preferred successors, and resends until
each answered; a follower told so stands sooner, the best-replicated one first.

Invariants: a resigned node is the known leader of its epoch but never acts as one; it
stands only in the next epoch. A :class:`Resignation` is part of the role state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker_core.backoff import exponential_backoff
from broker_core.raft.messages import EndQuorumEpochRequest, EndQuorumEpochResponse, Envelope
from broker_core.raft.roles import Role
from broker_core.wire.errors import ErrorCode

if TYPE_CHECKING:
    from broker_core.raft.node import RaftNode


@dataclass(slots=True)
class Resignation:
    """A resigned leader's EndQuorumEpoch round."""

    answered: set[int] = field(default_factory=set)  # voters that acknowledged
    preferred_successors: tuple[int, ...] = ()  # most caught up first


def resign(node: RaftNode) -> None:
    """The leader steps down in its epoch and tells the voters."""
    successors = node._rs.leader.successors(node)
    node._transition(Role.RESIGNED, node._epoch, leader_id=node.node_id)
    resignation = node._rs.resignation
    resignation.preferred_successors = successors
    resignation.answered = {node.node_id}
    send_end_epoch(node)


def send_end_epoch(node: RaftNode) -> None:
    resignation = node._rs.resignation
    request = EndQuorumEpochRequest(cluster_id=node.cluster_id, leader_id=node.node_id,
                                    leader_epoch=node._epoch,
                                    preferred_successors=resignation.preferred_successors)
    for voter in sorted(node._voters - resignation.answered):
        node._send(voter, request)
    node._schedule_resend()


def end_epoch_backoff(node: RaftNode, successors: tuple[int, ...]) -> float:
    # The best-replicated voter stands first; the others wait exponentially longer, so
    # the one most likely to win usually stands alone.
    position = successors.index(node.node_id) if node.node_id in successors else len(
        successors)
    cfg = node.config
    return exponential_backoff(position + 1, cfg.retry_backoff_ms, cfg.election_backoff_max_ms,
                               jitter=cfg.retry_backoff_ms, rng=node._rng)


def handle_end_epoch_request(node: RaftNode, env: Envelope, req: EndQuorumEpochRequest
                             ) -> None:
    if req.cluster_id != node.cluster_id:
        node._reply(env, EndQuorumEpochResponse(ErrorCode.INCONSISTENT_CLUSTER_ID,
                                                node._leader_id, node._epoch))
        return
    if req.leader_epoch < node._epoch:
        node._reply(env, EndQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH,
                                                node._leader_id, node._epoch))
        return
    node._observe_epoch(req.leader_epoch, req.leader_id)
    if node._leader_id == req.leader_id and node._role is Role.FOLLOWER:
        deadline = node._now + end_epoch_backoff(node, req.preferred_successors)
        fetching = node._rs.fetcher
        fetching.fetch_deadline = min(fetching.fetch_deadline or deadline, deadline)
    node._reply(env, EndQuorumEpochResponse(ErrorCode.NONE, node._leader_id, node._epoch))


def handle_end_epoch_response(node: RaftNode, env: Envelope, resp: EndQuorumEpochResponse
                              ) -> None:
    if resp.leader_epoch > node._epoch:
        node._observe_epoch(resp.leader_epoch, resp.leader_id)
        return
    if node._role is Role.RESIGNED and resp.leader_epoch == node._epoch:
        node._rs.resignation.answered.add(env.source)
