"""The rebalance phases of a classic group (Kafka's names, as DescribeGroups shows them)::

    Empty ──join──▶ PreparingRebalance ──all joined / rebalance timeout──▶ CompletingRebalance
      ▲                 ▲     │ (no member left)                               │ leader's SyncGroup
      │                 │     ▼                                                ▼
      └────── Empty ◀───┘   (join, leave, expiry, leader rejoin) ◀────────── Stable
    Dead: removed (its id may be created again as a new group)

- the PreparingRebalance phase ends when every member and every pending member has joined, or
  after the largest rebalance timeout of the members; members that did not rejoin are removed.
  The first rebalance of an Empty group waits ``group.initial.rebalance.delay.ms`` more each
  time a member arrives (KIP-134), bounded by the rebalance timeout;
- after a generation is formed, members that do not send SyncGroup within the rebalance
  timeout are removed.

Invariants: ``generation_id`` grows by one each time PreparingRebalance completes; every join
or sync callback a phase takes out of a member is called exactly once.
"""

from __future__ import annotations

from twisted.logger import Logger

from broker_core.wire.errors import ErrorCode
from coordinator.classic.group import ClassicGroup, GroupState, drop_member
from coordinator.classic.interface import ClassicGroupConfig, SyncResult
from coordinator.classic.member import ClassicMember
from coordinator.classic.timers import DelayedJoin, GroupTimers

log = Logger(namespace="sluice.coordinator.classic")


class Rebalancer:
    """Moves the classic groups through their rebalance phases (see the module docstring).
    ``groups`` is the coordinator's map of classic groups, shared with the other handlers."""

    def __init__(self, config: ClassicGroupConfig, groups: dict[str, ClassicGroup],
                 timers: GroupTimers) -> None:
        self.config = config
        self.groups = groups
        self.timers = timers

    def maybe_prepare(self, group: ClassicGroup, reason: str) -> None:
        """A member joined or rejoined: rebalance unless the group is already preparing to."""
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                           GroupState.EMPTY):
            self.prepare(group, reason)

    def prepare(self, group: ClassicGroup, reason: str) -> None:
        """Enter PreparingRebalance: waiting SyncGroups are told to rejoin, the sync timeout
        cancelled, the join phase armed (the initial delay for an Empty group)."""
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # Members waiting for their assignment must rejoin instead.
            self.propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self.timers.cancel_sync_timeout(group)
        rebalance_s = group.rebalance_timeout_ms() / 1000.0
        if group.is_(GroupState.EMPTY):
            delay_s = self.config.initial_rebalance_delay_ms / 1000.0
            op = DelayedJoin(self.on_join_phase_end, group, delay_s, initial=True,
                             remaining_s=max(rebalance_s - delay_s, 0.0))
        else:
            op = DelayedJoin(self.on_join_phase_end, group, rebalance_s)
        group.empty_since = None
        log.info("classic group {g} preparing to rebalance (generation {gen}): {why}",
                 g=group.group_id, gen=group.generation_id, why=reason)
        group.state = GroupState.PREPARING_REBALANCE
        self.timers.watch_join(group, op)

    def on_join_phase_end(self, op: DelayedJoin) -> None:
        """The join phase ``op`` completed or timed out (or was cancelled: nothing to do)."""
        group = op.group
        self.timers.join_phase_ended(op)
        if op.cancelled or group.is_(GroupState.DEAD):
            return
        if op.initial and group.new_member_added and op.remaining_s > 0:
            # KIP-134: someone arrived during the delay; wait once more (bounded by what is
            # left of the rebalance timeout).
            group.new_member_added = False
            delay_s = min(self.config.initial_rebalance_delay_ms / 1000.0, op.remaining_s)
            self.timers.watch_join(group, DelayedJoin(
                self.on_join_phase_end, group, delay_s, initial=True,
                remaining_s=max(op.remaining_s - delay_s, 0.0)))
            return
        self.complete_join(group)

    def complete_join(self, group: ClassicGroup) -> None:
        """Kafka's ``onCompleteJoin``: drop members that did not rejoin, form the next
        generation, answer every waiting JoinGroup."""
        for member in [m for m in group.members.values() if m.awaiting_join is None]:
            log.info("classic group {g}: member {m} did not rejoin in time; removed",
                     g=group.group_id, m=member.member_id)
            drop_member(group, member)
        if group.members and not self._elect_joined_leader(group):
            # Only possible when nobody is waiting; kept for safety: wait once more.
            self.timers.watch_join(group, DelayedJoin(self.on_join_phase_end, group,
                                                      group.rebalance_timeout_ms() / 1000.0))
            return
        group.generation_id += 1
        group.pending_sync.clear()
        group.new_member_added = False
        if not group.members:
            group.protocol_name = None
            group.state = GroupState.EMPTY
            group.empty_since = self.timers.now()
            log.info("classic group {g} is empty (generation {gen})", g=group.group_id,
                     gen=group.generation_id)
            return
        group.protocol_name = group.select_protocol()
        group.state = GroupState.COMPLETING_REBALANCE
        log.info("classic group {g} generation {gen}: {n} members, protocol {p}, leader {l}",
                 g=group.group_id, gen=group.generation_id, n=len(group.members),
                 p=group.protocol_name, l=group.leader_id)
        for member in list(group.members.values()):
            respond, member.awaiting_join = member.awaiting_join, None
            if respond is not None:
                respond(group.join_result(member))
            member.is_new = False
            group.pending_sync.add(member.member_id)
            self.timers.expect_heartbeat(group, member)
        self._arm_sync_timeout(group)

    @staticmethod
    def _elect_joined_leader(group: ClassicGroup) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join is not None:
            return True
        joined = next((m for m in group.members.values() if m.awaiting_join is not None), None)
        if joined is None:
            return False
        group.leader_id = joined.member_id
        return True

    def _arm_sync_timeout(self, group: ClassicGroup) -> None:
        gid, generation = group.group_id, group.generation_id
        self.timers.arm_sync_timeout(group, lambda: self.expire_sync(gid, generation))

    def expire_sync(self, group_id: str, generation: int) -> None:
        """The sync timeout of ``generation`` fired: members still without a SyncGroup go."""
        group = self.groups.get(group_id)
        self.timers.sync_timeout_fired(group_id)
        if group is None or group.generation_id != generation or not group.pending_sync:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        late = sorted(group.pending_sync)
        log.info("classic group {g}: members {m} sent no SyncGroup in time; removed",
                 g=group_id, m=late)
        for mid in late:
            member = group.members.get(mid)
            if member is not None:
                drop_member(group, member)
        self.after_removal(group, "members sent no SyncGroup")

    def propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        """Answer every waiting SyncGroup: its assignment, or ``error`` (assignments cleared)."""
        for member in group.members.values():
            if error is not ErrorCode.NONE:
                member.assignment = b""
            respond, member.awaiting_sync = member.awaiting_sync, None
            if respond is None:
                continue
            if error is ErrorCode.NONE:
                respond(SyncResult(error, group.protocol_type, group.protocol_name,
                                   member.assignment))
            else:
                respond(SyncResult(error))
            # The wait for the assignment counted as alive; the session starts again now.
            self.timers.expect_heartbeat(group, member)

    def remove_member(self, group: ClassicGroup, member: ClassicMember, reason: str) -> None:
        drop_member(group, member)
        self.after_removal(group, reason)

    def after_removal(self, group: ClassicGroup, reason: str) -> None:
        """Members left: a formed generation rebalances; a join phase may now be complete."""
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self.timers.check_join(group.group_id)
