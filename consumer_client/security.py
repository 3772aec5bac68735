"""How Sluice's clients reach a TLS or SASL listener: Kafka's client properties, parsed and
checked once into a :class:`ClientSecurity`.

The keys are Kafka's (librdkafka's spellings accepted too)::

    security.protocol                      PLAINTEXT (default) | SSL | SASL_PLAINTEXT | SASL_SSL
    sasl.mechanism (sasl.mechanisms)       PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    sasl.username, sasl.password           the login
    ssl.ca.location                        PEM file of the CAs that sign broker certificates
                                           (unset: the system's trusted CAs)
    ssl.certificate.location,
    ssl.key.location                       a client certificate and its key (mutual TLS)
    ssl.endpoint.identification.algorithm  https (default: the broker's certificate must name
                                           the host connected to) | none

Every connection path uses the one object: the blocking
:class:`~consumer_client.connection.BrokerConnection` (:meth:`ClientSecurity.ssl_context`, and
the SASL exchange of :func:`login_blocking`), and the Twisted clients
(:mod:`consumer_client.secure_connect`, over :meth:`ClientSecurity.tls_creator`).

Invariants: a :class:`ClientSecurity` is consistent (SASL settings only with a SASL protocol,
all three of mechanism, username and password with one; TLS files only with a TLS protocol, a
certificate only with its key; every named file readable); the password never appears in its
repr, in an error message or in a log line.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_core.config.parsing import ConfigError
from broker_core.security.principal import SecurityProtocol
from broker_core.security.sasl import (
    KNOWN_MECHANISMS,
    ClientCredential,
    SaslAuthenticationError,
    SaslLogin,
)

#: Every security key a client configuration may hold (Kafka's names).
SECURITY_KEYS = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
)
#: Other spellings of the same keys (librdkafka's plural).
ALIASES = {"sasl.mechanisms": "sasl.mechanism"}
_SASL_KEYS = ("sasl.mechanism", "sasl.username", "sasl.password")
_TLS_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
             "ssl.endpoint.identification.algorithm")
_IDENTIFICATION = {"https": True, "none": False, "": False}  # Kafka: empty disables it too


class TlsHandshakeFailed(Exception):
    """The TLS handshake with a broker failed for a reason the same settings would meet again
    (its certificate is not signed by a trusted CA or does not name the host, or it refused
    ours); the message says which."""


#: What a client must not retry: the same settings would be refused the same way.
AUTHENTICATION_ERRORS: tuple[type[BaseException], ...] = (
    SaslAuthenticationError, TlsHandshakeFailed, ssl.SSLCertVerificationError)


def is_security_key(name: str) -> bool:
    """Whether ``name`` is one of the keys :meth:`ClientSecurity.from_mapping` reads."""
    return name in SECURITY_KEYS or name in ALIASES


def split(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``values`` -> (its security keys, everything else): a client's config parser hands the
    first to :meth:`ClientSecurity.from_mapping` and checks the rest against its own keys."""
    sec = {k: v for k, v in values.items() if is_security_key(k)}
    rest = {k: v for k, v in values.items() if not is_security_key(k)}
    return sec, rest


