"""Which nodes vote: the latest :class:`VoterAssignment` in a node's own log.

A node acts on the latest *appended* assignment, committed or not: that is what makes
single-member changes safe in Raft (any two majorities of configurations that differ by one
member overlap, as long as a change is only appended once the previous one is committed).
Only *committed* assignments are persisted in the quorum-state file (``applied_offset`` and
its voters); the uncommitted ones are found again at start by scanning the log forward from
there, and forgotten when a truncation removes them (the node reverts to the assignment before).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker_core.raft.entries import LogEntry, VoterAssignment
from broker_core.raft.log import IRaftLog

_SCAN_CHUNK = 1000


class VoterChangeRejected(ValueError):
    """A proposed assignment that is not a safe single-member change; says why."""


@dataclass(frozen=True, slots=True)
class VoterHistoryState:
    applied_offset: int
    voters: frozenset[int]
    target_voters: tuple[int, ...] | None


class VoterSetHistory:
    """The committed voter set plus the uncommitted assignments appended after it.

    Invariants: ``applied_offset`` < the offset of every pending assignment; pending
    assignments are in offset order; :attr:`voters` is the last pending assignment's current
    voters, or the committed voters when none is pending.
    """

    def __init__(self, applied_offset: int, voters: Iterable[int],
                 target_voters: tuple[int, ...] | None = None) -> None:
        self.applied_offset = applied_offset
        self.committed_voters = frozenset(voters)
        self.committed_target = target_voters
        self._pending: list[tuple[int, VoterAssignment]] = []
        # Committed assignments by offset, oldest first, for the voters a snapshot at some
        # committed offset records (:meth:`assignment_at`). Assignments are rare; kept whole.
        self._committed: list[tuple[int, tuple[int, ...], tuple[int, ...] | None]] = [
            (applied_offset, tuple(sorted(self.committed_voters)), target_voters)]
        # Every node named as a current or target voter since this history began: whom a
        # candidate that keeps losing asks too (`node_roles/candidate.py` `request_votes`).
        self.known: set[int] = set(self.committed_voters) | set(target_voters or ())

    @classmethod
    def recover(cls, applied_offset: int, voters: Iterable[int],
                target_voters: tuple[int, ...] | None, log: IRaftLog) -> VoterSetHistory:
        """The history after a restart: the persisted committed state, then every assignment
        the log holds after ``applied_offset`` (the forward scan)."""
        history = cls(applied_offset, voters, target_voters)
        # Entries below the log start are covered by a snapshot, whose voters the caller
        # passed in when they are newer than the persisted ones.
        offset, end = max(applied_offset + 1, log.start_offset()), log.end_offset()
        while offset < end:
            chunk = log.read(offset, _SCAN_CHUNK)
            history.appended(chunk)
            offset += len(chunk)
        return history

    @property
    def voters(self) -> frozenset[int]:
        if self._pending:
            return frozenset(self._pending[-1][1].current_voters)
        return self.committed_voters

    @property
    def target_voters(self) -> tuple[int, ...] | None:
        """The ``TargetVoters`` of the latest assignment, committed or not."""
        if self._pending:
            return self._pending[-1][1].target_voters
        return self.committed_target

    @property
    def latest_offset(self) -> int:
        """The offset of the latest assignment (``applied_offset`` when none is pending)."""
        return self._pending[-1][0] if self._pending else self.applied_offset

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def appended(self, entries: Iterable[LogEntry]) -> bool:
        """Note newly appended entries; True if the voter set changed."""
        before = self.voters
        for entry in entries:
            if isinstance(entry.payload, VoterAssignment):
                self._pending.append((entry.offset, entry.payload))
                self.known.update(entry.payload.current_voters, entry.payload.target_voters or ())
        return self.voters != before

    def truncated(self, offset: int) -> bool:
        """The log now ends at ``offset``; True if the voter set reverted."""
        if offset <= self.applied_offset:
            raise ValueError(f"truncation to {offset} removes the committed voter assignment "
                             f"at {self.applied_offset}")
        before = self.voters
        self._pending = [(o, a) for o, a in self._pending if o < offset]
        return self.voters != before

    def committed(self, high_watermark: int) -> bool:
        """Entries below ``high_watermark`` are committed; True if a pending assignment became
        committed (the quorum state to persist changed)."""
        changed = False
        while self._pending and self._pending[0][0] < high_watermark:
            offset, assignment = self._pending.pop(0)
            self.applied_offset = offset
            self.committed_voters = frozenset(assignment.current_voters)
            self.committed_target = assignment.target_voters
            self._committed.append((offset, tuple(assignment.current_voters),
                                    assignment.target_voters))
            changed = True
        return changed

    def assignment_at(self, end_offset: int
                      ) -> tuple[int, tuple[int, ...], tuple[int, ...] | None]:
        """``(offset, current voters, target voters)`` of the latest committed assignment below
        ``end_offset`` (at most the high watermark): the voters a snapshot ending there holds.
        Raises ValueError when this history starts above ``end_offset``."""
        found = [c for c in self._committed if c[0] < end_offset]
        if not found:
            raise ValueError(f"no committed voter assignment known below offset {end_offset}")
        return found[-1]

    def check_change(self, proposed: VoterAssignment, leader_id: int) -> None:
        """Raise :class:`VoterChangeRejected` unless appending ``proposed`` is safe now: the same
        voters (a change of ``TargetVoters`` alone is always safe), or no other change pending,
        at most one voter added or removed, and the leader stays a voter
        (a leader removes itself last, by resigning and letting the next leader do
        it)."""
        if proposed.target_voters is not None and not proposed.target_voters:
            raise VoterChangeRejected("a reassignment target needs at least one voter")
        new = frozenset(proposed.current_voters)
        if new == self.voters:
            # The same voters (only TargetVoters changes): no new configuration, so it needs
            # no commit of the previous one first.
            return
        if self._pending:
            raise VoterChangeRejected(
                f"the voter assignment at offset {self._pending[-1][0]} is not committed yet")
        if len(new ^ self.voters) > 1:
            raise VoterChangeRejected(
                f"{sorted(self.voters)} -> {sorted(new)} changes more than one voter")
        if leader_id not in new:
            raise VoterChangeRejected(f"the leader {leader_id} cannot remove itself; it must "
                                      "resign first")
