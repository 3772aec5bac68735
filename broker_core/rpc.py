"""Asynchronous Kafka-protocol client used inside the broker (controller → broker RPC, and later the
replica fetchers): a thin Twisted shell over the sans-IO codec.

:class:`KafkaClientProtocol` sends requests and fires one Deferred per response. Kafka answers in
request order on one connection, so responses are matched by correlation id *and* checked against
the oldest outstanding request.

:class:`BrokerChannel` is the controller's channel to one broker (Kafka's ``RequestSendThread``): a
reconnecting connection (``ClientService`` with backoff) and a queue of requests sent one at a time;
a request that fails because the connection dropped or timed out is retried on the next connection
until it succeeds or the channel is stopped (the broker left the cluster).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet import defer, task
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
    connectProtocol,
)
from twisted.internet.error import ConnectError, ConnectionLost
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from broker_core import net
from broker_core.backoff import exponential_backoff
from broker_core.security.peer_tls import (
    PeerTls,
    PeerTlsRefused,
    handshake_refusal,
    peer_endpoint,
)
from broker_core.security.sasl import (
    CLUSTER_USER,
    ClientCredential,
    SaslAuthenticationError,
    SaslLogin,
)
from broker_core.wire import apis, errors, framing


class LoginRefused(SaslAuthenticationError, ConnectError):
    """The login a connection runs as it opens (``credential=``: the cluster login between
    brokers) was refused. Also a ConnectError: the connection was never usable, so every broker
    component that backs off and reconnects after a failed connect does the same after a
    refused login. :meth:`KafkaClientProtocol.authenticate` itself raises the plain
    :class:`SaslAuthenticationError`: Sluice's client library treats a refusal as final, not
    as a broker it could not reach."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        # Not super().__init__: after SaslAuthenticationError the MRO reaches ConnectError,
        # whose first argument is an OSError, not the message.
        Exception.__init__(self, message)
        self.error_code = error_code
        self.osError = None

    def __str__(self) -> str:
        return str(self.args[0])


class RequestTimedOut(Exception):
    """No response arrived within the request timeout."""


class OutstandingRequests:
    """Requests written on one connection and not yet answered, oldest first (sans-IO).

    Kafka answers in request order on a connection, so a response frame belongs to the oldest
    outstanding request; its correlation id must match, or the connection is out of step and
    must be closed. Used by :class:`KafkaClientProtocol` and, in the other direction, by the
    coordinator's channel to a consumer (:mod:`broker_core.server.channel`).
    """

    def __init__(self, client_id: str | None) -> None:
        self.client_id = client_id
        self._pending: deque[tuple[int, int, int, defer.Deferred]] = deque()
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, api_key: int, api_version: int, body: Any) -> tuple[list[bytes], defer.Deferred]:
        """Encode a request; returns the framed chunks to write and the Deferred that fires with
        the decoded response body."""
        correlation_id = next(self._ids) & 0x7FFFFFFF
        chunks = apis.encode_request(api_key, api_version, correlation_id, self.client_id, body)
        d: defer.Deferred = defer.Deferred()
        self._pending.append((correlation_id, api_key, api_version, d))
        return framing.frame(chunks), d

    def response(self, frame: bytes) -> None:
        """Match one response frame to the oldest request and fire its Deferred.

        Raises :class:`~broker_core.wire.errors.ProtocolError` when the frame answers nothing,
        does not decode, or carries the wrong correlation id (the request's Deferred then fails
        with it too, except for the wrong-id case, where it stays outstanding for ``fail_all``).
        """
        if not self._pending:
            raise errors.MalformedFrame("response without a request")
        correlation_id, api_key, api_version, d = self._pending.popleft()
        try:
            got_id, body = apis.decode_response(api_key, api_version, frame)
        except errors.ProtocolError as e:
            if not d.called:
                d.errback(Failure(e))
            raise errors.MalformedFrame(f"undecodable response: {e}") from None
        if got_id != correlation_id:
            self._pending.appendleft((correlation_id, api_key, api_version, d))
            raise errors.MalformedFrame(
                f"expected correlation id {correlation_id}, got {got_id}")
        if not d.called:  # a timed-out request was already cancelled
            d.callback(body)

    def fail_all(self, failure: Failure) -> None:
        pending, self._pending = self._pending, deque()
        for _, _, _, d in pending:
            if not d.called:
                d.errback(failure)


#: Answers one request received on a connection we opened (see :meth:`KafkaClientProtocol.serve`):
#: returns a response body or a Deferred firing with one.
RequestServer = Callable[[apis.Request], Any]


