"""The quorum's server side: a Kafka-protocol listener for the quorum APIs, like KRaft's
separate controller listener.

It serves ApiVersions (advertising exactly what it serves), Vote (52), BeginQuorumEpoch (53),
EndQuorumEpoch (54), Fetch v12 and FetchSnapshot (59, KIP-630) on ``__cluster_metadata``-0, the
admin APIs
DescribeQuorum (55) and AlterPartitionReassignments (45), and the unadvertised gossip API
DiscoverBrokers (1007) (those three in :mod:`.listener_admin`), plus the APIs other modules
register with :meth:`QuorumRequestHandler.serve`, on the broker's own server
protocol (:class:`~broker_core.server.protocol.KafkaServerProtocol`): framing, socket options,
back-pressure and **responses in request order per connection** come from there. This module
only decodes the quorum's requests and turns each into an :class:`Envelope` for the node.

A request reaches the node under a correlation id of this listener's own (the wire ids of
different connections may collide); :class:`InboundRequests` remembers which Deferred waits
for which ``(peer, id)`` and fires it when the node's response envelope comes back through
the transport, maybe much later (a follower's fetch is held up to ``fetch_max_wait_ms``).

Bad input never reaches the node and never crashes it: an undecodable frame, an api key this
listener does not serve, or a quorum API at a version it does not speak closes the connection
(logged, as the broker's listener does); a Fetch at another version than v12 gets
UNSUPPORTED_VERSION; a request naming another partition than the metadata one, or claiming to
come from this node itself, gets INVALID_REQUEST. A wrong cluster id is the node's to answer
(INCONSISTENT_CLUSTER_ID).

Only brokers may act on the quorum. A listener built with the cluster credential
(``QuorumListenerFactory(..., sasl=ClusterCredential.sasl_settings())`` and
``QuorumRequestHandler(brokers_only=True)``, as every broker's is) accepts the cluster login
(SaslHandshake/SaslAuthenticate, answered by the connection's authentication gate, see
:mod:`broker_core.server.authentication`) and serves every API except ApiVersions and the
read-only DescribeQuorum (:data:`OPEN_TO_ANYONE`) only to a connection that logged in with it:
anyone else gets the API's error response with CLUSTER_AUTHORIZATION_FAILED (every quorum API
has a top-level error code), and the request reaches nothing.

The APIs registered with :meth:`QuorumRequestHandler.serve` check their own input:
MetadataWrite's handler (``NetworkQuorumClient``) validates the command and refuses one that
does not validate before anything is proposed. A request the node has not answered within the
request timeout closes its connection: the peer has given up on it, and the responses queued behind it could
not be sent out of order anyway.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from broker_core.raft import wire
from broker_core.raft.listener_admin import (
    ADMIN_VERSIONS,
    GOSSIP_VERSIONS,
    GossipHandler,
    handle_admin_request,
)
from broker_core.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchSnapshotRequest,
    Request,
    Response,
    VoteRequest,
)
from broker_core.security.principal import DEFAULT_LISTENER, ListenerSettings
from broker_core.security.sasl import SaslSettings
from broker_core.server.connection_limits import ServerLimits
from broker_core.server.protocol import NO_RESPONSE, KafkaServerFactory, KafkaServerProtocol
from broker_core.wire import apis, errors
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.framing import MAX_FRAME_BYTES

#: The APIs this listener serves and the versions it advertises.
SERVED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.API_VERSIONS: (apis.SUPPORTED[ApiKey.API_VERSIONS].min_version,
                          apis.SUPPORTED[ApiKey.API_VERSIONS].max_version),
    ApiKey.FETCH: (wire.VERSIONS[ApiKey.FETCH], wire.VERSIONS[ApiKey.FETCH]),
    **{key: (apis.DEFINED[key].min_version, apis.DEFINED[key].max_version)
       for key in (ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
                   ApiKey.FETCH_SNAPSHOT)},
    **ADMIN_VERSIONS,  # DescribeQuorum, AlterPartitionReassignments: listener_admin.py
    # The cluster login (answered by the connection's authentication gate, never the handler).
    **{key: (apis.SUPPORTED[key].min_version, apis.SUPPORTED[key].max_version)
       for key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)},
}

#: What a connection that has not logged in as a broker may ask a brokers-only listener: the
#: versions it speaks, and the quorum's state (read-only; ``sluice quorum describe``).
OPEN_TO_ANYONE = frozenset({ApiKey.API_VERSIONS, ApiKey.DESCRIBE_QUORUM})


def refused_body(request: apis.Request, error: ErrorCode) -> dict[str, Any]:
    """The response body of ``request``'s API carrying ``error`` and nothing else."""
    header = request.header
    spec = apis.DEFINED.get(header.api_key) or apis.SUPPORTED[header.api_key]  # type: ignore
    assert spec.error_body is not None  # every API this listener serves has one
    return spec.error_body(header.api_version, request.body, int(error))


