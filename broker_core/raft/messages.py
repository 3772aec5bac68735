"""The quorum's messages as plain values, named after KIP-595's fields.

These are the sans-IO core's inputs and outputs; :mod:`broker_core.raft.wire` encodes them.
On the wire they use Kafka's api keys: Vote 52, BeginQuorumEpoch 53, EndQuorumEpoch 54, Fetch 1
(with KIP-595's ``LastFetchedEpoch``, ``DivergingEpoch`` and ``CurrentLeader`` fields), and
DescribeQuorum 55 (its schema only). Kafka's requests carry a topic/partition list because one
raft client could host several partitions; Sluice's quorum has exactly one metadata partition,
so the values here hold that one partition's fields flat, and the wire module wraps them.

Every message travels in an :class:`Envelope` that names its source, destination and
correlation id, as a connection and a request header do on the wire. A response carries the
correlation id of the request it answers; the core ignores responses it is not waiting for,
which makes duplicated and late responses harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.raft.entries import LogEntry
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
      INCONSISTENT_CLUSTER_ID.
    - ``leader_id`` / ``leader_epoch``: KIP-595's ``CurrentLeader``: the answering node's view.
    - ``high_watermark``: the leader's high watermark (-1 when not answering as leader).
    - ``diverging_epoch``: set instead of ``records`` when the fetch position does not match.
    - ``records``: entries from ``fetch_offset`` on, in order. There are no snapshots yet, so a
      leader never answers with a snapshot id: the whole log is always available.
    """

    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int
    diverging_epoch: DivergingEpoch | None = None
    records: tuple[LogEntry, ...] = ()


Request = VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
Response = VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
Message = Request | Response

REQUEST_TYPES = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest)


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
