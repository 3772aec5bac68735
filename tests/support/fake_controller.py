"""A stand-in for a broker's connection to the controller (AlterPartition and heartbeat
senders' unit tests): it records requests and answers when the test says.
"""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet import defer
from twisted.internet.error import ConnectionRefusedError


class FakeController:
    """Stands in for the TCP connection to the controller: records requests, answers on demand."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, int, dict, defer.Deferred]] = []
        self.refuse_connections = 0
        self.connects = 0
        self._closed = False
        self.transport = SimpleNamespace(loseConnection=self._lose)

    def _lose(self) -> None:
        self._closed = True

    def connect(self, host: str, port: int) -> defer.Deferred:
        self.connects += 1
        if self.refuse_connections:
            self.refuse_connections -= 1
            return defer.fail(ConnectionRefusedError())
        self._closed = False
        return defer.succeed(self)

    def request(self, api_key: int, version: int, body: dict) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        self.requests.append((api_key, version, body, d))
        return d

    def answer(self, i: int, top_error: int = 0, errors: dict | None = None) -> None:
        _, _, body, d = self.requests[i]
        errors = errors or {}
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                code = errors.get((t["topic_name"], p["partition_index"]), 0)
                parts.append(SimpleNamespace(
                    partition_index=p["partition_index"], error_code=code, leader_id=1,
                    leader_epoch=p["leader_epoch"], isr=p["new_isr"],
                    partition_epoch=p["partition_epoch"] + 1))
            topics.append(SimpleNamespace(topic_name=t["topic_name"], partitions=parts))
        d.callback(SimpleNamespace(error_code=top_error, topics=topics))


