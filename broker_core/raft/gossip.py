"""The DiscoverBrokers client of a quorum node (docs/design.md#bootstrapping).

Two ways to use it, over the same connections:

- :meth:`GossipClient.ask`: one request to one server, on demand; the Deferred fires with the
  :class:`~broker_core.raft.discovery.Gossip` of the answer. The start procedure
  (:mod:`broker_core.raft.bootstrap_runner`) asks this way whenever its machine says so.
- :meth:`GossipClient.start`: a round every ``interval_s`` for as long as the node runs, each
  answer handed to ``receive`` (start procedure step 5.2: it keeps sending
  DiscoverBrokers, so that it hears of moved and new nodes). A round asks the bootstrap
  servers and every node added with :meth:`GossipClient.add_server` (the node adds every other
  node it knows), so each node it knows hears of it from its own request.

What the node tells is ``tell()`` at the time of each request. One connection per server
(the broker's ``KafkaClientProtocol`` under a ``ClientService``, reconnecting with backoff, as
:mod:`broker_core.raft.transport` does, TLS too when the quorum listener is); a server that does
not answer within the timeout is skipped until the next request. Answers of another cluster
are logged and ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet import defer
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from broker_core.raft import discovery
from broker_core.raft.discovery import Gossip
from broker_core.rpc import KafkaClientFactory, client_endpoint, logged_in
from broker_core.security.peer_tls import PeerTls, peer_endpoint
from broker_core.security.sasl import ClientCredential
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

VERSION = 0


class DiscoverBrokersRefused(Exception):
    """The server answered DiscoverBrokers with an error code (another cluster: ...)."""


class GossipClient:
    """See the module docstring.

    :param servers: ``bootstrap.servers``; more are added by :meth:`add_server`, never
        removed.
    :param tell: what this node tells (its directory's gossip), called for every request.
    :param receive: takes an answer of a periodic round; may raise
        :class:`~broker_core.raft.discovery.ClusterMismatch` (logged).
    """

    log = Logger(namespace="sluice.raft.gossip")

    def __init__(self, node_id: int, servers: list[tuple[str, int]], reactor: Any,
                 timeout_s: float, tell: Callable[[], Gossip],
                 receive: Callable[[Gossip], Any], interval_s: float = 1.0,
                 credential: ClientCredential | None = None,
                 tls: PeerTls | None = None) -> None:
        self.node_id = node_id
        #: The cluster login every connection starts with.
        self.credential = credential
        #: TLS on every connection (the quorum listener is SSL or SASL_SSL), else None.
        self.tls = tls
        self.reactor = reactor
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.tell = tell
        self.receive = receive
        self.answers = 0
        self._services: dict[tuple[str, int], ClientService] = {}
        self._connecting = False
        for server in servers:
            self.add_server(server)
        self._loop = LoopingCall(self.round)
        self._loop.clock = reactor

    def add_server(self, server: tuple[str, int]) -> None:
        """Ask ``server`` too in every round from now on (nothing if it is asked already)."""
        if server in self._services:
            return
        service = ClientService(
            peer_endpoint(client_endpoint(self.reactor, server[0], server[1], self.timeout_s),
                          server[0], self.tls),
            KafkaClientFactory(f"sluice-quorum-gossip-{self.node_id}",
                               credential=self.credential,
                               peer_name=f"quorum server {server[0]}:{server[1]}"),
            retryPolicy=backoffPolicy(initialDelay=0.02, maxDelay=1.0, factor=2.0),
            clock=self.reactor, prepareConnection=logged_in)
        self._services[server] = service
        if self._connecting:
            service.startService()

    def _connect(self) -> None:
        if not self._connecting:
            self._connecting = True
            for s in self._services.values():
                s.startService()

    def start(self) -> None:
        """Ask every server once every ``interval_s`` from now on."""
        self._connect()
        if not self._loop.running:
            self._loop.start(self.interval_s, now=True)

    def stop(self) -> defer.Deferred:
        if self._loop.running:
            self._loop.stop()
        if not self._connecting:
            return defer.succeed(None)
        self._connecting = False
        return defer.DeferredList([s.stopService() for s in self._services.values()])

    def ask(self, server: tuple[str, int], gossip: Gossip) -> defer.Deferred:
        """One DiscoverBrokers to ``server`` (one of ``servers``) telling ``gossip``; fires with
        the answer's :class:`Gossip`, fails on a timeout, a lost connection or an error code."""
        self._connect()
        body = discovery.gossip_body(gossip)

        def send(proto: Any) -> defer.Deferred:
            return proto.request(ApiKey.DISCOVER_BROKERS, VERSION, body)

        def decode(answer: Any) -> Gossip:
            if answer.error_code != ErrorCode.NONE:
                raise DiscoverBrokersRefused(f"{server[0]}:{server[1]} answered "
                                             f"{ErrorCode(answer.error_code).name}")
            self.answers += 1
            return discovery.gossip_from_body(answer)

        d = self._services[server].whenConnected()
        d.addCallback(send)
        d.addTimeout(self.timeout_s, self.reactor)
        d.addCallback(decode)
        return d

    def round(self) -> defer.Deferred:
        """Ask every server once, each answer to ``receive``; fires when all have answered or
        failed."""
        return defer.DeferredList([self.ask(s, self.tell()).addCallbacks(
            self._answered, self._failed) for s in list(self._services)], consumeErrors=True)

    def _answered(self, gossip: Gossip) -> None:
        try:
            self.receive(gossip)
        except discovery.ClusterMismatch as e:
            self.log.warn("DiscoverBrokers: {e}", e=e)

    def _failed(self, failure: Any) -> None:
        if failure.check(DiscoverBrokersRefused):
            self.log.warn("DiscoverBrokers refused: {why}", why=failure.getErrorMessage())
        else:
            self.log.debug("DiscoverBrokers unanswered: {why}", why=failure.getErrorMessage())
