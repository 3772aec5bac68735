"""/metrics over TLS with HTTP basic auth, on a real broker: ``metrics.listener`` takes
Twisted's ``ssl:`` endpoint (certificates generated here with ``cryptography``), and
``metrics.basic.auth.file`` makes every scrape authenticate. Scraped with the standard
library's HTTPS client, which checks the certificate against the test's CA."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import pytest_twisted
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from twisted.internet import reactor, threads

from broker_core.broker import BrokerService
from broker_core.config.parsing import ConfigError
from broker_core.security.basic_auth import MIN_ITERATIONS, user_line
from tests.support.cluster import broker_config, running_brokers


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca.pem, cert.pem, key.pem)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    os.chmod(paths[2], 0o600)
    return paths


@pytest.fixture
def certs(tmp_path):
    return make_certificates(tmp_path)


@pytest.fixture
def broker(zk_hosts, tmp_path, certs):
    ca, cert, key = certs
    users = tmp_path / "metrics-users"
    users.write_text(user_line("prometheus", "scrape-me", iterations=MIN_ITERATIONS) + "\n")
    os.chmod(users, 0o600)
    listener = f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"
    for b in running_brokers(zk_hosts, tmp_path, 1, metrics_listener=listener,
                             metrics_basic_auth_file=str(users)):
        yield b[0]


def scrape(port: int, ca: Path, credentials: tuple[str, str] | None) -> tuple[int, dict, bytes]:
    """GET https://127.0.0.1:port/metrics (blocking: run it in a thread)."""
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if credentials is not None:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest_twisted.ensureDeferred
async def test_tls_scrape_needs_the_right_credentials(broker, certs):
    ca = certs[0]
    port = broker.metrics_port.getHost().port
    for credentials in (None, ("prometheus", "wrong"), ("grafana", "scrape-me")):
        status, headers, body = await threads.deferToThread(scrape, port, ca, credentials)
        assert status == 401, credentials
        assert headers["WWW-Authenticate"] == 'Basic realm="sluice metrics", charset="UTF-8"'
        assert b"sluice_" not in body
    status, _, body = await threads.deferToThread(scrape, port, ca, ("prometheus", "scrape-me"))
    assert status == 200 and b"sluice_connections" in body


@pytest_twisted.ensureDeferred
async def test_plain_http_gets_no_metrics_from_a_tls_listener(broker, certs):
    port = broker.metrics_port.getHost().port

    def plain() -> bytes:
        import socket

        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            return out

    answer = await threads.deferToThread(plain)
    assert b"sluice_" not in answer and not answer.startswith(b"HTTP/1.1 200")


@pytest_twisted.ensureDeferred
async def test_an_in_process_broker_refuses_an_open_password_file_before_it_opens_anything(
        zk_hosts, tmp_path):
    # twistd's option parsing reads the secret files; a broker built in-process (or embedded)
    # reads them first thing in its start, before it claims its log directory or connects.
    users = tmp_path / "metrics-users"
    users.write_text(user_line("prometheus", "scrape-me", iterations=MIN_ITERATIONS) + "\n")
    os.chmod(users, 0o644)  # readable by others: refused
    log_dir = tmp_path / "broker-1"
    svc = BrokerService(broker_config(1, zk_hosts, log_dir,
                                      metrics_listener="tcp:0:interface=127.0.0.1",
                                      metrics_basic_auth_file=str(users)), reactor=reactor)
    try:
        with pytest.raises(ConfigError) as refused:
            await svc.startService()
        assert refused.value.key == "metrics.basic.auth.file"
        assert not (log_dir / "meta.properties").exists()
    finally:
        if svc.running:
            await svc.stopService()
