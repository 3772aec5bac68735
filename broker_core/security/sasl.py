"""SASL for Kafka's SaslHandshake / SaslAuthenticate: the per-connection server state machine
and Sluice's own client side, both sans-IO.

Mechanisms: PLAIN (:mod:`~broker_core.security.sasl_plain`), SCRAM-SHA-256 and SCRAM-SHA-512
(:mod:`~broker_core.security.scram`). Users' credentials come through a
:data:`CredentialLookup` (the user store implements it over the metadata store). One login is
never looked up there: the cluster login, user :data:`CLUSTER_USER` over SCRAM-SHA-512 with the
cluster secret as password, is checked against :attr:`SaslSettings.cluster_credential` (derived
from ``cluster.secret.file``) and is the only way a connection becomes ``is_broker``. Other
names starting with ``__`` are reserved and always fail.

The server's states and what moves it (anything else is ILLEGAL_SASL_STATE)::

    EXPECT_HANDSHAKE --handshake(enabled mechanism)--> EXPECT_AUTHENTICATE
    EXPECT_AUTHENTICATE --authenticate(token)--> EXPECT_AUTHENTICATE (SCRAM's first round)
                                              \\-> DONE (principal, is_broker) | FAILED
    EXPECT_HANDSHAKE --handshake(other mechanism)--> FAILED (UNSUPPORTED_SASL_MECHANISM)

Invariants: the principal is set only on entering DONE; FAILED and DONE are final; every
outcome says whether the connection must be closed once the answer is written (every failure
before DONE does; a stray handshake after DONE is only refused).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker_core.security import sasl_plain, scram
from broker_core.security.principal import Principal
from broker_core.security.scram_credential import MECHANISMS as SCRAM_MECHANISMS
from broker_core.security.scram_credential import ScramCredential
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

#: ``lookup(mechanism, username)``: the user's stored credential for ``mechanism`` (for PLAIN
#: it is asked for SCRAM-SHA-512), or None when there is no such user.
CredentialLookup = Callable[[str, str], "ScramCredential | None"]

#: The user name brokers log in to each other with; its password is the cluster secret.
CLUSTER_USER = "__sluice_broker"
#: The mechanism of the cluster login.
CLUSTER_MECHANISM = "SCRAM-SHA-512"
#: User names starting with this are reserved for Sluice (never looked up, never created).
RESERVED_PREFIX = "__"

PLAIN = "PLAIN"
#: Every mechanism Sluice implements, in the order a client would prefer them.
KNOWN_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", PLAIN)
#: What ``sasl.enabled.mechanisms`` defaults to: PLAIN sends the password, so it is opt-in.
DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def no_users(mechanism: str, username: str) -> ScramCredential | None:
    """A :data:`CredentialLookup` with no users (only the cluster login can succeed)."""
    return None


@dataclass(frozen=True)
class SaslSettings:
    """A SASL listener's settings.

    ``mechanisms``: the enabled ones, offered in SaslHandshake answers. The cluster login works
    over SCRAM-SHA-512 whether or not it is listed, so brokers always reach each other.
    ``cluster_credential``: None leaves no cluster login (no connection can be a broker).
    ``decoy_key``: keys the salts SCRAM shows for unknown users; the same on every broker
    (:func:`~broker_core.security.cluster_secret.decoy_key`), an unknown user cannot be told
    from a known one by asking two brokers, or one broker before and after a restart.
    """

    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
    lookup: CredentialLookup = no_users
    cluster_credential: ScramCredential | None = None
    decoy_key: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        unknown = [m for m in self.mechanisms if m not in KNOWN_MECHANISMS]
        if unknown:
            raise ValueError(f"unknown SASL mechanism(s) {', '.join(unknown)} (known: "
                             f"{', '.join(KNOWN_MECHANISMS)})")
        if (self.cluster_credential is not None
                and self.cluster_credential.mechanism != CLUSTER_MECHANISM):
            raise ValueError(f"the cluster credential must be {CLUSTER_MECHANISM}")


class SaslState(enum.Enum):
    EXPECT_HANDSHAKE = "expect-handshake"
    EXPECT_AUTHENTICATE = "expect-authenticate"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class HandshakeOutcome:
    """What to answer a SaslHandshake with, and whether to close afterwards."""

    error_code: int
    mechanisms: tuple[str, ...]
    close: bool


@dataclass(frozen=True)
class AuthenticateOutcome:
    """What to answer a SaslAuthenticate with, and whether to close afterwards.

    ``result`` is ``"success"``, ``"failure"`` or None (a round in the middle of an exchange,
    or a refusal that is no authentication attempt)."""

    error_code: int
    error_message: str | None
    auth_bytes: bytes
    close: bool
    result: str | None


def _failed_message(mechanism: str) -> str:
    # Kafka's wording; the same for a wrong password and an unknown user.
    return (f"Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}")


class SaslServer:
    """One connection's SASL exchange; see the module docstring for its states."""

    def __init__(self, settings: SaslSettings) -> None:
        self.settings = settings
        self.state = SaslState.EXPECT_HANDSHAKE
        #: The chosen mechanism once a handshake accepted it.
        self.mechanism: str | None = None
        #: Set on entering DONE.
        self.principal: Principal | None = None
        self.is_broker = False
        self._scram: scram.ScramServer | None = None

    def handshake(self, mechanism: str) -> HandshakeOutcome:
        enabled = self.settings.mechanisms
        if self.state is not SaslState.EXPECT_HANDSHAKE:
            closing = self.state is not SaslState.DONE
            if closing:
                self.state = SaslState.FAILED
            return HandshakeOutcome(ErrorCode.ILLEGAL_SASL_STATE, enabled, closing)
        cluster_only = (mechanism == CLUSTER_MECHANISM and mechanism not in enabled
                        and self.settings.cluster_credential is not None)
        if mechanism not in enabled and not cluster_only:
            self.state = SaslState.FAILED
            return HandshakeOutcome(ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled, True)
        self.mechanism = mechanism
        if mechanism in SCRAM_MECHANISMS:
            self._scram = scram.ScramServer(mechanism, self._scram_lookup,
                                            decoy_key=self.settings.decoy_key)
        self.state = SaslState.EXPECT_AUTHENTICATE
        return HandshakeOutcome(ErrorCode.NONE, enabled, False)

    def authenticate(self, token: bytes) -> AuthenticateOutcome:
        if self.state is not SaslState.EXPECT_AUTHENTICATE:
            closing = self.state is not SaslState.DONE
            if closing:
                self.state = SaslState.FAILED
            return AuthenticateOutcome(
                ErrorCode.ILLEGAL_SASL_STATE,
                f"SaslAuthenticate is not expected in SASL state {self.state.value}"
                if closing else "this connection has already authenticated", b"", closing, None)
        assert self.mechanism is not None
        try:
            if self._scram is not None:
                return self._scram_round(token)
            return self._plain(token)
        except (scram.ScramError, sasl_plain.PlainError) as e:
            return self._fail(str(e))
        except Exception as e:  # the credential lookup failed (a store error): refuse, say so
            return self._fail(f"SASL {self.mechanism} authentication could not be completed: "
                              f"{type(e).__name__} while looking up the credential")

    # -- mechanisms ------------------------------------------------------------------------

    def _scram_lookup(self, username: str) -> ScramCredential | None:
        mechanism = self.mechanism
        assert mechanism is not None
        if username == CLUSTER_USER:
            if mechanism == CLUSTER_MECHANISM:
                return self.settings.cluster_credential
            return None
        if username.startswith(RESERVED_PREFIX) or mechanism not in self.settings.mechanisms:
            return None
        return self.settings.lookup(mechanism, username)

    def _scram_round(self, token: bytes) -> AuthenticateOutcome:
        exchange = self._scram
        assert exchange is not None
        if exchange.state is scram.ScramState.EXPECT_CLIENT_FIRST:
            server_first = exchange.client_first(token)
            return AuthenticateOutcome(ErrorCode.NONE, None, server_first, False, None)
        server_final = exchange.client_final(token)
        assert exchange.username is not None
        return self._succeed(exchange.username, server_final)

    def _plain(self, token: bytes) -> AuthenticateOutcome:
        username, password = sasl_plain.parse(token)
        credential = None
        if not username.startswith(RESERVED_PREFIX):
            credential = self.settings.lookup(sasl_plain.PLAIN_CREDENTIAL_MECHANISM, username)
        if credential is None or credential.mechanism != sasl_plain.PLAIN_CREDENTIAL_MECHANISM:
            # Spend the same work as a real check: timing must not tell who exists.
            sasl_plain.verify(scram.decoy_credential(sasl_plain.PLAIN_CREDENTIAL_MECHANISM,
                                                     username), password)
            return self._fail(_failed_message(PLAIN))
        if not sasl_plain.verify(credential, password):
            return self._fail(_failed_message(PLAIN))
        return self._succeed(username, b"")

    def _succeed(self, username: str, auth_bytes: bytes) -> AuthenticateOutcome:
        self.principal = Principal("User", username)
        self.is_broker = username == CLUSTER_USER and self.mechanism == CLUSTER_MECHANISM
        self.state = SaslState.DONE
        return AuthenticateOutcome(ErrorCode.NONE, None, auth_bytes, False, "success")

    def _fail(self, message: str) -> AuthenticateOutcome:
        self.state = SaslState.FAILED
        return AuthenticateOutcome(ErrorCode.SASL_AUTHENTICATION_FAILED, message, b"", True,
                                   "failure")


