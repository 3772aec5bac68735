"""The metadata quorum's admin client (``sluice quorum describe | reassign``), blocking.

It speaks to quorum listeners (``sluice-quorum --listen``, or a broker's ``quorum.listener`` in
quorum mode) with DescribeQuorum (55) and AlterPartitionReassignments (45) on
``__cluster_metadata``-0, and follows the quorum admin retry rules as
:func:`broker_core.raft.admin.next_action` states them: success is returned; a retriable error
or no answer is retried with a doubling backoff; any other error fails; nothing is retried past
the overall timeout. A reassignment is always resent until answered (resubmitting the same
target is idempotent at the leader).

Finding the leader (the admin client uses DiscoverBrokers and Metadata in
order to discover the current leader). The client asks the servers given (``--bootstrap-server``,
any quorum nodes, one is enough) with **DiscoverBrokers** (Sluice key 1007), in order, until an
answer names a leader whose endpoint it knows, and sends the request straight there:

- it sends DiscoverBrokers as a tool that is no node: node id -1, no other nodes, no cluster
  id, no quorum view. The listener merges what a request tells into its directory only when it
  is news, and ignores negative node ids and a view that is not newer than its own, so the
  request teaches it nothing and leaves its directory as it was;
- the answers are merged into the client's own
  :class:`~broker_core.raft.discovery.Directory`, with its monotonic rules (an endpoint only by a
  later boot time, the quorum view only by a higher epoch and voters offset); an answer of
  another cluster than the first one's is refused (:class:`~broker_core.raft.discovery
  .ClusterMismatch`) and counts as a failed server;
- a node that answered is reached where the client reached it, whatever it advertises for
  itself (a listener bound to every interface advertises an address others cannot use);
- NOT_LEADER_OR_FOLLOWER naming a leader: straight to that leader's endpoint, or a new
  DiscoverBrokers round at once when its endpoint is unknown; no leader known, no answer, or a
  leader that cannot be reached: back off (doubling) and ask DiscoverBrokers again. Redirects
  without a backoff are bounded (two nodes naming each other back off like an unknown leader).

A broker's quorum listener serves brokers only (everything but ApiVersions and DescribeQuorum,
DiscoverBrokers included): given a ``credential`` (the cluster login, from the brokers'
``cluster.secret.file``) the client logs in on every connection before its first request. A
refused login, or CLUSTER_AUTHORIZATION_FAILED (no credential given), fails at once: retrying
cannot help. When the quorum listener is SSL or SASL_SSL, ``security`` (a
:class:`~consumer_client.security.ClientSecurity` with ``security.protocol=SSL``, from the
tool's ``--command-config``) makes every connection TLS, the node's certificate checked against
``ssl.ca.location`` and the host name; a refused handshake fails at once, like a refused login.

Invariant: every request goes to the node the client believes leads, and the client never
sleeps without :func:`~broker_core.raft.admin.next_action` (or the redirect bound) asking for it.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from typing import Any

from broker_core.raft import discovery, wire
from broker_core.raft.admin import Step, next_action, retry_backoff
from broker_core.raft.discovery import NO_NODE, Directory, Gossip, NodeEndpoint, QuorumView
from broker_core.raft.messages import (
    AlterVotersRequest,
    AlterVotersResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ReplicaState,
)
from broker_core.security.sasl import ClientCredential, SaslAuthenticationError, SaslLogin
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client.blocking_clock import SYSTEM_CLOCK, BlockingClock
from consumer_client.connection import BrokerConnection, parse_servers
from consumer_client.connection_cache import ConnectionCache
from consumer_client.security import AUTHENTICATION_ERRORS, ClientSecurity

#: The DiscoverBrokers version the client speaks (the only one defined).
DISCOVER_BROKERS_VERSION = 0

#: What the client says of itself in DiscoverBrokers: no node (id -1), nothing known. The
#: listener learns nothing from it (see the module docstring).
ADMIN_GOSSIP = Gossip(NodeEndpoint(NO_NODE, "", 0, -1), (), QuorumView())

Address = tuple[str, int]


class QuorumAdminError(Exception):
    """An admin operation on the quorum failed; ``code`` is the Kafka error, if any."""

    def __init__(self, code: ErrorCode | None, message: str) -> None:
        super().__init__(message)
        self.code = code


def log_in(conn: BrokerConnection, credential: ClientCredential) -> None:
    """Run the SASL exchange of ``credential`` on ``conn``; QuorumAdminError when the server
    refuses it or does not prove it knows the secret (SCRAM's server signature)."""
    login = SaslLogin(credential, f"{conn.host}:{conn.port}")
    request = login.first_request()
    try:
        while request is not None:
            api_key, version, body = request
            request = login.answer(conn.request(api_key, body, version=version))
    except SaslAuthenticationError as e:
        code = None if e.error_code is None else ErrorCode(e.error_code)
        raise QuorumAdminError(code, f"{e}: is --secret-file the brokers' "
                                     "cluster.secret.file?") from None


def quorum_security(values: dict[str, str]) -> ClientSecurity:
    """The ``--command-config`` keys as the TLS settings of a connection to a quorum listener:
    ``security.protocol`` PLAINTEXT or SSL and the ``ssl.*`` keys. A SASL protocol is refused
    (ConfigError naming the key): the quorum port's only login is the cluster login, which the
    tool takes from ``--secret-file``."""
    from broker_core.config.parsing import ConfigError  # noqa: PLC0415

    security = ClientSecurity.from_mapping(values)
    if security.protocol.uses_sasl:
        tls = "SSL" if security.protocol.uses_tls else "PLAINTEXT"
        raise ConfigError(f"security.protocol={security.protocol.value}: the quorum listener's "
                          "only login is the cluster login (--secret-file); use "
                          f"security.protocol={tls}", "security.protocol")
    return security


def parse_voters(raw: str) -> tuple[int, ...]:
    """``--voters 4,5,6``: distinct non-negative node ids, at least one. Raises ValueError
    naming what is wrong."""
    items = [x.strip() for x in raw.split(",")]
    if not raw.strip() or any(not x for x in items):
        raise ValueError(f"--voters expects node ids separated by commas, got {raw!r}")
    ids = []
    for x in items:
        if not x.isdigit():
            raise ValueError(f"--voters: {x!r} is not a node id (a non-negative integer)")
        ids.append(int(x))
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"--voters names {', '.join(map(str, dupes))} more than once")
    return tuple(ids)


