"""Shared fixtures: one real ZooKeeper for the whole run, a fresh chroot per test."""

from __future__ import annotations

import uuid

import pytest

from tests.support.zookeeper import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper_server():
    server = ZooKeeperServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def zk_hosts(zookeeper_server):
    """``127.0.0.1:PORT/sluice-test-XXXX``: a chroot of the session's ZooKeeper, created empty."""
    from kazoo.client import KazooClient

    chroot = f"/sluice-test-{uuid.uuid4().hex[:10]}"
    zk = KazooClient(hosts=zookeeper_server.hosts)
    zk.start(timeout=15)
    try:
        zk.ensure_path(chroot)
    finally:
        zk.stop()
        zk.close()
    return zookeeper_server.hosts + chroot
