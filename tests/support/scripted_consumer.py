"""A test-only consumer for the coordinator's integration tests: it registers, then answers the
coordinator's Ping / StopFetcher / StartFetcher on the channel and records what it was told.
It fetches nothing; a test moves its positions by hand (:meth:`ScriptedConsumer.consume`).

Behaviour switches: ``silent`` (stop answering anything, as a hung process), and
:meth:`rejoin` (what a real consumer does when its channel closes: ClusterMetadata from any
broker, then RegisterConsumer at the coordinator).
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet import defer, reactor, task

from broker_core.rpc import connect_client
from broker_core.wire.apis import ApiKey
from broker_core.wire.topic_partition import TopicPartition


def static(**topics: int) -> str:
    return json.dumps({"version": 1, "pattern": "static", "subscription": topics})


def wildcard(regex: str, streams: int = 1, pattern: str = "white_list") -> str:
    return json.dumps({"version": 1, "pattern": pattern, "subscription": {regex: streams}})


class ScriptedConsumer:
    """See the module docstring. ``owned`` maps each partition to its thread id as of the last
    StartFetcher; ``positions`` is the next offset it would report."""

    def __init__(self, group: str, consumer_id: str, topic_count: str, *,
                 session_timeout_ms: int = 1500, auto_commit: bool = True,
                 auto_offset_reset: str = "smallest") -> None:
        self.group = group
        self.consumer_id = consumer_id
        self.topic_count = topic_count
        self.session_timeout_ms = session_timeout_ms
        self.auto_commit = auto_commit
        self.auto_offset_reset = auto_offset_reset
        self.proto: Any = None
        self.silent = False
        self.owned: dict[TopicPartition, str] = {}
        self.start_offsets: dict[TopicPartition, int] = {}
        self.positions: dict[TopicPartition, int] = {}
        self.generation = -1
        self.fetching = False
        self.log: list[tuple[str, Any]] = []
        self.pings = 0
        self.stops = 0
        self.starts = 0
        self.registrations = 0
        self.session_id = 0
        self.stopped = False

    # -- registration ------------------------------------------------------------------------------

    async def register(self, host: str, port: int) -> Any:
        """Connect and send RegisterConsumer; on success start answering. Returns the
        response body."""
        self.proto = await connect_client(reactor, host, port, f"scripted-{self.consumer_id}")
        resp = await self.proto.request(ApiKey.REGISTER_CONSUMER, 1, {
            "group_id": self.group, "consumer_id": self.consumer_id,
            "topic_count": self.topic_count, "auto_commit": self.auto_commit,
            "auto_offset_reset": self.auto_offset_reset,
            "session_timeout_ms": self.session_timeout_ms})
        if resp.error_code == 0:
            self.registrations += 1
            self.session_id = resp.session_id  # what a CommitOffsets v1 must carry
            # Thin consumer: nothing is fetched until the coordinator's StartFetcher.
            self.fetching = False
            self.owned = {}
            self.proto.serve(self._answer)
        else:
            self.proto.transport.loseConnection()
            self.proto = None
        return resp

    async def register_at(self, broker: Any) -> Any:
        return await self.register("127.0.0.1", broker.port.getHost().port)

    async def rejoin(self, brokers: list[Any], timeout: float = 30.0) -> None:
        """``consumerStartup``: ClusterMetadata from any running broker, RegisterConsumer
        at the coordinator it names; retried until registered."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for b in brokers:
                if not b.running or b.port is None:
                    continue
                try:
                    proto = await connect_client(reactor, "127.0.0.1", b.port.getHost().port,
                                                 "scripted-metadata")
                    try:
                        md = await proto.request(ApiKey.CLUSTER_METADATA, 0, {})
                    finally:
                        proto.transport.loseConnection()
                    if md.error_code != 0:
                        continue
                    addr = {x.node_id: (x.host, x.port) for x in md.brokers}
                    if md.coordinator_id not in addr:
                        continue
                    resp = await self.register(*addr[md.coordinator_id])
                    if resp.error_code == 0:
                        return
                except Exception:  # noqa: BLE001 - any failure: try the next broker
                    pass
            await task.deferLater(reactor, 0.1, lambda: None)
        raise AssertionError(f"{self.consumer_id} could not re-register in {timeout}s")

    @property
    def connected(self) -> bool:
        return self.proto is not None and not self.proto.closed

    def close(self) -> None:
        self.stopped = True
        if self.proto is not None:
            self.proto.transport.loseConnection()

    def closed(self) -> defer.Deferred:
        return self.proto.closed_d

    # -- the consumer's side of the channel --------------------------------------------------------

    def consume(self, topic: str, partition: int, offset: int) -> None:
        """Pretend the application consumed up to ``offset`` (next offset to read)."""
        self.positions[(topic, partition)] = offset

    def _offsets(self) -> list[dict] | None:
        if not self.auto_commit:
            return None
        return [{"topic": t, "partition": p, "offset": o}
                for (t, p), o in sorted(self.positions.items()) if (t, p) in self.owned]

    def _answer(self, request: Any) -> Any:
        key, body = request.header.api_key, request.body
        if self.silent:
            return defer.Deferred()  # never answered
        if key == ApiKey.PING:
            self.pings += 1
            return {"error_code": 0, "consumer_id": self.consumer_id, "offsets": self._offsets()}
        if key == ApiKey.STOP_FETCHER:
            self.stops += 1
            self.log.append(("stop", None))
            offsets = self._offsets()
            self.fetching = False
            self.owned = {}
            return {"error_code": 0, "consumer_id": self.consumer_id, "offsets": offsets}
        if key == ApiKey.START_FETCHER:
            self.starts += 1
            self.generation = body.generation_id
            self.owned = {}
            for t in body.ownership:
                for p in t.partitions:
                    tp = (p.topic, p.partition)
                    self.owned[tp] = t.consumer_thread_id
                    self.start_offsets[tp] = p.offset
                    if p.offset >= 0:
                        self.positions[tp] = max(p.offset, self.positions.get(tp, -1))
            self.brokers = [(b.node_id, b.host, b.port) for b in body.brokers]
            self.fetching = True
            self.log.append(("start", dict(self.owned)))
            return {"error_code": 0, "consumer_id": self.consumer_id}
        return {"error_code": 42, "consumer_id": self.consumer_id}
