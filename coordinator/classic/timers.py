"""Every timer of the classic groups, all on the coordinator's
:class:`~broker_core.purgatory.Purgatory` machinery (one timing wheel per purgatory, on the
injected clock):

- **session timeout** per member (``heartbeat_purgatory``, key ``(group, member)``), re-armed
  by :meth:`GroupTimers.expect_heartbeat`; a member id handed out with MEMBER_ID_REQUIRED is
  watched under the same key until it joins (:meth:`GroupTimers.watch_pending`);
- **the PreparingRebalance phase** (``rebalance_purgatory``, key ``("join", group)``): a
  :class:`DelayedJoin` per group, completed early when every member has joined;
- **sync timeout** (``rebalance_purgatory``, key ``("sync", group)``).

Invariants: at most one join phase and one sync timeout are armed per group (the ones in
``_join_ops`` / ``_sync_ops``); a timer's callback runs at most once, never after a cancel.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_core.purgatory import DelayedOperation, Purgatory
from coordinator.classic.group import ClassicGroup
from coordinator.classic.member import ClassicMember

#: Kafka's ``GroupCoordinator.NewMemberJoinTimeoutMs``: a new member whose first JoinGroup is
#: still waiting is removed after this long (it cannot heartbeat without its member id, and a
#: client that timed out rejoins with a new id).
NEW_MEMBER_JOIN_TIMEOUT_S = 300.0


class Expiry(DelayedOperation):
    """A timeout only: nothing completes it early except :meth:`cancel` (a heartbeat replaced
    it, the member left); on expiry ``expired`` runs."""

    def __init__(self, timeout_s: float, expired: Callable[[], None]) -> None:
        super().__init__(timeout_s)
        self._expired = expired

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self._expired()


class DelayedJoin(DelayedOperation):
    """The PreparingRebalance phase of one group: completes when every member has joined,
    or at the rebalance timeout (Kafka's ``DelayedJoin``). With ``initial`` it is the
    initial delay of an empty group's first rebalance (Kafka's ``InitialDelayedJoin``): it
    never completes early, and is extended while members keep arriving."""

    def __init__(self, on_end: Callable[[DelayedJoin], None], group: ClassicGroup,
                 timeout_s: float, *, initial: bool = False, remaining_s: float = 0.0) -> None:
        super().__init__(timeout_s)
        self._on_end = on_end
        self.group = group
        self.initial = initial
        self.remaining_s = remaining_s

    def try_complete(self) -> bool:
        if self.initial:
            return False
        return self.group.has_all_members_joined() and self.force_complete()

    def on_complete(self) -> None:
        self._on_end(self)


class GroupTimers:
    """The classic groups' timers; see the module docstring. ``on_member_expired(group id,
    member id, op)`` runs when a member's session timer ``op`` fires, ``on_pending_expired(group
    id, member id)`` when a pending member id's does."""

    def __init__(self, heartbeat_purgatory: Purgatory, rebalance_purgatory: Purgatory, *,
                 on_member_expired: Callable[[str, str, DelayedOperation], None],
                 on_pending_expired: Callable[[str, str], None]) -> None:
        self.heartbeats = heartbeat_purgatory
        self.rebalances = rebalance_purgatory
        self._on_member_expired = on_member_expired
        self._on_pending_expired = on_pending_expired
        self._join_ops: dict[str, DelayedJoin] = {}
        self._sync_ops: dict[str, DelayedOperation] = {}

    def now(self) -> float:
        """The purgatories' clock, in seconds."""
        return self.rebalances.clock.seconds()

    def expect_heartbeat(self, group: ClassicGroup, member: ClassicMember,
                         timeout_s: float | None = None) -> None:
        """Kafka's ``completeAndScheduleNextHeartbeatExpiration``: the member proved alive;
        its next proof is due within its session timeout (or ``timeout_s``)."""
        if member.heartbeat is not None:
            member.heartbeat.cancel()
        member.heartbeat_satisfied = False
        gid, mid = group.group_id, member.member_id
        op = Expiry(member.session_timeout_ms / 1000.0 if timeout_s is None else timeout_s,
                    lambda: self._on_member_expired(gid, mid, op))
        member.heartbeat = op
        self.heartbeats.try_complete_else_watch(op, [(gid, mid)])

    def watch_pending(self, group: ClassicGroup, member_id: str, timeout_s: float) -> None:
        """``member_id`` was handed out with MEMBER_ID_REQUIRED: pending until it joins, or
        until ``timeout_s`` passes."""
        gid, mid = group.group_id, member_id
        op = Expiry(timeout_s, lambda: self._on_pending_expired(gid, mid))
        group.pending_members[mid] = op
        self.heartbeats.try_complete_else_watch(op, [(gid, mid)])

    def watch_join(self, group: ClassicGroup, op: DelayedJoin) -> None:
        """Arm ``op`` as the group's PreparingRebalance phase."""
        self._join_ops[group.group_id] = op
        self.rebalances.try_complete_else_watch(op, [("join", group.group_id)])

    def join_phase_ended(self, op: DelayedJoin) -> None:
        if self._join_ops.get(op.group.group_id) is op:
            del self._join_ops[op.group.group_id]

    def check_join(self, group_id: str) -> None:
        """Members joined or left: the group's join phase completes if everyone is in."""
        self.rebalances.check_and_complete(("join", group_id))

    def arm_sync_timeout(self, group: ClassicGroup, expired: Callable[[], None]) -> None:
        """The generation just formed: ``expired`` runs if SyncGroups are still missing after
        the rebalance timeout."""
        op = Expiry(group.rebalance_timeout_ms() / 1000.0, expired)
        self._sync_ops[group.group_id] = op
        self.rebalances.try_complete_else_watch(op, [("sync", group.group_id)])

    def cancel_sync_timeout(self, group: ClassicGroup) -> None:
        op = self._sync_ops.pop(group.group_id, None)
        if op is not None:
            op.cancel()

    def sync_timeout_fired(self, group_id: str) -> None:
        self._sync_ops.pop(group_id, None)

    def cancel_phases(self) -> None:
        """Cancel every join phase and sync timeout (the coordinator resigned)."""
        for op in [*self._join_ops.values(), *self._sync_ops.values()]:
            op.cancel()
        self._join_ops.clear()
        self._sync_ops.clear()
