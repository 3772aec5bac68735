"""The leader's half of :class:`~broker_core.raft.node.RaftNode`: its view of every fetching
replica, the high-watermark advance, fetch serving (with parked long polls), the voter
changes it makes while leading, and DescribeQuorum.

Invariants:

- a :class:`Leadership` lives for one epoch of one leader: the node builds an empty one for
  every role state, and only a node that is leading fills and reads it;
- the high watermark only advances over an entry of the leader's own epoch (at or past
  ``epoch_start_offset``), to an offset a majority of the voters holds;
- a replica has at most one parked fetch, its newest;
- every parked fetch and pending AlterVoters is answered: when ready, at its deadline, or
  when leadership ends (:meth:`Leadership.hand_over`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker_core.raft.commit import majority_size, next_high_watermark
from broker_core.raft.entries import VoterAssignment
from broker_core.raft.log import IRaftLog
from broker_core.raft.messages import (
    NOT_FOLLOWER,
    AlterVotersRequest,
    BeginQuorumEpochRequest,
    DescribeQuorumResponse,
    DivergingEpoch,
    Envelope,
    FetchRequest,
    FetchResponse,
    ReplicaState,
)
from broker_core.raft.node_roles import resigned
from broker_core.raft.reassignment import Add, Done, Remove, ResignThenRemove, next_step
from broker_core.raft.roles import Role
from broker_core.wire.errors import ErrorCode

if TYPE_CHECKING:
    from broker_core.raft.node import RaftNode


@dataclass(slots=True)
class ReplicaProgress:
    """The leader's view of one fetching replica (voter or observer)."""

    end_offset: int = 0  # highest fetch offset that matched the leader's log this epoch
    last_fetch_ms: float | None = None
    acknowledged_epoch: bool = False  # fetched or answered BeginQuorumEpoch this epoch
    last_hw_sent: int = -1
    # Observer promotion (KIP-836's lastCaughtUpTimestamp): the latest time the replica was
    # known to hold the leader's whole log, and the leader's log end at its previous fetch.
    last_caught_up_ms: float | None = None
    leader_end_at_last_fetch: int = 0
    matched_fetch_ms: float | None = None  # time of the previous fetch that matched
    was_voter: bool = False  # a voter at some point of this epoch (NOT_FOLLOWER)
    announce: bool = False  # a non-voter told of the epoch with BeginQuorumEpoch (a rival)
    told_not_follower: bool = False


@dataclass(slots=True)
class PendingAlter:
    """An AlterVotersRequest answered once the assignment at ``offset`` commits."""

    envelope: Envelope
    offset: int
    deadline: float


@dataclass(slots=True)
class ParkedFetch:
    """A valid fetch the leader holds until it has something new or ``deadline`` comes."""

    envelope: Envelope
    deadline: float


def below_log_start(log: IRaftLog, fetch_offset: int, last_fetched_epoch: int) -> bool:
    """Whether the fetcher's position (or where it diverges) lies below our log start,
    where only a snapshot can help (Kafka's ``validateOffsetAndEpoch``): its offset is
    below the start, or at the start with another epoch below it, or its last epoch is
    older than the epoch below the start (so the logs part below the start)."""
    start = log.start_offset()
    if start == 0:
        return False
    start_epoch = log.epoch_at(start - 1)
    return (fetch_offset < start or last_fetched_epoch < start_epoch
            or (fetch_offset == start and last_fetched_epoch != start_epoch))


def check_fetch_position(log: IRaftLog, fetch_offset: int, last_fetched_epoch: int
                         ) -> DivergingEpoch | None:
    """``None`` if the fetcher's log matches ours below ``fetch_offset``, else where its
    ``last_fetched_epoch`` ends in our log."""
    if fetch_offset == 0 and last_fetched_epoch == 0:
        return None
    epoch, end = log.end_offset_for_epoch(last_fetched_epoch)
    if epoch != last_fetched_epoch or end < fetch_offset:
        return DivergingEpoch(epoch, end)
    return None


