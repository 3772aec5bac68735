"""A TCP proxy in front of one Kafka-protocol listener that can lose a request's answer for
real, on the reactor: :class:`CuttingProxy`.

Every frame passes through both ways, except the next request of the watched api key after
:meth:`CuttingProxy.cut_next`:

- ``forward=True``: the request is passed on to the listener, then the client's connection is
  closed before any answer comes back (the request takes effect; the client never hears). The
  upstream connection stays open until the answer arrives, so the server sees an ordinary
  request and answers it into the void;
- ``forward=False``: the client's connection is closed without passing the request on (it never
  takes effect, but the client cannot tell the two apart: both are a connection lost after
  sending).

Invariants: :attr:`CuttingProxy.seen` counts every request of the watched key that arrived,
passed on or not, so a test can tell whether a client resent one; a cut applies to exactly one
request.
"""

from __future__ import annotations

import struct
from typing import Any

from twisted.internet import defer
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.protocol import Factory, Protocol

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")  # the request header's first field


class _Upstream(Protocol):
    """The proxy's connection to the listener, for one client connection."""

    def __init__(self, client: _Downstream) -> None:
        self.client = client
        self.closed: defer.Deferred = defer.Deferred()

    def dataReceived(self, data: bytes) -> None:
        if self.client.cut:
            # The client was cut off: this is the lost answer. Drop it, and the connection.
            self.transport.loseConnection()
            return
        self.client.transport.write(data)

    def connectionLost(self, reason: Any = None) -> None:
        if not self.client.cut:
            self.client.transport.loseConnection()
        self.closed.callback(None)


class _Downstream(Protocol):
    """One client connection accepted by the proxy."""

    def __init__(self, proxy: CuttingProxy) -> None:
        self.proxy = proxy
        self.buffer = b""
        self.queued: list[bytes] = []  # frames for the listener before it is connected
        self.upstream: _Upstream | None = None
        self.cut = False
        self.closed: defer.Deferred = defer.Deferred()

    def connectionMade(self) -> None:
        self.proxy.connections.append(self)
        host, port = self.proxy.upstream
        d = connectProtocol(TCP4ClientEndpoint(self.proxy.reactor, host, port), _Upstream(self))
        d.addCallbacks(self._connected, lambda f: self.transport.loseConnection())

    def _connected(self, upstream: _Upstream) -> None:
        self.upstream = upstream
        for frame in self.queued:
            upstream.transport.write(frame)
        self.queued.clear()

    def _pass_on(self, frame: bytes) -> None:
        if self.upstream is None:
            self.queued.append(frame)
        else:
            self.upstream.transport.write(frame)

    def dataReceived(self, data: bytes) -> None:
        if self.cut:
            return
        self.buffer += data
        while len(self.buffer) >= _SIZE.size:
            (size,) = _SIZE.unpack_from(self.buffer)
            if len(self.buffer) < _SIZE.size + size:
                return
            frame = self.buffer[:_SIZE.size + size]
            self.buffer = self.buffer[_SIZE.size + size:]
            (api_key,) = _API_KEY.unpack_from(frame, _SIZE.size)
            if api_key == self.proxy.api_key:
                self.proxy.seen += 1
                cut, self.proxy.pending_cut = self.proxy.pending_cut, None
                if cut is not None:
                    if cut:
                        self._pass_on(frame)
                    self.proxy.cuts += 1
                    self.cut = True
                    self.transport.loseConnection()
                    return
            self._pass_on(frame)

    def connectionLost(self, reason: Any = None) -> None:
        if not self.cut and self.upstream is not None:
            self.upstream.transport.loseConnection()
        self.closed.callback(None)


class CuttingProxy:
    """See the module docstring. ``port = await proxy.start()``, then ``await proxy.stop()``."""

    def __init__(self, reactor: Any, upstream: tuple[str, int], api_key: int) -> None:
        self.reactor = reactor
        self.upstream = upstream
        self.api_key = int(api_key)
        self.seen = 0  # requests of ``api_key`` that reached the proxy
        self.cuts = 0  # of which cut off
        self.pending_cut: bool | None = None  # the next cut's ``forward``, if one is asked
        self.connections: list[_Downstream] = []
        self._port: Any = None

    async def start(self) -> int:
        """Listen on a free port of 127.0.0.1; returns it."""
        factory = Factory.forProtocol(lambda: _Downstream(self))
        self._port = await TCP4ServerEndpoint(self.reactor, 0, interface="127.0.0.1").listen(
            factory)
        return self._port.getHost().port

    def cut_next(self, *, forward: bool) -> None:
        """Lose the answer to the next request of the watched key (see the module docstring)."""
        self.pending_cut = forward

    async def stop(self) -> None:
        if self._port is not None:
            port, self._port = self._port, None
            await port.stopListening()
        closing = []
        for c in self.connections:
            for proto in (c, c.upstream):
                if proto is not None:
                    proto.transport.loseConnection()
                    closing.append(proto.closed)
        await defer.DeferredList(closing)
