import pytest

from tests.support.procs import ProcessCluster


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    """Three broker processes in a fresh ZooKeeper chroot, shared by a test module."""
    c = ProcessCluster(zookeeper_server.hosts, tmp_path_factory.mktemp("cluster"), size=3)
    c.start()
    try:
        c.wait_registered()
        yield c
    finally:
        c.stop()
