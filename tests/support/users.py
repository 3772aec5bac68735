"""SCRAM users for tests against broker processes, made the way an operator makes them:
``sluice users add`` through a broker, logged in with the cluster login (without an authorizer,
user management is served to brokers and ``super.users`` only)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.cluster import ROOT, cluster_secret_file


def add_user(bootstrap: str, base: Path, user: str, password: str,
             mechanisms: Sequence[str] = ("SCRAM-SHA-512",)) -> None:
    """``user`` with a credential per mechanism, through ``bootstrap`` (a plaintext listener)
    of the cluster whose secret is under ``base``; the password and the login go through
    files (mode 0600) under ``base``, never the command line."""
    from broker_core.security.cluster_secret import ClusterCredential

    login = ClusterCredential.from_file(cluster_secret_file(base)).login
    config = base / "cluster-login.properties"
    config.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={login.mechanism}\n"
                      f"sasl.username={login.username}\nsasl.password={login.password}\n")
    os.chmod(config, 0o600)
    password_file = base / f"{user}.password"
    password_file.write_text(password + "\n")
    os.chmod(password_file, 0o600)
    args = ["users", "add", user, "--bootstrap-server", bootstrap, "--command-config",
            str(config), "--password-file", str(password_file)]
    for m in mechanisms:
        args += ["--mechanism", m]
    done = subprocess.run([sys.executable, "-m", "sluice_tools.cli", *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