def handle_fetch_request(node: RaftNode, env: Envelope, req: FetchRequest) -> None:
    """A Fetch on any role: refused (naming the epoch and leader this node knows) unless it
    is valid and this node leads the fetcher's epoch; then the leader serves it."""
    if req.cluster_id != node.cluster_id:
        node._reply(env, node._not_leader_fetch_response(ErrorCode.INCONSISTENT_CLUSTER_ID))
        return
    if req.current_leader_epoch < node._epoch:
        node._reply(env, node._not_leader_fetch_response(ErrorCode.FENCED_LEADER_EPOCH))
        return
    if req.current_leader_epoch > node._epoch:
        # The fetcher knows a newer epoch than we do, but not through us; we learn nothing
        # about its leader from a fetch, so just tell it we are behind.
        node._reply(env, node._not_leader_fetch_response(ErrorCode.UNKNOWN_LEADER_EPOCH))
        return
    if node._role is not Role.LEADER:
        node._reply(env, node._not_leader_fetch_response(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        return
    if req.fetch_offset < 0 or req.last_fetched_epoch < 0 or req.replica_id != env.source:
        node._reply(env, node._not_leader_fetch_response(ErrorCode.INVALID_REQUEST))
        return
    node._rs.leader.serve_fetch(node, env, req)


@dataclass(slots=True)
class Leadership:
    """The leader's state for its epoch (see the module docstring)."""

    progress: dict[int, ReplicaProgress] = field(default_factory=dict)
    parked: dict[int, ParkedFetch] = field(default_factory=dict)
    pending_alters: list[PendingAlter] = field(default_factory=list)
    epoch_start_offset: int = 0  # offset of its LeaderChange entry
    leader_since_ms: float = 0.0

    def enter(self, node: RaftNode) -> None:
        """Start leading: every other voter is tracked (and owes an acknowledgement of the
        epoch), and entries from the log end on are this epoch's."""
        self.leader_since_ms = node._now
        self.progress = {r: ReplicaProgress(was_voter=True)
                         for r in node._voters if r != node.node_id}
        self.epoch_start_offset = node.log.end_offset()

    def deadlines(self, node: RaftNode) -> list[float | None]:
        """The times :meth:`tick` has something to do."""
        times: list[float | None] = [p.deadline for p in self.parked.values()]
        times.extend(p.deadline for p in self.pending_alters)
        times.append(self.check_quorum_due(node))
        return times

    def hand_over(self, node: RaftNode) -> None:
        """Leadership ended (the node already moved on): answer what it held."""
        # A former leader answers its parked fetches now rather than leave them to time out
        # at the fetchers: the answer already carries the epoch and leader it moved to.
        for held in self.parked.values():
            node._reply(held.envelope, node._not_leader_fetch_response(
                ErrorCode.NOT_LEADER_OR_FOLLOWER))
        # Requests it had not settled: the client retries with the leader it can find.
        for alter in self.pending_alters:
            node._reply(alter.envelope, node._alter_response(ErrorCode.NOT_LEADER_OR_FOLLOWER))

    def tick(self, node: RaftNode) -> None:
        """Resign when a majority stopped fetching; expire long polls and AlterVoters."""
        now = node._now
        due = self.check_quorum_due(node)
        if due is not None and now >= due:
            resigned.resign(node)
            return
        self.complete_parked(node)
        for alter in [a for a in self.pending_alters if a.deadline <= now]:
            self.pending_alters.remove(alter)
            node._reply(alter.envelope, node._alter_response(ErrorCode.REQUEST_TIMED_OUT))
        rs = node._rs
        if rs.next_resend_ms is not None and now >= rs.next_resend_ms:
            self.send_begin_epoch(node)

    def send_begin_epoch(self, node: RaftNode) -> None:
        request = BeginQuorumEpochRequest(cluster_id=node.cluster_id, leader_id=node.node_id,
                                          leader_epoch=node._epoch)
        for replica, progress in sorted(self.progress.items()):
            if ((replica in node._voters or progress.announce)
                    and not progress.acknowledged_epoch):
                node._send(replica, request)
        node._schedule_resend()

    def successors(self, node: RaftNode) -> tuple[int, ...]:
        """The voters best placed to lead next, most caught up first (EndQuorumEpoch)."""
        progress = self.progress
        return tuple(sorted((r for r in progress if r in node._voters),
                            key=lambda r: (-progress[r].end_offset, r)))

    def voters_changed(self, node: RaftNode) -> None:
        """Track and greet new voters; a removed one may leave a majority that already
        holds more."""
        for replica in node._voters - {node.node_id}:
            self.progress.setdefault(replica, ReplicaProgress()).was_voter = True
        self.send_begin_epoch(node)
        node._maybe_advance_leader_hw()

    def advance_high_watermark(self, node: RaftNode) -> None:
        ends = [node.log.end_offset() if v == node.node_id
                else self.progress[v].end_offset for v in node._voters]
        hw = next_high_watermark(node._high_watermark, ends, self.epoch_start_offset)
        if hw > node._high_watermark:
            node._set_high_watermark(hw)

    # ------------------------------------------------------------------ reassignment (admin)

    def handle_alter_voters(self, node: RaftNode, env: Envelope, req: AlterVotersRequest
                            ) -> None:
        """AlterPartitionReassignments handling on the leader: the same target as the latest
        assignment's is not written again (idempotent resubmission); a new one is written as
        ``(current voters, target)``, or as ``(current voters, None)`` when the target is the
        current voters (cancellation). The answer waits until that assignment commits; the
        moves themselves follow (:meth:`step_reassignment`)."""
        history = node._history
        current = history.voters
        wanted = (tuple(sorted(current)) if req.target_voters is None
                  else tuple(req.target_voters))
        if (not wanted or len(set(wanted)) != len(wanted) or min(wanted) < 0
                or req.timeout_ms < 0):
            node._reply(env, node._alter_response(ErrorCode.INVALID_REPLICA_ASSIGNMENT))
            return
        target = frozenset(wanted)
        latest_target = history.target_voters
        if (target == current and latest_target is None) or (
                latest_target is not None and frozenset(latest_target) == target):
            offset = history.latest_offset  # already asked for: wait for the same entry
        else:
            assignment = VoterAssignment(node.cluster_id, tuple(sorted(current)),
                                         None if target == current else tuple(sorted(target)))
            history.check_change(assignment, node.node_id)  # the same voters: always safe
            offset = node._append_as_leader(assignment).offset
        if offset < node._high_watermark:
            node._reply(env, node._alter_response(ErrorCode.NONE))
            return
        self.pending_alters.append(PendingAlter(env, offset, node._now + req.timeout_ms))

    def settle_alters(self, node: RaftNode) -> None:
        done = [a for a in self.pending_alters if a.offset < node._high_watermark]
        for alter in done:
            self.pending_alters.remove(alter)
            node._reply(alter.envelope, node._alter_response(ErrorCode.NONE))

    def step_reassignment(self, node: RaftNode) -> None:
        """Take the next single-member step of an ongoing reassignment, once the
        previous assignment is committed and the leader has committed an entry of its own
        epoch (the condition :meth:`RaftNode.propose` puts on every voter change). A new
        leader that finds a TargetVoters in its log carries on from where the previous one
        stopped."""
        history = node._history
        if (history.has_pending
                or not history.committed_target  # None, or an empty one never accepted
                or node._high_watermark <= self.epoch_start_offset):
            return
        current = history.committed_voters
        step = next_step(current, history.committed_target, node.node_id, self.caught_up(node))
        if isinstance(step, Add):
            voters = current | {step.voter_id}
        elif isinstance(step, Remove):
            voters = current - {step.voter_id}
        elif isinstance(step, Done):
            voters = current
        elif isinstance(step, ResignThenRemove):
            # The last voter to remove is this leader: it steps down (EndQuorumEpoch) and the
            # next leader, for whom it is an ordinary voter, removes it.
            resigned.resign(node)
            return
        else:
            return  # Wait: no new voter has caught up yet
        target = None if isinstance(step, Done) else history.committed_target
        assignment = VoterAssignment(node.cluster_id, tuple(sorted(voters)), target)
        history.check_change(assignment, node.node_id)
        node._append_as_leader(assignment)

    def describe_quorum(self, node: RaftNode) -> DescribeQuorumResponse:
        """The progress table as DescribeQuorum reports it (see
        :meth:`RaftNode.describe_quorum`)."""
        progress = self.progress

        def state(replica: int) -> ReplicaState:
            if replica == node.node_id:
                now = int(node._now)
                return ReplicaState(replica, node.log.end_offset(), now, now)
            p = progress.get(replica)
            if p is None or p.last_fetch_ms is None:
                return ReplicaState(replica)
            caught_up = -1 if p.last_caught_up_ms is None else int(p.last_caught_up_ms)
            return ReplicaState(replica, p.end_offset, int(p.last_fetch_ms), caught_up)

        voters = node._voters
        target = node._history.target_voters
        return DescribeQuorumResponse(
            ErrorCode.NONE, node.node_id, node._epoch, node._high_watermark,
            current_voters=tuple(state(v) for v in sorted(voters)),
            target_voters=None if target is None else tuple(state(v) for v in sorted(target)),
            observers=tuple(state(r) for r in sorted(progress)
                            if r not in voters and progress[r].last_fetch_ms is not None))

    # ------------------------------------------------------------------ serving fetches

    def heard_from(self, replica: int, now: float) -> ReplicaProgress:
        """A Fetch or FetchSnapshot from ``replica``: it follows this epoch (check-quorum)."""
        progress = self.progress.setdefault(replica, ReplicaProgress())
        progress.last_fetch_ms = now
        progress.acknowledged_epoch = True
        return progress

    def serve_fetch(self, node: RaftNode, env: Envelope, req: FetchRequest) -> None:
        """A valid Fetch of this epoch: name the snapshot, the diverging epoch, or (once)
        NOT_FOLLOWER; otherwise record the matched position and answer with entries now or
        park it until there is something new."""
        progress = self.heard_from(req.replica_id, node._now)
        if below_log_start(node.log, req.fetch_offset, req.last_fetched_epoch):
            # The entries the fetcher needs next were deleted after a snapshot (KIP-630): name
            # the latest snapshot, which the fetcher gets with FetchSnapshot. The log start
            # never passes the latest snapshot's end, so there is one.
            self.parked.pop(req.replica_id, None)
            snapshot = node._snapshot
            assert snapshot is not None, "a log start above 0 without a snapshot"
            node._reply(env, FetchResponse(ErrorCode.NONE, node.node_id, node._epoch,
                                           node._high_watermark,
                                           snapshot_id=snapshot.snapshot_id))
            return
        diverging = check_fetch_position(node.log, req.fetch_offset, req.last_fetched_epoch)
        if diverging is not None:
            self.parked.pop(req.replica_id, None)
            node._reply(env, FetchResponse(ErrorCode.NONE, node.node_id, node._epoch,
                                           node._high_watermark, diverging_epoch=diverging))
            return
        self.note_caught_up(node, progress, req.fetch_offset)
        if self.lacks_own_removal(node, req.replica_id, req.fetch_offset, progress):
            # NOT_FOLLOWER: tell a removed voter at once, rather than after the many
            # fetch rounds it may need to reach its removal, so it stops standing for election.
            # Once per epoch: its next fetch, as an observer, gets entries as usual.
            progress.told_not_follower = True
            self.parked.pop(req.replica_id, None)
            node._reply(env, FetchResponse(NOT_FOLLOWER, node.node_id, node._epoch,
                                           node._high_watermark))
            return
        # A replica has one fetch in flight, the newest; an older one held here is stale.
        self.parked.pop(req.replica_id, None)
        # The position matched: the replica holds our log below fetch_offset.
        if req.fetch_offset > progress.end_offset:
            progress.end_offset = req.fetch_offset
            if req.replica_id in node._voters:
                node._maybe_advance_leader_hw()
                self.complete_parked(node)
        parked = ParkedFetch(env, node._now + req.max_wait_ms)
        if not self.fetch_is_ready(node, parked) and req.max_wait_ms > 0:
            self.parked[req.replica_id] = parked
            return
        self.answer_fetch(node, parked)

    def note_caught_up(self, node: RaftNode, progress: ReplicaProgress, fetch_offset: int
                       ) -> None:
        """KIP-836's rule for ``last_caught_up_ms``: a fetch at the leader's log end means the
        replica is caught up now; a fetch at or past the leader's log end as of the replica's
        previous fetch means it was caught up then."""
        leader_end = node.log.end_offset()
        if fetch_offset >= leader_end:
            progress.last_caught_up_ms = node._now
        elif (progress.matched_fetch_ms is not None
              and fetch_offset >= progress.leader_end_at_last_fetch):
            progress.last_caught_up_ms = max(progress.last_caught_up_ms or 0.0,
                                             progress.matched_fetch_ms)
        progress.leader_end_at_last_fetch = leader_end
        progress.matched_fetch_ms = node._now

    def caught_up(self, node: RaftNode) -> set[int]:
        """Replicas that may be promoted: caught up with the leader's log within the last
        election timeout, so one fetch round of theirs takes less than an election timeout
        (leader-based observer promotion, docs/design.md#procedure-index-metadata-quorum)."""
        horizon = node._now - node.config.election_timeout_ms
        return {r for r, p in self.progress.items()
                if p.last_caught_up_ms is not None and p.last_caught_up_ms >= horizon}

    def lacks_own_removal(self, node: RaftNode, replica: int, fetch_offset: int,
                          progress: ReplicaProgress) -> bool:
        history = node._history
        return (progress.was_voter and not progress.told_not_follower
                and replica not in node._voters and replica not in history.committed_voters
                and fetch_offset <= history.applied_offset)

    def fetch_is_ready(self, node: RaftNode, parked: ParkedFetch) -> bool:
        req = parked.envelope.message
        assert isinstance(req, FetchRequest)
        progress = self.progress[req.replica_id]
        return (req.fetch_offset < node.log.end_offset()
                or progress.last_hw_sent != node._high_watermark)

    def answer_fetch(self, node: RaftNode, parked: ParkedFetch) -> None:
        req = parked.envelope.message
        assert isinstance(req, FetchRequest)
        records = node.log.read(req.fetch_offset, node.config.fetch_max_entries)
        self.progress[req.replica_id].last_hw_sent = node._high_watermark
        node._reply(parked.envelope, FetchResponse(ErrorCode.NONE, node.node_id, node._epoch,
                                                   node._high_watermark, records=records))

    def complete_parked(self, node: RaftNode) -> None:
        for replica, parked in list(self.parked.items()):
            if self.fetch_is_ready(node, parked) or parked.deadline <= node._now:
                del self.parked[replica]
                self.answer_fetch(node, parked)

    def check_quorum_due(self, node: RaftNode) -> float | None:
        """When the leader must next check that a majority still fetches from it."""
        voters = node._voters
        recent = sorted((p.last_fetch_ms for r, p in self.progress.items()
                         if r in voters and p.last_fetch_ms is not None), reverse=True)
        others_needed = majority_size(len(voters)) - (1 if node.is_voter else 0)
        if others_needed <= 0:
            return None  # a single voter is always its own majority
        start = (recent[others_needed - 1] if len(recent) >= others_needed
                 else self.leader_since_ms)
        return max(start, self.leader_since_ms) + node.config.fetch_timeout_ms
