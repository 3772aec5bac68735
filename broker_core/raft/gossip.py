"""The DiscoverBrokers client of a quorum node: asks its ``bootstrap.servers`` what they know,
once every ``interval_s``, and merges the answers into the node's
:class:`~broker_core.raft.discovery.Directory` (seed 002's step 3: "as long as a broker does
not know all the current quorum voters' connections, it should continue periodically ask";
it keeps asking after that too, as the seed's step 5.2 says, so that it hears of moved nodes).

One connection per server (the broker's ``KafkaClientProtocol`` under a ``ClientService``,
reconnecting with backoff, as :mod:`broker_core.raft.transport` does); a server that does not
answer within the timeout is skipped until the next round. Answers of another cluster are
logged and ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet import defer
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from broker_core.raft import discovery
from broker_core.raft.discovery import Directory
from broker_core.rpc import KafkaClientFactory
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

VERSION = 0


class GossipClient:
    """See the module docstring. ``on_learned`` hears of the nodes whose endpoint is new."""

    log = Logger(namespace="sluice.raft.gossip")

    def __init__(self, directory: Directory, servers: list[tuple[str, int]], reactor: Any,
                 timeout_s: float, interval_s: float = 1.0,
                 on_learned: Callable[[set[int]], None] | None = None) -> None:
        self.directory = directory
        self.reactor = reactor
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.on_learned = on_learned
        self.answers = 0
        self._services = [ClientService(
            HostnameEndpoint(reactor, host, port, timeout=timeout_s),
            KafkaClientFactory(f"sluice-quorum-gossip-{directory.me.node_id}"),
            retryPolicy=backoffPolicy(initialDelay=0.02, maxDelay=1.0, factor=2.0),
            clock=reactor) for host, port in servers]
        self._loop = LoopingCall(self.round)
        self._loop.clock = reactor

    def start(self) -> None:
        for s in self._services:
            s.startService()
        self._loop.start(self.interval_s, now=True)

    def stop(self) -> defer.Deferred:
        if self._loop.running:
            self._loop.stop()
        return defer.DeferredList([s.stopService() for s in self._services])

    def round(self) -> defer.Deferred:
        """Ask every server once; fires when all have answered or timed out."""
        return defer.DeferredList([self._ask(s) for s in self._services], consumeErrors=True)

    def _ask(self, service: ClientService) -> defer.Deferred:
        body = discovery.gossip_body(self.directory.gossip())

        def send(proto: Any) -> defer.Deferred:
            return proto.request(ApiKey.DISCOVER_BROKERS, VERSION, body)

        d = service.whenConnected()
        d.addCallback(send)
        d.addTimeout(self.timeout_s, self.reactor)
        d.addCallbacks(self._answered, self._failed)
        return d

    def _answered(self, body: Any) -> None:
        if body.error_code != ErrorCode.NONE:
            self.log.warn("DiscoverBrokers refused: {error}",
                          error=ErrorCode(body.error_code).name)
            return
        try:
            learned = self.directory.merge(discovery.gossip_from_body(body))
        except discovery.ClusterMismatch as e:
            self.log.warn("DiscoverBrokers: {e}", e=e)
            return
        self.answers += 1
        if learned and self.on_learned is not None:
            self.on_learned(learned)

    def _failed(self, failure: Any) -> None:
        self.log.debug("DiscoverBrokers unanswered: {why}", why=failure.getErrorMessage())
