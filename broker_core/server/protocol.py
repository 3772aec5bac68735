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
- a frame's bytes are reserved from the listeners' memory pool as soon as its size has arrived
  and given back once its handler is done with it (an acks=all Produce: at its answer); while
  the pool (or the peer host's share of it) cannot give them the protocol stops reading
  (:mod:`broker_core.server.memory_pool`). Reading resumes only when no reason to pause is
  left. On a SASL listener a connection that has not logged in reserves from the small
  unauthenticated pool instead. A frame whose memory is reserved must arrive whole within
  ``socket.request.read.timeout.ms`` of its reservation, or the connection is closed and the
  reservation given back (time during which the broker itself stopped reading does not count
  against the peer: the deadline is then re-armed);
- responses are bounded too: the protocol is the transport's streaming producer, so when the
  transport's write buffer is full (a peer that does not read its responses) it stops
  dispatching the frames it holds and stops reading, until the buffer drains. What one read
  delivered waits, parsed but not dispatched, in ``_backlog`` (its bytes still reserved in the
  pool);
- every close the broker decides (idle, a malformed or oversized frame, a refused login,
  shutdown) ends within :data:`CLOSE_GRACE_S`: what was written may leave meanwhile, then the
  connection is aborted, so a peer that stops reading cannot hold its slot, its reservations
  or the broker's buffers;
- the factory refuses a connection over ``max.connections`` / ``max.connections.per.ip`` at
  accept and closes one idle for ``connections.max.idle.ms``
  (:mod:`broker_core.server.connection_limits`, :mod:`broker_core.server.idle`);
- a malformed frame, an oversized frame or an unknown API key closes the connection after logging and
  counting it; an unsupported version gets Kafka's error response where the protocol has one
  (ApiVersions answers UNSUPPORTED_VERSION with the versions it supports, KIP-511);
- every request passes the connection's authentication gate
  (:mod:`broker_core.server.authentication`) first: SASL requests are answered there, and on a
  SASL listener nothing else but ApiVersions is served before authentication (frames then
  limited to 512 KiB; a client must wait for its last SaslAuthenticate answer before sending a
  larger request, as Kafka's clients do).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IHandshakeListener, IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from broker_core import net
from broker_core.security.peer_tls import handshake_refusal
from broker_core.security.principal import (
    DEFAULT_LISTENER,
    ConnectionSecurity,
    ListenerSettings,
    SecurityProtocol,
    canonical_host,
)
from broker_core.security.sasl import SaslSettings
from broker_core.security.ssl_principal import principal_from_certificate
from broker_core.server.authentication import SERVE, ConnectionAuthentication, Verdict
from broker_core.server.connection_limits import ServerLimits
from broker_core.server.idle import IdleTracker
from broker_core.server.memory_pool import ConnectionBudget
from broker_core.wire import apis, errors, framing

#: How long a connection refused by the authentication gate stays open after its answer was
#: written (Kafka's ``connection.failed.authentication.delay.ms`` default): a client that reads
#: the answer and the end of the stream at once may drop the answer (kafka-python does), and a
#: password guesser is slowed down. Nothing more is read from the connection meanwhile.
FAILED_AUTHENTICATION_CLOSE_DELAY_S = 0.1

#: How long a connection the broker closes may take to flush what was written to it before it
#: is aborted: enough for an error answer to leave, not enough for a peer that stopped reading
#: to hold the connection (Twisted's ``loseConnection`` alone waits for the buffer forever).
CLOSE_GRACE_S = 1.0

#: A handler answers with a response body, ``None`` (no response: acks=0 Produce), or a Deferred
#: firing with either.
Handler = Callable[[Any, "KafkaServerProtocol"], Any]

NO_RESPONSE = object()
"""Returned by a handler when Kafka sends no response (Produce with acks=0)."""
#: The first byte of a TLS handshake record (a ClientHello): as a Kafka frame's first byte it
#: would announce a frame of over 350 MB.
TLS_HANDSHAKE_RECORD = b"\x16"
#: OpenSSL's reasons for a handshake whose peer sent no TLS at all (a plaintext client).
NOT_TLS_SIGNS = ("wrong version number", "http request", "unknown protocol",
                 "packet length too long", "record layer failure")


class _Slot:
    __slots__ = ("chunks", "ready")

    def __init__(self) -> None:
        self.chunks: list[bytes] | None = None
        self.ready = False


@implementer(IHandshakeListener, IPushProducer)
class KafkaServerProtocol(Protocol):
    """One client connection. See the module docstring for the ordering invariant.

    On a TLS listener the transport is Twisted's TLS wrapper, which calls
    :meth:`handshakeCompleted` before it delivers the first byte of application data: an SSL
    listener's client certificate names the principal before any request is handled."""

    log = Logger(namespace="sluice.server")

    def __init__(self, factory: KafkaServerFactory) -> None:
        self.factory = factory
        self._slots: deque[_Slot] = deque()
        # Why reading is paused: "in_flight", "memory", "closing", "writing".
        self._pauses: set[str] = set()
        #: Frames read but not dispatched yet: dispatch stops while the write buffer is full.
        self._backlog: deque[bytes] = deque()
        self._dispatching = False
        self._closed = False
        self._losing = False  # lose_connection was called
        self._abort_timer: Any = None
        #: (reason, detail) of a close waiting for the answers already queued to be written.
        self._close_when_flushed: tuple[str, str] | None = None
        self._delayed_close: Any = None
        #: The peer host counted by the factory's connection limiter (None: not counted).
        self.counted_host: str | None = None
        self.peer = "?"
        self.security = ConnectionSecurity(factory.listener.name, factory.listener.protocol)
        self.authentication = ConnectionAuthentication(self.security, factory.sasl,
                                                       factory.count_authentication)
        self._budget = ConnectionBudget(factory.limits.pool, self._memory_granted)
        self._decoder = framing.FrameDecoder(
            self.authentication.frame_limit(factory.max_frame_bytes), admit=self._admit)
        #: The read deadline of the admitted, incomplete frame (``frames_admitted`` it is for).
        self._read_timer: Any = None
        self._read_timer_frame = -1
        self.channel: Any = None  # a ServerChannel once this is a coordinator channel
        self._channel_pending = False
        self._handshake_done = False
        self._bytes_seen = False

    # -- connection lifecycle -------------------------------------------------------------

    def connectionMade(self) -> None:  # noqa: N802 (Twisted API)
        net.tune(self.transport)  # small responses must not wait for Nagle (broker_core.net)
        peer = self.transport.getPeer()
        self.peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
        # The canonical form ACL hosts and connection limits use (an IPv4 client accepted by
        # an IPv6 wildcard listener arrives as ::ffff:a.b.c.d).
        self.security.peer_host = canonical_host(str(getattr(peer, "host", "?")))
        self._budget.host = self.security.peer_host  # the pool's per-host share
        # The transport tells a registered streaming producer when its write buffer is full
        # (pauseProducing) and drained (resumeProducing): how responses stay bounded.
        self.transport.registerProducer(self, True)
        self.factory.connection_made(self)

    def handshakeCompleted(self) -> None:  # noqa: N802 (Twisted API)
        """The TLS handshake is done: on an SSL listener a client certificate (verified
        against ``ssl.cafile`` by the handshake) makes the principal its subject's DN, as
        Kafka's default principal builder; without one the client stays ANONYMOUS. On
        SASL_SSL the principal is SASL's to set, never the certificate's."""
        self._handshake_done = True
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
        hint = self.factory.protocol_mismatch_hint
        if hint is not None and self.security.protocol.uses_tls and not self._handshake_done:
            refusal = handshake_refusal(reason)
            if refusal is not None:
                plain = any(sign in refusal for sign in NOT_TLS_SIGNS)
                self.log.warn("TLS handshake from {peer} on listener {l} failed: {why}{advice}",
                              peer=self.peer, l=self.security.listener, why=refusal,
                              advice=f" (a plaintext peer? {hint})" if plain else "")
        self._closed = True
        self._slots.clear()
        self._backlog.clear()
        self._budget.close()
        for timer in (self._delayed_close, self._abort_timer, self._read_timer):
            if timer is not None and timer.active():
                timer.cancel()
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

    @property
    def busy(self) -> bool:
        """A request in flight, or a coordinator channel: never closed as idle."""
        return bool(self._slots) or self.channel is not None

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 (Twisted API)
        if self._closed:
            return
        self.factory.activity(self)
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        if not self._bytes_seen:
            self._bytes_seen = True
            hint = self.factory.protocol_mismatch_hint
            if (hint is not None and not self.security.protocol.uses_tls
                    and data[:1] == TLS_HANDSHAKE_RECORD):
                # As a frame size this is over 350 MB, which no quorum request comes near: a
                # TLS peer, not a Kafka client; saying so tells the operator what to fix.
                self._disconnect("malformed_frame", f"a TLS handshake on the plaintext "
                                 f"listener {self.security.listener} ({hint})")
                return
        try:
            self._backlog.extend(self._decoder.feed(data))
        except errors.FrameTooLarge as e:
            self._disconnect("frame_too_large", str(e))
            return
        except errors.BufferLimitExceeded as e:
            self._disconnect("buffer_overflow", str(e))
            return
        except errors.ProtocolError as e:
            self._disconnect("malformed_frame", str(e))
            return
        self._dispatch_backlog()
        if self._decoder.waiting and not self._closed:
            self._pause("memory")
        self._watch_read_deadline()

    def _admit(self, size: int) -> bool:
        """Reserve a frame's bytes: from the listeners' pool once the connection may be
        served, from the small unauthenticated pool before a SASL login."""
        limits = self.factory.limits
        self._budget.pool = (limits.pool if self.security.authenticated
                             else limits.unauthenticated_pool)
        return self._budget.admit(size)

    def _watch_read_deadline(self) -> None:
        """Arm the read deadline for a newly admitted incomplete frame; drop it once no
        admitted frame is incomplete."""
        timeout = self.factory.limits.read_timeout_s
        if timeout is None or self._closed:
            return
        if not self._decoder.reading_frame:
            if self._read_timer is not None and self._read_timer.active():
                self._read_timer.cancel()
            self._read_timer = None
            return
        if (self._read_timer_frame == self._decoder.frames_admitted
                and self._read_timer is not None):
            return  # the same frame: its deadline runs on
        if self._read_timer is not None and self._read_timer.active():
            self._read_timer.cancel()
        self._read_timer_frame = self._decoder.frames_admitted
        self._read_timer = self.factory.clock.callLater(timeout, self._read_overdue)

    def _read_overdue(self) -> None:
        self._read_timer = None
        if self._closed:
            return
        timeout = self.factory.limits.read_timeout_s
        assert timeout is not None
        if self._pauses:  # the broker stopped reading: not the peer's delay
            self._read_timer = self.factory.clock.callLater(timeout, self._read_overdue)
            return
        self._disconnect("request_read_timeout",
                         f"a request's size arrived but not the whole request within "
                         f"{timeout:g} s (socket.request.read.timeout.ms); "
                         f"{self._budget.held} reserved bytes given back")

    def _dispatch_backlog(self) -> None:
        """Dispatch the frames read, in order, until none is left or the transport's write
        buffer is full (a handler's answer may fill it: the rest wait for resumeProducing).
        Not re-entrant: a frame's handler may write, and a write may pause or resume."""
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._backlog and "writing" not in self._pauses:
                if self._closed or self._close_when_flushed is not None:
                    return  # what the frames still hold is released at connectionLost
                frame = self._backlog.popleft()
                token = self._budget.dispatched(len(frame))
                waiting = None
                if self.channel is not None:
                    self.channel.frame_received(frame)
                else:
                    waiting = self._handle_frame(frame)
                if waiting is None:
                    self._budget.release(token)  # done with: its bytes leave the pool
                else:  # the handler still holds the request (an acks=all Produce)
                    waiting.addBoth(self._release_frame, token)
        finally:
            self._dispatching = False

    # -- IPushProducer: the transport's write buffer ---------------------------------------

    def pauseProducing(self) -> None:  # noqa: N802 (Twisted API)
        """The write buffer is full: dispatch and reading stop until it drains."""
        if not self._closed:
            self._pause("writing")

    def resumeProducing(self) -> None:  # noqa: N802 (Twisted API)
        """The write buffer drained: dispatch what waits (on the next turn of the clock: this
        is called from inside the transport's write), then read again."""
        if "writing" not in self._pauses:
            return
        self._unpause("writing")
        if not self._closed:  # frames in the backlog, or one granted memory meanwhile
            self.factory.clock.callLater(0, self._feed_buffered)

    def stopProducing(self) -> None:  # noqa: N802 (Twisted API)
        """The transport is going away: connectionLost follows and releases everything."""

    def _memory_granted(self) -> None:
        """The pool reserved the bytes of the frame that waited. Called from inside another
        frame's release (maybe this connection's own, in the middle of its frames): what was
        buffered is parsed on the next turn of the clock, never re-entrantly, so frames keep
        their order and a chain of grants does not nest."""
        self._decoder.admitted()
        self._unpause("memory")
        self.factory.clock.callLater(0, self._feed_buffered)

    def _feed_buffered(self) -> None:
        if not self._closed and "writing" not in self._pauses:
            self._feed(b"")

    def _pause(self, reason: str) -> None:
        if not self._pauses:
            self.transport.pauseProducing()
        self._pauses.add(reason)

    def _unpause(self, reason: str) -> None:
        if reason in self._pauses:
            self._pauses.discard(reason)
            if not self._pauses and not self._closed:
                self.transport.resumeProducing()

    def _release_frame(self, result: Any, token: int) -> Any:
        self._budget.release(token)
        return result

    def _handle_frame(self, frame: bytes) -> defer.Deferred | None:
        """Handle one request; the Deferred of its answer while the handler still works on
        it (and so holds the request's bytes), else None."""
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

        verdict = self.authentication.check(request)
        if verdict is not SERVE:
            self._answer_authentication(request, verdict)
            return

        slot = _Slot()
        self._slots.append(slot)
        started = self.factory.clock.seconds()
        waiting = None
        try:
            result = self.factory.handler(request, self)
        except Exception:
            # Answered (with the error) like any request; the in-flight check below still runs.
            self._fill(slot, self._handler_failed(Failure(), request, started))
        else:
            if inspect.iscoroutine(result):
                result = defer.Deferred.fromCoroutine(result)
            if isinstance(result, defer.Deferred):
                # One callback pair per parked request (an acks=all Produce, a long-polling
                # Fetch): the answer is encoded and written by whichever of the two runs.
                result.addCallbacks(self._answer, self._answer_failure,
                                    callbackArgs=(slot, request, started),
                                    errbackArgs=(slot, request, started))
                waiting = None if result.called else result
            else:
                # Answered at once (most requests): encode and write now, no Deferred.
                self._answer(result, slot, request, started)
        if len(self._slots) >= self.factory.max_in_flight:
            self._pause("in_flight")
        return waiting

    def _answer(self, body: Any, slot: _Slot, request: Any, started: float) -> None:
        """Encode the handler's answer into its slot and write what is in order."""
        try:
            chunks = self._encode(body, request, started)
        except Exception:
            chunks = self._handler_failed(Failure(), request, started)
        self._fill(slot, chunks)

    def _answer_failure(self, failure: Failure, slot: _Slot, request: Any,
                        started: float) -> None:
        self._fill(slot, self._handler_failed(failure, request, started))

    def _answer_authentication(self, request: Any, verdict: Verdict) -> None:
        """Answer a request the authentication gate kept from the handler, and close the
        connection once the answer is written if the gate says so."""
        self._decoder.max_frame_bytes = self.authentication.frame_limit(
            self.factory.max_frame_bytes)
        if verdict.close_reason is not None and verdict.body is None:
            self._disconnect(verdict.close_reason, verdict.detail)
            return
        if verdict.close_reason is not None:
            self._close_when_flushed = (verdict.close_reason, verdict.detail)
        if verdict.body is not None and verdict.body.get("error_code"):
            self.factory.count_error(request.header.api_key,
                                     errors.ErrorCode(verdict.body["error_code"]).name)
        h = request.header
        slot = _Slot()
        self._slots.append(slot)
        self._fill(slot, apis.encode_response(h.api_key, h.api_version, h.correlation_id,
                                              verdict.body))

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
        if self._close_when_flushed is not None and not self._slots:
            if self._delayed_close is None:
                self._pause("closing")
                self._delayed_close = self.factory.clock.callLater(
                    FAILED_AUTHENTICATION_CLOSE_DELAY_S, self._disconnect,
                    *self._close_when_flushed)
            return
        if len(self._slots) < self.factory.max_in_flight:
            self._unpause("in_flight")
        self.factory.activity(self)  # a request left flight: idleness counts from here
        self._maybe_open_channel()

    def _disconnect(self, reason: str, detail: str) -> None:
        self.log.warn(
            "closing connection from {peer}: {reason} ({detail})",
            peer=self.peer,
            reason=reason,
            detail=detail,
        )
        self.factory.count_disconnect(reason)
        self._closed = True  # nothing more is read, dispatched or answered
        self.lose_connection()

    def lose_connection(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Close the connection: what was written, and answers written before the transport
        lets go, may leave for ``grace_s`` seconds, then it is aborted (0: at once).
        Idempotent. The one way the broker closes a client connection (a coordinator
        channel's close included; it may come from inside a handler whose answer is still
        to be written)."""
        if self._losing or self.transport is None:
            return
        self._losing = True
        transport = self.transport
        # A registered producer keeps loseConnection waiting for it: unregister first.
        transport.unregisterProducer()
        if grace_s <= 0:
            transport.abortConnection()
            return
        transport.loseConnection()
        self._abort_timer = self.factory.clock.callLater(grace_s, transport.abortConnection)

    def close_idle(self) -> None:
        """Close for ``connections.max.idle.ms`` (decided by the factory's sweep), aborting:
        an idle connection has nothing to deliver, and a peer that stopped reading must not
        keep it open. Counted, and logged at debug level only: a sweep may close thousands
        at once."""
        if self._closed:
            return  # already closing for another reason, counted as that
        self.log.debug("closing idle connection from {peer}", peer=self.peer)
        self.factory.count_disconnect("idle")
        self._closed = True
        self.lose_connection(grace_s=0)


class KafkaServerFactory(Factory):
    """Builds :class:`KafkaServerProtocol` instances that share one request handler.

    ``handler(request, protocol)`` returns a response body, ``NO_RESPONSE`` or a Deferred. The
    metrics object is optional (tests may leave it out).
    """

    noisy = False
    log = Logger(namespace="sluice.server")
    #: When set, a peer speaking the other protocol than this listener's (TLS on a plaintext
    #: listener, or a failed TLS handshake on a TLS one) is logged with this advice.
    protocol_mismatch_hint: str | None = None
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
        limits: ServerLimits | None = None,
        sasl: SaslSettings | None = None,
    ) -> None:
        if listener.protocol.uses_sasl and sasl is None:
            raise ValueError(f"listener {listener.name} uses {listener.protocol.value}: "
                             "it needs SASL settings (sasl=)")
        self.handler = handler
        #: Mechanisms, user lookup and cluster credential of a SASL listener (None otherwise).
        self.sasl = sasl
        #: The listener's name and security protocol, given to each connection's
        #: :class:`~broker_core.security.principal.ConnectionSecurity`.
        self.listener = listener
        self.clock = clock
        self.metrics = metrics
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight = max_in_flight
        #: Connection counts, request memory and idleness, maybe shared with other listeners.
        self.limits = limits if limits is not None else ServerLimits()
        self._idle = None if self.limits.idle_s is None else IdleTracker(self.limits.idle_s)
        self._idle_timer: Any = None
        self.connections: set[KafkaServerProtocol] = set()
        self._api_names: dict[int, str] = {}

    def buildProtocol(self, addr: Any) -> KafkaServerProtocol | None:  # noqa: N802 (Twisted API)
        """A protocol for the connection from ``addr``, or None (Twisted then closes the socket
        before reading from it) when it is over a connection limit. A factory that wraps this
        one (TLS) must return None too when this one does: Twisted's ``WrappingFactory`` would
        wrap the None."""
        host = None if addr is None else canonical_host(str(getattr(addr, "host", "local")))
        limiter = self.limits.connections
        if limiter is not None and host is not None:
            reason = limiter.admit(host)
            if reason is not None:
                self._refused(host, reason)
                return None
        proto = KafkaServerProtocol(self)
        if limiter is not None:
            proto.counted_host = host
        return proto

    def _refused(self, host: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.connections_refused_total.labels(reason=reason).inc()
        suppressed = self.limits.refusals.refused(host, reason, self.clock.seconds())
        if suppressed is not None:
            self.log.warn("refused a connection from {host} on listener {listener}: {reason} "
                          "({suppressed} more refused silently since the last line)",
                          host=host, listener=self.listener.name, reason=reason,
                          suppressed=suppressed)

    def connection_made(self, proto: KafkaServerProtocol) -> None:
        self.connections.add(proto)
        if self.metrics is not None:
            self.metrics.connections.set(len(self.connections))
        self.activity(proto)

    def connection_lost(self, proto: KafkaServerProtocol) -> None:
        self.connections.discard(proto)
        if self.metrics is not None:
            self.metrics.connections.set(len(self.connections))
        if proto.counted_host is not None and self.limits.connections is not None:
            self.limits.connections.release(proto.counted_host)
            proto.counted_host = None
        if self._idle is not None:
            self._idle.forget(proto)
            if not len(self._idle) and self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None

    # -- idle connections (connections.max.idle.ms) ----------------------------------------
    #
    # One timer per listener, set for the moment the least recently active connection would
    # become idle; none while no connection is open.

    def activity(self, proto: KafkaServerProtocol) -> None:
        """``proto`` received bytes or sent a response now."""
        if self._idle is not None and not proto._closed:
            self._idle.touch(proto, self.clock.seconds())
            self._schedule_idle_sweep()

    def _schedule_idle_sweep(self) -> None:
        if self._idle is None or self._idle_timer is not None:
            return
        deadline = self._idle.next_deadline()
        if deadline is not None:
            self._idle_timer = self.clock.callLater(
                max(0.0, deadline - self.clock.seconds()), self._sweep_idle)

    def _sweep_idle(self) -> None:
        self._idle_timer = None
        assert self._idle is not None
        for proto in self._idle.expired(self.clock.seconds(), lambda p: p.busy):
            proto.close_idle()  # type: ignore[attr-defined]
        self._schedule_idle_sweep()

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

    def count_authentication(self, mechanism: str, result: str) -> None:
        if self.metrics is not None:
            self.metrics.sasl_authentications_total.labels(mechanism=mechanism,
                                                           result=result).inc()

    def close_all(self) -> None:
        for proto in list(self.connections):
            proto.lose_connection()