class KafkaClientProtocol(Protocol):
    """One client connection speaking the Kafka protocol.

    Invariant: the outstanding-request table holds exactly the requests written and not yet
    answered, oldest first; on disconnect every pending Deferred fails with
    :class:`ConnectionLost`.

    With a ``credential`` the connection logs in over SASL as soon as it is made, before any
    other request: requests made meanwhile are held and written once the login succeeded, or
    fail with :class:`SaslAuthenticationError` when it failed (the connection is then closed).
    :meth:`when_logged_in` fires once the login is done, so a ``ClientService`` that passes it
    as ``prepareConnection`` hands out only logged-in connections and counts a refused login as
    a failed attempt (its backoff grows). ``peer_name`` (e.g. "broker 2") names the peer in the
    log line of a refused login.

    :meth:`serve` turns the connection around (a consumer's coordinator channel):
    from then on every incoming frame is a *request* from the peer, answered in order by the
    given handler, and this side sends no more requests.
    """

    log = Logger(namespace="sluice.rpc")

    def __init__(self, client_id: str = "sluice-broker", max_frame_bytes: int = 1 << 31, *,
                 credential: ClientCredential | None = None, peer_name: str | None = None
                 ) -> None:
        self.client_id = client_id
        self.credential = credential
        self.peer_name = peer_name
        #: Requests made while logging in: (api_key, api_version, body, Deferred); None once
        #: requests go straight out (no credential, or the login succeeded).
        self._held: list[tuple[int, int, Any, defer.Deferred]] | None = (
            [] if credential is not None else None)
        #: The login's outcome: None while it runs (or before the connection), True, or the
        #: failure.
        self._login: bool | Failure | None = None if credential is not None else True
        self._login_waiters: list[defer.Deferred] = []
        self._decoder = framing.FrameDecoder(max_frame_bytes)
        self._out = OutstandingRequests(client_id)
        self.connected_d: defer.Deferred = defer.Deferred()
        self.closed_d: defer.Deferred = defer.Deferred()
        self._closed = False
        self._server: RequestServer | None = None
        self._answers: deque[list] = deque()

    def connectionMade(self) -> None:  # noqa: N802 (Twisted API)
        net.tune(self.transport)  # small requests must not wait for Nagle (broker_core.net)
        if self.credential is not None:
            c = self.credential
            d = defer.Deferred.fromCoroutine(
                self.authenticate(c.mechanism, c.username, c.password))
            d.addBoth(self._logged_in)
        self.connected_d.callback(self)

    def when_logged_in(self) -> defer.Deferred:
        """Fires with this protocol once its login succeeded (at once without a credential);
        fails with :class:`SaslAuthenticationError` (or ConnectionLost) when it failed."""
        if self._login is True:
            return defer.succeed(self)
        if isinstance(self._login, Failure):
            return defer.fail(self._login)
        d: defer.Deferred = defer.Deferred()
        self._login_waiters.append(d)
        return d

    def _logged_in(self, result: Any) -> None:
        """The login's outcome (the first one: a connection lost while logging in may be
        reported by the exchange and by ``connectionLost``)."""
        if self._login is not None:
            return
        held, self._held = self._held or [], None
        waiters, self._login_waiters = self._login_waiters, []
        if not isinstance(result, Failure):
            self._login = True
            for api_key, api_version, body, d in held:
                self._send(api_key, api_version, body).chainDeferred(d)
            for w in waiters:
                w.callback(self)
            return
        if result.check(SaslAuthenticationError) and not result.check(LoginRefused):
            refused = result.value
            result = Failure(LoginRefused(str(refused), refused.error_code))
        if not result.check(ConnectionLost):
            who = self.peer_name or str(self.transport.getPeer())
            assert self.credential is not None
            if self.credential.username == CLUSTER_USER:
                self.log.warn("{who} refused the cluster login: wrong cluster.secret.file? "
                              "({why})", who=who, why=result.getErrorMessage())
            else:
                self.log.warn("{who} refused the SASL login of {user!r}: {why}", who=who,
                              user=self.credential.username, why=result.getErrorMessage())
        self._login = result
        if self.transport is not None:
            self.transport.loseConnection()
        for _, _, _, d in held:
            d.errback(result)
        for w in waiters:
            w.errback(result)

    @property
    def closed(self) -> bool:
        return self._closed

    def request(self, api_key: int, api_version: int, body: Any) -> defer.Deferred:
        """Send one request; the Deferred fires with the decoded response body (a ``Struct``)."""
        if self._closed:
            return defer.fail(ConnectionLost("connection closed"))
        if isinstance(self._login, Failure):
            return defer.fail(self._login)
        if self._held is not None:
            d: defer.Deferred = defer.Deferred()
            self._held.append((api_key, api_version, body, d))
            return d
        return self._send(api_key, api_version, body)

    def _send(self, api_key: int, api_version: int, body: Any) -> defer.Deferred:
        if self._closed:
            return defer.fail(ConnectionLost("connection closed"))
        if self._server is not None:
            return defer.fail(RuntimeError("this connection now answers the peer's requests"))
        chunks, d = self._out.add(api_key, api_version, body)
        self.transport.writeSequence(chunks)
        return d

    async def authenticate(self, mechanism: str, username: str, password: str) -> None:
        """Log in over SASL (:class:`~broker_core.security.sasl.SaslLogin`: SaslHandshake v1,
        then SaslAuthenticate v2 rounds until the exchange is complete; for SCRAM, until the
        server has proved it holds our credential).

        Fails with :class:`SaslAuthenticationError` naming the server's error (the server then
        closes the connection), or ConnectionLost.
        """
        peer = self.transport.getPeer() if self.transport is not None else "?"
        login = SaslLogin(ClientCredential(mechanism, username, password), str(peer))
        request = login.first_request()
        while request is not None:
            try:
                request = login.answer(await self._send(*request))
            except SaslAuthenticationError:
                if self.transport is not None:
                    self.transport.loseConnection()
                raise

    def serve(self, handler: RequestServer) -> None:
        """From now on, treat incoming frames as requests and answer them with ``handler``.
        Call it only with no request outstanding (the peer answers before it starts asking)."""
        if len(self._out):
            raise RuntimeError("cannot serve while requests are outstanding")
        self._server = handler

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 (Twisted API)
        try:
            frames = self._decoder.feed(data)
        except errors.ProtocolError as e:
            self._protocol_error(str(e))
            return
        for frame in frames:
            if self._closed:
                return
            if self._server is not None:
                self._serve_frame(frame)
                continue
            try:
                self._out.response(frame)
            except errors.ProtocolError as e:
                self._protocol_error(str(e))
                return

    def _serve_frame(self, frame: bytes) -> None:
        try:
            request = apis.decode_request(frame)
        except errors.ProtocolError as e:
            self._protocol_error(f"undecodable request: {e}")
            return
        slot: list = [request, None, False]
        self._answers.append(slot)
        d = defer.maybeDeferred(self._server, request)  # type: ignore[misc]

        def answered(body: Any) -> None:
            slot[1], slot[2] = body, True
            self._flush_answers()

        def failed(f: Failure) -> None:
            self.log.failure("answering {api} from {peer} failed", f,
                             api=request.header.api_key, peer=self.transport.getPeer())
            self.transport.loseConnection()

        d.addCallbacks(answered, failed)

    def _flush_answers(self) -> None:
        while self._answers and self._answers[0][2] and not self._closed:
            request, body, _ = self._answers.popleft()
            if body is None:
                continue
            h = request.header
            chunks = apis.encode_response(h.api_key, h.api_version, h.correlation_id, body)
            self.transport.writeSequence(framing.frame(chunks))

    def _protocol_error(self, detail: str) -> None:
        self.log.warn("protocol error from {peer}: {detail}", peer=self.transport.getPeer(),
                      detail=detail)
        self.transport.loseConnection()

    def connectionLost(self, reason: Failure = None) -> None:  # noqa: N802 (Twisted API)
        self._closed = True
        self._answers.clear()
        lost = Failure(ConnectionLost("connection lost before the response arrived"))
        refusal = handshake_refusal(reason)
        if refusal is not None:  # a refused TLS handshake: say why, to the caller and the log
            who = self.peer_name or str(self.transport.getPeer())
            self.log.warn("TLS handshake with {who} failed: {why}", who=who, why=refusal)
            lost = Failure(PeerTlsRefused(f"TLS handshake with {who} failed: {refusal}"))
        self._out.fail_all(lost)
        if self._login is None:  # lost while logging in: the held requests and waiters fail
            self._logged_in(lost)
        if not self.closed_d.called:
            self.closed_d.callback(None)


