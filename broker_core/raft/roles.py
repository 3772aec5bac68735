"""The roles a quorum node can be in and the table of moves between them.

Every role change goes through :func:`check_transition`; a move outside the table raises
:class:`IllegalStateTransition` naming both ends. The table says, for each ``(from, to)``
pair, how the epoch may change:

- ``SAME``: only within the current epoch (a vote, winning an election, resigning);
- ``NEXT``: only to ``epoch + 1`` (standing for election);
- ``HIGHER``: only to a strictly higher epoch (learning of a newer epoch);
- ``SAME_OR_HIGHER``: either.

Two more rules hold across the table: within one epoch a known leader never changes (at most
one leader per epoch), and a node's vote in an epoch never changes (at most one vote per
epoch); both are checked by :meth:`broker_core.raft.node.RaftNode._transition`.
"""

from __future__ import annotations

from enum import Enum


class Role(Enum):
    """What a node does in its current epoch.

    - ``UNATTACHED``: a voter that knows no leader and has not voted in this epoch; grants
      a vote to the first candidate with an up-to-date log; stands when its election timer
      fires.
    - ``VOTED``: a voter that voted in this epoch; stands when its election timer fires.
    - ``CANDIDATE``: a voter standing for election in this epoch (it voted for itself).
    - ``LEADER``: the one node that appends in this epoch; answers fetches, advances the high
      watermark, resigns when a majority stops fetching (zombie-leader rule).
    - ``RESIGNED``: a former leader of this epoch that stopped leading; tells the voters
      (EndQuorumEpoch) and stands in the next epoch when its election timer fires.
    - ``FOLLOWER``: a voter that fetches from the known leader of this epoch; stands when it
      has not heard from the leader for the fetch timeout.
    - ``OBSERVER``: a node outside the voter set; fetches from the leader if it knows one,
      otherwise asks voters who leads. Never votes, never stands.
    """

    UNATTACHED = "unattached"
    VOTED = "voted"
    CANDIDATE = "candidate"
    LEADER = "leader"
    RESIGNED = "resigned"
    FOLLOWER = "follower"
    OBSERVER = "observer"


class EpochRule(Enum):
    SAME = "same"
    NEXT = "next"
    HIGHER = "higher"
    SAME_OR_HIGHER = "same or higher"

    def allows(self, old: int, new: int) -> bool:
        if self is EpochRule.SAME:
            return new == old
        if self is EpochRule.NEXT:
            return new == old + 1
        if self is EpochRule.HIGHER:
            return new > old
        return new >= old


_R = Role
_E = EpochRule

TRANSITIONS: dict[tuple[Role, Role], EpochRule] = {
    (_R.UNATTACHED, _R.UNATTACHED): _E.HIGHER,
    (_R.UNATTACHED, _R.VOTED): _E.SAME,
    (_R.UNATTACHED, _R.CANDIDATE): _E.NEXT,
    (_R.UNATTACHED, _R.FOLLOWER): _E.SAME_OR_HIGHER,
    (_R.UNATTACHED, _R.OBSERVER): _E.SAME_OR_HIGHER,

    (_R.VOTED, _R.UNATTACHED): _E.HIGHER,
    (_R.VOTED, _R.CANDIDATE): _E.NEXT,
    (_R.VOTED, _R.FOLLOWER): _E.SAME_OR_HIGHER,
    (_R.VOTED, _R.OBSERVER): _E.SAME_OR_HIGHER,

    (_R.CANDIDATE, _R.CANDIDATE): _E.NEXT,
    (_R.CANDIDATE, _R.LEADER): _E.SAME,
    (_R.CANDIDATE, _R.UNATTACHED): _E.HIGHER,
    (_R.CANDIDATE, _R.FOLLOWER): _E.SAME_OR_HIGHER,
    (_R.CANDIDATE, _R.OBSERVER): _E.SAME_OR_HIGHER,

    (_R.LEADER, _R.RESIGNED): _E.SAME,
    (_R.LEADER, _R.UNATTACHED): _E.HIGHER,
    (_R.LEADER, _R.FOLLOWER): _E.HIGHER,
    (_R.LEADER, _R.OBSERVER): _E.HIGHER,

    (_R.RESIGNED, _R.CANDIDATE): _E.NEXT,
    (_R.RESIGNED, _R.UNATTACHED): _E.HIGHER,
    (_R.RESIGNED, _R.FOLLOWER): _E.HIGHER,
    (_R.RESIGNED, _R.OBSERVER): _E.HIGHER,

    (_R.FOLLOWER, _R.FOLLOWER): _E.HIGHER,
    (_R.FOLLOWER, _R.UNATTACHED): _E.HIGHER,
    (_R.FOLLOWER, _R.CANDIDATE): _E.NEXT,
    (_R.FOLLOWER, _R.OBSERVER): _E.SAME_OR_HIGHER,

    (_R.OBSERVER, _R.OBSERVER): _E.SAME_OR_HIGHER,
    (_R.OBSERVER, _R.UNATTACHED): _E.SAME_OR_HIGHER,
    (_R.OBSERVER, _R.FOLLOWER): _E.SAME_OR_HIGHER,
}
"""``(from, to) -> how the epoch may change``. A pair that is absent is never allowed."""

VOTER_ROLES = frozenset({Role.UNATTACHED, Role.VOTED, Role.CANDIDATE, Role.LEADER,
                         Role.RESIGNED, Role.FOLLOWER})


class IllegalStateTransition(RuntimeError):
    """A role change the table forbids; a bug in the core, never a peer's doing."""

    def __init__(self, node_id: int, current: Role, current_epoch: int, target: Role,
                 target_epoch: int, why: str = "not in the transition table") -> None:
        super().__init__(f"node {node_id}: cannot move from {current.value} in epoch "
                         f"{current_epoch} to {target.value} in epoch {target_epoch}: {why}")
        self.current = current
        self.target = target


def check_transition(node_id: int, current: Role, current_epoch: int, target: Role,
                     target_epoch: int) -> None:
    """Raise :class:`IllegalStateTransition` unless the table allows the move."""
    rule = TRANSITIONS.get((current, target))
    if rule is None:
        raise IllegalStateTransition(node_id, current, current_epoch, target, target_epoch)
    if not rule.allows(current_epoch, target_epoch):
        raise IllegalStateTransition(node_id, current, current_epoch, target, target_epoch,
                                     f"the epoch must be {rule.value}")
