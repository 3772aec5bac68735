"""Three in-process brokers in quorum mode (``metadata.store=quorum``), no ZooKeeper: each
runs its own quorum node (a voter) on a real TCP quorum listener, and the two brokers that do
not lead the quorum write through the leader (MetadataWrite, SessionHeartbeat). Topics are
created, records replicate, a consumer group rebalances, and when the broker that leads the
quorum stops, the other two elect a new quorum leader and keep serving."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from broker_core.broker import BrokerService
from broker_core.raft.roles import Role
from broker_core.wire.apis import ApiKey
from broker_core.zk import paths
from tests.support.cluster import (
    broker_config,
    call,
    controller_of,
    create_topic,
    eventually,
    free_port,
    leader_of,
    local_batches,
    produce,
    stop_brokers,
)
from tests.support.scripted_consumer import ScriptedConsumer, static

#: Small group timings, as tests/integration/test_coordinator.py uses.
GROUP_TIMINGS = {
    "group_min_session_timeout_ms": "300",
    "group_initial_rebalance_delay_ms": "300",
    "rebalance_backoff_ms": "200",
    "offsets_commit_interval_ms": "200",
    "controlled_shutdown_retry_backoff_ms": "200",
}


def quorum_configs(base, count: int) -> list:
    """Configs of ``count`` brokers, all voters; the voters' ports are picked before any
    broker starts because every voter must know the others' addresses up front."""
    ports = {i: free_port() for i in range(1, count + 1)}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    # zookeeper.connect is not needed in quorum mode.
    return [broker_config(i, "", base / f"broker-{i}", metadata_store="quorum",
                          quorum_voters=voters, cluster_id="quorum-test", **GROUP_TIMINGS)
            for i in range(1, count + 1)]


async def start_quorum_brokers(base, count: int = 3) -> list[BrokerService]:
    """Start the brokers together: the first cannot open its metadata session before a
    majority of voters runs."""
    brokers = [BrokerService(cfg, reactor=reactor) for cfg in quorum_configs(base, count)]
    results = await defer.DeferredList([defer.maybeDeferred(b.startService) for b in brokers],
                                       consumeErrors=True)
    failed = [r for ok, r in results if not ok]
    if failed:
        await stop_brokers([b for b in brokers if b.running])
        failed[0].raiseException()
    return brokers


def observer_config(base, broker_id: int, bootstrap_port: int):
    """An observer broker that knows nothing of the quorum but one quorum listener
    (``quorum.bootstrap.servers``): no ``quorum.voters``."""
    return broker_config(broker_id, "", base / f"broker-{broker_id}", metadata_store="quorum",
                         quorum_bootstrap_servers=f"127.0.0.1:{bootstrap_port}",
                         quorum_listener=f"127.0.0.1:{free_port()}", cluster_id="quorum-test",
                         **GROUP_TIMINGS)


def quorum_leader(brokers: list[BrokerService]) -> BrokerService | None:
    leading = [b for b in brokers if b.running and b.quorum.client.leading]
    return leading[0] if len(leading) == 1 else None


@pytest.fixture
def brokers(tmp_path):
    started = pytest_twisted.blockon(defer.Deferred.fromCoroutine(
        start_quorum_brokers(tmp_path)))
    try:
        yield started
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(stop_brokers(started)))


@pytest_twisted.ensureDeferred
async def test_topics_replication_and_a_group_on_the_network_quorum(brokers):
    assert all(b.quorum is not None and b.store.session_id for b in brokers)
    leader = await eventually(lambda: quorum_leader(brokers), what="a quorum leader")
    assert sum(b.quorum.client.driver.role is Role.FOLLOWER for b in brokers) == 2
    await eventually(lambda: controller_of(brokers), what="an active controller")
    await eventually(lambda: all(len(b.cache.brokers) == 3 for b in brokers),
                     what="every cache lists 3 brokers")
    # Created through a broker that does not lead the quorum: its writes are forwarded.
    follower = next(b for b in brokers if b is not leader)
    await create_topic(follower, "orders", partitions=3, rf=3)
    await eventually(lambda: all(leader_of(brokers, "orders", p) for p in range(3)),
                     what="a leader for every partition")
    part_leader = leader_of(brokers, "orders", 0)
    resp = await produce(part_leader, "orders", 0, [b"a", b"b", b"c"], acks=-1)
    assert resp.error_code == 0 and resp.base_offset == 0
    await eventually(lambda: all(len(local_batches(b, "orders", 0)) == 1 for b in brokers),
                     what="the batch on every replica")
    # Every broker's tree holds the same metadata.
    trees = [b.quorum.client.tree for b in brokers]
    await eventually(lambda: len({t.applied_offset for t in trees}) == 1, what="trees level")
    assert len({t.to_snapshot() for t in trees}) == 1
    assert sorted(trees[0].children(paths.BROKER_IDS)) == ["1", "2", "3"]

    # A consumer group on the coordinator: two members, then one leaves and the other takes
    # every partition.
    coord = await eventually(lambda: next((b for b in brokers if b.coordinator.active), None),
                             what="an active coordinator")
    await create_topic(coord, "events", partitions=4)
    a = ScriptedConsumer("g1", "a", static(events=1))
    b = ScriptedConsumer("g1", "b", static(events=1))
    try:
        for c in (a, b):
            assert (await c.register_at(coord)).error_code == 0

        def balanced(members):
            owned = sorted(tp for c in members for tp in c.owned)
            return (all(c.fetching for c in members)
                    and len({c.generation for c in members}) == 1
                    and owned == [("events", p) for p in range(4)])

        await eventually(lambda: balanced([a, b]), what="two members balanced")
        assert a.owned and b.owned
        b.close()
        await eventually(lambda: balanced([a]) and len(a.owned) == 4, timeout=30,
                         what="the remaining member owning every partition")
        owners = trees[0].children(paths.consumer_owners_topic("g1", "events"))
        assert sorted(int(p) for p in owners) == [0, 1, 2, 3]
    finally:
        a.close()
        b.close()


