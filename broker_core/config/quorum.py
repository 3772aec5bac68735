"""Timing and sizing of the quorum, with Kafka's ``quorum.*`` names and defaults
(``QuorumConfig.java``)."""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.config.parsing import split_host_port


class RaftConfigError(ValueError):
    """A bad setting; the message names the key."""


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """- ``election_timeout_ms`` (``quorum.election.timeout.ms``): a voter without a leader
      stands after a random time in ``[T, 2T)``; randomising keeps candidates from splitting
      the vote forever.
    - ``fetch_timeout_ms`` (``quorum.fetch.timeout.ms``): a follower that has not heard from
      its leader for this long stands; a leader that has not been fetched from by a majority
      for this long resigns (docs/design.md#zombie-leader).
    - ``election_backoff_max_ms`` (``quorum.election.backoff.max.ms``): the cap of the wait
      before standing after an EndQuorumEpoch.
    - ``request_timeout_ms`` (``quorum.request.timeout.ms``): when an unanswered fetch is sent
      again; must exceed ``fetch_max_wait_ms``, or every long poll would time out.
    - ``retry_backoff_ms`` (``quorum.retry.backoff.ms``): the pause before retrying a failed
      fetch and between resends of Vote, BeginQuorumEpoch and EndQuorumEpoch.
    - ``fetch_max_wait_ms`` (``replica.fetch.wait.max.ms``): how long a leader holds a fetch
      that it has nothing new for.
    - ``fetch_max_entries``: entries per fetch response (a byte limit once entries are bytes).
    - ``snapshot_interval_entries`` (``quorum.snapshot.interval.entries``) and
      ``snapshot_interval_bytes`` (``quorum.snapshot.interval.bytes``, Kafka's
      ``metadata.log.max.record.bytes.between.snapshots``): the state machine's owner asks for a
      snapshot once this many committed entries, or payload bytes, were applied since the last
      one (0 disables that trigger; both 0: no snapshots).
    - ``snapshot_retain_entries`` (``quorum.snapshot.retain.entries``): after a snapshot the
      log's prefix below it is deleted, except for the last this-many entries below the log
      end, so a follower slightly behind still fetches entries rather than the whole
      snapshot; one further behind fetches the leader's snapshot (FetchSnapshot). The default
      keeps as many entries as the default snapshot interval, so about two intervals of log
      stay on disk; ``None`` keeps the whole log (no prefix is ever deleted).
    - ``fetch_snapshot_max_bytes``: the most bytes of a snapshot one FetchSnapshot answer
      carries (KIP-630's ``MaxBytes``); a larger snapshot comes in several chunks, so one
      step never reads, and one response never carries, more than this.
    """

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = 500
    fetch_max_entries: int = 500
    snapshot_interval_entries: int = 100_000
    snapshot_interval_bytes: int = 20 * 1024 * 1024
    snapshot_retain_entries: int | None = 100_000
    fetch_snapshot_max_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        for key, value in (("quorum.election.timeout.ms", self.election_timeout_ms),
                           ("quorum.fetch.timeout.ms", self.fetch_timeout_ms),
                           ("quorum.election.backoff.max.ms", self.election_backoff_max_ms),
                           ("quorum.request.timeout.ms", self.request_timeout_ms),
                           ("quorum.retry.backoff.ms", self.retry_backoff_ms),
                           ("fetch.max.entries", self.fetch_max_entries),
                           ("fetch.snapshot.max.bytes", self.fetch_snapshot_max_bytes)):
            if value <= 0:
                raise RaftConfigError(f"{key} must be positive, got {value}")
        for key, value in (("quorum.snapshot.interval.entries", self.snapshot_interval_entries),
                           ("quorum.snapshot.interval.bytes", self.snapshot_interval_bytes),
                           ("quorum.snapshot.retain.entries",
                            0 if self.snapshot_retain_entries is None
                            else self.snapshot_retain_entries)):
            if value < 0:
                raise RaftConfigError(f"{key} must not be negative, got {value}")
        if self.fetch_max_wait_ms < 0:
            raise RaftConfigError(f"replica.fetch.wait.max.ms must not be negative, got "
                                  f"{self.fetch_max_wait_ms}")
        if self.request_timeout_ms <= self.fetch_max_wait_ms:
            raise RaftConfigError(
                f"quorum.request.timeout.ms ({self.request_timeout_ms}) must exceed "
                f"replica.fetch.wait.max.ms ({self.fetch_max_wait_ms})")
        if self.fetch_timeout_ms <= self.fetch_max_wait_ms:
            raise RaftConfigError(
                f"quorum.fetch.timeout.ms ({self.fetch_timeout_ms}) must exceed "
                f"replica.fetch.wait.max.ms ({self.fetch_max_wait_ms}), or an idle follower "
                "would stand while its leader is fine")


