"""The client's view of the cluster, for the consumer and the producer (Twisted).

:class:`ClusterClient` holds the brokers and partition leaders from the last Metadata response
(a :class:`~consumer_client.cluster_view.ClusterView`, which indexes it), one connection per
broker (opened on first use, negotiated with ApiVersions, reopened after it closed), and sends
requests with a timeout. Bootstrap servers are tried round robin (the coordinator design's
consumer start-up: pick the next broker, keep retrying).

Invariants:

- a connection in ``_conns`` is either connecting (a Deferred) or open; a closed one is dropped
  the moment it closes, so the next request to that broker reconnects;
- a request that times out closes its connection (a late answer would arrive out of order);
- ``leader_for`` answers from the last metadata only; callers that see NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION or a connection error call :meth:`refresh` and retry.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet import defer
from twisted.internet.error import ConnectError, ConnectionLost
from twisted.logger import Logger

from broker_core.rpc import KafkaClientProtocol, RequestTimedOut, request_with_timeout
from broker_core.wire import apis, framing
from broker_core.wire.apis import ApiKey, common_versions
from consumer_client import secure_connect
from consumer_client.cluster_view import ClusterView
from consumer_client.connection import NoBrokersAvailable, parse_servers
from consumer_client.security import ClientSecurity


class UnsupportedApi(Exception):
    """The broker does not serve an API this client needs at a version it speaks."""


class BrokerLink:
    """One negotiated connection: the protocol and the version to use per API."""

    def __init__(self, proto: KafkaClientProtocol, versions: dict[int, int]) -> None:
        self.proto = proto
        self.versions = versions

    def version_of(self, api_key: int) -> int:
        try:
            return self.versions[int(api_key)]
        except KeyError:
            raise UnsupportedApi(f"the broker does not serve {ApiKey(api_key).name} at a "
                                 "version this client speaks") from None


class ClusterClient:
    """See the module docstring. ``bootstrap`` is ``"host:port,host:port"`` or a list of pairs.
    ``security`` says how every connection gets past TLS and SASL (default PLAINTEXT); a
    refused login or certificate fails the request at once (no other broker is tried: the
    same settings would be refused the same way)."""

    log = Logger(namespace="sluice.client.cluster")

    def __init__(self, bootstrap: str | Sequence[tuple[str, int]], *, reactor: Any,
                 client_id: str = "sluice-client", request_timeout_s: float = 30.0,
                 connect_timeout_s: float = 10.0,
                 security: ClientSecurity | None = None) -> None:
        self.security = security or ClientSecurity()
        self.bootstrap = (parse_servers(bootstrap) if isinstance(bootstrap, str)
                          else list(bootstrap))
        self.reactor = reactor
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.view = ClusterView()
        self._conns: dict[Any, defer.Deferred | BrokerLink] = {}
        self._rr = itertools.count()
        self._closed = False
        self._refreshing: list[tuple[frozenset[str] | None, bool, defer.Deferred]] = []

    # -- metadata --------------------------------------------------------------------------

    def leader_for(self, topic: str, partition: int) -> int:
        """The leader's node id from the last metadata, or -1 when unknown or leaderless."""
        return self.view.leader_for(topic, partition)

    def partitions_for(self, topic: str) -> list[int] | None:
        return self.view.partitions_for(topic)

    def update_brokers(self, brokers: Iterable[tuple[int, str, int]]) -> None:
        """Learn broker addresses from elsewhere (StartFetcher carries the broker list)."""
        self.view.learn_brokers(brokers)

    async def refresh(self, topics: Sequence[str] | None = None, *,
                      auto_create: bool = False) -> ClusterView:
        """Fetch metadata for ``topics`` (None: every topic) from any reachable broker and make
        it the current view. Topics not named keep their previous entries. With
        ``auto_create`` the request lets the broker create missing topics (Kafka's
        ``allow_auto_topic_creation``, honoured per the broker's ``auto.create.topics.enable``),
        as Kafka's producers ask.

        A refresh that asks for no more than one already in flight shares that one's answer
        (many consumers on one client place their partitions at the same moment after a
        rebalance: one Metadata request serves them all)."""
        wanted = None if topics is None else frozenset(topics)
        for covers, creates, pending in self._refreshing:
            if (covers is None or (wanted is not None and wanted <= covers)) and (
                    creates or not auto_create):
                return await _chain(pending)
        d = defer.Deferred.fromCoroutine(self._refresh(topics, auto_create))
        entry = (wanted, auto_create, d)
        self._refreshing.append(entry)
        try:
            return await _chain(d)
        finally:
            self._refreshing.remove(entry)

    async def _refresh(self, topics: Sequence[str] | None, auto_create: bool) -> ClusterView:
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": auto_create}
        resp = await self.request_any(ApiKey.METADATA, body)
        view = self.view.updated(resp, topics, self.reactor.seconds())
        self.view = view
        return view

    # -- connections -----------------------------------------------------------------------

    async def link(self, node_id: int) -> BrokerLink:
        """The negotiated connection to broker ``node_id`` (from the current view)."""
        address = self.view.brokers.get(node_id)
        if address is None:
            raise NoBrokersAvailable(f"broker {node_id} is not in the cluster metadata")
        return await self._link(node_id, address)

    async def _link(self, key: Any, address: tuple[str, int]) -> BrokerLink:
        if self._closed:
            raise ConnectionLost("cluster client closed")
        existing = self._conns.get(key)
        if isinstance(existing, BrokerLink):
            if not existing.proto.closed and (existing.proto.transport.getPeer().port
                                              == address[1]):
                return existing
            self._drop(key)
        elif existing is not None:
            return await _chain(existing)
        d = defer.Deferred.fromCoroutine(self._open(key, address))
        self._conns[key] = d
        try:
            return await _chain(d)
        except Exception:
            if self._conns.get(key) is d:
                del self._conns[key]
            raise

    async def _open(self, key: Any, address: tuple[str, int]) -> BrokerLink:
        host, port = address
        proto = await secure_connect.connect(self.reactor, host, port, self.client_id,
                                             timeout_s=self.connect_timeout_s,
                                             security=self.security)
        try:
            resp = await request_with_timeout(proto, self.reactor, ApiKey.API_VERSIONS, 0, {},
                                              self.request_timeout_s, f"{host}:{port}")
            link = BrokerLink(proto, common_versions(resp.api_keys))
        except Exception:
            proto.transport.loseConnection()
            raise
        self._conns[key] = link
        proto.closed_d.addCallback(lambda _: self._forget(key, link))
        return link

    def _forget(self, key: Any, link: BrokerLink) -> None:
        if self._conns.get(key) is link:
            del self._conns[key]

    def _drop(self, key: Any) -> None:
        link = self._conns.pop(key, None)
        if isinstance(link, BrokerLink) and link.proto.transport is not None:
            link.proto.transport.loseConnection()

    def disconnect(self, node_id: int) -> None:
        """Close the connection to a broker (after an error that leaves it in doubt)."""
        self._drop(node_id)

    # -- requests --------------------------------------------------------------------------

    async def request(self, node_id: int, api_key: int, body: Any,
                      timeout_s: float | None = None) -> Any:
        """Send ``body`` to broker ``node_id`` at the negotiated version; the decoded response.
        Fails with ``ConnectionLost``/``ConnectError``/:class:`NoBrokersAvailable`/
        :class:`RequestTimedOut`."""
        link = await self.link(node_id)
        return await self._send(link, api_key, body, timeout_s, f"broker {node_id}")

    async def send_oneway(self, node_id: int, api_key: int, body: Any) -> None:
        """Write a request the broker never answers (Produce with acks=0) to broker ``node_id``.

        It bypasses the connection's outstanding-request table on purpose: an entry there would
        wait for an answer that never comes and pair the *next* response with the wrong request.
        Fires once the bytes are handed to the transport; fails as :meth:`link` does."""
        link = await self.link(node_id)
        chunks = apis.encode_request(api_key, link.version_of(api_key), 0, self.client_id, body)
        link.proto.transport.writeSequence(framing.frame(chunks))

    async def request_address(self, address: tuple[str, int], api_key: int, body: Any, *,
                              version: int | None = None, timeout_s: float | None = None) -> Any:
        """Send to a broker known only by address (a bootstrap server, the consumer
        coordinator), on its own negotiated connection; ``version`` overrides the negotiated
        one (Sluice's coordination APIs exist only at v0, and a broker that has not wired an
        API yet does not advertise it)."""
        link = await self._link(("address", *address), address)
        return await self._send(link, api_key, body, timeout_s, f"{address[0]}:{address[1]}",
                                version=version)

    def disconnect_address(self, address: tuple[str, int]) -> None:
        """Close the connection :meth:`request_address` opened to ``address``."""
        self._drop(("address", *address))

    async def request_any(self, api_key: int, body: Any) -> Any:
        """Send to any reachable broker: known brokers and bootstrap servers, round robin."""
        candidates: list[tuple[Any, tuple[str, int]]] = [
            (nid, addr) for nid, addr in sorted(self.view.brokers.items())]
        candidates += [(("bootstrap", h, p), (h, p)) for h, p in self.bootstrap]
        start = next(self._rr)
        failures = []
        for i in range(len(candidates)):
            key, address = candidates[(start + i) % len(candidates)]
            try:
                link = await self._link(key, address)
                return await self._send(link, api_key, body, None, f"{address[0]}:{address[1]}")
            except (ConnectError, ConnectionLost, RequestTimedOut, defer.TimeoutError,
                    OSError) as e:
                failures.append(f"{address[0]}:{address[1]} ({e.__class__.__name__})")
                self._drop(key)
        raise NoBrokersAvailable("no broker reachable: " + ", ".join(failures))

    async def _send(self, link: BrokerLink, api_key: int, body: Any, timeout_s: float | None,
                    peer: str, version: int | None = None) -> Any:
        return await request_with_timeout(link.proto, self.reactor, api_key,
                                          link.version_of(api_key) if version is None else version,
                                          body,
                                          timeout_s or self.request_timeout_s, peer)

    def close(self) -> None:
        self._closed = True
        for key in list(self._conns):
            self._drop(key)


def _chain(d: defer.Deferred) -> defer.Deferred:
    """A new Deferred with ``d``'s result, leaving ``d`` intact for other waiters."""
    out: defer.Deferred = defer.Deferred()

    def ok(v: Any) -> Any:
        out.callback(v)
        return v

    def bad(f: Any) -> Any:
        out.errback(f)
        return None

    d.addCallbacks(ok, bad)
    return out
