import pytest

from tests.support.procs import ProcessCluster


@pytest.fixture
def make_cluster(zookeeper_server, tmp_path):
    """Build broker-process clusters in fresh chroots; all are stopped at teardown."""
    made = []

    def make(size: int = 1, extra: dict[str, str] | None = None) -> ProcessCluster:
        c = ProcessCluster(zookeeper_server.hosts, tmp_path / f"c{len(made)}", size=size,
                           extra=extra)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
