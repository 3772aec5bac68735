"""The broker's Twisted protocol: a thin shell over the sans-IO codec.

It frames bytes with :class:`broker_core.wire.framing.FrameDecoder`, decodes requests with
:func:`broker_core.wire.apis.decode_request`, hands each one to a request handler and writes the
responses back **in request order**, which is what Kafka clients rely on (the protocol guide: per
connection, responses return in the order requests were sent). A handler may answer later (a
long-poll Fetch, an acks=all Produce), so every request gets a slot in a per-connection queue and a
slot is flushed only when all slots before it are filled.

Invariants:

- responses leave in request order; a request with ``acks=0`` takes no slot (Kafka sends nothing);
- at most ``max_in_flight`` requests wait per connection: past that the protocol stops reading from
  the socket (back-pressure) instead of buffering without bound;
- a malformed frame, an oversized frame or an unknown API key closes the connection after logging and
  counting it; an unsupported version gets Kafka's error response where the protocol has one
  (ApiVersions answers UNSUPPORTED_VERSION with the versions it supports, KIP-511).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IHandshakeListener
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from broker_core import net
from broker_core.security.principal import (
    DEFAULT_LISTENER,
    ConnectionSecurity,
    ListenerSettings,
    SecurityProtocol,
)
from broker_core.security.ssl_principal import principal_from_certificate
from broker_core.wire import apis, errors, framing

#: A handler answers with a response body, ``None`` (no response: acks=0 Produce), or a Deferred
#: firing with either.
Handler = Callable[[Any, "KafkaServerProtocol"], Any]

NO_RESPONSE = object()
"""Returned by a handler when Kafka sends no response (Produce with acks=0)."""


class _Slot:
    __slots__ = ("chunks", "ready")

    def __init__(self) -> None:
        self.chunks: list[bytes] | None = None
        self.ready = False


@implementer(IHandshakeListener)
class KafkaServerProtocol(Protocol):
    """One client connection. See the module docstring for the ordering invariant.

    On a TLS listener the transport is Twisted's TLS wrapper, which calls
    :meth:`handshakeCompleted` before it delivers the first byte of application data: an SSL
    listener's client certificate names the principal before any request is handled."""

    log = Logger(namespace="sluice.server")

    def __init__(self, factory: KafkaServerFactory) -> None:
        self.factory = factory
        self._decoder = framing.FrameDecoder(factory.max_frame_bytes)
        self._slots: deque[_Slot] = deque()
        self._paused = False
        self._closed = False
        self.peer = "?"
        self.security = ConnectionSecurity(factory.listener.name, factory.listener.protocol)
        self.channel: Any = None  # a ServerChannel once this is a coordinator channel
        self._channel_pending = False

    # -- connection lifecycle -------------------------------------------------------------

    def connectionMade(self) -> None:  # noqa: N802 (Twisted API)
        net.tune(self.transport)  # small responses must not wait for Nagle (broker_core.net)
        peer = self.transport.getPeer()
        self.peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
        self.security.peer_host = getattr(peer, "host", "?")
        self.factory.connection_made(self)

    def handshakeCompleted(self) -> None:  # noqa: N802 (Twisted API)
        """The TLS handshake is done: on an SSL listener a client certificate (verified
        against ``ssl.cafile`` by the handshake) makes the principal its subject's DN, as
        Kafka's default principal builder; without one the client stays ANONYMOUS. On
        SASL_SSL the principal is SASL's to set, never the certificate's."""
        if self.security.protocol is not SecurityProtocol.SSL:
            return
        cert = self.transport.getPeerCertificate()
        if cert is None:
            return
        principal = principal_from_certificate(cert.to_cryptography())
        self.security.authenticate(principal)
        self.log.debug("TLS client {peer} on listener {l} authenticated as {p}",
                       peer=self.peer, l=self.security.listener, p=str(principal))

    def connectionLost(self, reason: Failure = None) -> None:  # noqa: N802 (Twisted API)
        self._closed = True
        self._slots.clear()
        self.factory.connection_lost(self)
        if self.channel is not None:
            self.channel.connection_lost()

    def attach_channel(self, channel: Any) -> None:
        """Turn this connection into a coordinator channel (:mod:`broker_core.server.channel`).

        Frames received from now on are responses for ``channel``; it may send once every
        response queued so far (the RegisterConsumer answer among them) has been written.
        """
        if self.channel is not None:
            raise RuntimeError("connection is already a coordinator channel")
        self.channel = channel
        channel.bind(self)
        if self._closed:
            channel.connection_lost()
            return
        self._channel_pending = True
        self._maybe_open_channel()

    def _maybe_open_channel(self) -> None:
        if self._channel_pending and not self._slots:
            self._channel_pending = False
            self.channel.opened()

    # -- inbound ---------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 (Twisted API)
        if self._closed:
            return
        try:
            frames = self._decoder.feed(data)
        except errors.FrameTooLarge as e:
            self._disconnect("frame_too_large", str(e))
            return
        except errors.ProtocolError as e:
            self._disconnect("malformed_frame", str(e))
            return
        for frame in frames:
            if self._closed:
                return
            if self.channel is not None:
                self.channel.frame_received(frame)
            else:
                self._handle_frame(frame)

    def _handle_frame(self, frame: bytes) -> None:
        try:
            request = self.factory.decode_request(frame)
        except errors.UnsupportedVersion as e:
            chunks = apis.error_response(e.header, errors.ErrorCode.UNSUPPORTED_VERSION)
            self.factory.count_error(e.header.api_key, "UNSUPPORTED_VERSION")
            if chunks is None:
                self._disconnect(
                    "unsupported_version",
                    f"api {e.header.api_key} v{e.header.api_version} is not supported",
                )
                return
            slot = _Slot()
            self._slots.append(slot)
            self._fill(slot, chunks)
            return
        except errors.UnknownApiKey as e:
            self._disconnect("unknown_api", f"unknown api key {e.header.api_key}")
            return
        except errors.ProtocolError as e:
            self._disconnect("malformed_frame", str(e))
            return

        slot = _Slot()
        self._slots.append(slot)
        started = self.factory.clock.seconds()
        try:
            result = self.factory.handler(request, self)
        except Exception:
            d = defer.fail()
        else:
            if isinstance(result, defer.Deferred):
                d = result
            elif inspect.iscoroutine(result):
                d = defer.Deferred.fromCoroutine(result)
            else:
                d = defer.succeed(result)
        d.addCallback(self._encode, request, started)
        d.addErrback(self._handler_failed, request, started)
        d.addCallback(lambda chunks: self._fill(slot, chunks))
        if len(self._slots) >= self.factory.max_in_flight and not self._paused:
            self._paused = True
            self.transport.pauseProducing()

    def _encode(self, body: Any, request: Any, started: float) -> list[bytes] | None:
        header = request.header
        self.factory.observe(header.api_key, self.factory.clock.seconds() - started)
        if body is NO_RESPONSE or body is None:
            return None
        return apis.encode_response(header.api_key, header.api_version, header.correlation_id, body)

    def _handler_failed(self, failure: Failure, request: Any, started: float) -> list[bytes] | None:
        self.log.failure(
            "request api={api} v{version} from {peer} failed",
            failure,
            api=request.header.api_key,
            version=request.header.api_version,
            peer=self.peer,
        )
        self.factory.count_error(request.header.api_key, "UNKNOWN_SERVER_ERROR")
        chunks = apis.error_response(request, errors.ErrorCode.UNKNOWN_SERVER_ERROR)
        if chunks is None:
            self._disconnect("handler_error", "no error response possible")
        return chunks

    # -- outbound --------------------------------------------------------------------------

    def _fill(self, slot: _Slot, chunks: list[bytes] | None) -> None:
        slot.chunks = chunks
        slot.ready = True
        if self._closed:
            return
        while self._slots and self._slots[0].ready:
            done = self._slots.popleft()
            if done.chunks is not None:
                self.transport.writeSequence(framing.frame(done.chunks))
        if self._paused and len(self._slots) < self.factory.max_in_flight:
            self._paused = False
            self.transport.resumeProducing()
        self._maybe_open_channel()

    def _disconnect(self, reason: str, detail: str) -> None:
        self.log.warn(
            "closing connection from {peer}: {reason} ({detail})",
            peer=self.peer,
            reason=reason,
            detail=detail,
        )
        self.factory.count_disconnect(reason)
        self._closed = True
        self.transport.loseConnection()