# -- the client side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientCredential:
    """What a Sluice client logs in with. The password never appears in a repr."""

    mechanism: str
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in KNOWN_MECHANISMS:
            raise ValueError(f"unknown SASL mechanism {self.mechanism!r} (known: "
                             f"{', '.join(KNOWN_MECHANISMS)})")


class SaslClientError(Exception):
    """The server's answers do not make a valid exchange (or do not prove it knows us)."""


class SaslAuthenticationError(Exception):
    """The server refused our SASL login, or its answers did not make a valid exchange; the
    message carries the server's error code and message, ``error_code`` the code (None when
    the server's answers were at fault)."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class SaslClient:
    """The client's half of one exchange: :meth:`first` gives the first SaslAuthenticate
    token; :meth:`step` takes each server token and gives the next one, or None when the
    exchange is complete (and, for SCRAM, the server has proved itself)."""

    def __init__(self, credential: ClientCredential, *, nonce: str | None = None) -> None:
        self.credential = credential
        self.done = False
        self._scram: scram.ScramClient | None = None
        self._round = 0
        if credential.mechanism in SCRAM_MECHANISMS:
            self._scram = scram.ScramClient(credential.mechanism, credential.username,
                                            credential.password, nonce=nonce)

    def first(self) -> bytes:
        if self._scram is not None:
            return self._scram.client_first()
        return sasl_plain.encode(self.credential.username, self.credential.password)

    def step(self, server_token: bytes) -> bytes | None:
        if self.done:
            raise SaslClientError("the SASL exchange is already complete")
        self._round += 1
        try:
            if self._scram is None:
                self.done = True
                return None
            if self._round == 1:
                return self._scram.client_final(server_token)
            self._scram.verify_server_final(server_token)
        except scram.ScramError as e:
            raise SaslClientError(str(e)) from None
        self.done = True
        return None


#: The SaslHandshake and SaslAuthenticate versions Sluice's clients send.
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 2
#: SCRAM takes two SaslAuthenticate rounds and PLAIN one; a server asking for more is refused.
MAX_SASL_ROUNDS = 3


class SaslLogin:
    """One login over Kafka's SASL APIs, as a client drives it, sans-IO: which request to send
    next and what each answer means. The Twisted client (:mod:`broker_core.rpc`), the blocking
    connection and the quorum admin tool each only carry its requests::

        request = login.first_request()
        while request is not None:
            request = login.answer(send(*request))

    A request is ``(api_key, api_version, body)``. :meth:`answer` raises
    :class:`SaslAuthenticationError` naming the server's error (the server then closes the
    connection), or the exchange's fault (a server that did not prove it holds our
    credential, or asks for too many rounds); ``None`` means logged in.
    """

    def __init__(self, credential: ClientCredential, peer: str) -> None:
        self.credential = credential
        self.peer = peer
        self._client = SaslClient(credential)
        self._shaken = False
        self._rounds = 0

    def first_request(self) -> tuple[int, int, dict]:
        return (ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION, {"mechanism": self.credential.mechanism})

    def answer(self, response: Any) -> tuple[int, int, dict] | None:
        mechanism = self.credential.mechanism
        if not self._shaken:
            self._shaken = True
            if response.error_code:
                raise SaslAuthenticationError(
                    f"{self.peer} refused SaslHandshake for {mechanism}: "
                    f"{ErrorCode(response.error_code).name} (enabled: "
                    f"{', '.join(response.mechanisms) or 'none'})", response.error_code)
            token: bytes | None = self._client.first()
        else:
            if response.error_code:
                raise SaslAuthenticationError(
                    f"{self.peer} refused SASL {mechanism} login of "
                    f"{self.credential.username!r}: {ErrorCode(response.error_code).name}: "
                    f"{response.error_message}", response.error_code)
            try:
                token = self._client.step(bytes(response.auth_bytes))
            except SaslClientError as e:
                raise SaslAuthenticationError(f"{self.peer}: {e}") from None
        if token is None:
            return None
        self._rounds += 1
        if self._rounds > MAX_SASL_ROUNDS:
            raise SaslAuthenticationError(f"{self.peer}: SASL {mechanism} took too many rounds")
        return (ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION, {"auth_bytes": token})
