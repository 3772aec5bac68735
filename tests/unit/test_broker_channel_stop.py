"""BrokerChannel.stop() while a request is in flight: the request's Deferred fails with
CancelledError once, and the answer that still arrives afterwards is dropped, not a second
firing of that Deferred (which was an AlreadyCalledError logged as critical at every broker
stop that raced a controller request)."""

from __future__ import annotations

from twisted.internet import defer, task
from twisted.logger import LogLevel, globalLogPublisher

from broker_core.rpc import BrokerChannel


class HeldProtocol:
    """A connected protocol whose answers the test gives."""

    def __init__(self) -> None:
        self.pending: list[defer.Deferred] = []

    def request(self, api_key, api_version, body):
        d: defer.Deferred = defer.Deferred()
        self.pending.append(d)
        return d


class ConnectedService:
    """Stands in for the channel's ClientService: always connected to ``proto``."""

    def __init__(self, proto: HeldProtocol) -> None:
        self.proto = proto

    def startService(self) -> None:  # noqa: N802 (Twisted API)
        pass

    def stopService(self) -> defer.Deferred:  # noqa: N802 (Twisted API)
        return defer.succeed(None)

    def whenConnected(self) -> defer.Deferred:  # noqa: N802 (Twisted API)
        return defer.succeed(self.proto)


def test_an_answer_after_stop_is_dropped_quietly():
    proto = HeldProtocol()
    clock = task.Clock()
    channel = BrokerChannel(2, "h", 1, reactor=clock, endpoint_factory=lambda r, h, p: None)
    channel._service = ConnectedService(proto)
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        channel.start()
        result = channel.send(4, 5, {"x": 1})
        assert len(proto.pending) == 1  # in flight
        failures: list = []
        result.addErrback(failures.append)
        channel.stop()
        assert len(failures) == 1 and failures[0].check(defer.CancelledError)
        proto.pending[0].callback({"answer": True})  # the late answer
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert not [e for e in events if e.get("log_level") is LogLevel.critical]
