"""One node of the metadata quorum as a sans-IO state machine (KIP-595's pull-based Raft).

Theory of operation
-------------------
A :class:`RaftNode` owns its role, epoch, vote and high watermark, and an :class:`IRaftLog`. It
does no I/O and reads no clock: the driver feeds it

- :meth:`RaftNode.receive` for every message that arrives,
- :meth:`RaftNode.tick` when :meth:`RaftNode.next_deadline` comes (or any time earlier),
- :meth:`RaftNode.propose` for entries to append (leader only),

and each call returns the :class:`~broker_core.raft.effects.Effects` of that step, which the
driver applies in the documented order (persist the quorum state, flush the log, then send).

Structure: the node is the facade and owns what outlives a role (epoch, vote, log, snapshots,
high watermark, voter history) and the step plumbing (Effects, transitions, timers). What only
one role needs lives in :mod:`broker_core.raft.node_roles`: each role's state is a part of
``_RoleState`` (rebuilt on every transition), handled by its module's functions, which take
the node explicitly: :mod:`~.node_roles.leader`, :mod:`~.node_roles.fetcher` (followers and
observers), :mod:`~.node_roles.candidate`, :mod:`~.node_roles.resigned` and
:mod:`~.node_roles.snapshot_transfer`.

Replication is pulled: followers send Fetch(fetch_offset, last_fetched_epoch); the leader
checks the pair against its log and answers with entries, or with the diverging epoch and its
end offset, after which the follower truncates and fetches again. A new leader appends a
LeaderChange entry (so it has an entry of its own epoch to commit) and announces itself with
BeginQuorumEpoch; a leader steps down with EndQuorumEpoch.

Snapshots (KIP-630): a node keeps snapshots of its state machine (:meth:`create_snapshot`)
and deletes the log below them. A fetch the leader can only serve from below its log start is
answered with its latest snapshot id; the fetcher then sends FetchSnapshot for it, chunk by
chunk (``SnapshotFetch``, part of the follower's or observer's role state, so any transition
drops it), checks the whole file and installs it: snapshot store, log reset to its end, its
voters, its end as the high watermark, and ``Effects.installed_snapshot`` for the state
machine. It is not a role of its own: the epoch and leader rules are the follower's.

Timers: a voter without a leader stands after a random election timeout in ``[T, 2T)``
(random source injected); a follower that has not had a successful fetch response for the
fetch timeout stands; a leader that has not been fetched from by a majority for the fetch
timeout resigns (docs/design.md#zombie-leader: it cannot learn of a newer epoch by itself in a
pull model, so it must stop acting as leader on its own).

Reassignment (docs/design.md): an admin's AlterVotersRequest makes the leader append the target as
the TargetVoters of an assignment, answered once that commits; after every step a leader with
a committed TargetVoters appends the next single-member change the planner
(:mod:`~broker_core.raft.reassignment`) gives, adding only caught-up replicas, and resigns when
it is the last voter to remove. A removed voter that lacks its removal is told NOT_FOLLOWER on
its fetch and observes. DescribeQuorum answers from the leader's progress table.

Pre-vote is not implemented: a node that was partitioned away bumps its epoch and, once back,
makes the current leader step down. That costs an election, never safety.

Invariants (checked by the simulation after every step):

- the epoch never decreases, and every role change is in :data:`~.roles.TRANSITIONS`;
- at most one vote per epoch, persisted before the response granting it leaves;
- at most one leader per epoch, and a known leader of an epoch never changes;
- the high watermark never decreases and never exceeds the log end offset;
- the leader only advances the high watermark over an entry of its own epoch.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from broker_core.backoff import exponential_backoff
from broker_core.config.quorum import RaftConfig
from broker_core.raft.effects import Effects, Transition
from broker_core.raft.entries import LeaderChange, LogEntry, Payload, VoterAssignment
from broker_core.raft.log import IRaftLog
from broker_core.raft.messages import (
    NO_LEADER,
    AlterVotersRequest,
    AlterVotersResponse,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from broker_core.raft.node_errors import NotLeaderError, RaftSafetyError
from broker_core.raft.node_roles import candidate, fetcher, leader, resigned, snapshot_transfer
from broker_core.raft.node_roles.candidate import NO_ID, Candidacy
from broker_core.raft.node_roles.fetcher import Fetching
from broker_core.raft.node_roles.leader import Leadership
from broker_core.raft.node_roles.resigned import Resignation
from broker_core.raft.quorum_state import QuorumState
from broker_core.raft.roles import VOTER_ROLES, IllegalStateTransition, Role, check_transition
from broker_core.raft.snapshots import (
    InMemorySnapshotStore,
    ISnapshotStore,
    Snapshot,
    SnapshotId,
)
from broker_core.raft.voter_set import VoterChangeRejected, VoterSetHistory
from broker_core.wire.errors import ErrorCode

__all__ = ["NO_ID", "NotLeaderError", "RaftNode", "RaftSafetyError"]


def _log_continues(log: IRaftLog, snapshot_id: SnapshotId) -> bool:
    """Whether ``log`` holds the snapshot's end (its entry below it, or the epoch below its
    start) with the snapshot's epoch, and nothing older after it."""
    end = snapshot_id.end_offset
    if not log.start_offset() <= end <= log.end_offset():
        return False
    if log.epoch_at(end - 1) != snapshot_id.epoch:
        return False
    return log.end_offset() == end or log.epoch_at(end) >= snapshot_id.epoch


