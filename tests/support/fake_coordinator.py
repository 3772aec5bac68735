"""A test-only consumer coordinator, for testing the consumer CLIENT against real brokers.

It speaks Sluice's own coordination protocol (ClusterMetadata, RegisterConsumer, CommitOffsets,
then Ping / StopFetcher / StartFetcher on the coordinator channel) on a real socket, built on the
broker's own server protocol (:class:`~broker_core.server.protocol.KafkaServerFactory`) and
channel (:class:`~broker_core.server.channel.ServerChannel`). It decides nothing: the test drives
it (``ping``, ``stop_fetcher``, ``start_fetcher``) and inspects what the consumer answered. Any
other API (Metadata, ...) is forwarded to a real broker, so it can sit in a consumer's bootstrap
list like the broker that hosts the real coordinator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer, task
from twisted.internet.endpoints import TCP4ServerEndpoint

from broker_core.rpc import connect_client
from broker_core.server.channel import ServerChannel
from broker_core.server.protocol import KafkaServerFactory
from broker_core.wire.apis import ApiKey, advertised_versions
from broker_core.wire.errors import ErrorCode


@dataclass
class Member:
    """One registered consumer as the fake coordinator sees it."""

    consumer_id: str
    registration: Any
    channel: ServerChannel
    answers: list[tuple[int, Any]] = field(default_factory=list)

    @property
    def lost(self) -> bool:
        return self.channel.lost


class FakeCoordinator:
    """See the module docstring. ``brokers()`` returns the real brokers (in-process
    ``BrokerService`` objects) to advertise and forward to."""

    def __init__(self, brokers: Callable[[], list[Any]], node_id: int = 99,
                 reactor: Any = None) -> None:
        if reactor is None:
            from twisted.internet import reactor as _r
            reactor = _r
        self.reactor = reactor
        self.brokers = brokers
        self.node_id = node_id
        self.port: Any = None
        self.members: dict[str, Member] = {}
        self.registrations: list[Any] = []
        self.register_errors: list[ErrorCode] = []  # answered to the next registrations
        self.commits: list[Any] = []
        self.commit_error = ErrorCode.NONE
        self.answer_cluster_metadata = True
        #: Highest RegisterConsumer version served; above it the connection is closed, as a
        #: broker that does not serve the version does.
        self.max_register_version = 1
        self.register_versions: list[int] = []
        self._pinger: task.LoopingCall | None = None
        self._waiters: list[tuple[str, defer.Deferred]] = []

    async def start(self) -> FakeCoordinator:
        factory = KafkaServerFactory(self._handle, clock=self.reactor)
        self.port = await TCP4ServerEndpoint(self.reactor, 0, interface="127.0.0.1").listen(
            factory)
        return self

    async def stop(self) -> None:
        self.stop_pinging()
        for m in self.members.values():
            m.channel.close()
        if self.port is not None:
            await self.port.stopListening()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port.getHost().port}"

    # -- the test drives these ----------------------------------------------------------------------

    def member(self, consumer_id: str) -> defer.Deferred:
        """Fires with the consumer's current (live) registration, waiting for one."""
        m = self.members.get(consumer_id)
        if m is not None and not m.lost:
            return defer.succeed(m)
        d: defer.Deferred = defer.Deferred()
        self._waiters.append((consumer_id, d))
        return d

    def _send(self, consumer_id: str, api: ApiKey, body: dict) -> defer.Deferred:
        m = self.members[consumer_id]
        d = m.channel.request(api, 0, body)

        def got(resp: Any) -> Any:
            m.answers.append((api, resp))
            return resp

        return d.addCallback(got)

    def ping(self, consumer_id: str, num_retries: int = 0) -> defer.Deferred:
        return self._send(consumer_id, ApiKey.PING,
                          {"consumer_id": consumer_id, "num_retries": num_retries})

    def stop_fetcher(self, consumer_id: str) -> defer.Deferred:
        return self._send(consumer_id, ApiKey.STOP_FETCHER, {"consumer_id": consumer_id})

    def start_fetcher(self, consumer_id: str, generation: int,
                      ownership: dict[str, list[tuple[str, int, int]]]) -> defer.Deferred:
        """``ownership``: consumer thread id -> [(topic, partition, start offset)]."""
        return self._send(consumer_id, ApiKey.START_FETCHER, {
            "consumer_id": consumer_id, "generation_id": generation,
            "ownership": [{"consumer_thread_id": tid, "partitions": [
                {"topic": t, "partition": p, "offset": o} for t, p, o in parts]}
                for tid, parts in ownership.items()],
            "brokers": self._broker_list(with_self=False)})

    def start_pinging(self, interval: float) -> None:
        """Ping every live member every ``interval`` seconds (what the real scheduler does
        at session_timeout / 3)."""
        def tick() -> None:
            for cid, m in list(self.members.items()):
                if not m.lost and m.channel.outstanding == 0:
                    self.ping(cid).addErrback(lambda f: None)

        self._pinger = task.LoopingCall(tick)
        self._pinger.clock = self.reactor
        self._pinger.start(interval, now=False)

    def stop_pinging(self) -> None:
        if self._pinger is not None and self._pinger.running:
            self._pinger.stop()
        self._pinger = None

    def drop(self, consumer_id: str) -> None:
        """Close a consumer's channel (the coordinator's way to force a rebalance)."""
        self.members[consumer_id].channel.close()

    # -- the server side ----------------------------------------------------------------------------

    def _broker_list(self, with_self: bool = True) -> list[dict]:
        out = [{"node_id": b.config.broker_id, "host": "127.0.0.1",
                "port": b.port.getHost().port} for b in self.brokers() if b.running]
        if with_self:
            out.append({"node_id": self.node_id, "host": "127.0.0.1",
                        "port": self.port.getHost().port})
        return out

    def _handle(self, request: Any, proto: Any) -> Any:
        api = request.header.api_key
        body = request.body
        if api == ApiKey.API_VERSIONS:
            return {"error_code": 0, "api_keys": advertised_versions(), "throttle_time_ms": 0}
        if api == ApiKey.CLUSTER_METADATA:
            if not self.answer_cluster_metadata:
                return {"error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "brokers": []}
            return {"error_code": 0, "coordinator_id": self.node_id,
                    "brokers": self._broker_list()}
        if api == ApiKey.REGISTER_CONSUMER:
            self.register_versions.append(request.header.api_version)
            if request.header.api_version > self.max_register_version:
                proto.transport.loseConnection()
                return defer.Deferred()  # never answered: the connection is gone
            self.registrations.append(body)
            if self.register_errors:
                return {"error_code": int(self.register_errors.pop(0))}
            ch = ServerChannel()
            proto.attach_channel(ch)
            m = Member(body.consumer_id, body, ch)
            self.members[body.consumer_id] = m
            waiters, self._waiters = self._waiters, []
            for cid, d in waiters:
                if cid == body.consumer_id:
                    d.callback(m)
                else:
                    self._waiters.append((cid, d))
            return {"error_code": 0}
        if api == ApiKey.COMMIT_OFFSETS:
            self.commits.append(body)
            code = int(self.commit_error)
            return {"error_code": code, "partitions": [
                {"topic": o.topic, "partition": o.partition, "error_code": code}
                for o in body.offsets]}
        return defer.Deferred.fromCoroutine(self._forward(request))

    async def _forward(self, request: Any) -> Any:
        b = next(b for b in self.brokers() if b.running)
        proto = await connect_client(self.reactor, "127.0.0.1", b.port.getHost().port,
                                     "fake-coordinator")
        try:
            return await proto.request(request.header.api_key, request.header.api_version,
                                       request.body)
        finally:
            proto.transport.loseConnection()