def client_endpoint(reactor: Any, host: str, port: int, timeout_s: float = 30.0) -> Any:
    """The TCP client endpoint for ``host:port``: an IP address is connected to directly, a
    name through :class:`HostnameEndpoint` (resolution, then every address tried in turn).

    Why not HostnameEndpoint for both: it resolves even an IP literal, on the reactor's thread
    pool (one ``getaddrinfo`` and two thread hand-offs per connection), and runs its
    happy-eyeballs machinery for the one address that comes back. A process opening thousands
    of connections (thousands of consumers, each with its own coordinator channel, in one load
    test worker or application) paid for that on every one."""
    if isIPAddress(host):
        return TCP4ClientEndpoint(reactor, host, port, timeout=timeout_s)
    if isIPv6Address(host):
        return TCP6ClientEndpoint(reactor, host, port, timeout=timeout_s)
    return HostnameEndpoint(reactor, host, port, timeout=timeout_s)


def connect_client(reactor: Any, host: str, port: int, client_id: str,
                   timeout_s: float = 10.0, *,
                   credential: ClientCredential | None = None,
                   peer_name: str | None = None, tls: PeerTls | None = None) -> defer.Deferred:
    """Open one :class:`KafkaClientProtocol` connection; fires with the connected protocol,
    already logged in over SASL when ``credential`` is given (a refused login is logged, closes
    the connection and fails with :class:`SaslAuthenticationError`). With ``tls`` the
    connection is TLS, the peer's certificate checked for ``host`` (a refused handshake fails
    the login with ConnectionLost)."""
    endpoint = peer_endpoint(client_endpoint(reactor, host, port, timeout_s), host, tls)
    proto = KafkaClientProtocol(client_id, credential=credential, peer_name=peer_name)
    d = connectProtocol(endpoint, proto)
    d.addCallback(lambda p: p.when_logged_in())
    return d