def source_of(request: Request) -> int:
    """The node a quorum request comes from, as the request itself names it."""
    if isinstance(request, VoteRequest):
        return request.candidate_id
    if isinstance(request, BeginQuorumEpochRequest | EndQuorumEpochRequest):
        return request.leader_id
    if isinstance(request, FetchRequest | FetchSnapshotRequest):
        return request.replica_id
    raise TypeError(f"{type(request).__name__} is not a quorum request")


class InboundRequests:
    """Requests handed to the node and not yet answered, by ``(peer, correlation id)``.

    Invariant: each entry's Deferred fires at most once, with the node's response message;
    an entry leaves the table when it is answered or given up (:meth:`forget`).
    """

    def __init__(self, node_id: int, deliver: Callable[[Envelope], None] | None = None) -> None:
        self.node_id = node_id
        self.deliver = deliver
        self._ids = itertools.count(1)
        self._waiting: dict[tuple[int, int], defer.Deferred] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def submit(self, source: int, request: Request) -> tuple[tuple[int, int], defer.Deferred]:
        """Hand ``request`` from ``source`` to the node; returns its key and a Deferred for the
        node's response message."""
        if self.deliver is None:
            raise RuntimeError("no node to deliver quorum requests to")
        key = (source, next(self._ids) & 0x7FFFFFFF)
        d: defer.Deferred = defer.Deferred()
        self._waiting[key] = d
        self.deliver(Envelope(source, self.node_id, key[1], request))
        return key, d

    def answer(self, envelope: Envelope) -> bool:
        """The node's response ``envelope``; False when nothing waits for it any more."""
        d = self._waiting.pop((envelope.destination, envelope.correlation_id), None)
        if d is None:
            return False
        d.callback(envelope.message)
        return True

    def forget(self, key: tuple[int, int]) -> None:
        self._waiting.pop(key, None)


def _invalid_request_body(api_key: int) -> dict[str, Any]:
    code = int(ErrorCode.INVALID_REQUEST)
    if api_key == ApiKey.FETCH:
        return {"error_code": code, "session_id": 0, "responses": []}
    return {"error_code": code, "topics": []}


