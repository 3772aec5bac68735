"""The quorum's messages as plain values, named after KIP-595's fields.

These are the sans-IO core's inputs and outputs; :mod:`broker_core.raft.wire` encodes them. On
the wire they use Kafka's api keys: Vote 52, BeginQuorumEpoch 53, EndQuorumEpoch 54, Fetch 1
(with KIP-595's ``LastFetchedEpoch``, ``DivergingEpoch`` and ``CurrentLeader`` fields), and for
admin clients DescribeQuorum 55 and AlterPartitionReassignments 45 (the voter
reassignment, here :class:`AlterVotersRequest`), and KIP-630's FetchSnapshot 59 for a fetcher
whose next entries the leader only holds in a snapshot. Kafka's requests carry a topic/partition
list because one raft client could host several partitions; Sluice's quorum has exactly one
metadata partition, so the values here hold that one partition's fields flat, and the wire
module wraps them.

Every message travels in an :class:`Envelope` that names its source, destination and
correlation id, as a connection and a request header do on the wire. A response carries the
correlation id of the request it answers; the core ignores responses it is not waiting for,
which makes duplicated and late responses harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.raft.entries import LogEntry
from broker_core.raft.snapshots import SnapshotId
from broker_core.wire.errors import ErrorCode

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A candidate asks for a vote (api 52).

    - ``candidate_epoch``: the epoch the candidate stands in.
    - ``candidate_id``: the candidate.
    - ``last_offset_epoch`` / ``last_offset``: the epoch of the candidate's last entry and its
      log end offset; a voter grants only to a log at least as up to date as its own.
    """

    cluster_id: str
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """The answer to a :class:`VoteRequest`.

    - ``error_code``: NONE, FENCED_LEADER_EPOCH (the candidate's epoch is older than the voter's),
      INCONSISTENT_CLUSTER_ID.
    - ``leader_id`` / ``leader_epoch``: the voter's view, so a stale candidate learns the current
      epoch and, if known, its leader.
    - ``vote_granted``: whether the voter voted for the candidate in ``leader_epoch``.
    """

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    """A new leader announces itself to the voters (api 53). Pull-based replication means a
    voter would otherwise only learn of the leader by fetching from it."""

    cluster_id: str
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    """``error_code``: NONE, FENCED_LEADER_EPOCH (the voter is already in a newer epoch, named
    by ``leader_id`` / ``leader_epoch``), INCONSISTENT_CLUSTER_ID."""

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    """A leader steps down (api 54), gracefully or because it lost its majority.

    ``preferred_successors`` lists voters by how far they have replicated, best first; a voter
    waits longer before standing the further back it is in the list, so the most up-to-date
    voter usually stands first and wins.
    """

    cluster_id: str
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower or observer pulls entries from the leader (api 1, KIP-595 fields).

    - ``replica_id``: the fetching node.
    - ``current_leader_epoch``: the epoch the fetcher believes current; the leader answers
      FENCED_LEADER_EPOCH if it is older, UNKNOWN_LEADER_EPOCH if it is newer than its own.
    - ``fetch_offset``: the fetcher's log end offset.
    - ``last_fetched_epoch``: the epoch of the fetcher's entry at ``fetch_offset - 1`` (0 for an
      empty log); the leader checks the pair against its own log before answering with entries.
    - ``max_wait_ms``: how long the leader may hold the request when it has nothing new.
    """

    cluster_id: str
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """The fetcher's log diverges from the leader's: the leader's largest epoch not above the
    fetcher's ``last_fetched_epoch``, and where that epoch ends in the leader's log. The fetcher
    truncates to the common point it can derive and fetches again (possibly several rounds)."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """The leader's answer to a :class:`FetchRequest`.

    - ``error_code``: NONE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER,
      INCONSISTENT_CLUSTER_ID, or :data:`NOT_FOLLOWER` (the fetcher's removal from the voters is
      committed; ``high_watermark`` is then the leader's, past that removal).
    - ``leader_id`` / ``leader_epoch``: KIP-595's ``CurrentLeader``: the answering node's view.
    - ``high_watermark``: the leader's high watermark (-1 when not answering as leader).
    - ``diverging_epoch``: set instead of ``records`` when the fetch position does not match.
    - ``snapshot_id``: set instead of ``records`` (KIP-630) when the entries the fetcher needs
      next are below the leader's log start: the leader's latest snapshot, which the fetcher
      gets with :class:`FetchSnapshotRequest` before fetching again from its end.
    - ``records``: entries from ``fetch_offset`` on, in order.
    """

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int
    diverging_epoch: DivergingEpoch | None = None
    records: tuple[LogEntry, ...] = ()
    snapshot_id: SnapshotId | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """A follower or observer pulls a chunk of the leader's snapshot (api 59, KIP-630).

    - ``replica_id`` / ``current_leader_epoch``: as in :class:`FetchRequest`.
    - ``snapshot_id``: the snapshot a :class:`FetchResponse` named.
    - ``position``: the byte offset in the snapshot's file of the chunk wanted.
    - ``max_bytes``: the most bytes the answer may carry.
    """

    cluster_id: str
    replica_id: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    """The leader's answer to a :class:`FetchSnapshotRequest`.

    - ``error_code``: NONE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER,
      INCONSISTENT_CLUSTER_ID, INVALID_REQUEST, SNAPSHOT_NOT_FOUND (the leader no longer keeps
      that snapshot: it made newer ones), POSITION_OUT_OF_RANGE.
    - ``leader_id`` / ``leader_epoch``: the answering node's view (``CurrentLeader``).
    - ``snapshot_id``: the snapshot the chunk is from (the request's).
    - ``size``: the whole snapshot file's size in bytes (-1 with an error).
    - ``position`` / ``data``: the chunk: ``data`` are the file's bytes from ``position`` on.
    """

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    snapshot_id: SnapshotId
    size: int = -1
    position: int = -1
    data: bytes = b""


#: The design's ``NOT_FOLLOWER``: a leader's answer to a fetch from a voter whose removal has
#: committed but which does not hold that removal yet; the fetcher stops acting as a voter. Kafka
#: has no such code; Sluice sends Kafka's ``VOTER_NOT_FOUND`` (127, "the voter is not part of
#: the voter set"), which says the same and which any Kafka client can name.
NOT_FOLLOWER = ErrorCode.VOTER_NOT_FOUND


@dataclass(frozen=True, slots=True)
class AlterVotersRequest:
    """An admin asks the leader to move the voters to ``target_voters`` (the design's use of
    AlterPartitionReassignments, api 45, on ``__cluster_metadata``-0).

    - ``target_voters``: the voters wanted; ``None`` cancels an ongoing reassignment (the
      quorum stays with its current voters), as resubmitting the current voters does.
    - ``timeout_ms``: how long the leader may hold the request before answering
      REQUEST_TIMED_OUT (the reassignment may still be accepted later; the client retries).
    """

    target_voters: tuple[int, ...] | None
    timeout_ms: int = 60_000


@dataclass(frozen=True, slots=True)
class AlterVotersResponse:
    """The answer to an :class:`AlterVotersRequest`, sent once it is settled.

    - ``error_code``: NONE once an assignment with the requested ``TargetVoters`` (or, for a
      cancellation, with the current voters and no target) is committed; NOT_LEADER_OR_FOLLOWER
      from a non-leader, or when the leader stepped down before then; INVALID_REPLICA_ASSIGNMENT
      for an empty target or duplicate ids; REQUEST_TIMED_OUT.
    - ``leader_id`` / ``leader_epoch``: the responder's view (-1: no leader known).
    """

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    """An admin asks the leader for the quorum's state (api 55)."""


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica in a :class:`DescribeQuorumResponse` (KIP-595 and KIP-836 fields).

    - ``log_end_offset``: the highest fetch offset that matched the leader's log in its epoch
      (the leader's own log end for itself); -1 when the leader has not heard from it.
    - ``last_fetch_ms`` / ``last_caught_up_ms``: the leader's clock at its latest fetch, and the
      latest time it was known to hold the leader's whole log (see
      :meth:`~broker_core.raft.node.RaftNode.describe_quorum`); -1 when unknown.
    """

    replica_id: int
    log_end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    """The leader's view of the quorum, or an error naming the leader a non-leader knows.

    - ``error_code``: NONE, or NOT_LEADER_OR_FOLLOWER (then only the leader fields are set).
    - ``current_voters``: the voters of the latest assignment in the leader's log.
    - ``target_voters``: where an ongoing reassignment is heading, ``None`` when none is (a
      Sluice extension of the design's field: a tagged field on the wire).
    - ``observers``: replicas fetching from the leader in its epoch that are not voters.
    """

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int = -1
    current_voters: tuple[ReplicaState, ...] = ()
    target_voters: tuple[ReplicaState, ...] | None = None
    observers: tuple[ReplicaState, ...] = ()


Request = (VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
           | FetchSnapshotRequest | AlterVotersRequest | DescribeQuorumRequest)
Response = (VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
            | FetchSnapshotResponse | AlterVotersResponse | DescribeQuorumResponse)
Message = Request | Response

REQUEST_TYPES = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest,
                 FetchSnapshotRequest, AlterVotersRequest, DescribeQuorumRequest)
#: Requests from admin clients rather than from quorum members.
ADMIN_REQUEST_TYPES = (AlterVotersRequest, DescribeQuorumRequest)


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message in flight: ``source`` and ``destination`` node ids and the ``correlation_id``
    of the exchange (a response reuses its request's)."""

    source: int
    destination: int
    correlation_id: int
    message: Message

    @property
    def is_request(self) -> bool:
        return isinstance(self.message, REQUEST_TYPES)
