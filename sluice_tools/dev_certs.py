"""Development certificates: a private CA and one broker certificate it signs, as PEM files, so
a TLS listener can be tried on one machine (``sluice certs create-dev``; the quickstart's
``--secure`` uses it). **For development only**: the CA's key sits next to its certificate,
unprotected, and anyone holding it can sign a certificate for any name.

What :func:`create_dev_certs` writes under ``out``:

    ca.pem       the CA's certificate: clients' ``ssl.ca.location``
    ca.key       the CA's key (mode 0600)
    broker.pem   the broker's certificate for every ``--host`` (``ssl.certfile``)
    broker.key   its key (mode 0600; ``ssl.keyfile``)

Invariants: nothing existing is overwritten (FileExistsError names the first file found, and
then nothing is written); keys are created with mode 0600 before a byte is written to them
(never readable by others, not even for a moment); a host that parses as an IP address goes
into the certificate as an IP address (what a client connecting to ``127.0.0.1`` checks),
any other as a DNS name.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

#: Kept short: a development certificate that outlives its use is a liability.
VALID_DAYS = 365
FILE_NAMES = ("ca.pem", "ca.key", "broker.pem", "broker.key")


@dataclass(frozen=True)
class DevCerts:
    """The paths :func:`create_dev_certs` wrote."""

    cafile: Path
    ca_keyfile: Path
    certfile: Path
    keyfile: Path


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _alt_name(host: str):  # -> x509.GeneralName
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def create_dev_certs(out: str | os.PathLike[str], hosts: list[str]) -> DevCerts:
    """A new CA and a broker certificate for ``hosts`` (at least one) under ``out`` (made if
    missing); see the module docstring."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not hosts:
        raise ValueError("at least one --host is required (the name clients connect to)")
    names = [_alt_name(h) for h in dict.fromkeys(hosts)]
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    paths = DevCerts(*(directory / n for n in FILE_NAMES))
    for p in (paths.cafile, paths.ca_keyfile, paths.certfile, paths.keyfile):
        if p.exists():
            raise FileExistsError(f"{p} exists; development certificates are never overwritten")

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Sluice development CA")])
    ca = (x509.CertificateBuilder()
          .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            # clientAuth too: brokers present it to each other on a TLS inter-broker listener.
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))

    def pem_key(k: ec.EllipticCurvePrivateKey) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())

    # Keys first: a run stopped half-way leaves no certificate without its key.
    _write(paths.ca_keyfile, pem_key(ca_key), 0o600)
    _write(paths.keyfile, pem_key(key), 0o600)
    _write(paths.cafile, ca.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(paths.certfile, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return paths