class QuorumRequestHandler:
    """Answers one decoded request (the ``handler`` of :class:`KafkaServerFactory`)."""

    log = Logger(namespace="sluice.raft.listener")

    def __init__(self, inbound: InboundRequests, clock: IReactorTime, timeout_s: float,
                 entries_to_records: wire.EntriesToRecords | None = None, *,
                 brokers_only: bool = False) -> None:
        self.inbound = inbound
        #: Serve everything but :data:`OPEN_TO_ANYONE` only to connections that logged in with
        #: the cluster login (see the module docstring).
        self.brokers_only = brokers_only
        self.clock = clock
        self.timeout_s = timeout_s
        self.gossip: GossipHandler | None = None  # DiscoverBrokers, when the node gossips
        self._encode_kw = ({} if entries_to_records is None
                           else {"entries_to_records": entries_to_records})
        #: APIs served by other modules on this listener: api key -> (versions, handler).
        self.extra: dict[int, tuple[tuple[int, int], Callable[..., Any]]] = {}

    def serve(self, api_key: ApiKey, handler: Callable[[apis.Request, KafkaServerProtocol], Any]
              ) -> None:
        """Serve ``api_key`` (an API in ``apis.DEFINED``, at all its versions) with
        ``handler(request, proto)``, which returns the response body or a Deferred of it."""
        spec = apis.DEFINED[api_key]
        self.extra[int(api_key)] = ((spec.min_version, spec.max_version), handler)

    def served_versions(self, api_key: int) -> tuple[int, int] | None:
        extra = self.extra.get(api_key)
        if extra is not None:
            return extra[0]
        return (SERVED_VERSIONS.get(api_key)  # type: ignore[call-overload]
                or GOSSIP_VERSIONS.get(api_key))  # type: ignore[call-overload]

    def __call__(self, request: apis.Request, proto: KafkaServerProtocol) -> Any:
        header = request.header
        if header.api_key == ApiKey.API_VERSIONS:
            served = {int(k): v for k, v in SERVED_VERSIONS.items()}
            served.update({k: versions for k, (versions, _) in self.extra.items()})
            return {"error_code": 0, "throttle_time_ms": 0, "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(served.items())]}
        if (self.brokers_only and header.api_key not in OPEN_TO_ANYONE
                and not proto.security.is_broker):
            self.log.info("refused {api} from {who}: the quorum is served to brokers only",
                          api=ApiKey(header.api_key).name, who=proto.security)
            return refused_body(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if header.api_key in self.extra:
            return self.extra[header.api_key][1](request, proto)
        if header.api_key == ApiKey.FETCH and header.api_version != wire.VERSIONS[ApiKey.FETCH]:
            spec = apis.SUPPORTED[ApiKey.FETCH]
            assert spec.error_body is not None
            return spec.error_body(header.api_version, request.body,
                                   int(ErrorCode.UNSUPPORTED_VERSION))
        if header.api_key in ADMIN_VERSIONS:
            return handle_admin_request(self, request, proto)
        if header.api_key in GOSSIP_VERSIONS:
            if self.gossip is None:
                proto.transport.loseConnection()  # as for any api this listener does not serve
                return NO_RESPONSE
            return self.gossip(request, proto)
        try:
            message = wire.request_from_body(header.api_key, request.body)
        except wire.UnexpectedPartitions as e:
            self.log.warn("invalid quorum request from {peer}: {e}", peer=proto.peer, e=e)
            return _invalid_request_body(header.api_key)
        source = source_of(message)
        if source == self.inbound.node_id or source < 0:
            self.log.warn("quorum request from {peer} claims node id {source}",
                          peer=proto.peer, source=source)
            return _invalid_request_body(header.api_key)
        key, d = self.inbound.submit(source, message)

        def timed_out(result: Any, timeout: float) -> Any:
            self.inbound.forget(key)
            self.log.warn("quorum node did not answer {api} from {peer} in {t}s; closing",
                          api=header.api_key, peer=proto.peer, t=timeout)
            proto.transport.loseConnection()
            return NO_RESPONSE

        d.addTimeout(self.timeout_s, self.clock, onTimeoutCancel=timed_out)
        d.addCallback(self._encode)
        return d

    def _encode(self, message: Response | object) -> Any:
        if message is NO_RESPONSE:
            return NO_RESPONSE
        return wire.response_body(message, **self._encode_kw)  # type: ignore[arg-type]


class QuorumListenerFactory(KafkaServerFactory):
    """The quorum listener: :class:`KafkaServerFactory` decoding only the APIs in
    :data:`SERVED_VERSIONS` (anything else is an unknown api key: the connection closes)."""

    #: Every quorum node must give the quorum listener the same protocol: a peer speaking the
    #: other one is logged with this advice (see ``KafkaServerProtocol``).
    protocol_mismatch_hint = ("every quorum node's listener.security.protocol.map must give "
                              "the quorum listener (quorum.listener.name) the same protocol")

    def __init__(self, handler: QuorumRequestHandler, *, clock: IReactorTime,
                 metrics: Any = None, limits: ServerLimits | None = None,
                 max_frame_bytes: int = MAX_FRAME_BYTES, sasl: SaslSettings | None = None,
                 listener: ListenerSettings = DEFAULT_LISTENER) -> None:
        super().__init__(handler, clock=clock, metrics=metrics, limits=limits,
                         max_frame_bytes=max_frame_bytes, sasl=sasl, listener=listener)

    def decode_request(self, frame: bytes | memoryview) -> apis.Request:  # type: ignore[override]
        request = apis.decode_request(frame, defined=True)
        header = request.header
        served = self.handler.served_versions(header.api_key)
        if served is None:
            raise errors.UnknownApiKey(header)
        if header.api_key != ApiKey.FETCH and not served[0] <= header.api_version <= served[1]:
            raise errors.UnsupportedVersion(header, f"api {header.api_key} "
                                                    f"v{header.api_version} is not served")
        return request