def request_with_timeout(proto: KafkaClientProtocol, clock: Any, api_key: int, api_version: int,
                         body: Any, timeout_s: float, peer: str) -> defer.Deferred:
    """``proto.request`` that fails with :class:`RequestTimedOut` after ``timeout_s`` and then
    closes the connection: a late answer would arrive out of order, so start afresh."""
    d = proto.request(api_key, api_version, body)

    def timed_out(result: Any, timeout: float) -> Any:
        proto.transport.loseConnection()
        raise RequestTimedOut(f"no answer from {peer} in {timeout}s")

    d.addTimeout(timeout_s, clock, onTimeoutCancel=timed_out)
    return d


class ClientConnection:
    """One client connection, opened on first use and reopened after it closed or when asked
    for another address (the replica fetchers keep one per leader; the AlterIsr sender follows
    the controller wherever it moves). ``connect(host, port)`` fires with a connected
    :class:`KafkaClientProtocol`."""

    def __init__(self, connect: Callable[[str, int], defer.Deferred]) -> None:
        self._connect = connect
        self._proto: KafkaClientProtocol | None = None
        self._address: tuple[str, int] | None = None
        self._connecting: set[defer.Deferred] = set()  # connects in progress (for close())

    async def to(self, host: str, port: int) -> KafkaClientProtocol:
        proto = self._proto
        if proto is not None and not proto.closed and self._address == (host, port):
            return proto
        self.drop()
        connecting = self._connect(host, port)
        self._connecting.add(connecting)
        try:
            self._proto = await connecting
        finally:
            self._connecting.discard(connecting)
        self._address = (host, port)
        return self._proto

    def drop(self) -> None:
        """Close the connection if one is open; the next :meth:`to` opens a new one."""
        proto, self._proto, self._address = self._proto, None, None
        if proto is not None and proto.transport is not None:
            proto.transport.loseConnection()

    def close(self) -> None:
        """:meth:`drop`, and cancel every connect still in progress (its :meth:`to` fails with
        CancelledError): for the owner's stop, which a connect to a peer that never answers
        (stopped, or cut off) would otherwise hold for the whole connect timeout."""
        for connecting in list(self._connecting):
            connecting.cancel()
        self.drop()


class KafkaClientFactory(Factory):
    """Builds :class:`KafkaClientProtocol` connections that log in with ``credential`` (if
    any) before their first request."""

    protocol = KafkaClientProtocol
    noisy = False  # one line per connection attempt would drown the log

    def __init__(self, client_id: str, *, credential: ClientCredential | None = None,
                 peer_name: str | None = None) -> None:
        self.client_id = client_id
        self.credential = credential
        self.peer_name = peer_name

    def buildProtocol(self, addr: Any) -> KafkaClientProtocol:  # noqa: N802 (Twisted API)
        return KafkaClientProtocol(self.client_id, credential=self.credential,
                                   peer_name=self.peer_name)


def logged_in(proto: Any) -> defer.Deferred:
    """``ClientService``'s ``prepareConnection`` for :class:`KafkaClientFactory` connections:
    only a logged-in connection is handed out, and a refused login counts as a failed connection
    attempt (the service's backoff grows instead of reconnecting at once)."""
    return proto.when_logged_in()


