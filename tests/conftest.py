"""Shared fixtures: one real ZooKeeper for the whole run, a fresh chroot per test."""

from __future__ import annotations

import threading
import uuid

import pytest

from tests.support.zookeeper import TEST_SASL_USERS, ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper_server():
    server = ZooKeeperServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def sasl_zookeeper_server():
    """A second real ZooKeeper, set up for SASL DIGEST-MD5 logins of :data:`TEST_SASL_USERS`
    (started only by the tests that need it)."""
    server = ZooKeeperServer(sasl_users=TEST_SASL_USERS)
    server.start()
    yield server
    server.stop()


def new_chroot(server: ZooKeeperServer) -> str:
    """``127.0.0.1:PORT/sluice-test-XXXX``: a new, empty chroot of ``server``."""
    from kazoo.client import KazooClient

    chroot = f"/sluice-test-{uuid.uuid4().hex[:10]}"
    zk = KazooClient(hosts=server.hosts)
    zk.start(timeout=15)
    try:
        zk.ensure_path(chroot)
    finally:
        zk.stop()
        zk.close()
    return server.hosts + chroot


@pytest.fixture
def zk_hosts(zookeeper_server):
    """A chroot of the session's ZooKeeper, created empty (:func:`new_chroot`)."""
    return new_chroot(zookeeper_server)


@pytest.fixture
def other_zk_hosts(zookeeper_server):
    """A second chroot: another cluster's metadata on the same ZooKeeper."""
    return new_chroot(zookeeper_server)


@pytest.fixture(params=["DIGEST-MD5", "digest"])
def zk_auth_mechanism(request):
    """A test of ZooKeeper ACLs runs once per ``zookeeper.auth.mechanism``."""
    return request.param


@pytest.fixture
def acl_zk_hosts(request, zk_auth_mechanism):
    """A new chroot on the ZooKeeper ``zk_auth_mechanism`` needs: the SASL one for
    DIGEST-MD5; for ``digest`` the plain one, which (like a managed service) has no SASL."""
    if zk_auth_mechanism == "DIGEST-MD5":
        return new_chroot(request.getfixturevalue("sasl_zookeeper_server"))
    return new_chroot(request.getfixturevalue("zookeeper_server"))


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if it leaves a non-daemon thread behind.

    Python joins every non-daemon thread before it exits, so one forgotten thread pool makes
    the test process hang after its last test instead of exiting (CI would wait for its
    time limit). Reported here, it is an error with a name instead.
    """
    leftover = [t.name for t in threading.enumerate()
                if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    # Twisted's reactor pool is stopped by pytest-twisted after this hook, so it is not a leak.
    leftover = [n for n in leftover if not n.startswith("PoolThread-twisted.internet.reactor")]
    if leftover:
        session.config.get_terminal_writer().line(
            f"ERROR: the tests left non-daemon threads running: {', '.join(leftover)}", red=True)
        session.exitstatus = 1