def _name(address: Address) -> str:
    return f"{address[0]}:{address[1]}"


class QuorumAdminClient:
    """See the module docstring. ``connect`` and ``clock`` (time and waits, the blocking
    clients' :class:`~consumer_client.blocking_clock.BlockingClock`) are injectable for
    tests. Connections are kept per address in the client library's
    :class:`~consumer_client.connection_cache.ConnectionCache`, logged in as they open.
    :attr:`directory` is what DiscoverBrokers told the client; :attr:`leader_id` the leader of
    the latest answer, if any."""

    def __init__(self, servers: str, *, timeout_s: float = 30.0,
                 retry_backoff_ms: float = 100.0, max_backoff_ms: float = 1000.0,
                 connect: Callable[..., BrokerConnection] = BrokerConnection,
                 clock: BlockingClock = SYSTEM_CLOCK,
                 credential: ClientCredential | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.servers: list[Address] = parse_servers(servers)
        #: The cluster login each connection starts with (None: connect anonymously).
        self.credential = credential
        #: TLS to the quorum listeners (None: plaintext); see :func:`quorum_security`.
        self.security = security
        self.timeout_s = timeout_s
        self.retry_backoff_ms = retry_backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self._connect = connect
        self.clock = clock
        self.directory = Directory(ADMIN_GOSSIP.node)
        self._reached: dict[int, Address] = {}  # node id -> where it answered DiscoverBrokers
        self._conns: ConnectionCache[Address] = ConnectionCache(self._open)
        self._leader: Address | None = None  # where the latest successful answer came from
        self.leader_id: int | None = None

    def close(self) -> None:
        self._conns.close()

    def __enter__(self) -> QuorumAdminClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the operations -------------------------------------------------------------------

    def describe(self) -> DescribeQuorumResponse:
        """The leader's DescribeQuorum answer."""
        resp = self._call(DescribeQuorumRequest())
        assert isinstance(resp, DescribeQuorumResponse)
        return resp

    def reassign(self, target: Sequence[int] | None) -> AlterVotersResponse:
        """Ask the leader to move the voters to ``target`` (``None``: cancel); returns once
        the leader has committed the request (the moves follow: see :meth:`wait_for`)."""
        remaining_ms = max(1, int(self.timeout_s * 1000))
        req = AlterVotersRequest(None if target is None else tuple(target), remaining_ms)
        resp = self._call(req)
        assert isinstance(resp, AlterVotersResponse)
        return resp

    def wait_for(self, target: Sequence[int], poll_s: float = 0.2) -> DescribeQuorumResponse:
        """Poll DescribeQuorum until the voters are exactly ``target`` with no reassignment
        running; QuorumAdminError(REQUEST_TIMED_OUT) after the timeout."""
        deadline = self.clock.monotonic() + self.timeout_s
        wanted = sorted(target)
        while True:
            d = self.describe()
            if d.target_voters is None and sorted(r.replica_id for r in d.current_voters) == wanted:
                return d
            if self.clock.monotonic() + poll_s >= deadline:
                voters = ",".join(str(r.replica_id) for r in d.current_voters)
                raise QuorumAdminError(ErrorCode.REQUEST_TIMED_OUT,
                                       f"the voters are still {voters}, not "
                                       f"{','.join(map(str, wanted))}, after {self.timeout_s} s")
            self.clock.sleep(poll_s)

    # -- finding the leader ---------------------------------------------------------------------

    def endpoint_of(self, node_id: int) -> Address | None:
        """Where to reach node ``node_id``: where it answered, else what gossip says."""
        if node_id < 0:
            return None
        if node_id in self._reached:
            return self._reached[node_id]
        e = self.directory.endpoint(node_id)
        return None if e is None else (e.host, e.port)

    def discover(self, failures: dict[str, str], leader: int | None = None) -> Address | None:
        """One DiscoverBrokers round: ask the given servers, then the other nodes learned of,
        until the endpoint of ``leader`` (default: the leader of the view) is known; returns it
        (``None``: no leader known, or its endpoint is not)."""
        asked: set[Address] = set()
        while True:
            candidates = [*self.servers, *(
                (e.host, e.port) for e in self.directory.nodes.values())]
            todo = [a for a in candidates if a not in asked]
            if not todo:
                return None
            address = todo[0]
            asked.add(address)
            body = self._request(address, ApiKey.DISCOVER_BROKERS,
                                 discovery.gossip_body(ADMIN_GOSSIP),
                                 DISCOVER_BROKERS_VERSION, failures)
            if body is None:
                continue
            if body.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
                raise QuorumAdminError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, (
                    f"{_name(address)} serves the quorum to brokers only: pass the brokers' "
                    "cluster.secret.file with --secret-file (or $SLUICE_CLUSTER_SECRET_FILE)"
                    if self.credential is None else
                    f"{_name(address)} refused DiscoverBrokers after the cluster login"))
            if body.error_code != ErrorCode.NONE:
                failures[_name(address)] = f"DiscoverBrokers: {ErrorCode(body.error_code).name}"
                continue
            gossip = discovery.gossip_from_body(body)
            try:
                self.directory.merge(gossip)
            except discovery.ClusterMismatch as e:
                failures[_name(address)] = str(e)
                continue
            if gossip.node.node_id >= 0:
                self._reached[gossip.node.node_id] = address
            found = self.endpoint_of(self.directory.view.leader_id if leader is None
                                     else leader)
            if found is not None:
                return found

    # -- retries ----------------------------------------------------------------------------

    def _call(self, message: DescribeQuorumRequest | AlterVotersRequest
              ) -> DescribeQuorumResponse | AlterVotersResponse:
        key = wire.api_key_of(message)
        start = self.clock.monotonic()
        attempt = 1
        redirects = 0  # NOT_LEADER_OR_FOLLOWER redirects since the last backoff
        failures: dict[str, str] = {}
        target = self._leader
        named: int | None = None  # a leader named by a refusal, whose endpoint is unknown
        while True:
            if target is None:
                target = self.discover(failures, named)
                named = None
            resp = None if target is None else self._send(target, key, message, failures)
            elapsed_ms = (self.clock.monotonic() - start) * 1000
            action = next_action(resp, attempt=attempt, elapsed_ms=elapsed_ms,
                                 timeout_ms=self.timeout_s * 1000,
                                 retry_backoff_ms=self.retry_backoff_ms,
                                 max_backoff_ms=self.max_backoff_ms)
            if resp is not None and resp.leader_id >= 0:
                self.leader_id = resp.leader_id
            if action.step is Step.DONE:
                assert resp is not None
                self._leader = target
                return resp
            if action.step is Step.FAIL:
                raise self._failure(action.error, failures)
            attempt += 1
            self._leader = None
            delay_ms = action.delay_ms
            target = None  # DISCOVER: ask DiscoverBrokers again after the backoff
            if action.step is Step.SEND_TO:
                assert action.node_id is not None
                redirects += 1
                # Unknown endpoint: target stays None and the next turn asks DiscoverBrokers
                # where that node is.
                target = self.endpoint_of(action.node_id)
                named = action.node_id
                if redirects > len(self.servers) + len(self.directory.nodes):
                    # Nodes keep naming leaders that do not lead: back off as for no leader.
                    target = named = None
                    delay_ms = retry_backoff(attempt - 1, self.retry_backoff_ms,
                                             self.max_backoff_ms)
            if delay_ms:
                redirects = 0
                if elapsed_ms + delay_ms >= self.timeout_s * 1000:
                    raise self._failure(ErrorCode.REQUEST_TIMED_OUT, failures)
                self.clock.sleep(delay_ms / 1000)

    def _send(self, address: Address, key: int, message: Any, failures: dict[str, str]
              ) -> DescribeQuorumResponse | AlterVotersResponse | None:
        """One attempt at ``address``; ``None`` when it could not be reached or answered."""
        body = self._request(address, key, wire.request_body(message), wire.VERSIONS[key],
                             failures)
        if body is None:
            return None
        resp = wire.response_from_body(key, body)
        assert isinstance(resp, DescribeQuorumResponse | AlterVotersResponse)
        return resp

    def _open(self, address: Address) -> BrokerConnection:
        """A connection to ``address``, logged in with the cluster login when there is one
        (closed again when the login fails)."""
        read_timeout = self.timeout_s + 5.0  # the leader answers a reassignment before this
        tls = {} if self.security is None else {"security": self.security}
        conn = self._connect(*address, timeout=read_timeout, **tls)
        if self.credential is not None:
            try:
                log_in(conn, self.credential)
            except BaseException:
                conn.close()
                raise
        return conn

    def _request(self, address: Address, key: int, body: dict[str, Any], version: int,
                 failures: dict[str, str]) -> Any:
        """One request on the connection to ``address`` (opened if needed); ``None``, with
        the reason in ``failures``, when it could not be reached or answered."""
        connecting = address not in self._conns
        try:
            conn = self._conns.get(address)
            answer = conn.request(key, body, version=version)
        except (*AUTHENTICATION_ERRORS, ssl.SSLError) as e:
            if (isinstance(e, ssl.SSLEOFError | ssl.SSLZeroReturnError | ssl.SSLSyscallError)
                    or (isinstance(e, ssl.SSLError) and not connecting)):
                # Closed mid-handshake (a node stopping, say), or a TLS error on a connection
                # that was already up: as any lost connection.
                failures[_name(address)] = str(e) or type(e).__name__
                self._conns.drop(address)
                return None
            # The node's certificate was refused, or ours, or it speaks no TLS: the same
            # settings would be refused again.
            raise QuorumAdminError(None, f"TLS handshake with {_name(address)} refused: {e} "
                                         "(ssl.ca.location must hold the CA of the quorum "
                                         "listener's certificates, and a listener with "
                                         "ssl.client.auth=required needs "
                                         "ssl.certificate.location and ssl.key.location)"
                                   ) from None
        except OSError as e:
            failures[_name(address)] = str(e) or type(e).__name__
            self._conns.drop(address)
            return None
        failures.pop(_name(address), None)
        return answer

    def _failure(self, error: ErrorCode, failures: dict[str, str]) -> QuorumAdminError:
        if all(_name(a) in failures for a in self.servers) and not self._reached:
            return QuorumAdminError(None, "no quorum node reachable: " + "; ".join(
                f"{k} ({v})" for k, v in failures.items()))
        if error is ErrorCode.REQUEST_TIMED_OUT:
            view = self.directory.view
            if view.leader_id < 0 and self.leader_id is None:
                why = "no leader known"
            else:
                leader = view.leader_id if self.leader_id is None else self.leader_id
                address = self.endpoint_of(leader)
                why = (f"leader {leader}'s endpoint is unknown" if address is None else
                       f"leader {leader} at {_name(address)}: "
                       f"{failures.get(_name(address), 'no answer in time')}")
            return QuorumAdminError(error, f"timed out after {self.timeout_s} s ({why})")
        return QuorumAdminError(error, "the quorum refused the request")


