"""TLS on the connections a broker opens to other brokers (the inter-broker listener is SSL
or SASL_SSL).

:class:`PeerTls` holds what every such connection needs: the CAs that sign the brokers'
certificates (the inter-broker listener's ``ssl.cafile``) and this broker's own certificate
and key (that listener's ``ssl.certfile``/``ssl.keyfile``), presented as the client
certificate so a listener with ``ssl.client.auth=required`` takes brokers too.

Invariant: a connection wrapped here completes no handshake unless the peer's certificate
chains to one of those CAs *and* names the host it was reached at (its advertised host name or
IP address, checked by ``service_identity``), at TLS 1.2 or later. A refused handshake closes
the connection before any byte of the Kafka protocol (the cluster login first) is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.internet import ssl
from twisted.internet.endpoints import wrapClientTLS
from twisted.internet.error import ConnectionLost
from twisted.python.failure import Failure


class PeerTlsRefused(ConnectionLost):
    """The TLS handshake with another broker failed (its certificate was refused, or ours
    was): a ConnectionLost, so callers retry as for any lost connection, with the reason."""


def handshake_refusal(reason: Failure | None) -> str | None:
    """Why a lost connection's TLS handshake failed, as one line, or None when ``reason`` is
    not a TLS refusal (OpenSSL's certificate checks or the host name check)."""
    from OpenSSL import SSL  # noqa: PLC0415 (only TLS connections get here)
    from service_identity import VerificationError  # noqa: PLC0415

    if reason is None or not reason.check(SSL.Error, VerificationError):
        return None
    error = reason.value
    parts = [str(item[2]) for item in (error.args[0] if error.args
                                       and isinstance(error.args[0], list) else [])
             if isinstance(item, tuple) and len(item) == 3]
    return ", ".join(parts) or str(error)


@dataclass(frozen=True)
class PeerTls:
    """The trusted CAs and this broker's client certificate; see the module docstring."""

    trust_root: Any  # IOpenSSLTrustRoot over the inter-broker listener's ssl.cafile
    client_certificate: ssl.PrivateCertificate
    #: Intermediate certificates sent after ours (pyOpenSSL X509), as ``ssl.certfile`` lists.
    chain: tuple[Any, ...] = ()

    def creator(self, host: str) -> Any:
        """The client connection creator for a broker reached at ``host``."""
        extra: dict[str, Any] = {"raiseMinimumTo": ssl.TLSVersion.TLSv1_2}
        if self.chain:
            extra["extraCertChain"] = list(self.chain)
        return ssl.optionsForClientTLS(host, trustRoot=self.trust_root,
                                       clientCertificate=self.client_certificate,
                                       extraCertificateOptions=extra)

    def wrap(self, endpoint: Any, host: str) -> Any:
        """``endpoint`` (TCP to ``host``) with the TLS handshake on top."""
        return wrapClientTLS(self.creator(host), endpoint)


def peer_endpoint(endpoint: Any, host: str, tls: PeerTls | None) -> Any:
    """``endpoint`` as is without TLS, wrapped in it with; the one place callers branch."""
    return endpoint if tls is None else tls.wrap(endpoint, host)
