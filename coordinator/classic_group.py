"""Kafka's classic consumer-group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) as
a sans-IO state machine on the coordinator's purgatories.

A *classic group* is one a standard Kafka client manages itself: members join, the coordinator
picks a leader and a protocol, the leader computes the assignment and hands it back in its
SyncGroup, and the coordinator passes each member its share. The coordinator only keeps
membership, generations and liveness; it never looks inside the protocol metadata or the
assignments (opaque bytes).

States (Kafka's names, as DescribeGroups shows them)::

    Empty ──join──▶ PreparingRebalance ──all joined / rebalance timeout──▶ CompletingRebalance
      ▲                 ▲     │ (no member left)                               │ leader's SyncGroup
      │                 │     ▼                                                ▼
      └────── Empty ◀───┘   (join, leave, expiry, leader rejoin) ◀────────── Stable
    Dead: removed (its id may be created again as a new group)

Timers, all on the coordinator's :class:`~broker_core.purgatory.Purgatory` machinery (so one
timing wheel per purgatory, on the injected clock):

- **session timeout** per member (``heartbeat_purgatory``, key ``(group, member)``): each
  heartbeat, join or sync of the member re-arms it; on expiry the member is removed and the
  group rebalances. A member waiting in a JoinGroup or SyncGroup counts as alive (Kafka's
  ``hasSatisfiedHeartbeat``), except a *new* member, which gets ``NEW_MEMBER_JOIN_TIMEOUT_S``
  to complete its first join. A member id handed out with MEMBER_ID_REQUIRED (KIP-394) is
  *pending* until it joins with it, and expires after the session timeout it asked for;
- **rebalance timeout** (``rebalance_purgatory``, key ``("join", group)``): the
  PreparingRebalance phase ends when every member and every pending member has joined, or after
  the largest rebalance timeout of the members; members that did not rejoin are removed. The
  first rebalance of an Empty group waits ``group.initial.rebalance.delay.ms`` more each time a
  member arrives (KIP-134), bounded by the rebalance timeout;
- **sync timeout** (``rebalance_purgatory``, key ``("sync", group)``): after a generation is
  formed, members that do not send SyncGroup within the rebalance timeout are removed.

Invariants:

- ``generation_id`` only grows; it grows by one each time PreparingRebalance completes;
- in CompletingRebalance and Stable, ``protocol_name`` is supported by every member and
  ``leader_id`` is a member; an Empty group has no members, no leader and no protocol name;
- ``protocol_type`` is set while the group has members and every member has it;
- every join or sync callback is called exactly once (with a result or an error);
- at most ``max_group_size`` members and pending members.

Static membership (KIP-345): a member that joins with a ``group.instance.id`` is *static*.
``static_members`` maps each instance id to the one member id that holds it now. A JoinGroup
with that instance id and no member id (the client restarted) takes the member over under a new
member id: the old member id is fenced (its waiting join or sync, and every later request with
it, gets FENCED_INSTANCE_ID), and in a Stable group whose protocol choice does not change the
member gets its old assignment back without a rebalance. A static member leaves only on its
session timeout or a LeaveGroup naming its instance id (clients do not send one on close).

- ``static_members`` maps instance ids to members of the group, and each static member's
  ``group_instance_id`` maps back to it.

Everything runs on the reactor thread; callbacks are called synchronously.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from twisted.logger import Logger

from broker_core.purgatory import DelayedOperation, Purgatory
from broker_core.wire.errors import ErrorCode

log = Logger(namespace="sluice.coordinator.classic")

#: Kafka's ``GroupCoordinator.NewMemberJoinTimeoutMs``: a new member whose first JoinGroup is
#: still waiting is removed after this long (it cannot heartbeat without its member id, and a
#: client that timed out rejoins with a new id).
NEW_MEMBER_JOIN_TIMEOUT_S = 300.0


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ClassicGroupConfig:
    """The broker keys the classic groups use (docs/configuration.md), in milliseconds."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_group_size: int = 1000


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer. ``members`` (member id, group instance id, protocol metadata) is
    filled only for the leader."""

    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True)
class SyncResult:
    """A SyncGroup answer: the member's assignment (opaque bytes)."""

    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupSummary:
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberSummary, ...]


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]
Protocols = tuple[tuple[str, bytes], ...]


