"""The real brokers, controller and coordinator run unchanged on the metadata quorum: three
in-process brokers whose ``IMetadataStore`` is a ``QuorumMetadataStore`` on one real
one-voter quorum (``tests/support/local_quorum.py``), no ZooKeeper involved. A controller is
elected, a replicated topic gets its leaders, records go in and come out, and when the
controller's broker stops (its session closes, its ephemerals go) another broker takes over in a
higher epoch. The consumer coordinator is elected, balances a group, and keeps its owners and
offsets in the quorum's tree."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from broker_core import metadata_paths as paths
from broker_core.broker import BrokerService
from broker_core.raft.metadata_store import QuorumMetadataStore
from broker_core.wire.apis import ApiKey
from tests.support.cluster import (
    GROUP_TIMINGS,
    broker_config,
    call,
    controller_of,
    coordinates,
    create_topic,
    eventually,
    leader_of,
    produce,
    stop_brokers,
)
from tests.support.local_quorum import LocalQuorum
from tests.support.scripted_consumer import ScriptedConsumer, static


async def _start(quorum: LocalQuorum, base, count: int) -> list[BrokerService]:
    await quorum.wait_for_leader()
    brokers = []
    for i in range(1, count + 1):
        # zookeeper.connect names no server: the store given to the broker is the quorum's.
        cfg = broker_config(i, "127.0.0.1:1", base / f"broker-{i}", **GROUP_TIMINGS)
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


@pytest_twisted.ensureDeferred
async def test_the_coordinator_balances_a_group_with_its_state_in_the_quorum(quorum_brokers):
    quorum, brokers = quorum_brokers
    coord = await eventually(lambda: next((b for b in brokers if coordinates(b, "g1")), None),
                             what="an active coordinator of g1's shard")
    reg = paths.CoordinatorRegistration.from_bytes(quorum.tree.get(
        paths.coordinator_shard_seat(coord.coordinator.shard_of("g1")))[0])
    assert reg.broker_id == coord.broker_id
    await create_topic(coord, "events", partitions=4)
    consumers = [ScriptedConsumer("g1", "a", static(events=1)),
                 ScriptedConsumer("g1", "b", static(events=1))]
    try:
        for c in consumers:
            assert (await c.register_at(coord)).error_code == 0

        def balanced():
            owned = [tp for c in consumers for tp in c.owned]
            return (all(c.fetching for c in consumers) and len({c.generation for c in consumers})
                    == 1 and sorted(owned) == [("events", p) for p in range(4)])

        await eventually(balanced, what="a balanced group")

        def owners():
            # The coordinator writes the owners after StartFetcher has reached every member
            # (the rebalance's last step), so a balanced group's owners follow it shortly.
            return sorted(int(p) for p in quorum.tree.children(
                paths.consumer_owners_topic("g1", "events")) or ())

        await eventually(lambda: owners() == [0, 1, 2, 3], what="the owners in the quorum")
        a = consumers[0]
        tp = sorted(a.owned)[0]
        a.consume(*tp, 42)

        def committed():
            got = quorum.tree.get(paths.consumer_offset("g1", *tp))
            return got is not None and paths.parse_offset_value(got[0]) == 42

        await eventually(committed, what="offset 42 in the quorum's tree")
    finally:
        for c in consumers:
            c.close()


@pytest_twisted.ensureDeferred
async def test_a_topic_created_while_no_controller_ran_gets_leaders(tmp_path):
    """The assignment is written before any broker runs (as CreateTopics does while the
    controller's broker is dead and its ephemeral node lingers): the first controller's
    failover loads it with no partition state and must elect its first leaders."""
    quorum = LocalQuorum(reactor)
    await quorum.wait_for_leader()
    writer = QuorumMetadataStore(quorum, reactor=reactor, session_timeout=6.0)
    await writer.start()
    await writer.create(paths.topic("early"),
                        paths.TopicAssignment({0: [1, 2, 3], 1: [2, 3, 1]}).to_bytes(),
                        makepath=True)
    await writer.stop()
    brokers = await _start(quorum, tmp_path, 3)
    try:
        await eventually(lambda: all(leader_of(brokers, "early", p) for p in range(2)),
                         timeout=30, what="leaders of a topic created with no controller")
    finally:
        await stop_brokers(brokers)
        quorum.stop()
