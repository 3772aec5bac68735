"""The classic groups of a coordinator: :class:`ClassicGroups`, the facade the coordinator's
Kafka request handlers call (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, offset commits,
DescribeGroups, removal of empty groups). See :mod:`coordinator.classic` for the protocol.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence

from twisted.logger import Logger

from broker_core.purgatory import DelayedOperation, Purgatory
from broker_core.wire.errors import ErrorCode
from coordinator.classic.group import ClassicGroup, GroupState, forget_if_unused
from coordinator.classic.interface import (
    ClassicGroupConfig,
    GroupSummary,
    JoinCallback,
    JoinResult,
    MemberSummary,
    SyncCallback,
    SyncResult,
)
from coordinator.classic.join import JoinHandler
from coordinator.classic.rebalance import Rebalancer
from coordinator.classic.timers import GroupTimers

log = Logger(namespace="sluice.coordinator.classic")


class ClassicGroups:
    """Every classic group of the coordinator; see :mod:`coordinator.classic`.

    ``heartbeat_purgatory`` and ``rebalance_purgatory`` are the coordinator's purgatories (on
    its clock); ``new_member_id(client_id)`` makes member ids (default: Kafka's
    ``client_id-uuid``). The facade owns ``groups`` (group id -> group), which its handlers
    share: :class:`~coordinator.classic.join.JoinHandler` (JoinGroup),
    :class:`~coordinator.classic.rebalance.Rebalancer` (the phases), and
    :class:`~coordinator.classic.timers.GroupTimers` (every timer); it answers the other
    requests itself. The map is only ever changed in place, never replaced.
    """

    def __init__(self, config: ClassicGroupConfig, *, heartbeat_purgatory: Purgatory,
                 rebalance_purgatory: Purgatory,
                 new_member_id: Callable[[str], str] | None = None) -> None:
        self.config = config
        self.heartbeats = heartbeat_purgatory
        self.rebalances = rebalance_purgatory
        self.new_member_id = new_member_id or (lambda client_id: f"{client_id}-{uuid.uuid4()}")
        self.groups: dict[str, ClassicGroup] = {}
        self.timers = GroupTimers(heartbeat_purgatory, rebalance_purgatory,
                                  on_member_expired=self._expire_member,
                                  on_pending_expired=self._expire_pending)
        self.rebalancer = Rebalancer(config, self.groups, self.timers)
        self.joins = JoinHandler(config, self.groups, timers=self.timers,
                                 rebalancer=self.rebalancer, new_member_id=self.new_member_id)

    def get(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    # -- JoinGroup ---------------------------------------------------------------------------------

    def join(self, group_id: str, member_id: str, *, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: Iterable[tuple[str, bytes]], require_known_member_id: bool,
             respond: JoinCallback, group_instance_id: str | None = None) -> None:
        """:meth:`JoinHandler.join <coordinator.classic.join.JoinHandler.join>`."""
        self.joins.join(group_id, member_id, client_id=client_id, client_host=client_host,
                        session_timeout_ms=session_timeout_ms,
                        rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type,
                        protocols=protocols, require_known_member_id=require_known_member_id,
                        respond=respond, group_instance_id=group_instance_id)

    # -- SyncGroup ---------------------------------------------------------------------------------

    def sync(self, group_id: str, member_id: str, generation_id: int, *,
             protocol_type: str | None, protocol_name: str | None,
             assignments: Iterable[tuple[str, bytes]], respond: SyncCallback,
             group_instance_id: str | None = None) -> None:
        """A SyncGroup. The leader's ``assignments`` (member id, bytes) are handed to every
        member of the generation (members it left out get an empty assignment); ``respond``
        is called exactly once, now or when the leader's SyncGroup arrives."""
        group = self.groups.get(group_id)
        if group is None:
            respond(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        error = self._check_generation(group, member_id, generation_id, group_instance_id)
        if error is ErrorCode.NONE and (
                (protocol_type is not None and protocol_type != group.protocol_type)
                or (protocol_name is not None and protocol_name != group.protocol_name)):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is not ErrorCode.NONE:
            respond(SyncResult(error))
            return
        member = group.members[member_id]
        if group.is_(GroupState.PREPARING_REBALANCE):
            respond(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_(GroupState.STABLE):
            group.pending_sync.discard(member_id)
            respond(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name,
                               member.assignment))
            self.timers.expect_heartbeat(group, member)
        else:  # CompletingRebalance
            if member.awaiting_sync is not None:
                member.awaiting_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            member.awaiting_sync = respond
            group.pending_sync.discard(member_id)
            if member_id == group.leader_id:
                given = dict(assignments)
                for m in group.members.values():
                    m.assignment = given.get(m.member_id, b"")
                group.state = GroupState.STABLE
                self.rebalancer.propagate_assignment(group, ErrorCode.NONE)
        if not group.pending_sync:
            self.timers.cancel_sync_timeout(group)

    # -- Heartbeat ---------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        error = self._check_generation(group, member_id, generation_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        self.timers.expect_heartbeat(group, group.members[member_id])
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _check_generation(self, group: ClassicGroup, member_id: str, generation_id: int,
                          group_instance_id: str | None = None) -> ErrorCode:
        """The checks shared by SyncGroup, Heartbeat and offset commits of members."""
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _expire_member(self, group_id: str, member_id: str, op: DelayedOperation) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None or member.heartbeat is not op:
            return
        member.heartbeat = None
        if member.has_satisfied_heartbeat():
            return  # waiting in a join or sync: the rebalance / sync timeout watches it
        log.info("classic group {g}: member {m} expired (no heartbeat within its session "
                 "timeout)", g=group_id, m=member_id)
        self.rebalancer.remove_member(group, member, "session timeout")

    def _expire_pending(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.pending_members.pop(member_id, None) is None:
            return
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.timers.check_join(group_id)
        forget_if_unused(self.groups, group)

    # -- LeaveGroup --------------------------------------------------------------------------------

    def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]
              ) -> tuple[ErrorCode, list[ErrorCode]]:
        """A LeaveGroup of one (v0–v2) or several (v3+) members, each (member id, instance
        id): the group's error and one per member. A static member may be named by its
        instance id alone (member id ""; an administrator removing it); a member id with an
        instance id must be the one holding it (else FENCED_INSTANCE_ID). UNKNOWN_MEMBER_ID
        for a member the group does not know; the others leave."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        errors = []
        for mid, instance_id in members:
            if not mid and instance_id is not None:
                mid = group.static_members.get(instance_id, "")
                if not mid:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
            pending = group.pending_members.pop(mid, None) if instance_id is None else None
            if pending is not None:
                pending.cancel()
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self.timers.check_join(group_id)
                errors.append(ErrorCode.NONE)
            elif (error := group.validate_member(mid, instance_id)) is ErrorCode.NONE:
                log.info("classic group {g}: member {m} left", g=group_id, m=mid)
                self.rebalancer.remove_member(group, group.members[mid], f"member {mid} left")
                errors.append(ErrorCode.NONE)
            else:
                errors.append(error)
        forget_if_unused(self.groups, group)
        return ErrorCode.NONE, errors

    # -- removal -----------------------------------------------------------------------------------

    def remove_group(self, group_id: str) -> bool:
        """Drop an Empty group (Dead from now on); False (nothing done) if it has members."""
        group = self.groups.get(group_id)
        if group is None or not group.is_(GroupState.EMPTY) or group.pending_members:
            return False
        group.state = GroupState.DEAD
        self.timers.cancel_sync_timeout(group)
        del self.groups[group_id]
        return True

    def expire_empty(self, now: float, grace_s: float) -> list[str]:
        """Remove the groups Empty for at least ``grace_s``; returns their ids."""
        gone = [gid for gid, g in self.groups.items()
                if g.is_(GroupState.EMPTY) and g.empty_since is not None
                and now - g.empty_since >= grace_s and not g.pending_members]
        for gid in gone:
            self.remove_group(gid)
        return gone

    def clear(self) -> None:
        """Forget every group (the coordinator resigned): every waiting request is answered
        NOT_COORDINATOR and every timer cancelled."""
        # Emptied in place: the handlers share the map.
        groups = dict(self.groups)
        self.groups.clear()
        self.timers.cancel_phases()
        for group in groups.values():
            group.state = GroupState.DEAD
            for op in group.pending_members.values():
                op.cancel()
            group.pending_members.clear()
            for member in list(group.members.values()):
                if member.heartbeat is not None:
                    member.heartbeat.cancel()
                join, member.awaiting_join = member.awaiting_join, None
                sync, member.awaiting_sync = member.awaiting_sync, None
                if join is not None:
                    join(JoinResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                if sync is not None:
                    sync(SyncResult(ErrorCode.NOT_COORDINATOR))

    # -- ListGroups / DescribeGroups ----------------------------------------------------------------

    @staticmethod
    def summary(group: ClassicGroup) -> GroupSummary:
        """What DescribeGroups shows: members' metadata and assignments only while Stable
        (Kafka's ``GroupMetadata.summary``; mid-rebalance they are not settled)."""
        stable = group.is_(GroupState.STABLE)
        protocol = (group.protocol_name or "") if stable else ""
        members = tuple(
            MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                          m.metadata(protocol) if stable else b"",
                          m.assignment if stable else b"")
            for m in group.members.values())
        return GroupSummary(group.state.value, group.protocol_type or "", protocol, members)

    # -- offsets -----------------------------------------------------------------------------------

    def check_commit(self, group_id: str, member_id: str, generation_id: int,
                     group_instance_id: str | None = None) -> ErrorCode:
        """Whether an OffsetCommit for ``group_id`` may be written: from a member of the current
        generation (not while its assignment is being handed out), or with generation -1 and
        no member id while the group has no members (a client that manages partitions itself;
        Kafka allows it). A commit by a member also proves it alive."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE if generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return ErrorCode.NONE
        if generation_id >= 0 or member_id:
            error = group.validate_member(member_id, group_instance_id)
            if error is not ErrorCode.NONE:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        else:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        self.timers.expect_heartbeat(group, group.members[member_id])
        return ErrorCode.NONE
