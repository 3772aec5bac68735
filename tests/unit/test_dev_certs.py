"""``sluice certs create-dev``: the development CA and broker certificate, checked by a real
TLS handshake (Python's ssl over memory buffers) against the names a client connects to."""

from __future__ import annotations

import ssl
import stat

import pytest

from sluice_tools import cli
from sluice_tools.dev_certs import FILE_NAMES, create_dev_certs


def _handshake(certs, server_hostname: str, *, mutual: bool = False) -> None:
    """A TLS handshake between a server holding the broker certificate and a client trusting
    only the development CA, checking ``server_hostname`` as a Kafka client does. ``mutual``:
    the server requires a client certificate and the client presents the broker's, as one
    broker connecting to another on a TLS inter-broker listener does."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs.certfile, certs.keyfile)
    client = ssl.create_default_context(cafile=str(certs.cafile))
    if mutual:
        server.verify_mode = ssl.CERT_REQUIRED
        server.load_verify_locations(cafile=str(certs.cafile))
        client.load_cert_chain(certs.certfile, certs.keyfile)
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out, server_hostname=server_hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(10):
        for name, side in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not finish")


def test_the_broker_certificate_passes_a_client_check_for_each_host(tmp_path):
    certs = create_dev_certs(tmp_path / "tls", ["127.0.0.1", "localhost"])
    _handshake(certs, "127.0.0.1")
    _handshake(certs, "localhost")


def test_the_broker_certificate_is_also_a_client_certificate_between_brokers(tmp_path):
    certs = create_dev_certs(tmp_path / "tls", ["127.0.0.1"])
    _handshake(certs, "127.0.0.1", mutual=True)


def test_a_name_not_given_is_refused_by_the_client(tmp_path):
    certs = create_dev_certs(tmp_path / "tls", ["127.0.0.1"])
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch|match"):
        _handshake(certs, "127.0.0.2")


def test_keys_are_private_and_certificates_readable(tmp_path):
    certs = create_dev_certs(tmp_path / "tls", ["localhost"])
    for key in (certs.keyfile, certs.ca_keyfile):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    for cert in (certs.cafile, certs.certfile):
        assert "BEGIN CERTIFICATE" in cert.read_text()


def test_nothing_existing_is_overwritten(tmp_path):
    out = tmp_path / "tls"
    out.mkdir()
    (out / "broker.pem").write_text("mine")
    with pytest.raises(FileExistsError, match="broker.pem"):
        create_dev_certs(out, ["localhost"])
    assert sorted(p.name for p in out.iterdir()) == ["broker.pem"]
    assert (out / "broker.pem").read_text() == "mine"


def test_a_host_is_required(tmp_path):
    with pytest.raises(ValueError, match="--host"):
        create_dev_certs(tmp_path / "tls", [])


def test_the_command_writes_the_files_and_refuses_a_second_run(tmp_path, capsys):
    out = tmp_path / "tls"
    argv = ["certs", "create-dev", "--out", str(out), "--host", "127.0.0.1"]
    assert cli.main(argv) == 0
    assert "For development only" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted(FILE_NAMES)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert cli.main(argv) == 1
    assert "never overwritten" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_the_command_requires_a_host(tmp_path):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["certs", "create-dev", "--out", str(tmp_path)])
