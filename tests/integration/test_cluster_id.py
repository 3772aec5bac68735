"""The cluster id: created once in ``/cluster/id`` by the first broker, reported in Metadata,
stamped into every log directory (``meta.properties``); a broker refuses a log directory of
another cluster or another broker. Real ZooKeeper, in-process brokers, real sockets."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor

from broker_core import metadata_paths as paths
from broker_core.broker import BrokerService, StartupError
from broker_core.log import meta_properties
from broker_core.wire.apis import ApiKey
from tests.support.cluster import (
    BrokerProcess,
    broker_config,
    call,
    free_port,
    start_brokers,
    stop_brokers,
)


def contents(directory) -> dict[str, bytes]:
    """Every file under ``directory`` by relative path, with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


async def refused(config, match: str) -> None:
    """A broker on ``config`` fails to start with ``match``, and stops cleanly after."""
    svc = BrokerService(config, reactor=reactor)
    with pytest.raises(StartupError, match=match):
        await svc.startService()
    await svc.stopService()


@pytest_twisted.ensureDeferred
async def test_brokers_share_one_generated_cluster_id_and_report_it(zk_hosts, tmp_path):
    brokers = await start_brokers(zk_hosts, tmp_path, 2)
    try:
        data, _ = await brokers[0].store.get(paths.CLUSTER_ID)
        cluster_id = paths.cluster_id_from_bytes(data)
        assert len(cluster_id) == 22  # Kafka's form: a UUID in URL-safe base64
        assert [b.cluster_id for b in brokers] == [cluster_id, cluster_id]
        md = await call(brokers[1], ApiKey.METADATA, 9, {"topics": None})
        assert md.cluster_id == cluster_id
        for b in brokers:
            assert meta_properties.read(b.log_dir) == meta_properties.MetaProperties(
                b.broker_id, cluster_id)
    finally:
        await stop_brokers(brokers)


@pytest_twisted.ensureDeferred
async def test_a_log_dir_of_another_cluster_is_refused_and_left_as_it_was(
        zk_hosts, other_zk_hosts, tmp_path):
    [first] = await start_brokers(zk_hosts, tmp_path, 1)
    await first.store.create("/brokers/topics/t", b'{"version":1,"partitions":{"0":[1]}}')
    old_id = first.cluster_id
    await stop_brokers([first])
    before = contents(first.log_dir)
    # The same log directory, but ZooKeeper is another cluster's (a wiped ensemble, say).
    await refused(broker_config(1, other_zk_hosts, first.log_dir),
                  f"belongs to cluster {old_id}, but the broker is joining cluster")
    assert contents(first.log_dir) == before


@pytest_twisted.ensureDeferred
async def test_a_log_dir_of_another_broker_is_refused_and_left_as_it_was(zk_hosts, tmp_path):
    [first] = await start_brokers(zk_hosts, tmp_path, 1)
    await stop_brokers([first])
    before = contents(first.log_dir)
    await refused(broker_config(2, zk_hosts, first.log_dir),
                  "belongs to broker 1, but this is broker 2")
    assert contents(first.log_dir) == before


@pytest_twisted.ensureDeferred
async def test_a_zookeeper_mode_log_dir_is_refused_in_quorum_mode(zk_hosts, tmp_path):
    """Switching a broker to ``metadata.store=quorum`` on the log directory of a ZooKeeper
    cluster would start a new cluster over the old one's partitions."""
    [first] = await start_brokers(zk_hosts, tmp_path, 1)
    await stop_brokers([first])
    before = contents(first.log_dir)
    quorum = broker_config(1, "", first.log_dir, **{
        "metadata.store": "quorum", "quorum.voters": f"1@127.0.0.1:{free_port()}"})
    await refused(quorum, f"belongs to cluster {first.cluster_id}, but the broker is joining "
                          "cluster sluice")
    assert contents(first.log_dir) == before
    assert not (first.log_dir / "quorum").exists()


def test_twistd_broker_on_a_refused_log_dir_exits_1_saying_why(tmp_path):
    """As a process (``twist broker``): the refusal comes before the reactor runs, and the
    process still stops, with exit status 1 for its supervisor."""
    log_dir = tmp_path / "broker-1"
    log_dir.mkdir()
    (log_dir / "meta.properties").write_text("version=0\nbroker.id=1\ncluster.id=other\n")
    proc = BrokerProcess(1, "", tmp_path, quorum_voters=f"1@127.0.0.1:{free_port()}")
    proc.start()
    try:
        assert proc.proc.wait(timeout=60) == 1
    finally:
        proc.stop()
    assert "belongs to cluster other, but the broker is joining cluster sluice" in proc.log_text()
    assert sorted(p.name for p in log_dir.iterdir()) == ["meta.properties"]
