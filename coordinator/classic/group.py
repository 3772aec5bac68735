"""One classic group's membership and generation: its members and pending member ids, its
leader, its static members' instance ids, and the generation's state, protocol and pending
SyncGroups. The phases that move it between states are :mod:`coordinator.classic.rebalance`'s.

Invariants:

- ``generation_id`` only grows; it grows by one each time PreparingRebalance completes;
- in CompletingRebalance and Stable, ``protocol_name`` is supported by every member and
  ``leader_id`` is a member; an Empty group has no members, no leader and no protocol name;
- ``protocol_type`` is set while the group has members and every member has it;
- ``static_members`` maps instance ids to members of the group, and each static member's
  ``group_instance_id`` maps back to it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker_core.purgatory import DelayedOperation
from broker_core.wire.errors import ErrorCode
from coordinator.classic.interface import JoinCallback, JoinResult, SyncResult
from coordinator.classic.member import ClassicMember, Protocols
from coordinator.classic.protocols import ProtocolSupport


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False)
class ClassicGroup:
    """One classic group; see the module docstring for the invariants."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED, with their expiry watch.
    pending_members: dict[str, DelayedOperation] = field(default_factory=dict)
    #: KIP-345: instance id -> the member id holding it now.
    static_members: dict[str, str] = field(default_factory=dict)
    #: Members of the current generation that have not sent SyncGroup yet.
    pending_sync: set[str] = field(default_factory=set)
    #: KIP-134: a member joined during the initial delay, so the delay is extended once more.
    new_member_added: bool = False
    protocols: ProtocolSupport = field(default_factory=ProtocolSupport)
    #: When the group last became Empty (on the purgatories' clock); None while not Empty.
    empty_since: float | None = None

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def supports(self, protocol_type: str, names: Sequence[str]) -> bool:
        """Kafka's ``supportsProtocols``: an empty group takes any non-empty type and list; a
        group with members needs the same type and one protocol every member supports."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        return (protocol_type == self.protocol_type
                and self.protocols.all_support_one_of(names, len(self.members)))

    def select_protocol(self) -> str:
        """:meth:`ProtocolSupport.select` over the members, the leader breaking ties."""
        return self.protocols.select(self.members, self.leader_id)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return (len(self.members) == self.awaiting_join_count()
                and not self.pending_members)

    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    def add(self, member: ClassicMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.protocols.add(member)

    def update_protocols(self, member: ClassicMember, protocols: Protocols) -> None:
        self.protocols.replace(member, protocols)

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.protocols.remove(member)
            if (member.group_instance_id is not None
                    and self.static_members.get(member.group_instance_id) == member_id):
                del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        if not self.members:
            self.protocol_type = None
        return member

    def replace_static(self, instance_id: str, new_member_id: str) -> ClassicMember:
        """Kafka's ``replaceStaticMember``: the member holding ``instance_id`` goes on under
        ``new_member_id`` (its protocols, assignment and leadership kept). The caller fences
        the old member id's waiting requests first."""
        old_id = self.static_members[instance_id]
        member = self.members.pop(old_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old_id:
            self.leader_id = new_member_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_member_id)
        return member

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """Kafka's ``validateCurrentMember``: a request naming ``instance_id`` must come from
        the member id holding it (else FENCED_INSTANCE_ID: a newer instance took it over);
        either way ``member_id`` must be a member."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def join_result(self, member: ClassicMember, *, with_members: bool = True) -> JoinResult:
        """The JoinGroup answer of ``member`` for the current generation; the leader's lists
        the members' metadata for its protocol unless ``with_members`` is False."""
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if with_members and member.member_id == self.leader_id:
            members = tuple((m.member_id, m.group_instance_id,
                             m.metadata(self.protocol_name or ""))
                            for m in self.members.values())
        return JoinResult(ErrorCode.NONE, member.member_id, self.generation_id,
                          self.protocol_type, self.protocol_name, self.leader_id or "",
                          members)


def drop_member(group: ClassicGroup, member: ClassicMember) -> None:
    """Take ``member`` out of ``group``: its timer cancelled, its waiting requests answered
    UNKNOWN_MEMBER_ID (each callback once)."""
    if member.heartbeat is not None:
        member.heartbeat.cancel()
        member.heartbeat = None
    respond_join, member.awaiting_join = member.awaiting_join, None
    respond_sync, member.awaiting_sync = member.awaiting_sync, None
    group.remove(member.member_id)
    if respond_join is not None:
        respond_join(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
    if respond_sync is not None:
        respond_sync(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))


def update_member(group: ClassicGroup, member: ClassicMember, joining: ClassicMember,
                   respond: JoinCallback) -> None:
    """Kafka's ``updateMember``: the member's protocols and timeouts from its JoinGroup,
    which now waits for the next generation."""
    group.update_protocols(member, joining.protocols)
    member.rebalance_timeout_ms = joining.rebalance_timeout_ms
    member.session_timeout_ms = joining.session_timeout_ms
    member.client_id, member.client_host = joining.client_id, joining.client_host
    if member.awaiting_join is not None:
        # A second JoinGroup replaces the first: the first gets an error, so each callback
        # is answered once.
        member.awaiting_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
    member.awaiting_join = respond


def forget_if_unused(groups: dict[str, ClassicGroup], group: ClassicGroup) -> None:
    """Drop ``group`` from ``groups`` if it holds nothing."""
    # A group made only to hand out a member id that was never used holds nothing.
    if (group.is_(GroupState.EMPTY) and group.generation_id == 0 and not group.members
            and not group.pending_members):
        groups.pop(group.group_id, None)
