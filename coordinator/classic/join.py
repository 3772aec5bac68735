"""JoinGroup on the classic groups: a new member (KIP-394's MEMBER_ID_REQUIRED first, for a
dynamic member asking for it), a member joining again, or a static member's restarted instance
(:mod:`coordinator.classic.static`); the checks that refuse a join change nothing but may drop
a group made only for it.

Invariants: ``respond`` is called exactly once, now or when the generation forms; a new member
gets ``NEW_MEMBER_JOIN_TIMEOUT_S`` to complete its first join; at most ``max_group_size``
members and pending members.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from broker_core.wire.errors import ErrorCode
from coordinator.classic.group import (
    ClassicGroup,
    GroupState,
    forget_if_unused,
    update_member,
)
from coordinator.classic.interface import ClassicGroupConfig, JoinCallback, JoinResult
from coordinator.classic.member import ClassicMember
from coordinator.classic.rebalance import Rebalancer
from coordinator.classic.static import rejoin_static
from coordinator.classic.timers import NEW_MEMBER_JOIN_TIMEOUT_S, GroupTimers


class JoinHandler:
    """Answers JoinGroups (see the module docstring). ``groups`` is the coordinator's map of
    classic groups, shared with the other handlers; ``new_member_id(client_id)`` makes member
    ids."""

    def __init__(self, config: ClassicGroupConfig, groups: dict[str, ClassicGroup], *,
                 timers: GroupTimers, rebalancer: Rebalancer,
                 new_member_id: Callable[[str], str]) -> None:
        self.config = config
        self.groups = groups
        self.timers = timers
        self.rebalancer = rebalancer
        self.new_member_id = new_member_id

    def join(self, group_id: str, member_id: str, *, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: Iterable[tuple[str, bytes]], require_known_member_id: bool,
             respond: JoinCallback, group_instance_id: str | None = None) -> None:
        """A JoinGroup (``member_id`` "" for a new member; ``require_known_member_id`` for
        v4+, KIP-394; ``group_instance_id`` for a static member, KIP-345). ``respond`` is
        called exactly once, now or when the generation forms."""
        protocols = tuple((str(n), bytes(m)) for n, m in protocols)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            respond(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))
            return
        if len({n for n, _ in protocols}) != len(protocols):
            respond(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                return
            group = self.groups[group_id] = ClassicGroup(group_id)
        refusal = None
        known = (member_id in group.members or member_id in group.pending_members
                 or group_instance_id in group.static_members)
        if group.is_(GroupState.DEAD):
            refusal = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif not group.supports(protocol_type, [n for n, _ in protocols]):
            refusal = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        elif not known and group.size() >= cfg.max_group_size:
            refusal = ErrorCode.GROUP_MAX_SIZE_REACHED
        if refusal is not None:
            forget_if_unused(self.groups, group)
            respond(JoinResult(refusal, member_id))
            return
        member = ClassicMember(member_id, client_id, client_host, rebalance_timeout_ms,
                               session_timeout_ms, protocol_type, protocols, group_instance_id)
        if not member_id and group_instance_id in group.static_members:
            rejoin_static(group, member, respond, new_member_id=self.new_member_id,
                          timers=self.timers, rebalancer=self.rebalancer)
        elif not member_id:
            self._join_new(group, member, require_known_member_id, respond)
        else:
            self._join_current(group, member, respond)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.timers.check_join(group_id)
        forget_if_unused(self.groups, group)

    def _join_new(self, group: ClassicGroup, member: ClassicMember,
                  require_known_member_id: bool, respond: JoinCallback) -> None:
        member.member_id = self.new_member_id(member.client_id)
        # KIP-394 is for dynamic members only: a static one is known by its instance id.
        if require_known_member_id and member.group_instance_id is None:
            # KIP-394: the id is handed out first, so a client that times out in its JoinGroup
            # rejoins as the same member instead of leaving a ghost behind.
            mid = member.member_id
            self.timers.watch_pending(group, mid, member.session_timeout_ms / 1000.0)
            respond(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, mid))
            return
        self._add_and_rebalance(group, member, respond)

    def _join_current(self, group: ClassicGroup, joining: ClassicMember,
                      respond: JoinCallback) -> None:
        mid = joining.member_id
        pending = group.pending_members.pop(mid, None)
        if pending is not None:
            pending.cancel()
            self._add_and_rebalance(group, joining, respond)
            return
        error = group.validate_member(mid, joining.group_instance_id)
        if error is not ErrorCode.NONE:
            respond(JoinResult(error, mid))
            return
        member = group.members[mid]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_and_rebalance(group, member, joining, respond)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(joining.protocols):
                # It missed its JoinGroup answer: give it the current generation again.
                respond(group.join_result(member))
            else:
                self._update_and_rebalance(group, member, joining, respond)
        elif state is GroupState.STABLE:
            if mid == group.leader_id or not member.matches(joining.protocols):
                # A leader's join forces a rebalance (it may see new topics); so does a change
                # of a follower's metadata.
                self._update_and_rebalance(group, member, joining, respond)
            else:
                respond(group.join_result(member, with_members=False))
        else:
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, mid))

    def _add_and_rebalance(self, group: ClassicGroup, member: ClassicMember,
                           respond: JoinCallback) -> None:
        member.is_new = True
        member.awaiting_join = respond
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self.timers.expect_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_S)
        self.rebalancer.maybe_prepare(group, f"member {member.member_id} joined")

    def _update_and_rebalance(self, group: ClassicGroup, member: ClassicMember,
                              joining: ClassicMember, respond: JoinCallback) -> None:
        update_member(group, member, joining, respond)
        self.rebalancer.maybe_prepare(group, f"member {member.member_id} rejoined")