class KafkaServerFactory(Factory):
    """Builds :class:`KafkaServerProtocol` instances that share one request handler.

    ``handler(request, protocol)`` returns a response body, ``NO_RESPONSE`` or a Deferred. The
    metrics object is optional (tests may leave it out).
    """

    noisy = False
    #: How a frame becomes a request; a listener serving another set of APIs (the quorum's,
    #: :mod:`broker_core.raft.listener`) replaces it.
    decode_request = staticmethod(apis.decode_request)

    def __init__(
        self,
        handler: Handler,
        *,
        clock: Any,
        metrics: Any = None,
        max_frame_bytes: int = framing.MAX_FRAME_BYTES,
        max_in_flight: int = 100,
        listener: ListenerSettings = DEFAULT_LISTENER,
    ) -> None:
        self.handler = handler
        #: The listener's name and security protocol, given to each connection's
        #: :class:`~broker_core.security.principal.ConnectionSecurity`.
        self.listener = listener
        self.clock = clock
        self.metrics = metrics
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight = max_in_flight
        self.connections: set[KafkaServerProtocol] = set()
        self._api_names: dict[int, str] = {}

    def buildProtocol(self, addr: Any) -> KafkaServerProtocol:  # noqa: N802 (Twisted API)
        return KafkaServerProtocol(self)

    def connection_made(self, proto: KafkaServerProtocol) -> None:
        self.connections.add(proto)
        if self.metrics is not None:
            self.metrics.connections.set(len(self.connections))

    def connection_lost(self, proto: KafkaServerProtocol) -> None:
        self.connections.discard(proto)
        if self.metrics is not None:
            self.metrics.connections.set(len(self.connections))

    def _api_name(self, api_key: int) -> str:
        name = self._api_names.get(api_key)
        if name is None:  # an enum lookup per request is measurable; the names never change
            try:
                name = apis.ApiKey(api_key).name
            except ValueError:
                name = str(api_key)
            self._api_names[api_key] = name
        return name

    def observe(self, api_key: int, seconds: float) -> None:
        if self.metrics is not None:
            name = self._api_name(api_key)
            self.metrics.requests_by_api(name).inc()
            self.metrics.request_duration_by_api(name).observe(seconds)

    def count_error(self, api_key: int, error: str) -> None:
        if self.metrics is not None:
            self.metrics.request_errors_total.labels(api=self._api_name(api_key), error=error).inc()

    def count_disconnect(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.disconnects_total.labels(reason=reason).inc()

    def close_all(self) -> None:
        for proto in list(self.connections):
            proto.transport.loseConnection()
