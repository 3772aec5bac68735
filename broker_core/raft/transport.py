"""The quorum's network: one outbound connection per peer voter, and the answers to requests
that came in through the listener (:mod:`broker_core.raft.listener`).

:class:`QuorumNetwork` is the driver's :class:`~broker_core.raft.driver.IRaftTransport`. An
envelope the node sends is either

- a *request* (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot): it goes out on the
  connection to its destination (:class:`PeerConnection`), encoded by
  :mod:`broker_core.raft.wire`; the response is decoded and handed back to the node as an
  envelope carrying the node's own correlation id (the wire's ids belong to the connection);
- a *response* to a request the listener delivered: it completes that request
  (:class:`~broker_core.raft.listener.InboundRequests`), and the listener writes it back in
  request order.

Delivery is best effort, as the core expects: a request that finds no connection within the
request timeout, that loses its connection, or whose answer does not come in time is dropped
(the core resends). A timed-out request also closes its connection: its late answer would
arrive ahead of later ones, so the next request starts on a fresh connection.

Outbound connections reuse the broker's client protocol and reconnect policy
(:class:`~broker_core.rpc.KafkaClientProtocol` under a ``ClientService`` with backoff, as the
controller's :class:`~broker_core.rpc.BrokerChannel` does), and with a ``credential`` each logs
in with the cluster login before its first request (a refused login is a failed connection
attempt, retried with the same backoff). With ``tls`` (the quorum listener is SSL or SASL_SSL)
each connection is TLS first, the peer's certificate checked against the quorum listener's CA
and the host it is reached at (:mod:`broker_core.security.peer_tls`); a refused handshake is a
failed attempt too, logged with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from broker_core.config.quorum import VoterAddress
from broker_core.raft import wire
from broker_core.raft.driver import IRaftTransport
from broker_core.raft.listener import InboundRequests
from broker_core.raft.messages import Envelope
from broker_core.rpc import (
    KafkaClientFactory,
    KafkaClientProtocol,
    RequestTimedOut,
    client_endpoint,
    logged_in,
)
from broker_core.security.peer_tls import PeerTls, peer_endpoint
from broker_core.security.sasl import ClientCredential

#: Reconnect backoff: quick after a blip, at most a second apart while the peer is down (a
#: failover waits for the new leader's connections, so a long cap would lengthen it).
RECONNECT_INITIAL_S = 0.02
RECONNECT_MAX_S = 1.0


class PeerConnection:
    """Requests from this node to one peer, on one reconnecting connection.

    Invariant: every envelope given to :meth:`send` either yields exactly one response
    envelope to ``deliver`` or is dropped (counted in :attr:`dropped`); none waits longer than
    ``timeout_s``.
    """

    log = Logger(namespace="sluice.raft.transport")

    def __init__(self, node_id: int, peer: VoterAddress, reactor: Any, timeout_s: float,
                 deliver: Callable[[Envelope], None],
                 records_to_entries: wire.RecordsToEntries | None = None,
                 credential: ClientCredential | None = None,
                 tls: PeerTls | None = None) -> None:
        self.node_id = node_id
        self.peer = peer
        self._reactor = reactor
        self._timeout_s = timeout_s
        self._deliver = deliver
        self._decode_kw = ({} if records_to_entries is None
                           else {"records_to_entries": records_to_entries})
        self._service = ClientService(
            peer_endpoint(client_endpoint(reactor, peer.host, peer.port, timeout_s), peer.host,
                          tls),
            KafkaClientFactory(f"sluice-quorum-{node_id}", credential=credential,
                               peer_name=f"quorum node {peer.node_id}"),
            retryPolicy=backoffPolicy(initialDelay=RECONNECT_INITIAL_S,
                                      maxDelay=RECONNECT_MAX_S, factor=2.0),
            clock=reactor, prepareConnection=logged_in,
        )
        self.sent = 0
        self.dropped = 0

    def start(self) -> None:
        self._service.startService()

    def stop(self) -> defer.Deferred:
        """Close the connection and stop reconnecting; fires once it is closed."""
        return self._service.stopService()

    def send(self, envelope: Envelope) -> None:
        """Send one request envelope (best effort, see the class docstring)."""
        message = envelope.message
        key = wire.api_key_of(message)  # type: ignore[arg-type]
        body = wire.request_body(message)  # type: ignore[arg-type]
        written: list[KafkaClientProtocol] = []

        def write(proto: KafkaClientProtocol) -> defer.Deferred:
            written.append(proto)
            return proto.request(key, wire.VERSIONS[key], body)

        def timed_out(result: Any, timeout: float) -> Failure:
            if written and written[0].transport is not None:
                written[0].transport.loseConnection()
            return Failure(RequestTimedOut(
                f"no answer from quorum node {self.peer.node_id} in {timeout}s"))

        d = self._service.whenConnected()
        d.addCallback(write)
        d.addTimeout(self._timeout_s, self._reactor, onTimeoutCancel=timed_out)
        d.addCallbacks(self._answered, self._failed, callbackArgs=(envelope, key),
                       errbackArgs=(envelope,))
        self.sent += 1

    def _answered(self, body: Any, envelope: Envelope, key: int) -> None:
        try:
            response = wire.response_from_body(key, body, **self._decode_kw)
        except Exception as e:  # a response we cannot read: as good as lost
            self.dropped += 1
            self.log.warn("unreadable {api} response from quorum node {peer}: {e}",
                          api=key, peer=self.peer.node_id, e=e)
            return
        self._deliver(Envelope(self.peer.node_id, self.node_id, envelope.correlation_id,
                               response))

    def _failed(self, failure: Failure, envelope: Envelope) -> None:
        self.dropped += 1
        self.log.debug("request to quorum node {peer} dropped: {why}",
                       peer=self.peer.node_id, why=failure.getErrorMessage())


@implementer(IRaftTransport)
class QuorumNetwork:
    """The driver's transport over TCP: :class:`PeerConnection` per peer voter for requests,
    :class:`InboundRequests` (shared with the listener) for responses.

    :param node_id: this node.
    :param voters: every voter's address (``quorum.voters``); this node's own entry is skipped.
    :param reactor: the reactor (``IReactorTCP`` and ``IReactorTime``).
    :param timeout_s: the request timeout (``quorum.request.timeout.ms``).
    :param inbound: the listener's table of requests awaiting the node's answer.
    :param records_to_entries: reads the entries of fetch responses (RecordBatch bytes).
    :param credential: the cluster login each connection starts with.
    :param tls: TLS on every connection (the quorum listener is SSL or SASL_SSL).
    """

    log = Logger(namespace="sluice.raft.transport")

    def __init__(self, node_id: int, voters: dict[int, VoterAddress], reactor: Any,
                 timeout_s: float, inbound: InboundRequests,
                 records_to_entries: wire.RecordsToEntries | None = None,
                 credential: ClientCredential | None = None,
                 tls: PeerTls | None = None) -> None:
        self.node_id = node_id
        self._credential = credential
        self._tls = tls
        self.inbound = inbound
        self._deliver: Callable[[Envelope], None] | None = None
        self._reactor = reactor
        self._timeout_s = timeout_s
        self._records_to_entries = records_to_entries
        self._started = False
        self._stopped = False
        self.peers = {v: PeerConnection(node_id, address, reactor, timeout_s,
                                        self._to_node, records_to_entries, credential, tls)
                      for v, address in voters.items() if v != node_id}
        self._unknown_warned: set[int] = set()

    def set_peer(self, address: VoterAddress) -> None:
        """Reach node ``address.node_id`` at ``address`` from now on: a node learned through
        DiscoverBrokers, or one that came back elsewhere (its old connection is closed; the
        requests on it are dropped and the core resends them)."""
        if address.node_id == self.node_id or self._stopped:
            return  # a stopped network opens no connection (gossip may still arrive)
        old = self.peers.get(address.node_id)
        if old is not None:
            if old.peer == address:
                return
            old.stop()
        peer = PeerConnection(self.node_id, address, self._reactor, self._timeout_s,
                              self._to_node, self._records_to_entries, self._credential,
                              self._tls)
        self.peers[address.node_id] = peer
        self._unknown_warned.discard(address.node_id)
        self.log.info("quorum node {node} reaches node {peer} at {address}", node=self.node_id,
                      peer=address.node_id, address=str(address))
        if self._started:
            peer.start()

    def bind(self, deliver: Callable[[Envelope], None]) -> None:
        """Where envelopes for this node go (the driver's ``receive``), both the responses
        to its requests and the requests the listener decodes."""
        self._deliver = deliver
        self.inbound.deliver = deliver

    def _to_node(self, envelope: Envelope) -> None:
        if self._deliver is not None:
            self._deliver(envelope)

    def start(self) -> None:
        self._started = True
        for peer in self.peers.values():
            peer.start()

    def stop(self) -> defer.Deferred:
        """Close every outbound connection; fires when all are closed."""
        self._stopped = True
        return defer.DeferredList([p.stop() for p in self.peers.values()])

    def send(self, envelope: Envelope) -> None:
        if not envelope.is_request:
            self.inbound.answer(envelope)  # False: the asker is gone; nothing to do
            return
        peer = self.peers.get(envelope.destination)
        if peer is None:
            if envelope.destination not in self._unknown_warned:
                self._unknown_warned.add(envelope.destination)
                self.log.warn("quorum node {node} has no address for node {dest} (not in "
                              "quorum.voters); its messages are dropped", node=self.node_id,
                              dest=envelope.destination)
            return
        peer.send(envelope)