# -- formatting ---------------------------------------------------------------------------------


def describe_as_dict(d: DescribeQuorumResponse) -> dict[str, Any]:
    """DescribeQuorum as plain data (``--json``): Kafka's field names in snake case."""
    def replicas(states: Sequence[ReplicaState] | None) -> list[dict[str, int]] | None:
        if states is None:
            return None
        return [{"replica_id": r.replica_id, "log_end_offset": r.log_end_offset,
                 "last_fetch_timestamp": r.last_fetch_ms,
                 "last_caught_up_timestamp": r.last_caught_up_ms} for r in states]

    return {"leader_id": d.leader_id, "leader_epoch": d.leader_epoch,
            "high_watermark": d.high_watermark, "current_voters": replicas(d.current_voters),
            "target_voters": replicas(d.target_voters), "observers": replicas(d.observers)}


def format_describe(d: DescribeQuorumResponse) -> str:
    """The quorum's status then one row per replica (as ``kafka-metadata-quorum describe
    --status`` and ``--replication`` show them). Times are relative to the leader's clock:
    the leader reports itself as fetched now."""
    leader = next((r for r in d.current_voters if r.replica_id == d.leader_id), None)
    now = leader.last_fetch_ms if leader is not None else -1
    leader_end = leader.log_end_offset if leader is not None else -1

    def ids(states: Sequence[ReplicaState]) -> str:
        return "[" + ",".join(str(r.replica_id) for r in states) + "]"

    lines = [f"LeaderId:       {d.leader_id}",
             f"LeaderEpoch:    {d.leader_epoch}",
             f"HighWatermark:  {d.high_watermark}",
             f"CurrentVoters:  {ids(d.current_voters)}"]
    if d.target_voters is not None:
        lines.append(f"TargetVoters:   {ids(d.target_voters)} (reassignment in progress)")
    lines.append(f"Observers:      {ids(d.observers)}")
    lines.append("")

    def ago(ts: int) -> str:
        return "-" if ts < 0 or now < 0 else f"{max(0, now - ts)} ms ago"

    header = ("NodeId", "Status", "LogEndOffset", "Lag", "LastFetch", "LastCaughtUp")
    rows = [header]
    target_ids = {r.replica_id for r in d.target_voters or ()}
    seen = set()
    for status, states in (("Voter", d.current_voters), ("Observer", d.observers)):
        for r in states:
            seen.add(r.replica_id)
            s = "Leader" if r.replica_id == d.leader_id else status
            if r.replica_id in target_ids and status == "Observer":
                s = "Observer (target)"
            lag = "-" if r.log_end_offset < 0 or leader_end < 0 else str(
                max(0, leader_end - r.log_end_offset))
            rows.append((str(r.replica_id), s,
                         "-" if r.log_end_offset < 0 else str(r.log_end_offset), lag,
                         ago(r.last_fetch_ms), ago(r.last_caught_up_ms)))
    for r in d.target_voters or ():
        if r.replica_id not in seen:  # a target that has not fetched yet
            rows.append((str(r.replica_id), "Target (not fetching)", "-", "-", "-", "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    return "\n".join(lines)
