"""The authentication gate of one accepted connection (Twisted-free; the protocol calls it).

:meth:`ConnectionAuthentication.check` sees every decoded request before the request handler
does and says what to do with it (a :class:`Verdict`):

- SaslHandshake and SaslAuthenticate are always answered here, never by the handler: on a SASL
  listener they drive a :class:`~broker_core.security.sasl.SaslServer`;
- on any other listener (PLAINTEXT, SSL) they drive one that knows a single login, the cluster
  login (SCRAM-SHA-512 as the cluster user, checked against the cluster secret): brokers prove
  themselves on every listener, so the control plane can stay closed to anonymous clients
  while ``--listen tcp:9092`` needs no SASL of them. Any other login fails
  (SASL_AUTHENTICATION_FAILED; another mechanism: UNSUPPORTED_SASL_MECHANISM) and closes the
  connection. Requests sent without logging in are served as before, as the listener's
  principal (anonymous, or the TLS client certificate's). The cluster login may follow a
  client certificate (brokers connecting to an SSL listener present theirs and then log in);
  it then replaces the certificate's principal. A listener without a cluster credential, or a
  connection that has authenticated, gets ILLEGAL_SASL_STATE and nothing changes;
- SaslHandshake v0 (raw SASL tokens would follow, outside Kafka requests) is advertised for old
  librdkafka's sake but never served: it gets UNSUPPORTED_VERSION and the connection closes;
- on a SASL listener, until the connection has authenticated, ApiVersions is the only other
  request served (clients ask it first, KIP-511); anything else closes the connection;
- a failed authentication is answered (SASL_AUTHENTICATION_FAILED with a message, or
  UNSUPPORTED_SASL_MECHANISM with the enabled list) and the connection is then closed (the
  protocol waits Kafka's 100 ms failed-authentication delay after writing the answer).

Before authentication a frame may be at most :data:`MAX_UNAUTHENTICATED_FRAME_BYTES`
(:meth:`frame_limit`), so an anonymous peer cannot make the broker buffer a large request.

Invariant: ``security.authenticate`` is called exactly when the SaslServer reaches DONE, and
nothing else here changes the connection's identity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_core.security.principal import ConnectionSecurity
from broker_core.security.sasl import SaslServer, SaslSettings, no_users
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

#: Kafka's ``sasl.server.max.receive.size`` default: the largest frame before authentication.
MAX_UNAUTHENTICATED_FRAME_BYTES = 512 * 1024

#: The APIs answered here on every listener; request handlers never see them (but list them in
#: ApiVersions, as Kafka does on every listener).
ANSWERED_BY_THE_GATE = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})

#: The requests a SASL connection may send before it has authenticated.
_BEFORE_AUTHENTICATION = ANSWERED_BY_THE_GATE | {ApiKey.API_VERSIONS}

#: ``count(mechanism, result)``: one authentication attempt finished (result: success/failure).
AuthenticationCounter = Callable[[str, str], None]


@dataclass(frozen=True)
class Verdict:
    """What the protocol does with one request.

    ``body`` None and ``close_reason`` None: hand the request to the handler. ``body`` set:
    write it as the response (the handler never sees the request). ``close_reason`` set: close
    the connection, after writing ``body`` when there is one (``detail`` is for the log).
    """

    body: dict | None = None
    close_reason: str | None = None
    detail: str = ""


SERVE = Verdict()


class ConnectionAuthentication:
    """One connection's gate; see the module docstring."""

    def __init__(self, security: ConnectionSecurity, settings: SaslSettings | None,
                 count: AuthenticationCounter | None = None) -> None:
        self.security = security
        self._count = count
        self._sasl: SaslServer | None = None
        if security.protocol.uses_sasl:
            if settings is None:
                raise ValueError(f"listener {security.listener} uses "
                                 f"{security.protocol.value} but has no SASL settings")
            self._sasl = SaslServer(settings)
        elif settings is not None and settings.cluster_credential is not None:
            # The cluster login only: no user mechanism enabled, no user looked up.
            self._sasl = SaslServer(SaslSettings(
                mechanisms=(), lookup=no_users, cluster_credential=settings.cluster_credential,
                decoy_key=settings.decoy_key))

    def frame_limit(self, authenticated_limit: int) -> int:
        """The largest frame to accept now."""
        if self.security.authenticated:
            return authenticated_limit
        return min(authenticated_limit, MAX_UNAUTHENTICATED_FRAME_BYTES)

    def check(self, request: Any) -> Verdict:
        key = request.header.api_key
        if key == ApiKey.SASL_HANDSHAKE and request.header.api_version == 0:
            return Verdict({"error_code": ErrorCode.UNSUPPORTED_VERSION, "mechanisms": []},
                           "unsupported_version", "SaslHandshake v0 (raw SASL tokens)")
        if key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(request.body.mechanism)
        if key == ApiKey.SASL_AUTHENTICATE:
            return self._authenticate(request)
        if self.security.authenticated or key in _BEFORE_AUTHENTICATION:
            return SERVE
        return Verdict(close_reason="unauthenticated_request",
                       detail=f"api {key} before SASL authentication")

    def _no_login_here(self) -> bool:
        """No SASL exchange on this connection: none configured. (On a non-SASL listener the
        one login there is the cluster login, which may follow a client certificate.)"""
        return self._sasl is None

    def _handshake(self, mechanism: str) -> Verdict:
        if self._no_login_here():
            return Verdict({"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []})
        sasl = self._sasl
        assert sasl is not None
        outcome = sasl.handshake(mechanism)
        body = {"error_code": outcome.error_code, "mechanisms": list(outcome.mechanisms)}
        if not outcome.close:
            return Verdict(body)
        if outcome.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            return Verdict(body, "unsupported_sasl_mechanism",
                           f"mechanism {mechanism[:40]!r} is not enabled")
        return Verdict(body, "illegal_sasl_state", "SaslHandshake out of order")

    def _authenticate(self, request: Any) -> Verdict:
        if self._no_login_here():
            return Verdict({"error_code": ErrorCode.ILLEGAL_SASL_STATE,
                            "error_message": f"listener {self.security.listener} does not use "
                                             "SASL and this connection cannot log in as a "
                                             "broker",
                            "auth_bytes": b"", "session_lifetime_ms": 0})
        sasl = self._sasl
        assert sasl is not None
        outcome = sasl.authenticate(bytes(request.body.auth_bytes))
        body = {"error_code": outcome.error_code, "error_message": outcome.error_message,
                "auth_bytes": outcome.auth_bytes, "session_lifetime_ms": 0}
        if outcome.result is not None and self._count is not None:
            self._count(sasl.mechanism or "?", outcome.result)
        if outcome.result == "success":
            assert sasl.principal is not None
            self.security.authenticate(sasl.principal, is_broker=sasl.is_broker)
        if not outcome.close:
            return Verdict(body)
        if outcome.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED:
            return Verdict(body, "sasl_authentication_failed",
                           f"{sasl.mechanism}: {outcome.error_message}")
        return Verdict(body, "illegal_sasl_state", "SaslAuthenticate out of order")