@dataclass(slots=True)
class _RoleState:
    """Timers and bookkeeping of the current role; rebuilt on every transition so nothing
    leaks from one role or epoch into the next. Every role's part is present (and empty)
    whatever the role, so a handler reads the part of the role it checked it is in."""

    election_deadline: float | None = None  # voters without a leader; candidates; resigned
    next_resend_ms: float | None = None  # Vote / BeginQuorumEpoch / EndQuorumEpoch resends
    resends: int = 0
    fetcher: Fetching = field(default_factory=Fetching)  # followers and observers
    candidacy: Candidacy = field(default_factory=Candidacy)  # candidate
    resignation: Resignation = field(default_factory=Resignation)  # resigned
    leader: Leadership = field(default_factory=Leadership)  # leader


class RaftNode:
    """One quorum member (or observer), sans-IO. See the module docstring.

    :param node_id: this node's id.
    :param cluster_id: checked on every request; a mismatch is answered with
        INCONSISTENT_CLUSTER_ID and otherwise ignored.
    :param voters: the voter set (the bootstrap ``quorum.voters``, or the persisted one).
    :param log: the replicated log; the node appends and truncates it directly.
    :param config: timeouts and sizes.
    :param rng: the random source for election timeouts (inject a seeded one in tests).
    :param now: the current time in milliseconds, for the first timers.
    :param persisted: the quorum state read at start, or ``None`` for a fresh node.
    :param snapshots: the node's snapshot store (default: an empty in-memory one). The node
        starts from its latest valid snapshot: entries below it count as committed, and its
        voters apply when they are newer than the persisted ones.
    """

    def __init__(self, node_id: int, cluster_id: str, voters: frozenset[int] | set[int],
                 log: IRaftLog, config: RaftConfig, rng: random.Random, now: float,
                 persisted: QuorumState | None = None,
                 snapshots: ISnapshotStore | None = None) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.log = log
        self.config = config
        self._rng = rng
        self._now = now
        self._correlation = 0
        self._fx = Effects()
        self._high_watermark = 0
        # NOT_FOLLOWER: the leader said our removal is committed below this offset; until our
        # log reaches it we act as an observer (0: not demoted). Not persisted: a restarted
        # node learns it again from the leader.
        self._demoted_below = 0
        # Candidates outside our voter set that asked us for a vote since we last knew a
        # leader: we tell them our epoch when we stand (see candidate.request_votes).
        self._rivals: set[int] = set()
        self._lost_candidacies = 0  # candidacies in a row that timed out; 0 once a leader is known
        # Snapshots installed from a leader, and why fetched ones were refused, the latest few
        # (for operators and tests; bounded, since a leader could keep sending a bad one).
        self.snapshots_installed = 0
        self.snapshot_problems: deque[str] = deque(maxlen=16)
        self.snapshots: ISnapshotStore = (snapshots if snapshots is not None
                                          else InMemorySnapshotStore())
        snapshot = self._snapshot = self.snapshots.latest()
        if snapshot is not None:
            self._check_snapshot(snapshot)
            if not _log_continues(log, snapshot.snapshot_id):
                # The snapshot was installed from the leader but the node stopped before its
                # log was reset (or the log lost what the snapshot covers): the snapshot wins.
                log.reset(snapshot.end_offset, snapshot.epoch)
        applied, current, target = -1, tuple(voters), None
        if persisted is not None:
            if persisted.cluster_id != cluster_id:
                raise ValueError(f"quorum state belongs to cluster {persisted.cluster_id!r}, "
                                 f"not {cluster_id!r}")
            applied = persisted.applied_offset
            current, target = persisted.current_voters, persisted.target_voters
            self._epoch = persisted.leader_epoch
            self._voted_id = persisted.voted_id
            self._leader_id = persisted.leader_id
        else:
            self._epoch = 0
            self._voted_id = NO_ID
            self._leader_id = NO_LEADER
        if snapshot is not None and snapshot.voters_offset > applied:
            # The snapshot knows a newer committed assignment than the quorum-state file (it
            # came from the leader): its voters hold at its end.
            applied = snapshot.voters_offset
            current = snapshot.voters.current_voters
            target = snapshot.voters.target_voters
        self._history = VoterSetHistory.recover(applied, current, target, log)
        if snapshot is not None:
            # Everything a snapshot covers was committed when it was taken.
            self._high_watermark = snapshot.end_offset
            self._history.committed(self._high_watermark)
        self._rs = _RoleState()
        self._role = self._initial_role()
        self._enter_role(initial=True)
        self._last_persisted = self.quorum_state()
        self._fx = Effects()

    def _initial_role(self) -> Role:
        # A restarted leader cannot lead again in its epoch (its followers' progress and
        # parked fetches are gone, and it may have appended entries nobody has): it resumes
        # as resigned and stands in the next epoch. A restarted candidate keeps its own vote.
        if not self.is_voter:
            return Role.OBSERVER
        if self._leader_id == self.node_id:
            return Role.RESIGNED
        if self._leader_id != NO_LEADER:
            return Role.FOLLOWER
        if self._voted_id == self.node_id:
            return Role.CANDIDATE
        if self._voted_id != NO_ID:
            return Role.VOTED
        return Role.UNATTACHED

    # ------------------------------------------------------------------ public view

    @property
    def role(self) -> Role:
        return self._role

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def leader_id(self) -> int:
        """The leader of the current epoch if known, else -1 (this node's id when leading or
        resigned)."""
        return self._leader_id

    @property
    def voted_id(self) -> int:
        return self._voted_id

    @property
    def high_watermark(self) -> int:
        """Every entry below this offset is committed. Never decreases while the node runs."""
        return self._high_watermark

    @property
    def latest_snapshot(self) -> Snapshot | None:
        """The newest snapshot this node holds (taken here or installed from the leader)."""
        return self._snapshot

    @property
    def voters(self) -> frozenset[int]:
        """The voters this node acts on: the latest assignment in its log, even uncommitted."""
        return self._history.voters

    @property
    def _voters(self) -> frozenset[int]:
        return self._history.voters

    @property
    def is_voter(self) -> bool:
        """In the voter set of this node's log, and not told by the leader (NOT_FOLLOWER) that
        its removal is committed beyond its log end."""
        return (self.node_id in self._history.voters
                and self._demoted_below <= self.log.end_offset())

    @property
    def target_voters(self) -> tuple[int, ...] | None:
        """Where an ongoing reassignment is heading (the latest assignment's TargetVoters)."""
        return self._history.target_voters

    def quorum_state(self) -> QuorumState:
        """What the driver persists (see ``Effects.quorum_state``). Its voters are the
        *committed* ones: an uncommitted assignment may still be truncated away."""
        history = self._history
        return QuorumState(cluster_id=self.cluster_id, leader_id=self._leader_id,
                           leader_epoch=self._epoch, voted_id=self._voted_id,
                           applied_offset=history.applied_offset,
                           current_voters=tuple(sorted(history.committed_voters)),
                           target_voters=history.committed_target)

    def next_deadline(self) -> float | None:
        """The earliest time :meth:`tick` has something to do, or ``None``."""
        rs = self._rs
        times = [rs.election_deadline, rs.next_resend_ms, *rs.fetcher.deadlines(self)]
        if self._role is Role.LEADER:
            times.extend(rs.leader.deadlines(self))
        present = [t for t in times if t is not None]
        return min(present) if present else None

    # ------------------------------------------------------------------ inputs

    def receive(self, envelope: Envelope, now: float) -> Effects:
        """Handle one message addressed to this node."""
        self._begin(now)
        if envelope.destination != self.node_id:
            raise ValueError(f"node {self.node_id} got an envelope for {envelope.destination}")
        handler = getattr(self, self._HANDLERS[type(envelope.message)])
        handler(envelope, envelope.message)
        return self._end()

    def tick(self, now: float) -> Effects:
        """Let timers fire: elections, fetch timeouts, resends, long-poll expiry."""
        self._begin(now)
        self._on_tick()
        return self._end()

    def propose(self, payload: Payload, now: float) -> Effects:
        """Append ``payload`` as a new entry of the leader's epoch; ``Effects.proposed`` is the
        entry. Raises :class:`NotLeaderError` on any other role. The entry is committed once
        the high watermark passes its offset, and may be truncated if leadership is lost
        before that."""
        if self._role is not Role.LEADER:
            raise NotLeaderError(self.node_id, self._role, self._leader_id, self._epoch)
        if isinstance(payload, LeaderChange):
            raise ValueError("LeaderChange entries are appended by the core, not proposed")
        if isinstance(payload, VoterAssignment):
            if payload.cluster_id != self.cluster_id:
                raise VoterChangeRejected(f"assignment for cluster {payload.cluster_id!r}, "
                                          f"this is {self.cluster_id!r}")
            if self._high_watermark <= self._rs.leader.epoch_start_offset:
                # Raft's single-server change needs the leader to have committed an entry of
                # its own epoch first (Ongaro's 2015 correction): an older leader's uncommitted
                # change could otherwise overlap with this one.
                raise VoterChangeRejected(f"leader {self.node_id} has not committed an entry "
                                          f"of epoch {self._epoch} yet")
            self._history.check_change(payload, self.node_id)
        self._begin(now)
        self._fx.proposed = self._append_as_leader(payload)
        return self._end()

    def create_snapshot(self, end_offset: int, state: bytes, now: float) -> Effects:
        """Keep ``state``, the state machine's state after every entry below ``end_offset``,
        as a snapshot (durably, in the snapshot store), with the voters in force there; then
        let the log's prefix go, keeping ``snapshot_retain_entries`` entries below the log
        end. ``end_offset`` must be committed (at most the high watermark) and past the log
        start; one at or below the latest snapshot's end changes nothing."""
        if end_offset > self._high_watermark:
            raise ValueError(f"snapshot end {end_offset} is past the high watermark "
                             f"{self._high_watermark}: only committed state may be kept")
        self._begin(now)
        latest = self._snapshot
        if end_offset >= max(1, self.log.start_offset()) and (
                latest is None or end_offset > latest.end_offset):
            offset, voters = self._assignment_at(end_offset)
            snapshot = Snapshot(SnapshotId(end_offset, self.log.epoch_at(end_offset - 1)),
                                voters, offset, state)
            self.snapshots.save(snapshot)
            self._snapshot = snapshot
            self._delete_prefix()
        return self._end()

    def _assignment_at(self, end_offset: int) -> tuple[int, VoterAssignment]:
        """The committed voter assignment in force at ``end_offset`` and its offset. The
        history knows it unless it started (at a restart) from a persisted assignment at or
        past ``end_offset``; then the log below ``end_offset`` is scanned from the latest
        snapshot below it (whose own voters hold when the log has no newer assignment)."""
        try:
            offset, current, target = self._history.assignment_at(end_offset)
            return offset, VoterAssignment(self.cluster_id, current, target)
        except ValueError:
            pass
        below = self._snapshot if (self._snapshot is not None
                                   and self._snapshot.end_offset <= end_offset) else None
        found = None if below is None else (below.voters_offset, below.voters)
        offset = max(self.log.start_offset(), below.end_offset if below is not None else 0)
        while offset < end_offset:
            chunk = self.log.read(offset, min(1000, end_offset - offset))
            for entry in chunk:
                if isinstance(entry.payload, VoterAssignment):
                    found = (entry.offset, entry.payload)
            offset += len(chunk)
        if found is None:
            raise RaftSafetyError(f"node {self.node_id}: no voter assignment known below "
                                  f"offset {end_offset}")
        return found

    def _delete_prefix(self) -> None:
        """Let go of the log below the latest snapshot, keeping the last
        ``snapshot_retain_entries`` entries (a follower a little behind fetches those rather
        than the whole snapshot). The snapshot is durable before this runs."""
        retain = self.config.snapshot_retain_entries
        if self._snapshot is None or retain is None:
            return
        keep_from = self.log.end_offset() - retain
        start = min(self._snapshot.end_offset, keep_from)
        if start > self.log.start_offset():
            self.log.delete_prefix(start)

    def _check_snapshot(self, snapshot: Snapshot) -> None:
        if snapshot.voters.cluster_id != self.cluster_id:
            raise ValueError(f"snapshot {snapshot.snapshot_id} belongs to cluster "
                             f"{snapshot.voters.cluster_id!r}, not {self.cluster_id!r}")

    def resign(self, now: float) -> Effects:
        """Graceful step-down (shutdown): a leader resigns and tells the voters; otherwise a
        no-op."""
        self._begin(now)
        if self._role is Role.LEADER:
            resigned.resign(self)
        return self._end()

    # ------------------------------------------------------------------ step plumbing

    def _begin(self, now: float) -> None:
        if now < self._now:
            raise ValueError(f"time went backwards: {now} < {self._now}")
        self._now = now
        self._fx = Effects()

    def _end(self) -> Effects:
        self._maybe_step_reassignment()
        fx = self._fx
        state = self.quorum_state()
        if state != self._last_persisted:
            fx.quorum_state = state
            self._last_persisted = state
        if fx.appended or fx.truncated_to is not None:
            fx.flush_log = True
        self._fx = Effects()
        return fx

    def _send(self, destination: int, message: Message, correlation_id: int | None = None) -> int:
        if correlation_id is None:
            self._correlation += 1
            correlation_id = self._correlation
        self._fx.messages.append(Envelope(self.node_id, destination, correlation_id, message))
        return correlation_id

    def _reply(self, request: Envelope, message: Message) -> None:
        self._send(request.source, message, request.correlation_id)

    def _schedule_resend(self) -> None:
        # Resends back off from retry.backoff.ms to request.timeout.ms: quick when a message
        # was merely lost, quiet when the peer is down for long.
        rs, cfg = self._rs, self.config
        rs.resends += 1
        interval = exponential_backoff(rs.resends, cfg.retry_backoff_ms, cfg.request_timeout_ms)
        rs.next_resend_ms = self._now + interval

    def _random_election_timeout(self) -> float:
        t = self.config.election_timeout_ms
        return t + self._rng.random() * t

    # ------------------------------------------------------------------ transitions

    def _transition(self, role: Role, epoch: int, leader_id: int = NO_LEADER,
                    voted_id: int = NO_ID) -> None:
        """Move to ``role`` in ``epoch``; checks the table and the one-leader / one-vote rules."""
        check_transition(self.node_id, self._role, self._epoch, role, epoch)
        if epoch == self._epoch:
            if self._leader_id != NO_LEADER and leader_id != self._leader_id:
                raise IllegalStateTransition(
                    self.node_id, self._role, self._epoch, role, epoch,
                    f"epoch {epoch} already has leader {self._leader_id}, not {leader_id}")
            if voted_id != NO_ID and self._voted_id not in (NO_ID, voted_id):
                raise IllegalStateTransition(
                    self.node_id, self._role, self._epoch, role, epoch,
                    f"already voted for {self._voted_id} in epoch {epoch}")
        else:
            self._voted_id = NO_ID
        if voted_id != NO_ID:
            self._voted_id = voted_id
        old_role, old_epoch, old_rs = self._role, self._epoch, self._rs
        self._role, self._epoch, self._leader_id = role, epoch, leader_id
        if leader_id != NO_LEADER:
            self._rivals.clear()  # an election ended
            self._lost_candidacies = 0
        self._rs = _RoleState()
        self._fx.transitions.append(Transition(old_role, old_epoch, role, epoch, leader_id))
        old_rs.leader.hand_over(self)  # empty unless it was leading
        self._enter_role()
        if (role is Role.UNATTACHED and old_rs.election_deadline is not None
                and old_role in (Role.UNATTACHED, Role.VOTED, Role.CANDIDATE)):
            # Learning of a newer epoch mid-election does not restart the election timer
            # (Raft resets it only on a vote granted or a leader heard). Restarting it kept a
            # candidate whose vote requests always arrived one epoch late forever behind a
            # rival that could never win: the simulation found a two-voter quorum stuck so.
            self._rs.election_deadline = min(self._rs.election_deadline,
                                             old_rs.election_deadline)

    def _enter_role(self, initial: bool = False) -> None:
        """Start the timers of the new role. ``initial`` (the role a restart resumes in) only
        arms timers, due at once, instead of sending: a constructor has no step to return
        messages from."""
        rs, now = self._rs, self._now
        role = self._role
        if role in (Role.UNATTACHED, Role.VOTED, Role.RESIGNED):
            rs.election_deadline = now + self._random_election_timeout()
        elif role is Role.CANDIDATE:
            rs.election_deadline = now + self._random_election_timeout()
            rs.candidacy.enter(self, initial)
        elif role in (Role.FOLLOWER, Role.OBSERVER):
            rs.fetcher.enter(self, initial)
        elif role is Role.LEADER:
            rs.leader.enter(self)

    def _observe_epoch(self, epoch: int, leader_id: int) -> None:
        """React to a message that reveals ``epoch`` (>= ours) and possibly its leader."""
        if leader_id == self.node_id:
            leader_id = NO_LEADER  # only we can know that we lead; a stale echo proves nothing
        if epoch > self._epoch:
            if leader_id != NO_LEADER:
                self._transition(Role.FOLLOWER if self.is_voter else Role.OBSERVER, epoch,
                                 leader_id)
            else:
                self._transition(Role.UNATTACHED if self.is_voter else Role.OBSERVER, epoch)
        elif epoch == self._epoch and leader_id != NO_LEADER and self._leader_id == NO_LEADER:
            self._transition(Role.FOLLOWER if self.is_voter else Role.OBSERVER, epoch, leader_id)

    # ------------------------------------------------------------------ elections

    def _start_election(self) -> None:
        if self._role is Role.CANDIDATE:
            self._lost_candidacies += 1
        self._transition(Role.CANDIDATE, self._epoch + 1, voted_id=self.node_id)

    def _vote_response(self, error: ErrorCode, granted: bool) -> VoteResponse:
        return VoteResponse(error_code=error, leader_id=self._leader_id,
                            leader_epoch=self._epoch, vote_granted=granted)

    # ------------------------------------------------------------------ begin epoch

    def _handle_begin_epoch_request(self, env: Envelope, req: BeginQuorumEpochRequest) -> None:
        if req.cluster_id != self.cluster_id:
            self._reply(env, BeginQuorumEpochResponse(ErrorCode.INCONSISTENT_CLUSTER_ID,
                                                      self._leader_id, self._epoch))
            return
        if req.leader_epoch < self._epoch:
            self._reply(env, BeginQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH,
                                                      self._leader_id, self._epoch))
            return
        self._observe_epoch(req.leader_epoch, req.leader_id)
        self._reply(env, BeginQuorumEpochResponse(ErrorCode.NONE, self._leader_id, self._epoch))

    def _handle_begin_epoch_response(self, env: Envelope, resp: BeginQuorumEpochResponse) -> None:
        if resp.leader_epoch > self._epoch:
            self._observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        if (self._role is Role.LEADER and resp.leader_epoch == self._epoch
                and resp.error_code is ErrorCode.NONE and env.source in self._rs.leader.progress):
            self._rs.leader.progress[env.source].acknowledged_epoch = True

    # ------------------------------------------------------------------ reassignment (admin)

    def _known_leader(self) -> int:
        """The leader to name to a client: never ourselves unless we lead (a resigned leader
        knows it no longer does)."""
        if self._leader_id == self.node_id and self._role is not Role.LEADER:
            return NO_LEADER
        return self._leader_id

    def _alter_response(self, error: ErrorCode) -> AlterVotersResponse:
        return AlterVotersResponse(error, self._known_leader(), self._epoch)

    def _handle_alter_voters_request(self, env: Envelope, req: AlterVotersRequest) -> None:
        """AlterPartitionReassignments handling: only the leader accepts
        (:meth:`.Leadership.handle_alter_voters`)."""
        if self._role is not Role.LEADER:
            self._reply(env, self._alter_response(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            return
        self._rs.leader.handle_alter_voters(self, env, req)

    def _maybe_step_reassignment(self) -> None:
        """After every step, a leader takes the next single-member step of an ongoing
        reassignment when it may (:meth:`.Leadership.step_reassignment`)."""
        if self._role is Role.LEADER:
            self._rs.leader.step_reassignment(self)

    def describe_quorum(self) -> DescribeQuorumResponse:
        """The answer to DescribeQuorum: the leader's progress table (voters, the target of an
        ongoing reassignment, observers), or NOT_LEADER_OR_FOLLOWER naming the leader this
        node knows. Times are this node's clock (the driver's milliseconds); the leader reports
        itself as fetched and caught up now, as Kafka does."""
        if self._role is not Role.LEADER:
            return DescribeQuorumResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, self._known_leader(),
                                          self._epoch)
        return self._rs.leader.describe_quorum(self)

    def _handle_describe_quorum_request(self, env: Envelope, req: DescribeQuorumRequest) -> None:
        self._reply(env, self.describe_quorum())

    # ------------------------------------------------------------------ log and high watermark

    def _append_as_leader(self, payload: Payload) -> LogEntry:
        entry = LogEntry(self.log.end_offset(), self._epoch, payload)
        self._append([entry])
        self._maybe_advance_leader_hw()
        self._rs.leader.complete_parked(self)
        return entry

    def _append(self, entries: tuple[LogEntry, ...] | list[LogEntry]) -> None:
        self.log.append(entries)
        self._fx.appended.extend(entries)
        changed = self._history.appended(entries)
        if self._demoted_below and self.log.end_offset() >= self._demoted_below:
            # Our log now holds the removal NOT_FOLLOWER told of: it speaks for itself again.
            self._demoted_below = 0
            changed = True
        if changed:
            self._voters_changed()

    def _truncate(self, offset: int) -> None:
        self.log.truncate_to(offset)
        prev = self._fx.truncated_to
        self._fx.truncated_to = offset if prev is None else min(prev, offset)
        if self._history.truncated(offset):
            self._voters_changed()

    def _voters_changed(self) -> None:
        """The voter set moved (an assignment was appended or truncated): a node that left it
        observes, one that joined it follows, a leader tracks and greets new voters."""
        voter = self.is_voter
        role = self._role
        if role is Role.LEADER:
            self._rs.leader.voters_changed(self)
        elif role is Role.OBSERVER and voter:
            if self._leader_id != NO_LEADER:
                self._transition(Role.FOLLOWER, self._epoch, self._leader_id)
            else:
                self._transition(Role.UNATTACHED, self._epoch)
        elif role in VOTER_ROLES and role is not Role.RESIGNED and not voter:
            self._transition(Role.OBSERVER, self._epoch, self._leader_id)

    def _maybe_advance_leader_hw(self) -> None:
        # A method of the node, not only of Leadership, so that a node subclass can override
        # the commit rule (the simulation's deliberately broken nodes do).
        self._rs.leader.advance_high_watermark(self)

    def _set_high_watermark(self, hw: int) -> None:
        self._high_watermark = hw
        self._fx.high_watermark = hw
        self._history.committed(hw)  # a committed assignment joins the persisted state
        if self._role is Role.LEADER:
            self._rs.leader.settle_alters(self)

    def _not_leader_fetch_response(self, error: ErrorCode) -> FetchResponse:
        return FetchResponse(error_code=error, leader_id=self._leader_id,
                             leader_epoch=self._epoch, high_watermark=-1)

    # ------------------------------------------------------------------ timers

    def _on_tick(self) -> None:
        now, rs, role = self._now, self._rs, self._role
        if role in (Role.UNATTACHED, Role.VOTED, Role.CANDIDATE, Role.RESIGNED):
            if rs.election_deadline is not None and now >= rs.election_deadline:
                self._start_election()
                return
            if rs.next_resend_ms is not None and now >= rs.next_resend_ms:
                if role is Role.CANDIDATE:
                    candidate.request_votes(self)
                    candidate.maybe_win(self)  # a restarted single-voter candidate wins here
                elif role is Role.RESIGNED:
                    resigned.send_end_epoch(self)
            return
        if role in (Role.FOLLOWER, Role.OBSERVER):
            rs.fetcher.tick(self)
            return
        if role is Role.LEADER:
            rs.leader.tick(self)

    # ------------------------------------------------------------------ message handlers

    # The handlers whose logic is a role's stay methods of the node, delegating, so that
    # ``_HANDLERS`` dispatches through the node (a subclass may override one).

    def _handle_vote_request(self, env: Envelope, req: VoteRequest) -> None:
        candidate.handle_vote_request(self, env, req)

    def _handle_vote_response(self, env: Envelope, resp: VoteResponse) -> None:
        candidate.handle_vote_response(self, env, resp)

    def _handle_end_epoch_request(self, env: Envelope, req: EndQuorumEpochRequest) -> None:
        resigned.handle_end_epoch_request(self, env, req)

    def _handle_end_epoch_response(self, env: Envelope, resp: EndQuorumEpochResponse) -> None:
        resigned.handle_end_epoch_response(self, env, resp)

    def _handle_fetch_request(self, env: Envelope, req: FetchRequest) -> None:
        leader.handle_fetch_request(self, env, req)

    def _handle_fetch_snapshot_request(self, env: Envelope, req: FetchSnapshotRequest) -> None:
        snapshot_transfer.serve_chunk(self, env, req)

    def _handle_fetch_response(self, env: Envelope, resp: FetchResponse) -> None:
        fetcher.handle_fetch_response(self, env, resp)

    def _handle_fetch_snapshot_response(self, env: Envelope, resp: FetchSnapshotResponse
                                        ) -> None:
        fetcher.handle_fetch_snapshot_response(self, env, resp)

    # Names, not functions, so that a subclass's override is the one called.
    _HANDLERS: dict[type, str] = {
        VoteRequest: "_handle_vote_request",
        VoteResponse: "_handle_vote_response",
        BeginQuorumEpochRequest: "_handle_begin_epoch_request",
        BeginQuorumEpochResponse: "_handle_begin_epoch_response",
        EndQuorumEpochRequest: "_handle_end_epoch_request",
        EndQuorumEpochResponse: "_handle_end_epoch_response",
        FetchRequest: "_handle_fetch_request",
        FetchResponse: "_handle_fetch_response",
        FetchSnapshotRequest: "_handle_fetch_snapshot_request",
        FetchSnapshotResponse: "_handle_fetch_snapshot_response",
        AlterVotersRequest: "_handle_alter_voters_request",
        DescribeQuorumRequest: "_handle_describe_quorum_request",
    }
