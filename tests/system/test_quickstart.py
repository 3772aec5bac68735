"""``scripts/quickstart.sh``, run for real: three broker processes in quorum mode on the
quickstart's fixed ports, kcat and ``sluice`` as the script drives them, then ``--stop``.

The script runs from a copy of the repository's ``scripts/quickstart.sh`` in a temporary tree
(so its ``run/`` directory is the test's, never the checkout's), whose ``.venv/bin`` commands
run this checkout's code with the installed interpreter, and whose ``scripts/bootstrap.sh``
does nothing (what it would install, the test environment has). A smaller ``COUNT`` keeps it
short; everything else is the README's command.

- plain: the output a reader of the README sees, every message read back, the group caught up.
- ``--secure``: the same over SASL_SSL as the SCRAM-SHA-512 user the script makes; the files it
  leaves (certificates, password, client settings) private; the settings work for kcat as the
  script prints them; the listeners take no anonymous client; the cluster secret is in no file
  but its own; and a plain run against the running secure cluster is refused with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: Every port the quickstart binds (brokers, quorum, SASL_SSL clients, metrics).
PORTS = (9092, 9093, 9094, 9192, 9193, 9194, 9292, 9293, 9294, 9404, 9405, 9406)
COUNT = 3000
SECURE_BOOTSTRAP = "127.0.0.1:9292,127.0.0.1:9293,127.0.0.1:9294"


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tree(base: Path) -> Path:
    """A repository tree holding the quickstart script, running this checkout's code."""
    root = base / "sluice"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "quickstart.sh", root / "scripts" / "quickstart.sh")
    stub = root / "scripts" / "bootstrap.sh"
    stub.write_text("#!/bin/sh\n# the test environment has everything installed\nexit 0\n")
    stub.chmod(0o755)
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    real = Path(sys.prefix) / "bin"
    for name in ("python", "sluice", "twistd"):
        target = sys.executable if name == "python" else str(real / name)
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{target}" "$@"\n')
        wrapper.chmod(0o755)
    return root


def _run(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["COUNT"] = str(COUNT)
    return subprocess.run(["bash", str(root / "scripts" / "quickstart.sh"), *args], cwd=root,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def tree(tmp_path):
    busy = [p for p in PORTS if _port_in_use(p)]
    if busy:
        pytest.skip(f"the quickstart's ports are in use here: {busy}")
    root = _tree(tmp_path)
    try:
        yield root
    finally:
        stopped = _run(root, "--stop", timeout=120)
        if stopped.returncode != 0:  # leave no broker behind (twistd removes a stopped one's)
            for pidfile in (root / "run").glob("broker-*.pid"):
                try:
                    os.kill(int(pidfile.read_text()), 9)
                except (ProcessLookupError, ValueError):
                    pass
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def _kcat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *args], capture_output=True, text=True, timeout=60)


def test_the_plain_quickstart_runs_as_the_readme_shows(tree):
    done = _run(tree)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    for i in (1, 2, 3):
        assert f"started broker {i} on 127.0.0.1:909{i + 1} (log: run/broker-{i}.log)" in out
    assert f"read back {COUNT} messages (expected {COUNT})" in out
    assert "Cluster is running. Stop it with: scripts/quickstart.sh --stop" in out
    assert "SASL_SSL" not in out
    assert not (tree / "run" / "client-secure.properties").exists()
    assert not (tree / "run" / "tls").exists()
    # Anyone may read over the plain listeners, as before.
    listed = _kcat("-b", "127.0.0.1:9092", "-L", "-t", "quickstart")
    assert listed.returncode == 0 and "6 partitions" in listed.stdout, listed.stderr


def test_the_secure_quickstart_runs_over_sasl_ssl_only(tree):
    done = _run(tree, "--secure")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    run = tree / "run"
    for i in (1, 2, 3):
        assert (f"started broker {i}: clients on 127.0.0.1:929{i + 1} (SASL_SSL), brokers on "
                f"127.0.0.1:909{i + 1}") in out
    assert 'Set the SCRAM-SHA-512 credential of user "quickstart"' in out
    assert "user 'quickstart' logs in to every broker over SASL_SSL" in out
    assert f"read back {COUNT} messages (expected {COUNT})" in out
    props = run / "client-secure.properties"
    printed = f"kcat -F run/client-secure.properties -b {SECURE_BOOTSTRAP} -C -t quickstart"
    assert printed in out

    # What the script leaves: private keys, password and settings; settings that say SASL_SSL.
    for private in (props, run / "quickstart.password", run / "tls" / "broker.key",
                    run / "tls" / "ca.key", run / "cluster.secret"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
    settings = dict(line.split("=", 1) for line in props.read_text().splitlines())
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["sasl.mechanism"] == "SCRAM-SHA-512"
    assert settings["sasl.username"] == "quickstart"
    assert settings["sasl.password"] == (run / "quickstart.password").read_text().strip()
    assert settings["ssl.ca.location"] == str(run / "tls" / "ca.pem")

    # The printed kcat command reads the messages back (run from the tree, as printed).
    read = subprocess.run(["kcat", "-F", "run/client-secure.properties", "-b", SECURE_BOOTSTRAP,
                           "-C", "-t", "quickstart", "-o", "beginning", "-e", "-q"],
                          cwd=tree, capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr
    assert read.stdout.count("quickstart message") == COUNT

    # No anonymous client: not on the TLS listener without a login, not on the broker listener.
    no_login = _kcat("-b", "127.0.0.1:9292", "-X", "security.protocol=SSL", "-X",
                     f"ssl.ca.location={run / 'tls' / 'ca.pem'}", "-L", "-m", "5")
    assert no_login.returncode != 0
    plain = _kcat("-b", "127.0.0.1:9092", "-L", "-m", "5")
    assert plain.returncode != 0
    wrong = _kcat("-b", "127.0.0.1:9292", "-X", "security.protocol=SASL_SSL", "-X",
                  "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=quickstart", "-X",
                  "sasl.password=not-the-password", "-X",
                  f"ssl.ca.location={run / 'tls' / 'ca.pem'}", "-L", "-m", "5")
    assert wrong.returncode != 0 and "Authentication failed" in wrong.stderr, wrong.stderr

    # The cluster secret is in its own file only: not in the settings, the logs or any other.
    secret = (run / "cluster.secret").read_text().strip()
    holders = [p for p in run.rglob("*") if p.is_file() and p.name != "cluster.secret"
               and secret.encode() in p.read_bytes()]
    assert holders == []

    # A plain run against the running secure brokers is refused with the way out.
    mixed = _run(tree, timeout=60)
    assert mixed.returncode == 1
    assert "the brokers are running with --secure; stop them first" in mixed.stderr

    # A second --secure run reuses the certificates, the password and the user.
    ca = (run / "tls" / "ca.pem").read_bytes()
    again = _run(tree, "--secure")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already running" in again.stdout
    assert f"read back {2 * COUNT} messages (expected {2 * COUNT})" in again.stdout
    assert (run / "tls" / "ca.pem").read_bytes() == ca
