"""Fixtures shared by the integration tests (the session's real ZooKeeper is in tests/conftest.py)."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred


@pytest.fixture
def store(zk_hosts):
    """A started ``ZooKeeperStore`` on this test's chroot, stopped afterwards."""
    from broker_core.zk.store import ZooKeeperStore

    s = ZooKeeperStore(zk_hosts, reactor=reactor, session_timeout=6.0)
    pytest_twisted.blockon(Deferred.fromCoroutine(s.start()))
    yield s
    pytest_twisted.blockon(Deferred.fromCoroutine(s.stop()))
