"""Stand-ins for a coordinator channel and the connection it is attached to, for unit tests of
the coordinator on task.Clock (no sockets): the test sees what the coordinator sends and
answers it (or not)."""

from __future__ import annotations

from twisted.internet import defer


class FakeChannel:
    """Records requests; the test answers them (or not)."""

    def __init__(self):
        self.sent: list[tuple[int, dict, defer.Deferred]] = []
        self.closed = False
        self._lost: list = []

    def request(self, api_key, version, body):
        if self.closed:
            return defer.fail(ConnectionError("closed"))
        d: defer.Deferred = defer.Deferred()
        self.sent.append((api_key, body, d))
        return d

    def on_lost(self, cb):
        self._lost.append(cb)

    def close(self):
        if not self.closed:
            self.closed = True
            for _, _, d in self.sent:
                if not d.called:
                    d.errback(ConnectionError("closed"))
            for cb in self._lost:
                cb()

    def pending(self, api_key):
        return [(b, d) for k, b, d in self.sent if k == api_key and not d.called]


class FakeProto:
    peer = "127.0.0.1:5555"

    def attach_channel(self, ch):
        self.channel = ch
