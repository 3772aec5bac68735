"""Binding the broker's listeners (:mod:`broker_core.config.listeners`), TLS included.

Each listener gets its own :class:`~broker_core.server.protocol.KafkaServerFactory` (all
sharing the broker's one request handler), so each connection knows the listener it came on.
A TLS listener (SSL, SASL_SSL) wraps that factory in Twisted's ``TLSMemoryBIOFactory`` with a
context built here from its PEM files: TLS 1.2 at least, the client certificate asked for or
required as ``ssl.client.auth`` says and checked against ``ssl.cafile``.

The files are read once, when the broker starts (:func:`load_tls_options`); a missing,
unreadable or mismatched file stops the start with a :class:`TlsFileError` naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from OpenSSL import crypto
from twisted.internet import endpoints, ssl
from twisted.protocols.tls import TLSMemoryBIOFactory

from broker_core.config.listeners import ClientAuth, ListenerConfig, Listeners, TlsFiles
from broker_core.security.peer_tls import PeerTls


class _RefusingTLSFactory(TLSMemoryBIOFactory):
    """``TLSMemoryBIOFactory`` that keeps the wrapped factory's refusal: when the Kafka
    factory answers ``None`` (the connection is over a limit), Twisted's ``WrappingFactory``
    would wrap the None and fail later; returning None closes the socket before the
    handshake, as on a plaintext listener."""

    def buildProtocol(self, addr: Any) -> Any:  # noqa: N802 (Twisted API)
        inner = self.wrappedFactory.buildProtocol(addr)
        return None if inner is None else self.protocol(self, inner)


class TlsFileError(Exception):
    """A TLS listener's file cannot be used; the message names the key and the file."""


@dataclass
class BoundListener:
    """A listener bound at start: its configuration, factory, port and advertised address."""

    config: ListenerConfig
    #: The Kafka protocol factory (``connections`` holds this listener's connections).
    factory: Any
    port: Any
    advertised: tuple[str, int]

    @property
    def name(self) -> str:
        return self.config.name


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise TlsFileError(f"{key}: file {path!r} not found") from None
    except OSError as e:
        raise TlsFileError(f"{key}: cannot read {path!r}: {e.strerror}") from None


def _certificates(path: str, key: str) -> list[x509.Certificate]:
    data = _read(path, key)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise TlsFileError(f"{key}: {path!r} holds no PEM certificate")
    return certs


def _certificate_and_key(tls: TlsFiles) -> tuple[list[x509.Certificate], Any]:
    """``ssl.certfile``'s certificates (its own first, then any intermediates) and
    ``ssl.keyfile``'s unencrypted private key, checked to belong together."""
    certs = _certificates(tls.certfile, tls.key_of("ssl.certfile"))
    key_text = _read(tls.keyfile, tls.key_of("ssl.keyfile"))
    try:
        key = serialization.load_pem_private_key(key_text, password=None)
    except TypeError:
        raise TlsFileError(f"{tls.key_of('ssl.keyfile')}: {tls.keyfile!r} is encrypted; "
                           "give an unencrypted PEM key") from None
    except ValueError:
        raise TlsFileError(f"{tls.key_of('ssl.keyfile')}: {tls.keyfile!r} holds no PEM "
                           "private key") from None
    public = certs[0].public_key().public_bytes(serialization.Encoding.DER,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(serialization.Encoding.DER,
                                     serialization.PublicFormat.SubjectPublicKeyInfo) != public:
        raise TlsFileError(f"{tls.key_of('ssl.keyfile')}: the key in {tls.keyfile!r} does not "
                           f"belong to the certificate in {tls.certfile!r}")
    return certs, key


def load_tls_options(tls: TlsFiles) -> ssl.CertificateOptions:
    """The TLS context options of a listener from its files; see the module docstring.

    ``ssl.certfile`` holds the server certificate first, then any intermediates; ``ssl.keyfile``
    its unencrypted private key; ``ssl.cafile`` the CAs whose client certificates are accepted.
    """
    certs, key = _certificate_and_key(tls)
    ca_certs = []
    if tls.cafile:
        ca_certs = [crypto.X509.from_cryptography(c)
                    for c in _certificates(tls.cafile, tls.key_of("ssl.cafile"))]
    verify = tls.client_auth is not ClientAuth.NONE
    # pyOpenSSL takes the certificate and key as cryptography objects (its own are
    # deprecated there); its certificate store still wants its own X509 for the CAs.
    return ssl.CertificateOptions(
        privateKey=key,
        certificate=certs[0],
        extraCertChain=certs[1:],
        verify=verify,
        caCerts=ca_certs if verify else None,
        requireCertificate=tls.client_auth is ClientAuth.REQUIRED,
        raiseMinimumTo=ssl.TLSVersion.TLSv1_2,
    )


def load_peer_tls(tls: TlsFiles) -> PeerTls:
    """What this broker's connections to other brokers need when the inter-broker listener
    ``tls`` is SSL or SASL_SSL: its ``ssl.cafile`` as the CAs that sign the other brokers'
    certificates, its certificate and key as this broker's client certificate."""
    if not tls.cafile:  # the configuration refuses this; a TlsFiles built by hand may not
        raise TlsFileError(f"{tls.key_of('ssl.cafile')}: the inter-broker listener uses TLS "
                           "and needs the CA that signs the brokers' certificates")
    certs, key = _certificate_and_key(tls)
    cas = [ssl.Certificate(crypto.X509.from_cryptography(c))
           for c in _certificates(tls.cafile, tls.key_of("ssl.cafile"))]
    pem_key = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    own = ssl.PrivateCertificate.loadPEM(
        certs[0].public_bytes(serialization.Encoding.PEM) + pem_key)
    return PeerTls(ssl.trustRootFromCertificates(cas), own,
                   tuple(crypto.X509.from_cryptography(c) for c in certs[1:]))


def load_all_tls_options(listeners: Listeners) -> dict[str, ssl.CertificateOptions]:
    """Every TLS listener's options by listener name (read before anything is bound)."""
    return {lc.name: load_tls_options(lc.tls) for lc in listeners if lc.tls is not None}


def server_endpoint(reactor: Any, lc: ListenerConfig) -> Any:
    """Where ``lc`` binds: its Twisted endpoint string (the old form) or TCP host:port."""
    if lc.endpoint is not None:
        return endpoints.serverFromString(reactor, lc.endpoint)
    if ":" in lc.host:
        return endpoints.TCP6ServerEndpoint(reactor, lc.port, interface=lc.host)
    return endpoints.TCP4ServerEndpoint(reactor, lc.port, interface=lc.host)


async def bind(reactor: Any, lc: ListenerConfig, factory: Any,
               tls_options: ssl.CertificateOptions | None) -> BoundListener:
    """Bind ``lc`` serving ``factory`` (through TLS when ``tls_options`` is given)."""
    served = factory
    if tls_options is not None:
        served = _RefusingTLSFactory(tls_options, False, factory)
        served.noisy = False  # the broker logs each bound listener itself
    port = await server_endpoint(reactor, lc).listen(served)
    host = port.getHost()
    bound = (getattr(host, "host", ""), getattr(host, "port", 0))
    return BoundListener(lc, factory, port, lc.advertised_address(*bound))
