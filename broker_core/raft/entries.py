"""What the metadata log holds: one :class:`LogEntry` per offset, carrying either an opaque
payload (a metadata record, bytes) or a control record.

The Raft core reasons about entries, not bytes. :mod:`broker_core.raft.records` maps each
entry to a RecordBatch v2 batch whose ``partitionLeaderEpoch`` is the entry's epoch; control
records become control batches (attributes bit 5) whose key carries the control type below.

Control types: Kafka's KIP-595 gave type 2 to ``LeaderChange``; the design also asks for type 2
for its ``VoterAssignmentMessage``. As with DescribeQuorum's api key (docs/design.md), Kafka's
number wins and the Sluice-only record takes a number from 1000 up, so a Kafka tool that dumps the
log never misreads one as the other.
"""

from __future__ import annotations

from dataclasses import dataclass

LEADER_CHANGE_CONTROL_TYPE = 2
VOTER_ASSIGNMENT_CONTROL_TYPE = 1000


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """Appended by a new leader as the first entry of its epoch (KIP-595 ``LeaderChangeMessage``).

    Besides recording who led from which offset, it is what lets a new leader commit: Raft's
    commit rule only counts entries of the leader's own epoch, and without this entry a leader
    with nothing to propose would never advance the high watermark over older entries.

    - ``leader_id``: the new leader.
    - ``voters``: the voters of the epoch, as the leader saw them.
    - ``granting_voters``: the voters whose votes elected it (debugging aid, as in Kafka).
    """

    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class VoterAssignment:
    """The design's ``VoterAssignmentMessage``: the voter set in force from this entry on.

    - ``cluster_id``: the cluster the quorum belongs to.
    - ``current_voters``: the voters once this entry is appended (a node acts on the latest
      appended assignment, committed or not).
    - ``target_voters``: where an ongoing reassignment is heading, or ``None`` when none is.
    """

    cluster_id: str
    current_voters: tuple[int, ...]
    target_voters: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.current_voters:
            raise ValueError("a voter assignment needs at least one current voter")
        if len(set(self.current_voters)) != len(self.current_voters):
            raise ValueError(f"duplicate voter ids in {self.current_voters}")


ControlRecord = LeaderChange | VoterAssignment
Payload = bytes | LeaderChange | VoterAssignment


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One entry of the metadata log: ``offset`` (0-based, dense), the leader ``epoch`` that
    appended it (>= 1: epoch 0 never has a leader), and its ``payload``. Two entries are the same
    entry exactly when all three fields are equal."""

    offset: int
    epoch: int
    payload: Payload

    @property
    def is_control(self) -> bool:
        return not isinstance(self.payload, bytes)