@dataclass(eq=False)
class ClassicMember:
    """One member of a classic group. ``awaiting_join`` / ``awaiting_sync`` hold the callback
    of its outstanding JoinGroup / SyncGroup (None when it has none)."""

    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    #: KIP-345's ``group.instance.id`` of a static member; None for a dynamic one.
    group_instance_id: str | None = None
    assignment: bytes = b""
    awaiting_join: JoinCallback | None = None
    awaiting_sync: SyncCallback | None = None
    #: True from its first JoinGroup until the generation it joined is formed.
    is_new: bool = False
    heartbeat_satisfied: bool = False
    heartbeat: DelayedOperation | None = None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: Protocols) -> bool:
        return tuple(protocols) == tuple(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates`` (its list is in order of
        preference)."""
        return next(name for name in self.protocol_names() if name in candidates)

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return self.heartbeat_satisfied
        if self.awaiting_join is not None or self.awaiting_sync is not None:
            return True
        return self.heartbeat_satisfied


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
    supported_protocols: Counter[str] = field(default_factory=Counter)
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
                and any(self.supported_protocols[n] == len(self.members) for n in set(names)))

    def candidate_protocols(self) -> set[str]:
        return {n for n, c in self.supported_protocols.items() if c == len(self.members)}

    def select_protocol(self) -> str:
        """The protocol most members prefer among those all support (ties: the first in the
        leader's preference order, so the choice is deterministic)."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "")
        order = leader.protocol_names() if leader is not None else sorted(votes)
        return next(n for n in order if votes.get(n) == best)

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
        self.supported_protocols.update(set(member.protocol_names()))

    def update_protocols(self, member: ClassicMember, protocols: Protocols) -> None:
        self.supported_protocols.subtract(set(member.protocol_names()))
        member.protocols = protocols
        self.supported_protocols.update(set(member.protocol_names()))
        self.supported_protocols = +self.supported_protocols  # drop zero counts

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(set(member.protocol_names()))
            self.supported_protocols = +self.supported_protocols
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


class _Expiry(DelayedOperation):
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


class _DelayedJoin(DelayedOperation):
    """The PreparingRebalance phase of one group: completes when every member has joined,
    or at the rebalance timeout (Kafka's ``DelayedJoin``). With ``initial`` it is the
    initial delay of an empty group's first rebalance (Kafka's ``InitialDelayedJoin``): it
    never completes early, and is extended while members keep arriving."""

    def __init__(self, groups: ClassicGroups, group: ClassicGroup, timeout_s: float, *,
                 initial: bool = False, remaining_s: float = 0.0) -> None:
        super().__init__(timeout_s)
        self.groups = groups
        self.group = group
        self.initial = initial
        self.remaining_s = remaining_s

    def try_complete(self) -> bool:
        if self.initial:
            return False
        return self.group.has_all_members_joined() and self.force_complete()

    def on_complete(self) -> None:
        self.groups._on_join_phase_end(self)


class ClassicGroups:
    """Every classic group of the coordinator; see the module docstring.

    ``heartbeat_purgatory`` and ``rebalance_purgatory`` are the coordinator's purgatories (on
    its clock); ``new_member_id(client_id)`` makes member ids (default: Kafka's
    ``client_id-uuid``).
    """

    def __init__(self, config: ClassicGroupConfig, *, heartbeat_purgatory: Purgatory,
                 rebalance_purgatory: Purgatory,
                 new_member_id: Callable[[str], str] | None = None) -> None:
        self.config = config
        self.heartbeats = heartbeat_purgatory
        self.rebalances = rebalance_purgatory
        self.new_member_id = new_member_id or (lambda client_id: f"{client_id}-{uuid.uuid4()}")
        self.groups: dict[str, ClassicGroup] = {}
        self._join_ops: dict[str, _DelayedJoin] = {}
        self._sync_ops: dict[str, DelayedOperation] = {}

    def get(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    # -- JoinGroup ---------------------------------------------------------------------------------

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
            self._forget_if_unused(group)
            respond(JoinResult(refusal, member_id))
            return
        member = ClassicMember(member_id, client_id, client_host, rebalance_timeout_ms,
                               session_timeout_ms, protocol_type, protocols, group_instance_id)
        if not member_id and group_instance_id in group.static_members:
            self._join_static_again(group, member, respond)
        elif not member_id:
            self._join_new(group, member, require_known_member_id, respond)
        else:
            self._join_current(group, member, respond)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.rebalances.check_and_complete(("join", group_id))
        self._forget_if_unused(group)

    def _join_new(self, group: ClassicGroup, member: ClassicMember,
                  require_known_member_id: bool, respond: JoinCallback) -> None:
        member.member_id = self.new_member_id(member.client_id)
        # KIP-394 is for dynamic members only: a static one is known by its instance id.
        if require_known_member_id and member.group_instance_id is None:
            # KIP-394: the id is handed out first, so a client that times out in its JoinGroup
            # rejoins as the same member instead of leaving a ghost behind.
            gid, mid = group.group_id, member.member_id
            op = _Expiry(member.session_timeout_ms / 1000.0,
                         lambda: self._expire_pending(gid, mid))
            group.pending_members[mid] = op
            self.heartbeats.try_complete_else_watch(op, [(gid, mid)])
            respond(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, mid))
            return
        self._add_and_rebalance(group, member, respond)

    def _join_static_again(self, group: ClassicGroup, joining: ClassicMember,
                           respond: JoinCallback) -> None:
        """Kafka's ``updateStaticMemberAndRebalance``: a static member's instance joins again
        without a member id (it restarted). It takes over the member under a new id; the old
        id's waiting requests are fenced. A Stable group whose protocol choice stays the same
        does not rebalance: the member syncs and gets its old assignment back."""
        instance_id = joining.group_instance_id
        assert instance_id is not None
        old = group.members[group.static_members[instance_id]]
        old_id, old_leader = old.member_id, group.leader_id or ""
        log.info("classic group {g}: static member {i} joined again; member {old} is fenced",
                 g=group.group_id, i=instance_id, old=old_id)
        fenced_join, old.awaiting_join = old.awaiting_join, None
        fenced_sync, old.awaiting_sync = old.awaiting_sync, None
        if fenced_join is not None:
            fenced_join(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        if fenced_sync is not None:
            fenced_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member = group.replace_static(instance_id, self.new_member_id(joining.client_id))
        self._expect_heartbeat(group, member)
        self._update_member(group, member, joining, respond)
        if group.is_(GroupState.STABLE):
            if group.select_protocol() == group.protocol_name:
                # The old leader id is answered, so the member (even the leader) does not
                # compute an assignment a Stable group would not hand out.
                respond, member.awaiting_join = member.awaiting_join, None
                assert respond is not None
                respond(JoinResult(ErrorCode.NONE, member.member_id, group.generation_id,
                                   group.protocol_type, group.protocol_name, old_leader))
            else:
                self._prepare_rebalance(group, f"static member {instance_id} joined again "
                                               "with other protocols")
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"static member {instance_id} joined again")

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
                respond(self._join_result(group, member))
            else:
                self._update_and_rebalance(group, member, joining, respond)
        elif state is GroupState.STABLE:
            if mid == group.leader_id or not member.matches(joining.protocols):
                # A leader's join forces a rebalance (it may see new topics); so does a change
                # of a follower's metadata.
                self._update_and_rebalance(group, member, joining, respond)
            else:
                respond(self._join_result(group, member, with_members=False))
        else:
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, mid))

    def _add_and_rebalance(self, group: ClassicGroup, member: ClassicMember,
                           respond: JoinCallback) -> None:
        member.is_new = True
        member.awaiting_join = respond
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self._expect_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_S)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} joined")

    def _update_and_rebalance(self, group: ClassicGroup, member: ClassicMember,
                              joining: ClassicMember, respond: JoinCallback) -> None:
        self._update_member(group, member, joining, respond)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    @staticmethod
    def _update_member(group: ClassicGroup, member: ClassicMember, joining: ClassicMember,
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

    def _join_result(self, group: ClassicGroup, member: ClassicMember, *,
                     with_members: bool = True) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if with_members and member.member_id == group.leader_id:
            members = tuple((m.member_id, m.group_instance_id,
                             m.metadata(group.protocol_name or ""))
                            for m in group.members.values())
        return JoinResult(ErrorCode.NONE, member.member_id, group.generation_id,
                          group.protocol_type, group.protocol_name, group.leader_id or "",
                          members)

    # -- rebalance phases ---------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                           GroupState.EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # Members waiting for their assignment must rejoin instead.
            self._propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._cancel_sync_timeout(group)
        rebalance_s = group.rebalance_timeout_ms() / 1000.0
        if group.is_(GroupState.EMPTY):
            delay_s = self.config.initial_rebalance_delay_ms / 1000.0
            op = _DelayedJoin(self, group, delay_s, initial=True,
                              remaining_s=max(rebalance_s - delay_s, 0.0))
        else:
            op = _DelayedJoin(self, group, rebalance_s)
        group.empty_since = None
        log.info("classic group {g} preparing to rebalance (generation {gen}): {why}",
                 g=group.group_id, gen=group.generation_id, why=reason)
        group.state = GroupState.PREPARING_REBALANCE
        self._watch_join(group, op)

    def _watch_join(self, group: ClassicGroup, op: _DelayedJoin) -> None:
        self._join_ops[group.group_id] = op
        self.rebalances.try_complete_else_watch(op, [("join", group.group_id)])

    def _on_join_phase_end(self, op: _DelayedJoin) -> None:
        group = op.group
        if self._join_ops.get(group.group_id) is op:
            del self._join_ops[group.group_id]
        if op.cancelled or group.is_(GroupState.DEAD):
            return
        if op.initial and group.new_member_added and op.remaining_s > 0:
            # KIP-134: someone arrived during the delay; wait once more (bounded by what is
            # left of the rebalance timeout).
            group.new_member_added = False
            delay_s = min(self.config.initial_rebalance_delay_ms / 1000.0, op.remaining_s)
            self._watch_join(group, _DelayedJoin(
                self, group, delay_s, initial=True,
                remaining_s=max(op.remaining_s - delay_s, 0.0)))
            return
        self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """Kafka's ``onCompleteJoin``: drop members that did not rejoin, form the next
        generation, answer every waiting JoinGroup."""
        for member in [m for m in group.members.values() if m.awaiting_join is None]:
            log.info("classic group {g}: member {m} did not rejoin in time; removed",
                     g=group.group_id, m=member.member_id)
            self._drop_member(group, member)
        if group.members and not self._elect_joined_leader(group):
            # Only possible when nobody is waiting; kept for safety: wait once more.
            self._watch_join(group, _DelayedJoin(self, group,
                                                 group.rebalance_timeout_ms() / 1000.0))
            return
        group.generation_id += 1
        group.pending_sync.clear()
        group.new_member_added = False
        if not group.members:
            group.protocol_name = None
            group.state = GroupState.EMPTY
            group.empty_since = self.rebalances.clock.seconds()
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
                respond(self._join_result(group, member))
            member.is_new = False
            group.pending_sync.add(member.member_id)
            self._expect_heartbeat(group, member)
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
        op = _Expiry(group.rebalance_timeout_ms() / 1000.0,
                     lambda: self._expire_sync(gid, generation))
        self._sync_ops[gid] = op
        self.rebalances.try_complete_else_watch(op, [("sync", gid)])

    def _cancel_sync_timeout(self, group: ClassicGroup) -> None:
        op = self._sync_ops.pop(group.group_id, None)
        if op is not None:
            op.cancel()

    def _expire_sync(self, group_id: str, generation: int) -> None:
        group = self.groups.get(group_id)
        self._sync_ops.pop(group_id, None)
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
                self._drop_member(group, member)
        self._after_removal(group, "members sent no SyncGroup")

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
            self._expect_heartbeat(group, member)
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
                self._propagate_assignment(group, ErrorCode.NONE)
        if not group.pending_sync:
            self._cancel_sync_timeout(group)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
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
            self._expect_heartbeat(group, member)

    # -- Heartbeat ---------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        error = self._check_generation(group, member_id, generation_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        self._expect_heartbeat(group, group.members[member_id])
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

    def _expect_heartbeat(self, group: ClassicGroup, member: ClassicMember,
                          timeout_s: float | None = None) -> None:
        """Kafka's ``completeAndScheduleNextHeartbeatExpiration``: the member proved alive;
        its next proof is due within its session timeout (or ``timeout_s``)."""
        if member.heartbeat is not None:
            member.heartbeat.cancel()
        member.heartbeat_satisfied = False
        gid, mid = group.group_id, member.member_id
        op = _Expiry(member.session_timeout_ms / 1000.0 if timeout_s is None else timeout_s,
                     lambda: self._expire_member(gid, mid, op))
        member.heartbeat = op
        self.heartbeats.try_complete_else_watch(op, [(gid, mid)])

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
        self._remove_member(group, member, "session timeout")

    def _expire_pending(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.pending_members.pop(member_id, None) is None:
            return
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.rebalances.check_and_complete(("join", group_id))
        self._forget_if_unused(group)

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
                    self.rebalances.check_and_complete(("join", group_id))
                errors.append(ErrorCode.NONE)
            elif (error := group.validate_member(mid, instance_id)) is ErrorCode.NONE:
                log.info("classic group {g}: member {m} left", g=group_id, m=mid)
                self._remove_member(group, group.members[mid], f"member {mid} left")
                errors.append(ErrorCode.NONE)
            else:
                errors.append(error)
        self._forget_if_unused(group)
        return ErrorCode.NONE, errors

    # -- removal -----------------------------------------------------------------------------------

    def _drop_member(self, group: ClassicGroup, member: ClassicMember) -> None:
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

    def _remove_member(self, group: ClassicGroup, member: ClassicMember, reason: str) -> None:
        self._drop_member(group, member)
        self._after_removal(group, reason)

    def _after_removal(self, group: ClassicGroup, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self.rebalances.check_and_complete(("join", group.group_id))

    def _forget_if_unused(self, group: ClassicGroup) -> None:
        # A group made only to hand out a member id that was never used holds nothing.
        if (group.is_(GroupState.EMPTY) and group.generation_id == 0 and not group.members
                and not group.pending_members):
            self.groups.pop(group.group_id, None)

    def remove_group(self, group_id: str) -> bool:
        """Drop an Empty group (Dead from now on); False (nothing done) if it has members."""
        group = self.groups.get(group_id)
        if group is None or not group.is_(GroupState.EMPTY) or group.pending_members:
            return False
        group.state = GroupState.DEAD
        self._cancel_sync_timeout(group)
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
        groups, self.groups = self.groups, {}
        for op in [*self._join_ops.values(), *self._sync_ops.values()]:
            op.cancel()
        self._join_ops.clear()
        self._sync_ops.clear()
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
        self._expect_heartbeat(group, group.members[member_id])
        return ErrorCode.NONE
