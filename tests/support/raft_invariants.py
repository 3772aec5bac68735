"""Safety invariants of the Raft quorum, checked after every simulated step.

:class:`InvariantChecker` watches one node at a time (the one that just stepped) and keeps
just enough history to make each check incremental, so it can run after every step of
thousands of simulations:

- at most one leader per epoch (a resigned leader still counts for its epoch);
- at most one vote per node per epoch;
- a node's epoch never decreases, across restarts too (it is persisted);
- a node's high watermark never decreases while it runs, and never passes its log end;
- a committed entry ``(offset, epoch, payload)`` never changes or disappears on a node that
  holds it, and every node's log agrees with the committed log below its high watermark;
- a node that becomes leader holds every committed entry (Leader Completeness);
- nothing a node sends is ahead of what it has persisted: every message's epoch is at most
  the persisted epoch, and a granted vote is the persisted vote (:meth:`check_sent`);
- a reassignment is answered "success" only when an assignment with the requested target is
  committed (:meth:`check_alter_reply`);
- a node's state machine (started from its latest snapshot, then fed committed entries) equals
  the committed log applied from scratch (the simulation calls :meth:`state_machine_diverged`);
- one voter change at a time: consecutive voter sets of the committed log differ by at most one
  member, and the part of any node's log past the committed log holds at most one voter change,
  itself of at most one member (:meth:`_check_voter_changes`).

A node whose disk was lost (:meth:`disk_lost`) starts again as a new replica: its epoch, vote
and log are forgotten with the disk, so the per-node rules start over for it; the rules about
the quorum (one leader per epoch, committed entries kept, leader completeness) do not.

"Committed" is learned from the nodes themselves: whenever a node's high watermark passes an
offset, the entry it holds there joins the committed log, or must equal the one already there.
"""

from __future__ import annotations

import bisect

from broker_core.raft import Effects, LogEntry, QuorumState, RaftNode, Role, VoterAssignment
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
    VoteRequest,
    VoteResponse,
)
from broker_core.wire.errors import ErrorCode


def message_epoch(env: Envelope) -> int:
    """The epoch a message reveals its sender to be in."""
    m = env.message
    if isinstance(m, VoteRequest):
        return m.candidate_epoch
    if isinstance(m, (BeginQuorumEpochRequest, EndQuorumEpochRequest)):
        return m.leader_epoch
    if isinstance(m, FetchRequest | FetchSnapshotRequest):
        return m.current_leader_epoch
    if isinstance(m, (AlterVotersRequest, DescribeQuorumRequest)):
        return 0  # an admin client's request names no epoch
    assert isinstance(m, (VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse,
                          FetchResponse, FetchSnapshotResponse, AlterVotersResponse,
                          DescribeQuorumResponse))
    return m.leader_epoch


class InvariantViolation(AssertionError):
    """A safety rule was broken; the message says which, where and when."""


