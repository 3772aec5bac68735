"""Real certificates for TLS tests, made with ``cryptography``: a CA, a server certificate for
127.0.0.1/localhost and client certificates, each written as PEM files.

``make_pki(dir)`` returns a :class:`Pki` with the paths; ``pki.client("alice", ou="eng")``
adds a client certificate signed by the same CA. Keys are EC P-256 (fast to make), certificates
valid from an hour ago for a day.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertFiles:
    """A certificate and its key as PEM files; ``subject`` is the certificate's subject."""

    certfile: Path
    keyfile: Path
    subject: x509.Name


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(directory: Path, name: str, cert: x509.Certificate,
           key: ec.EllipticCurvePrivateKey) -> CertFiles:
    certfile, keyfile = directory / f"{name}.pem", directory / f"{name}.key"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return CertFiles(certfile, keyfile, cert.subject)


def _build(subject: x509.Name, issuer: x509.Name, public: object, signer: object, *,
           ca: bool, extensions: list[tuple[x509.ExtensionType, bool]]) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(subject).issuer_name(issuer).public_key(public)
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    for ext, critical in extensions:
        builder = builder.add_extension(ext, critical=critical)
    return builder.sign(signer, hashes.SHA256())


class Pki:
    """A test CA with the certificates it signed; see the module docstring."""

    def __init__(self, directory: Path, ca_name: str = "Sluice Test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._ca_key = _key()
        self._ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
        ca = _build(self._ca_subject, self._ca_subject, self._ca_key.public_key(),
                    self._ca_key, ca=True, extensions=[
                        (x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                       crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False,
                                       decipher_only=False), True)])
        self.ca = _write(directory, "ca", ca, self._ca_key)
        self.server = self._leaf("server", x509.Name([
            x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]),
            [ExtendedKeyUsageOID.SERVER_AUTH],
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])

    @property
    def cafile(self) -> Path:
        return self.ca.certfile

    def client(self, common_name: str, *, ou: str | None = None, org: str | None = None,
               file_name: str | None = None) -> CertFiles:
        """A client certificate ``CN=common_name[,OU=ou][,O=org]`` signed by this CA."""
        attrs = []
        if org is not None:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        if ou is not None:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        return self._leaf(file_name or f"client-{common_name}", x509.Name(attrs),
                          [ExtendedKeyUsageOID.CLIENT_AUTH], [])

    def broker(self, name: str, hosts: tuple[str, ...] = ("localhost", "127.0.0.1")
               ) -> CertFiles:
        """A broker's certificate for ``hosts`` (DNS names or IP addresses), good both as a
        server's and as a client's: brokers present it to each other in both roles."""
        alt_names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                alt_names.append(x509.DNSName(host))
        return self._leaf(name, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]),
                          [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
                          alt_names)

    def _leaf(self, name: str, subject: x509.Name, usages: list[x509.ObjectIdentifier],
              alt_names: list[x509.GeneralName]) -> CertFiles:
        key = _key()
        extensions: list[tuple[x509.ExtensionType, bool]] = [
            (x509.ExtendedKeyUsage(usages), False)]
        if alt_names:
            extensions.append((x509.SubjectAlternativeName(alt_names), False))
        cert = _build(subject, self._ca_subject, key.public_key(), self._ca_key, ca=False,
                      extensions=extensions)
        return _write(self.directory, name, cert, key)


def make_pki(directory: Path) -> Pki:
    """A CA and a server certificate for 127.0.0.1/localhost under ``directory``."""
    return Pki(directory)
