"""The coordinator channel, broker side (docs/design.md#shared-decisions).

A consumer connects, sends RegisterConsumer, and once the broker's answer is on the wire the
connection turns around: the broker sends *requests* on it (Ping, StopFetcher, StartFetcher) and
the consumer answers them, so the consumer needs no server socket. :class:`ServerChannel` is that
turned-around connection: ``request()`` returns a Deferred for the consumer's answer.

Invariants:

- nothing is sent on the channel before the RegisterConsumer response has been written (the
  protocol opens the channel only once every earlier response has left);
- every frame the consumer sends after registering is a response to the oldest outstanding
  request; anything else (a request, a wrong correlation id) closes the connection;
- when the connection closes, every outstanding request fails with ``ConnectionLost`` and the
  ``on_lost`` callbacks run once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.logger import Logger
from twisted.python.failure import Failure

from broker_core.rpc import OutstandingRequests
from broker_core.wire import errors


class ServerChannel:
    """Broker → consumer requests over an accepted connection; see the module docstring."""

    log = Logger(namespace="sluice.coordinator.channel")

    def __init__(self, client_id: str = "sluice-coordinator") -> None:
        self._out = OutstandingRequests(client_id)
        self._proto: Any = None
        self._open = False
        self._lost = False
        self._queued: list[list[bytes]] = []
        self._on_lost: list[Callable[[], None]] = []
        self.peer = "?"

    # -- called by the server protocol ----------------------------------------------------------

    @property
    def listener(self) -> str | None:
        """The listener the consumer's connection came on (None before :meth:`bind`)."""
        security = getattr(self._proto, "security", None)
        return None if security is None else security.listener

    def bind(self, proto: Any) -> None:
        """The protocol took this channel; frames from now on are responses."""
        self._proto = proto
        self.peer = getattr(proto, "peer", "?")

    def opened(self) -> None:
        """Every earlier response has been written: requests may flow."""
        self._open = True
        queued, self._queued = self._queued, []
        for chunks in queued:
            self._proto.transport.writeSequence(chunks)

    def frame_received(self, frame: bytes) -> None:
        try:
            self._out.response(frame)
        except errors.ProtocolError as e:
            self.log.warn("closing coordinator channel to {peer}: {e}", peer=self.peer, e=e)
            self.close()

    def connection_lost(self) -> None:
        if self._lost:
            return
        self._lost = True
        self._out.fail_all(Failure(ConnectionLost("coordinator channel closed")))
        callbacks, self._on_lost = self._on_lost, []
        for cb in callbacks:
            try:
                cb()
            except Exception:
                self.log.failure("on_lost callback failed")

    # -- used by the coordinator ----------------------------------------------------------------

    @property
    def lost(self) -> bool:
        return self._lost

    @property
    def outstanding(self) -> int:
        return len(self._out)

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once when the connection closes (at once if it already has)."""
        if self._lost:
            callback()
        else:
            self._on_lost.append(callback)

    def request(self, api_key: int, api_version: int, body: Any) -> defer.Deferred:
        """Send a request to the consumer; fires with its decoded response body, or fails with
        ``ConnectionLost`` when the channel closes first."""
        if self._lost:
            return defer.fail(ConnectionDone("coordinator channel is closed"))
        chunks, d = self._out.add(api_key, api_version, body)
        if self._open:
            self._proto.transport.writeSequence(chunks)
        else:
            self._queued.append(chunks)
        return d

    def close(self) -> None:
        """Close the connection (a failed consumer's socket is closed)."""
        if self._proto is not None and self._proto.transport is not None:
            self._proto.lose_connection()
        else:
            self.connection_lost()
