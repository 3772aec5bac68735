"""Opening a Twisted client connection as a :class:`~consumer_client.security.ClientSecurity`
says: TCP, then the TLS handshake (SSL, SASL_SSL), then the SASL login (SASL_PLAINTEXT,
SASL_SSL), each finished before the connection is handed out.

The consumer's cluster client and its coordinator channel open every connection here, so a
connection in use is always past both; in particular the coordinator channel is authenticated
before RegisterConsumer turns it around (from then on the broker sends the requests, and a
SASL exchange could no longer be started).
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.internet.endpoints import connectProtocol, wrapClientTLS
from twisted.internet.error import ConnectionLost
from twisted.internet.interfaces import IHandshakeListener
from twisted.python.failure import Failure
from zope.interface import implementer

from broker_core.rpc import KafkaClientProtocol, client_endpoint
from consumer_client.security import ClientSecurity, TlsHandshakeFailed


@implementer(IHandshakeListener)
class TlsClientProtocol(KafkaClientProtocol):
    """A :class:`~broker_core.rpc.KafkaClientProtocol` under TLS that knows when the handshake
    ended: ``handshake_d`` fires once it completed, or fails with
    :class:`~consumer_client.security.TlsHandshakeFailed` (the broker's certificate was
    refused, or ours was) or ConnectionLost (the connection dropped before it finished)."""

    def __init__(self, client_id: str) -> None:
        super().__init__(client_id)
        self.handshake_d: defer.Deferred = defer.Deferred()

    def handshakeCompleted(self) -> None:  # noqa: N802 (Twisted API)
        if not self.handshake_d.called:
            self.handshake_d.callback(self)

    def connectionLost(self, reason: Failure = None) -> None:  # noqa: N802 (Twisted API)
        if not self.handshake_d.called:
            from OpenSSL import SSL  # noqa: PLC0415
            from service_identity import VerificationError  # noqa: PLC0415

            # OpenSSL refused a certificate (ours or the broker's chain), or Twisted's check
            # of the host name against the broker's certificate failed.
            if reason is not None and reason.check(SSL.Error, VerificationError):
                self.handshake_d.errback(Failure(TlsHandshakeFailed(
                    f"TLS handshake with {self.transport.getPeer()} failed: "
                    f"{_ssl_reason(reason.value)}")))
            else:
                self.handshake_d.errback(Failure(ConnectionLost(
                    "connection lost during the TLS handshake")))
        super().connectionLost(reason)


def _ssl_reason(error: BaseException) -> str:
    """OpenSSL's error list as one readable line (``certificate verify failed``, ...)."""
    parts = []
    for item in error.args[0] if error.args and isinstance(error.args[0], list) else []:
        if isinstance(item, tuple) and len(item) == 3:
            parts.append(str(item[2]))
    return ", ".join(parts) or str(error)


async def connect(reactor: Any, host: str, port: int, client_id: str, *,
                  timeout_s: float, security: ClientSecurity) -> KafkaClientProtocol:
    """One connection to ``host:port``, past TLS and SASL as ``security`` says.

    Fails with ConnectError/ConnectionLost (retriable: the broker is not reachable now),
    :class:`~consumer_client.security.TlsHandshakeFailed` or
    :class:`~broker_core.security.sasl.SaslAuthenticationError` (not retriable: the same
    settings fail the same way). Nothing stays open after a failure."""
    endpoint: Any = client_endpoint(reactor, host, port, timeout_s)
    creator = security.tls_creator(host)
    if creator is None:
        proto = await connectProtocol(endpoint, KafkaClientProtocol(client_id))
    else:
        endpoint = wrapClientTLS(creator, endpoint)
        proto = await connectProtocol(endpoint, TlsClientProtocol(client_id))
        shake = proto.handshake_d
        shake.addTimeout(timeout_s, reactor)
        try:
            await shake
        except defer.TimeoutError:
            proto.transport.abortConnection()
            raise ConnectionLost(f"no TLS handshake from {host}:{port} in {timeout_s}s") \
                from None
    credential = security.credential
    if credential is not None:
        try:
            await proto.authenticate(credential.mechanism, credential.username,
                                     credential.password)
        except BaseException:
            proto.transport.loseConnection()
            raise
    return proto