@dataclass
class _Queued:
    api_key: int
    api_version: int
    body: Any
    result: defer.Deferred


class BrokerChannel:
    """The controller's request channel to one broker, logged in with ``credential`` (the
    cluster login) before its first request, over TLS with ``tls`` (the peer's certificate
    checked for ``host``).

    Requests are sent strictly one at a time, in the order queued (a LeaderAndIsr must not overtake
    an earlier StopReplica for the same partition). A request whose connection drops or times out is
    retried after reconnecting; ``stop()`` fails whatever is still queued with ``CancelledError``.
    """

    log = Logger(namespace="sluice.controller.channel")

    def __init__(
        self,
        broker_id: int,
        host: str,
        port: int,
        *,
        reactor: Any,
        timeout_s: float = 30.0,
        client_id: str = "sluice-controller",
        endpoint_factory: Callable[[Any, str, int], Any] | None = None,
        credential: ClientCredential | None = None,
        tls: PeerTls | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.address = (host, port)
        self._reactor = reactor
        self._timeout = timeout_s
        make = endpoint_factory or client_endpoint
        self._service = ClientService(
            peer_endpoint(make(reactor, host, port), host, tls),
            KafkaClientFactory(client_id, credential=credential, peer_name=f"broker {broker_id}"),
            retryPolicy=backoffPolicy(initialDelay=0.05, maxDelay=2.0, factor=2.0),
            clock=reactor, prepareConnection=logged_in,
        )
        self._queue: deque[_Queued] = deque()
        self._busy = False
        self._stopped = False

    def start(self) -> None:
        self._service.startService()

    def stop(self) -> defer.Deferred:
        self._stopped = True
        queued, self._queue = self._queue, deque()
        for q in queued:
            q.result.errback(Failure(defer.CancelledError("channel to broker stopped")))
        return self._service.stopService()

    @property
    def queue_size(self) -> int:
        return len(self._queue) + (1 if self._busy else 0)

    def send(self, api_key: int, api_version: int, body: Any) -> defer.Deferred:
        """Queue a request; the Deferred fires with its response body."""
        if self._stopped:
            return defer.fail(defer.CancelledError("channel to broker stopped"))
        q = _Queued(api_key, api_version, body, defer.Deferred())
        self._queue.append(q)
        self._pump()
        return q.result

    def _pump(self) -> None:
        if self._busy or not self._queue or self._stopped:
            return
        self._busy = True
        d = defer.Deferred.fromCoroutine(self._send_head())
        d.addErrback(lambda f: self.log.failure("channel to broker {b} failed", f,
                                                b=self.broker_id))

    async def _send_head(self) -> None:
        attempt = 0
        try:
            while self._queue and not self._stopped:
                q = self._queue[0]
                try:
                    proto = await self._service.whenConnected()
                    d = proto.request(q.api_key, q.api_version, q.body)
                    d.addTimeout(self._timeout, self._reactor,
                                 onTimeoutCancel=lambda *_, p=proto: self._on_timeout(p))
                    body = await d
                except (ConnectionLost, RequestTimedOut, defer.TimeoutError,
                        defer.CancelledError) as e:
                    if self._stopped:
                        return
                    attempt += 1
                    self.log.info("request {api} to broker {b} failed ({e}); retry {n}",
                                  api=q.api_key, b=self.broker_id, e=e, n=attempt)
                    # Back off before retrying: the dead connection may still be the one
                    # ClientService hands out until it notices the loss. 0.1 s doubling to 2 s.
                    await task.deferLater(self._reactor, exponential_backoff(attempt, 0.1, 2.0),
                                          lambda: None)
                    continue
                except Exception as e:  # undecodable response, encode error: not retriable
                    if self._queue and self._queue[0] is q:
                        self._queue.popleft()
                    if not q.result.called:  # stop() may have failed it meanwhile
                        q.result.errback(Failure(e))
                    continue
                attempt = 0
                if self._queue and self._queue[0] is q:
                    self._queue.popleft()
                if not q.result.called:  # stop() failed it while it was in flight
                    q.result.callback(body)
        finally:
            self._busy = False
        if self._queue and not self._stopped:
            self._pump()

    def _on_timeout(self, proto: KafkaClientProtocol) -> Failure:
        # The late response would still arrive on this connection; drop it and start afresh.
        proto.transport.loseConnection()
        return Failure(
            RequestTimedOut(f"no response from broker {self.broker_id} in {self._timeout}s"))
