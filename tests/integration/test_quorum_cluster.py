"""The real brokers, controller and coordinator run unchanged on the metadata quorum: three
in-process brokers whose ``IMetadataStore`` is a ``QuorumMetadataStore`` on one real
one-voter quorum (``tests/support/local_quorum.py``), no ZooKeeper involved. A controller is
elected, a replicated topic gets its leaders, records go in and come out, and when the
controller's broker stops (its session closes, its ephemerals go) another broker takes over in a
higher epoch."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from broker_core.broker import BrokerService
from broker_core.raft.metadata_store import QuorumMetadataStore
from broker_core.wire.apis import ApiKey
from broker_core.zk import paths
from tests.support.cluster import (
    broker_config,
    call,
    controller_of,
    create_topic,
    eventually,
    leader_of,
    produce,
    stop_brokers,
)
from tests.support.local_quorum import LocalQuorum


async def _start(quorum: LocalQuorum, base, count: int) -> list[BrokerService]:
    await quorum.wait_for_leader()
    brokers = []
    for i in range(1, count + 1):
        # zookeeper.connect names no server: the store given to the broker is the quorum's.
        cfg = broker_config(i, "127.0.0.1:1", base / f"broker-{i}")
        store = QuorumMetadataStore(quorum, reactor=reactor, session_timeout=6.0)
        svc = BrokerService(cfg, reactor=reactor, store=store)
        brokers.append(svc)
        await svc.startService()
    return brokers


@pytest.fixture
def quorum_brokers(tmp_path):
    quorum = LocalQuorum(reactor)
    brokers = pytest_twisted.blockon(defer.Deferred.fromCoroutine(_start(quorum, tmp_path, 3)))
    try:
        yield quorum, brokers
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(stop_brokers(brokers)))
        quorum.stop()


@pytest_twisted.ensureDeferred
async def test_controller_elects_leaders_and_the_topic_serves(quorum_brokers):
    quorum, brokers = quorum_brokers
    ctrl = await eventually(lambda: controller_of(brokers), what="one active controller")
    await eventually(lambda: all(len(b.cache.brokers) == 3 for b in brokers),
                     what="every cache lists 3 brokers")
    await create_topic(brokers[0], "orders", partitions=3, rf=3)
    await eventually(lambda: all(leader_of(brokers, "orders", p) for p in range(3)),
                     what="a leader for every partition")
    assert len({leader_of(brokers, "orders", p).broker_id for p in range(3)}) == 3
    state = paths.LeaderAndIsr.from_bytes(quorum.tree.get(
        paths.leader_and_isr("orders", 0))[0])
    assert sorted(state.isr) == [1, 2, 3] and state.controller_epoch == ctrl.controller.epoch

    leader = leader_of(brokers, "orders", 0)
    resp = await produce(leader, "orders", 0, [b"a", b"b"], acks=-1)
    assert resp.error_code == 0 and resp.base_offset == 0
    md = await call(brokers[2], ApiKey.METADATA, 9, {"topics": [{"name": "orders"}]})
    assert md.controller_id == ctrl.broker_id
    assert sorted(p.leader_id for p in md.topics[0].partitions) == sorted(
        leader_of(brokers, "orders", p).broker_id for p in range(3))


@pytest_twisted.ensureDeferred
async def test_controller_failover_on_the_quorum(quorum_brokers):
    quorum, brokers = quorum_brokers
    first = await eventually(lambda: controller_of(brokers), what="controller")
    epoch = first.controller.epoch
    await create_topic(brokers[0], "fo", partitions=2, rf=3)
    await eventually(lambda: all(leader_of(brokers, "fo", p) for p in range(2)),
                     what="leaders")
    await first.stopService()  # closes its session: /controller and its registration go
    rest = [b for b in brokers if b is not first]
    new = await eventually(lambda: controller_of(rest), timeout=30, what="new controller")
    assert new.controller.epoch > epoch
    await eventually(lambda: all(leader_of(rest, "fo", p) for p in range(2)), timeout=30,
                     what="every partition led by a surviving broker")
    assert quorum.tree.exists(paths.broker(first.broker_id)) is None
