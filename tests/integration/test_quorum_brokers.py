"""Three in-process brokers in quorum mode (``metadata.store=quorum``), no ZooKeeper: each
runs its own quorum node (a voter) on a real TCP quorum listener, and the two brokers that do
not lead the quorum write through the leader (MetadataWrite, SessionHeartbeat). Topics are
created, records replicate, a consumer group rebalances, and when the broker that leads the
quorum stops, the other two elect a new quorum leader and keep serving."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, threads

from broker_core import metadata_paths as paths
from broker_core.broker import BrokerService
from broker_core.raft.metadata_commands import CreateNode, encode
from broker_core.raft.roles import Role
from broker_core.wire.apis import ApiKey
from broker_core.wire.records import decode_records
from sluice_tools import cli
from sluice_tools.admin import AdminError
from sluice_tools.quorum_admin import QuorumAdminClient
from tests.support.cluster import (
    broker_config,
    call,
    controller_of,
    coordinates,
    create_topic,
    eventually,
    free_port,
    leader_of,
    local_batches,
    produce,
    stop_brokers,
)
from tests.support.quorum_brokers import TIMINGS, start_quorum_brokers
from tests.support.scripted_consumer import ScriptedConsumer, static


def observer_config(base, broker_id: int, bootstrap_port: int):
    """An observer broker that knows nothing of the quorum but one quorum listener
    (``quorum.bootstrap.servers``): no ``quorum.voters``."""
    return broker_config(broker_id, "", base / f"broker-{broker_id}", metadata_store="quorum",
                         quorum_bootstrap_servers=f"127.0.0.1:{bootstrap_port}",
                         quorum_listener=f"127.0.0.1:{free_port()}", cluster_id="quorum-test",
                         **TIMINGS)


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
    coord = await eventually(lambda: next((b for b in brokers if coordinates(b, "g1")), None),
                             what="an active coordinator of g1's shard")
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
    """Start procedure steps 3-4 in a broker: broker 4 asks one voter that does not lead
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
        # Broker 4 takes partitions too: a leader may be any of the four.
        await eventually(lambda: all(leader_of([*brokers, observer], "seen", p)
                                     for p in range(2)),
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


# -- sluice quorum against a broker's quorum listener -----------------------------------------


async def quorum_admin(broker: BrokerService, port: int,
                       operation: Callable[[QuorumAdminClient], Any]) -> Any:
    """``operation`` on a :class:`QuorumAdminClient` given only ``127.0.0.1:port`` and the
    cluster login (``broker``'s: the quorum serves brokers only), in a thread: the client
    blocks, and the brokers it talks to run on this reactor."""
    def run() -> Any:
        with QuorumAdminClient(f"127.0.0.1:{port}", timeout_s=30.0,
                               credential=broker.cluster_credential.login) as client:
            return operation(client)
    return await threads.deferToThread(run)


async def sluice_quorum(broker: BrokerService, *args: str) -> str:
    """``sluice quorum ARGS --secret-file F`` (the CLI's parsing, client and printing; F is
    ``broker``'s cluster.secret.file) in a thread; its output."""
    out = io.StringIO()
    argv = ["quorum", *args, "--secret-file", broker.config.cluster_secret_file]
    await threads.deferToThread(cli.run, cli.build_parser().parse_args(argv), out)
    return out.getvalue()


def voter_ids(d) -> list[int]:
    return sorted(r.replica_id for r in d.current_voters)


@pytest_twisted.ensureDeferred
async def test_sluice_quorum_describe_and_reassign_through_a_broker_that_does_not_lead(brokers):
    leader = await eventually(lambda: quorum_leader(brokers), what="a quorum leader")
    await eventually(lambda: controller_of(brokers), what="an active controller")
    # The highest id that does not lead: it leaves the voters and comes back; every request
    # goes to its quorum listener, which never leads, so the client must find the leader.
    moved = max((b for b in brokers if b is not leader), key=lambda b: b.broker_id)
    port = moved.quorum.listen[1]

    # Without the cluster secret the quorum tells nothing but its versions and DescribeQuorum,
    # and the tool cannot find the leader (DiscoverBrokers is for brokers): it says why.
    with pytest.raises(AdminError, match="CLUSTER_AUTHORIZATION_FAILED.*--secret-file"):
        await threads.deferToThread(cli.run, cli.build_parser().parse_args(
            ["quorum", "describe", "--bootstrap-server", f"127.0.0.1:{port}"]), io.StringIO())
    text = await sluice_quorum(brokers[0], "describe", "--bootstrap-server", f"127.0.0.1:{port}")
    epoch = leader.quorum.client.driver.node.epoch
    assert text.splitlines()[:4] == [f"LeaderId:       {leader.broker_id}",
                                     f"LeaderEpoch:    {epoch}",
                                     text.splitlines()[2], "CurrentVoters:  [1,2,3]"]
    hw = int(text.splitlines()[2].split()[1])
    assert 0 < hw <= leader.quorum.client.driver.high_watermark
    as_json = json.loads(await sluice_quorum(brokers[0], "describe", "--bootstrap-server",
                                             f"127.0.0.1:{port}", "--json"))
    assert as_json["leader_id"] == leader.broker_id and as_json["observers"] == []
    assert sorted(r["replica_id"] for r in as_json["current_voters"]) == [1, 2, 3]

    kept = sorted(b.broker_id for b in brokers if b is not moved)
    done = await quorum_admin(brokers[0], port, lambda c: (c.reassign(kept), c.wait_for(kept))[1])
    assert voter_ids(done) == kept and done.target_voters is None
    await eventually(lambda: moved.quorum.client.driver.role is Role.OBSERVER,
                     what=f"broker {moved.broker_id} observing")
    d = await quorum_admin(brokers[0], port, lambda c: c.describe())
    assert [r.replica_id for r in d.observers] == [moved.broker_id]
    # The broker goes on as an observer: its metadata writes are forwarded to the leader.
    await create_topic(moved, "while-observing", partitions=1, rf=3)
    await eventually(lambda: leader_of(brokers, "while-observing", 0),
                     what="a leader of 'while-observing'")

    out = await sluice_quorum(brokers[0], "reassign", "--bootstrap-server", f"127.0.0.1:{port}",
                              "--voters", "1,2,3", "--wait")
    assert out.splitlines()[-1].startswith("Done: the voters are 1,2,3")
    await eventually(lambda: moved.quorum.client.driver.role is Role.FOLLOWER,
                     what=f"broker {moved.broker_id} a voter again")
    d = await quorum_admin(brokers[0], port, lambda c: c.describe())
    assert voter_ids(d) == [1, 2, 3] and d.observers == () and d.target_voters is None


# -- a broker that is not a voter: an observer of the quorum ----------------------------------


@pytest.fixture
def with_observer(tmp_path):
    """Brokers 1-3 vote; broker 4 observes (its own quorum.listener)."""
    started = pytest_twisted.blockon(defer.Deferred.fromCoroutine(
        start_quorum_brokers(tmp_path, observers=1)))
    try:
        yield started
    finally:
        pytest_twisted.blockon(defer.Deferred.fromCoroutine(stop_brokers(started)))


async def fetch_values(broker: BrokerService, topic: str, partition: int) -> list[bytes]:
    resp = await call(broker, ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    p = resp.responses[0].partitions[0]
    assert p.error_code == 0, p
    return [r.value for r in decode_records(p.records)]


@pytest_twisted.ensureDeferred
async def test_an_observer_broker_joins_hosts_partitions_and_writes_metadata(with_observer):
    brokers = with_observer
    observer = brokers[3]
    assert observer.broker_id == 4 and 4 not in observer.quorum.voters
    await eventually(lambda: quorum_leader(brokers), what="a quorum leader")
    assert observer.quorum.client.driver.role is Role.OBSERVER
    await eventually(lambda: controller_of(brokers), what="an active controller")
    # It registered through the quorum like the voters, and every broker sees all four.
    await eventually(lambda: all(len(b.cache.brokers) == 4 for b in brokers),
                     what="every cache lists 4 brokers")

    # Metadata written elsewhere reaches it: a topic created through a voter, with broker 4
    # leading partition 0 and following partition 1.
    await create_topic(brokers[0], "seen", assignment={0: [4, 1], 1: [2, 4]})
    await eventually(lambda: leader_of(brokers, "seen", 0) is observer
                     and leader_of(brokers, "seen", 1) is brokers[1],
                     what="broker 4 leading 'seen'-0")
    md = await call(observer, ApiKey.METADATA, 9, {"topics": [{"name": "seen"}]})
    assert md.topics[0].error_code == 0
    assert sorted(p.leader_id for p in md.topics[0].partitions) == [2, 4]
    # It hosts partitions: a produce and a fetch through it, and it replicates the other.
    resp = await produce(observer, "seen", 0, [b"a", b"b"], acks=-1)
    assert (resp.error_code, resp.base_offset) == (0, 0)
    assert await fetch_values(observer, "seen", 0) == [b"a", b"b"]
    assert (await produce(brokers[1], "seen", 1, [b"c"], acks=-1)).error_code == 0
    await eventually(lambda: len(local_batches(observer, "seen", 1)) == 1,
                     what="broker 4's replica of 'seen'-1")

    # Its own metadata writes are forwarded to the quorum leader (an observer never leads):
    # a topic created through it, and a command submitted on its quorum client directly.
    await create_topic(observer, "from-observer", partitions=2, rf=2)
    await eventually(lambda: all(leader_of(brokers, "from-observer", p) for p in range(2)),
                     what="leaders of 'from-observer'")
    stamp = int(reactor.seconds() * 1000)
    assert await observer.quorum.client.submit(
        encode(CreateNode("/observer-wrote", b"4", 0, False), stamp)) == "/observer-wrote"
    assert observer.quorum.client.tree.get("/observer-wrote")[0] == b"4"  # read-your-writes
    leader = quorum_leader(brokers)
    assert leader is not None and leader.quorum.client.tree.exists("/observer-wrote")
    trees = [b.quorum.client.tree for b in brokers]
    await eventually(lambda: len({t.applied_offset for t in trees}) == 1, what="trees level")
    assert len({t.to_snapshot() for t in trees}) == 1

    # DescribeQuorum, asked at the observer's own quorum listener, lists it as an observer.
    d = await quorum_admin(brokers[0], observer.quorum.listen[1], lambda c: c.describe())
    assert d.leader_id == leader.broker_id and voter_ids(d) == [1, 2, 3]
    assert [r.replica_id for r in d.observers] == [4]
    (seen,) = d.observers
    (leader_row,) = [r for r in d.current_voters if r.replica_id == d.leader_id]
    assert 0 < seen.log_end_offset <= leader_row.log_end_offset and seen.last_fetch_ms >= 0


@pytest_twisted.ensureDeferred
async def test_an_observer_broker_given_only_a_bootstrap_server_is_made_a_voter(brokers,
                                                                                tmp_path):
    """The bootstrapping example in brokers: broker 4 joins as an observer knowing
    only one voter's quorum listener (``quorum.bootstrap.servers``), and ``sluice quorum
    reassign --voters 1,2,4 --wait`` makes it a voter online while broker 3 goes on as an
    observer. Then one of 1 and 2 stops: the two voters left, 4 and the other, elect a leader
    and commit metadata writes, which a majority of (1, 2, 4) without 4 could not do."""
    leader = await eventually(lambda: quorum_leader(brokers), what="a quorum leader")
    await eventually(lambda: controller_of(brokers), what="an active controller")
    # It asks a voter that does not lead: the leader learns of it only through the quorum.
    asked = next(b for b in brokers if b is not leader)
    observer = BrokerService(observer_config(tmp_path, 4, asked.quorum.listen[1]),
                             reactor=reactor)
    await observer.startService()
    everyone = [*brokers, observer]
    try:
        assert observer.quorum.started.voter_ids == (1, 2, 3)
        assert observer.quorum.client.driver.role is Role.OBSERVER
        await eventually(lambda: all(len(b.cache.brokers) == 4 for b in everyone),
                         what="every cache lists 4 brokers")
        # Every voter learns its quorum listener from its own DiscoverBrokers (it asks every
        # node it knows, not only its bootstrap server), not only the voter it asked: the
        # others need it to reach broker 4 once it votes.
        port = observer.quorum.listen[1]

        def knows_4(b: BrokerService) -> bool:
            e = b.quorum.node.directory.endpoint(4)
            a = b.quorum.client.addresses.get(4)
            return (e is not None and e.port == port and a is not None and a.port == port
                    and 4 in b.quorum.node.network.peers)

        await eventually(lambda: all(knows_4(b) for b in brokers),
                         what="every voter knowing broker 4's quorum listener")

        # The reassignment, asked at the observer's own quorum listener.
        out = await sluice_quorum(brokers[0], "reassign", "--bootstrap-server", f"127.0.0.1:{port}",
                                  "--voters", "1,2,4", "--wait")
        assert out.splitlines()[-1].startswith("Done: the voters are 1,2,4"), out
        await eventually(lambda: observer.quorum.client.driver.role in (Role.FOLLOWER,
                                                                        Role.LEADER),
                         what="broker 4 a voter")
        await eventually(lambda: brokers[2].quorum.client.driver.role is Role.OBSERVER,
                         what="broker 3 observing")
        d = await quorum_admin(brokers[0], port, lambda c: c.describe())
        assert voter_ids(d) == [1, 2, 4] and d.target_voters is None
        assert [r.replica_id for r in d.observers] == [3]

        # The cluster works on: a topic created through broker 4 and one through broker 3
        # (now an observer), written and read back.
        for via, topic in ((observer, "via-4"), (brokers[2], "via-3")):
            await create_topic(via, topic, partitions=1, rf=2)
            part_leader = await eventually(lambda t=topic: leader_of(everyone, t, 0),
                                           what=f"a leader of {topic!r}")
            resp = await produce(part_leader, topic, 0, [b"v"], acks=-1)
            assert (resp.error_code, resp.base_offset) == (0, 0)
            assert await fetch_values(part_leader, topic, 0) == [b"v"]

        # Broker 4 votes: stop the quorum leader if it is 1 or 2, else broker 1. The voters
        # left are 4 and one of 1, 2; neither can lead or commit without the other.
        leader = await eventually(lambda: quorum_leader(everyone), what="a quorum leader")
        stopped = leader if leader.broker_id in (1, 2) else brokers[0]
        epoch = leader.quorum.client.driver.node.epoch
        await stopped.stopService()
        rest = [b for b in everyone if b is not stopped]
        new_leader = await eventually(lambda: quorum_leader(rest), timeout=30,
                                      what="a quorum leader among the rest")
        assert new_leader.broker_id in {1, 2, 4} - {stopped.broker_id}
        if stopped is leader:
            assert new_leader.quorum.client.driver.node.epoch > epoch
        await eventually(lambda: controller_of(rest), timeout=30, what="a controller")
        await create_topic(brokers[2], "after", partitions=1, rf=2)
        part_leader = await eventually(lambda: leader_of(rest, "after", 0), timeout=30,
                                       what="a leader of 'after'")
        assert (await produce(part_leader, "after", 0, [b"w"], acks=-1)).error_code == 0
        stamp = int(reactor.seconds() * 1000)
        assert await observer.quorum.client.submit(
            encode(CreateNode("/voter-4-wrote", b"4", 0, False), stamp)) == "/voter-4-wrote"
        d = await quorum_admin(brokers[0], port, lambda c: c.describe())
        assert d.leader_id == new_leader.broker_id and voter_ids(d) == [1, 2, 4]
    finally:
        await stop_brokers([observer])