@dataclass(frozen=True)
class ClientSecurity:
    """A client's security settings; see the module docstring. ``PLAINTEXT`` is the default
    (``ClientSecurity()``)."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    verify_hostname: bool = True

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ClientSecurity:
        """Kafka keys -> a checked :class:`ClientSecurity`; raises ConfigError naming the key
        (never quoting the password). Keys other than the security keys are refused."""
        raw: dict[str, str] = {}
        for name, value in values.items():
            key = ALIASES.get(name, name)
            if key not in SECURITY_KEYS:
                raise ConfigError(f"unknown security key {name!r} (known: "
                                  f"{', '.join(SECURITY_KEYS)})", name)
            if key in raw:
                raise ConfigError(f"{key!r} is given twice (as {key!r} and as its alias)", key)
            raw[key] = "" if value is None else str(value)
        text = raw.get("security.protocol", "PLAINTEXT").strip().upper()
        try:
            protocol = SecurityProtocol(text)
        except ValueError:
            raise ConfigError(
                f"invalid value {raw['security.protocol']!r} for 'security.protocol': expected "
                f"one of {', '.join(p.value for p in SecurityProtocol)}",
                "security.protocol") from None
        for key in _SASL_KEYS if not protocol.uses_sasl else ():
            if key in raw:
                raise ConfigError(f"{key!r} is set but security.protocol={protocol.value} does "
                                  "not log in with SASL (use SASL_PLAINTEXT or SASL_SSL)", key)
        for key in _TLS_KEYS if not protocol.uses_tls else ():
            if key in raw:
                raise ConfigError(f"{key!r} is set but security.protocol={protocol.value} does "
                                  "not use TLS (use SSL or SASL_SSL)", key)
        mechanism = username = password = None
        if protocol.uses_sasl:
            mechanism = raw.get("sasl.mechanism", "").strip().upper()
            if mechanism not in KNOWN_MECHANISMS:
                got = repr(raw["sasl.mechanism"]) if "sasl.mechanism" in raw else "nothing"
                raise ConfigError(
                    f"security.protocol={protocol.value} needs 'sasl.mechanism', one of "
                    f"{', '.join(KNOWN_MECHANISMS)} (got {got})", "sasl.mechanism")
            username = raw.get("sasl.username", "")
            if not username:
                raise ConfigError(f"security.protocol={protocol.value} needs 'sasl.username'",
                                  "sasl.username")
            password = raw.get("sasl.password", "")
            if not password:
                raise ConfigError(f"security.protocol={protocol.value} needs 'sasl.password'",
                                  "sasl.password")
        algorithm = raw.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
        if algorithm not in _IDENTIFICATION:
            raise ConfigError(
                f"invalid value {raw['ssl.endpoint.identification.algorithm']!r} for "
                "'ssl.endpoint.identification.algorithm': expected https or none",
                "ssl.endpoint.identification.algorithm")
        files = {k: raw[k].strip() or None for k in _TLS_KEYS[:3] if k in raw}
        cert, key_file = files.get("ssl.certificate.location"), files.get("ssl.key.location")
        if (cert is None) != (key_file is None):
            given, missing = (("ssl.certificate.location", "ssl.key.location") if cert
                              else ("ssl.key.location", "ssl.certificate.location"))
            raise ConfigError(f"{given!r} is set without {missing!r}: a client certificate "
                              "needs both", missing)
        for key, path in files.items():
            if path is not None:
                _check_readable(key, path)
        security = cls(protocol, mechanism, username, password, files.get("ssl.ca.location"),
                       cert, key_file, _IDENTIFICATION[algorithm])
        if protocol.uses_tls:
            security.ssl_context()  # the files hold what they should: fail now, naming them
        return security

    @property
    def credential(self) -> ClientCredential | None:
        """The SASL login, or None when the protocol does not use SASL."""
        if not self.protocol.uses_sasl:
            return None
        assert self.mechanism and self.username and self.password
        return ClientCredential(self.mechanism, self.username, self.password)

    # -- TLS -------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext | None:
        """The stdlib context a blocking connection wraps its socket with (None without TLS):
        the broker's certificate checked against ``ssl.ca.location`` (or the system's CAs)
        and, unless identification is ``none``, against the host name; TLS 1.2 or later."""
        if not self.protocol.uses_tls:
            return None
        try:
            context = ssl.create_default_context(cafile=self.ca_location)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"'ssl.ca.location' {self.ca_location!r} holds no usable CA "
                              f"certificate: {e}", "ssl.ca.location") from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.verify_hostname
        if self.certificate_location is not None:
            try:
                context.load_cert_chain(self.certificate_location, self.key_location,
                                        password=_encrypted_key)
            except _EncryptedKey:
                raise ConfigError(f"'ssl.key.location' {self.key_location!r} is encrypted; "
                                  "Sluice reads unencrypted PEM keys (keep the file private)",
                                  "ssl.key.location") from None
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(
                    f"'ssl.certificate.location' {self.certificate_location!r} and "
                    f"'ssl.key.location' {self.key_location!r} do not hold a certificate and "
                    f"its unencrypted key: {e}", "ssl.certificate.location") from None
        return context

    def tls_creator(self, host: str) -> Any:
        """Twisted's client TLS options for a connection to ``host`` (None without TLS):
        the same checks as :meth:`ssl_context`."""
        if not self.protocol.uses_tls:
            return None
        from twisted.internet import ssl as tssl  # noqa: PLC0415 (blocking users skip Twisted)

        trust: Any = tssl.platformTrust()
        if self.ca_location is not None:
            trust = tssl.trustRootFromCertificates(_pem_certificates(self.ca_location))
        client_cert = None
        if self.certificate_location is not None:
            assert self.key_location is not None
            with open(self.certificate_location, "rb") as c, open(self.key_location, "rb") as k:
                client_cert = tssl.PrivateCertificate.loadPEM(c.read() + b"\n" + k.read())
        if self.verify_hostname:
            return tssl.optionsForClientTLS(host, trustRoot=trust,
                                            clientCertificate=client_cert,
                                            extraCertificateOptions={
                                                "raiseMinimumTo": tssl.TLSVersion.TLSv1_2})
        # Chain checked, host name not: Twisted's CertificateOptions without a hostname check.
        cert_options: dict[str, Any] = {}
        if client_cert is not None:
            cert_options = {"privateKey": client_cert.privateKey.original,
                            "certificate": client_cert.original}
        return tssl.CertificateOptions(trustRoot=trust, raiseMinimumTo=tssl.TLSVersion.TLSv1_2,
                                       **cert_options)


class _EncryptedKey(Exception):
    pass


def _encrypted_key() -> str:
    # Asked for only when the key is encrypted. Without a callback OpenSSL would prompt on the
    # terminal, and a service would hang there.
    raise _EncryptedKey


def _check_readable(key: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ConfigError(f"{key!r}: cannot read {path!r} ({e.strerror or e})", key) from None


def _pem_certificates(path: str) -> list[Any]:
    """Every certificate of a PEM file, as Twisted ``Certificate`` objects."""
    from twisted.internet import ssl as tssl  # noqa: PLC0415

    with open(path, "rb") as f:
        data = f.read()
    marker = b"-----END CERTIFICATE-----"
    blocks = [b + marker for b in data.split(marker) if b"-----BEGIN CERTIFICATE-----" in b]
    return [tssl.Certificate.loadPEM(b) for b in blocks]


# -- SASL over a blocking connection -------------------------------------------------------------


def login_blocking(roundtrip: Any, credential: ClientCredential, peer: str) -> None:
    """Log in over SASL on a blocking connection
    (:class:`~broker_core.security.sasl.SaslLogin`). ``roundtrip(api_key, version, body)``
    sends one request and returns the response. Raises
    :class:`~broker_core.security.sasl.SaslAuthenticationError` naming the server's error (the
    server then closes the connection)."""
    login = SaslLogin(credential, peer)
    request = login.first_request()
    while request is not None:
        request = login.answer(roundtrip(*request))