@pytest_twisted.ensureDeferred
async def test_an_observer_given_only_a_bootstrap_server_joins_and_writes(brokers, tmp_path):
    """Seed 002's steps 3-4 in a broker: broker 4 asks one voter that does not lead
    (DiscoverBrokers), learns the cluster's voters and their addresses, starts as an observer
    and forwards its writes to the leader at the address it learned."""
    leader = await eventually(lambda: quorum_leader(brokers), what="a quorum leader")
    await eventually(lambda: controller_of(brokers), what="an active controller")
    asked = next(b for b in brokers if b is not leader)
    observer = BrokerService(observer_config(tmp_path, 4, asked.quorum.listen[1]),
                             reactor=reactor)
    await observer.startService()
    try:
        assert observer.quorum.started.voter_ids == (1, 2, 3)
        assert not observer.quorum.started.as_voter
        assert observer.quorum.client.driver.role is Role.OBSERVER
        assert observer.quorum.client.addresses[leader.broker_id].port == leader.quorum.listen[1]
        # Its registration went through the leader; so does a topic created through it.
        await eventually(lambda: all(len(b.cache.brokers) == 4 for b in [*brokers, observer]),
                         what="every cache lists 4 brokers")
        await create_topic(observer, "seen", partitions=2, rf=2)
        await eventually(lambda: all(leader_of(brokers, "seen", p) for p in range(2)),
                         what="a leader for every partition")
        trees = [b.quorum.client.tree for b in [*brokers, observer]]
        await eventually(lambda: len({t.applied_offset for t in trees}) == 1, what="trees level")
        assert len({t.to_snapshot() for t in trees}) == 1
        # The voter it asked learned its quorum listener from the request.
        assert asked.quorum.node.directory.endpoint(4).port == observer.quorum.listen[1]
    finally:
        await stop_brokers([observer])


@pytest_twisted.ensureDeferred
async def test_the_cluster_survives_stopping_the_quorum_leaders_broker(brokers):
    leader = await eventually(lambda: quorum_leader(brokers), what="a quorum leader")
    await eventually(lambda: controller_of(brokers), what="an active controller")
    await eventually(lambda: all(len(b.cache.brokers) == 3 for b in brokers),
                     what="every cache lists 3 brokers")
    await create_topic(brokers[0], "before", partitions=2, rf=3)
    await eventually(lambda: all(leader_of(brokers, "before", p) for p in range(2)),
                     what="leaders of 'before'")
    acked = await produce(leader_of(brokers, "before", 0), "before", 0, [b"x"], acks=-1)
    assert acked.error_code == 0
    epoch = leader.quorum.client.driver.node.epoch

    await leader.stopService()
    rest = [b for b in brokers if b is not leader]
    new_leader = await eventually(lambda: quorum_leader(rest), timeout=30,
                                  what="a new quorum leader")
    assert new_leader.quorum.client.driver.node.epoch > epoch
    await eventually(lambda: controller_of(rest), timeout=30, what="a controller")
    await eventually(lambda: all(leader_of(rest, "before", p) for p in range(2)), timeout=30,
                     what="'before' led by the surviving brokers")
    # Metadata writes go on: a new topic through the broker that does not lead the quorum.
    other = next(b for b in rest if b is not new_leader)
    await create_topic(other, "after", partitions=2, rf=2)
    await eventually(lambda: all(leader_of(rest, "after", p) for p in range(2)), timeout=30,
                     what="leaders of 'after'")
    resp = await produce(leader_of(rest, "after", 1), "after", 1, [b"y"], acks=-1)
    assert resp.error_code == 0
    # The acknowledged record is still there, on the new leader of its partition.
    survivor = leader_of(rest, "before", 0)
    assert len(local_batches(survivor, "before", 0)) == 1
    # The stopped broker's registration went with its closed session.
    assert new_leader.quorum.client.tree.exists(paths.broker(leader.broker_id)) is None
    md = await call(other, ApiKey.METADATA, 9, {"topics": [{"name": "after"}]})
    assert md.topics[0].error_code == 0
