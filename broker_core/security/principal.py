"""A connection's identity: its listener, its security protocol and its principal.

Every accepted connection carries one :class:`ConnectionSecurity` (``proto.security`` on
:class:`~broker_core.server.protocol.KafkaServerProtocol`). It starts anonymous; the listener's
TLS handshake (a client certificate) or SASL exchange may set the principal once, after which
it never changes for the life of the connection.

Invariants:

- ``principal`` is :data:`ANONYMOUS` until authentication succeeded;
- ``is_broker`` is true only for a connection that proved it holds the cluster credential;
  nothing a client sends can set it otherwise;
- ``authenticated`` is true when no further authentication is expected on this connection
  (a PLAINTEXT or SSL listener from the start; a SASL listener once SaslAuthenticate succeeded).
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """Kafka's ``KafkaPrincipal``: a type (always ``User`` here) and a name."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``User:alice`` → ``Principal("User", "alice")``; raises ValueError otherwise."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is TYPE:NAME (e.g. User:alice), not {text!r}")
        return cls(kind, name)


#: The principal of a connection that has not authenticated (Kafka's ``User:ANONYMOUS``).
ANONYMOUS = Principal("User", "ANONYMOUS")


def canonical_host(host: str) -> str:
    """A peer host as ACLs and connection limits compare it: an address in its canonical text
    form, an IPv4-mapped IPv6 address (``::ffff:10.0.0.5``, how an IPv4 client appears on an
    IPv6 wildcard listener) as the plain IPv4 address it is, so that one client has one name
    whichever socket family accepted it; anything else (a name) lower-cased."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host.lower()
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


class SecurityProtocol(enum.Enum):
    """Kafka's listener security protocols."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True)
class ListenerSettings:
    """What a listener tells each connection it accepts: its name and security protocol."""

    name: str = "PLAINTEXT"
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT


#: A listener with no configuration: PLAINTEXT, named as Kafka names it.
DEFAULT_LISTENER = ListenerSettings()


class ConnectionSecurity:
    """The security state of one accepted connection; see the module docstring."""

    __slots__ = ("listener", "protocol", "peer_host", "principal", "is_broker", "authenticated")

    def __init__(self, listener: str, protocol: SecurityProtocol, peer_host: str = "?") -> None:
        self.listener = listener
        self.protocol = protocol
        self.peer_host = peer_host
        self.principal = ANONYMOUS
        self.is_broker = False
        self.authenticated = not protocol.uses_sasl

    def authenticate(self, principal: Principal, *, is_broker: bool = False) -> None:
        """Record a successful authentication; a connection authenticates at most once, except
        that the cluster login (``is_broker``) may follow a TLS client certificate's principal:
        brokers present their certificate and then log in, on SSL listeners too."""
        if self.is_broker or (self.principal is not ANONYMOUS and not is_broker):
            raise RuntimeError("this connection has already authenticated")
        self.principal = principal
        self.is_broker = is_broker
        self.authenticated = True

    def __repr__(self) -> str:
        who = "broker" if self.is_broker else str(self.principal)
        return f"<ConnectionSecurity {self.listener}/{self.protocol.value} {who}@{self.peer_host}>"


#: What a connection made without any listener configuration gets (tests, tools).
def plaintext(listener: str = "PLAINTEXT", peer_host: str = "?") -> ConnectionSecurity:
    return ConnectionSecurity(listener, SecurityProtocol.PLAINTEXT, peer_host)