class InvariantChecker:
    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # epoch -> leader
        self.votes: dict[tuple[int, int, int], int] = {}  # (node, disk, epoch) -> candidate
        self.committed: list[LogEntry] = []
        self._verified: dict[int, int] = {}  # node -> length of its prefix equal to committed
        self._epoch: dict[int, int] = {}
        self._hw: dict[int, int] = {}
        self._role: dict[int, Role] = {}
        # Per node, how many times it lost its disk: a vote is one per epoch per disk.
        self._generation: dict[int, int] = {}
        # The committed voter assignments: their offsets and current voters, in log order.
        self._assignment_offsets: list[int] = []
        self._assignment_voters: list[frozenset[int]] = []
        # Per node, what its log's uncommitted part was when last scanned for voter changes.
        self._voter_scan: dict[int, tuple[int, int, int]] = {}
        self.steps = 0

    def node_restarted(self, node_id: int) -> None:
        """A crash loses the high watermark (it is not persisted); nothing else is forgiven."""
        self._hw.pop(node_id, None)
        self._role.pop(node_id, None)

    def disk_lost(self, node_id: int) -> None:
        """``node_id`` lost its disk and comes back empty, a new replica with the same id."""
        self.node_restarted(node_id)
        self._generation[node_id] = self._generation.get(node_id, 0) + 1
        for per_node in (self._epoch, self._verified, self._voter_scan):
            per_node.pop(node_id, None)

    def state_machine_diverged(self, node_id: int, applied_end: int, now: float) -> None:
        self._fail(now, node_id, f"its state machine at offset {applied_end} differs from the "
                                 "committed log applied from scratch")

    def _fail(self, now: float, node_id: int, what: str) -> None:
        raise InvariantViolation(f"t={now:.1f} node {node_id}: {what}")

    def check_sent(self, node_id: int, persisted: QuorumState | None, messages: list[Envelope],
                   now: float) -> None:
        """Called when ``messages`` leave ``node_id`` with ``persisted`` on its disk."""
        epoch = persisted.leader_epoch if persisted is not None else 0
        for env in messages:
            if message_epoch(env) > epoch:
                self._fail(now, node_id, f"sent {env.message} before persisting epoch "
                                         f"{message_epoch(env)} (disk has {epoch})")
            m = env.message
            if isinstance(m, VoteResponse) and m.vote_granted and (
                    persisted is None or persisted.voted_id != env.destination):
                self._fail(now, node_id, f"granted a vote to {env.destination} before "
                                         "persisting it")

    def check_alter_reply(self, node_id: int, target: tuple[int, ...] | None,
                          response: AlterVotersResponse, now: float) -> None:
        """A success answer to a request for ``target`` needs a committed assignment that
        carries it: as its TargetVoters, or as its voters with no target (a target equal to the
        voters, or ``None``: a cancellation)."""
        if response.error_code is not ErrorCode.NONE:
            return
        wanted = None if target is None else frozenset(target)
        for entry in self.committed:
            a = entry.payload
            if not isinstance(a, VoterAssignment):
                continue
            if wanted is None:
                if a.target_voters is None:
                    return
            elif (a.target_voters is not None and frozenset(a.target_voters) == wanted) or (
                    a.target_voters is None and frozenset(a.current_voters) == wanted):
                return
        self._fail(now, node_id, f"answered success to a reassignment to {target} that is not "
                                 "committed")

    def check(self, node: RaftNode, effects: Effects | None, now: float) -> None:
        """Check ``node`` right after a step that produced ``effects`` (``None`` for a start)."""
        self.steps += 1
        n, epoch, log = node.node_id, node.epoch, node.log

        if epoch < self._epoch.get(n, 0):
            self._fail(now, n, f"epoch went back from {self._epoch[n]} to {epoch}")
        self._epoch[n] = epoch

        if node.voted_id != NO_LEADER:
            prior = self.votes.setdefault((n, self._generation.get(n, 0), epoch), node.voted_id)
            if prior != node.voted_id:
                self._fail(now, n, f"voted for {prior} and then {node.voted_id} in epoch {epoch}")

        if node.role in (Role.LEADER, Role.RESIGNED):
            prior = self.leaders.setdefault(epoch, n)
            if prior != n:
                self._fail(now, n, f"leads epoch {epoch}, which node {prior} already led")

        hw, end = node.high_watermark, log.end_offset()
        # Below the log start a snapshot stands for the entries (the state machine check
        # covers it); the log is compared from its start.
        verified = max(self._verified.get(n, 0), log.start_offset())
        # The lowest the log end went in this step: a truncation followed by appends in the
        # same step must not hide a committed entry that was dropped and written again.
        lowest = end
        if effects is not None and effects.truncated_to is not None:
            lowest = min(lowest, effects.truncated_to)
        if lowest < verified:
            gone = self.committed[lowest]
            self._fail(now, n, f"truncated to {lowest}, dropping committed entry {gone}")
        if hw < self._hw.get(n, 0):
            self._fail(now, n, f"high watermark went back from {self._hw[n]} to {hw}")
        if hw > end:
            self._fail(now, n, f"high watermark {hw} is past the log end {end}")
        self._hw[n] = hw

        committed = self.committed
        while verified < min(end, len(committed)):
            chunk = log.read(verified, min(end, len(committed)) - verified)
            for entry in chunk:
                if entry != committed[verified]:
                    break
                verified += 1
            else:
                continue
            break
        if hw > verified:
            if verified < len(committed):
                self._fail(now, n, f"holds {log.read(verified, 1)[0]} below its high watermark "
                                   f"{hw}, but {committed[verified]} is committed there")
            self._commit(log.read(verified, hw - verified), now, n)
            verified = hw
        self._verified[n] = verified
        self._check_voter_changes(node, verified, effects, now)

        if node.role is Role.LEADER and self._role.get(n) is not Role.LEADER:
            if verified < len(committed):
                self._fail(now, n, f"became leader of epoch {epoch} without committed entry "
                                   f"{committed[verified]}")
        self._role[n] = node.role

    # ------------------------------------------------------------------ one voter change at a time

    def _commit(self, entries: tuple[LogEntry, ...], now: float, node_id: int) -> None:
        """Extend the committed log; a committed assignment changes at most one voter."""
        for entry in entries:
            a = entry.payload
            if isinstance(a, VoterAssignment):
                voters = frozenset(a.current_voters)
                if self._assignment_voters and len(voters ^ self._assignment_voters[-1]) > 1:
                    self._fail(now, node_id, f"committed voter set {sorted(voters)} at offset "
                                             f"{entry.offset} after "
                                             f"{sorted(self._assignment_voters[-1])}: more than "
                                             "one member changed")
                self._assignment_offsets.append(entry.offset)
                self._assignment_voters.append(voters)
            self.committed.append(entry)

    def committed_voters_below(self, offset: int) -> frozenset[int] | None:
        """The voters of the latest committed assignment below ``offset`` (None: none yet)."""
        i = bisect.bisect_left(self._assignment_offsets, offset)
        return self._assignment_voters[i - 1] if i else None

    def _check_voter_changes(self, node: RaftNode, verified: int, effects: Effects | None,
                             now: float) -> None:
        """The node's log past ``verified`` (its prefix equal to the committed log) holds at
        most one voter change, of one member from the committed voters there. With the node's
        rule (a change is appended only once the previous one committed, and a new leader
        commits an entry of its epoch first) this holds for every log, since each is a prefix of
        some leader's log, whose committed part the checker learned when it stepped."""
        n, log = node.node_id, node.log
        end = log.end_offset()
        key = (verified, end, log.last_epoch())
        if (effects is not None and effects.truncated_to is None
                and self._voter_scan.get(n) == key):
            return  # nothing past the committed log changed since the last scan
        self._voter_scan[n] = key
        voters = self.committed_voters_below(verified)
        change: tuple[int, frozenset[int], frozenset[int]] | None = None
        offset = verified
        while offset < end:
            chunk = log.read(offset, end - offset)
            for entry in chunk:
                a = entry.payload
                if not isinstance(a, VoterAssignment):
                    continue
                new = frozenset(a.current_voters)
                if voters is not None and new != voters:
                    if len(new ^ voters) > 1:
                        self._fail(now, n, f"holds an uncommitted voter change {sorted(voters)} "
                                           f"-> {sorted(new)} at offset {entry.offset}: more "
                                           "than one member")
                    if change is not None:
                        self._fail(now, n, "holds two uncommitted voter changes: "
                                           f"{sorted(change[1])} -> {sorted(change[2])} at "
                                           f"offset {change[0]}, then {sorted(voters)} -> "
                                           f"{sorted(new)} at offset {entry.offset}")
                    change = (entry.offset, voters, new)
                voters = new
            offset += len(chunk)