@dataclass(frozen=True, slots=True)
class VoterAddress:
    """Where voter ``node_id`` listens for the quorum's requests."""

    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}"


def parse_quorum_voters(raw: str, key: str = "quorum.voters") -> dict[int, VoterAddress]:
    """Kafka's ``quorum.voters``: ``id@host:port`` entries separated by commas
    (``1@a:9093,2@b:9093,3@c:9093``; an IPv6 host goes in brackets: ``1@[::1]:9093``).

    Returns the voters by id. Raises :class:`RaftConfigError` naming ``key`` and the bad entry
    for an empty list, an entry without ``@`` or ``:port``, an id that is not a non-negative
    integer, a port outside 1-65535, or an id listed twice.
    """
    expected = "id@host:port[,id@host:port...]"
    entries = [e.strip() for e in raw.split(",")]
    if not raw.strip() or not all(entries):
        raise RaftConfigError(f"invalid value {raw!r} for {key!r}: expected {expected}")
    voters: dict[int, VoterAddress] = {}
    for entry in entries:
        node, at, address = entry.partition("@")
        if not at or not node.isdigit() or not node.isascii():
            raise RaftConfigError(f"invalid entry {entry!r} in {key!r}: expected id@host:port "
                                  "with a non-negative integer id")
        host_port = split_host_port(address)
        if host_port is None:
            raise RaftConfigError(f"invalid entry {entry!r} in {key!r}: expected id@host:port "
                                  "with a port from 1 to 65535")
        host, port = host_port
        node_id = int(node)
        if node_id in voters:
            raise RaftConfigError(f"invalid value {raw!r} for {key!r}: voter {node_id} is "
                                  "listed twice")
        voters[node_id] = VoterAddress(node_id, host, port)
    return voters


def parse_configured_voters(raw: str, key: str = "quorum.voters") -> dict[int, VoterAddress | None]:
    """``quorum.voters`` where an entry may also be a bare id (``1,2,3`` or
    ``1@a:9093,2,3``): a voter whose endpoint is learned through DiscoverBrokers (``None``).
    Raises :class:`RaftConfigError` as :func:`parse_quorum_voters` does."""
    entries = [e.strip() for e in raw.split(",")]
    if not raw.strip() or not all(entries):
        raise RaftConfigError(f"invalid value {raw!r} for {key!r}: expected "
                              "id[@host:port][,id[@host:port]...]")
    voters: dict[int, VoterAddress | None] = {}
    for entry in entries:
        if entry.isdigit() and entry.isascii():
            node_id, address = int(entry), None
        else:
            ((node_id, address),) = parse_quorum_voters(entry, key).items()
        if node_id in voters:
            raise RaftConfigError(f"invalid value {raw!r} for {key!r}: voter {node_id} is "
                                  "listed twice")
        voters[node_id] = address
    return voters


def parse_bootstrap_servers(raw: str, key: str = "bootstrap.servers") -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (an IPv6 host in brackets), the servers a quorum node asks
    with DiscoverBrokers. Raises :class:`RaftConfigError` naming ``key`` and the bad entry."""
    entries = [e.strip() for e in raw.split(",")]
    if not raw.strip() or not all(entries):
        raise RaftConfigError(f"invalid value {raw!r} for {key!r}: expected host:port[,...]")
    servers = []
    for entry in entries:
        # The voters' parser checks hosts and ports; an id in front makes it one.
        try:
            address = parse_quorum_voters(f"0@{entry}", key)[0]
        except RaftConfigError:
            raise RaftConfigError(f"invalid entry {entry!r} in {key!r}: expected host:port "
                                  "with a port from 1 to 65535") from None
        servers.append((address.host, address.port))
    return servers
