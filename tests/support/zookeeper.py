"""A real, standalone ZooKeeper server (Debian's ``zookeeper`` package) for tests and benchmarks.

Started on a free 127.0.0.1 port with a temporary data dir; the AdminServer is disabled so
servers do not fight over port 8080. ``pause``/``resume`` send SIGSTOP/SIGCONT to simulate a
hung server.

``sasl_users`` (name -> password) starts it with SASL DIGEST-MD5, as an operator sets it up
(docs/zookeeper.md#acls): a JAAS file whose ``Server`` section lists the users for
``DigestLoginModule``, and the ``sasl`` scheme's authentication provider so ACLs can name
``sasl:<user>``. Such a server still accepts anonymous clients and the ``digest`` scheme.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

CLASSPATH_DIRS = ("/usr/share/java", "/usr/share/zookeeper")
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


#: The SASL users of the tests' SASL ZooKeeper (``sasl_zookeeper_server`` in tests/conftest.py):
#: the brokers' identity, and another user ZooKeeper also knows.
TEST_SASL_USERS = {"sluice": "acl-test-password-0123456789abcdef",
                   "other": "other-user-password-0123456789abcdef"}


class ZooKeeperUnavailable(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def classpath() -> str:
    if shutil.which("java") is None:
        raise ZooKeeperUnavailable("java is not installed; run scripts/bootstrap.sh "
                                   "(or apt-get install default-jre-headless zookeeper)")
    if not Path("/usr/share/java/zookeeper.jar").exists():
        raise ZooKeeperUnavailable("Debian's zookeeper package is not installed; run "
                                   "scripts/bootstrap.sh (or apt-get install zookeeper)")
    return ":".join(f"{d}/*" for d in CLASSPATH_DIRS if Path(d).exists())


class ZooKeeperServer:
    """See the module docstring."""

    def __init__(self, tick_ms: int = 500, sasl_users: dict[str, str] | None = None) -> None:
        self.tick_ms = tick_ms
        self.sasl_users = dict(sasl_users or {})
        self.port: int | None = None
        self.data_dir: Path | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="sluice-zk-"))
            self.port = _free_port()
        log = open(self.data_dir / "server.log", "ab")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.admin.enableServer=false",
             "-Dzookeeper.4lw.commands.whitelist=srvr,ruok", *self._sasl_options(),
             "-cp", classpath(), MAIN, str(self.port), str(self.data_dir / "data"),
             str(self.tick_ms), "600"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ZooKeeperUnavailable(f"ZooKeeper exited: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"srvr")
                    if b"Zookeeper version" in s.recv(4096):
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise ZooKeeperUnavailable(f"ZooKeeper did not start in {timeout}s: {self.log_tail()}")

    def _sasl_options(self) -> list[str]:
        """The JVM options of SASL DIGEST-MD5 (none without ``sasl_users``)."""
        if not self.sasl_users:
            return []
        jaas = self.data_dir / "jaas.conf"
        users = "".join(f'\n    user_{name}="{password}"'
                        for name, password in self.sasl_users.items())
        jaas.write_text("Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule "
                        f"required{users};\n}};\n")
        jaas.chmod(0o600)
        return [f"-Djava.security.auth.login.config={jaas}",
                "-Dzookeeper.authProvider.sasl="
                "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"]

    def log_tail(self, n: int = 20) -> str:
        try:
            lines = (self.data_dir / "server.log").read_text(errors="replace").splitlines()
        except (OSError, TypeError):
            return ""
        return "\n".join(lines[-n:])

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        """Stop and start again on the same port and data dir (sessions survive if quick)."""
        self._kill()
        self.start()

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self._kill()
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
