"""The consumer coordinator against real ZooKeeper and in-process brokers, driven by scripted
consumers (tests/support/scripted_consumer.py): election, registration, the channel, failure
detection, rebalancing with owners and offsets in ZooKeeper, listeners, failover, fencing."""

from __future__ import annotations

import pytest
import pytest_twisted

from broker_core import metadata_paths as paths
from broker_core.metadata import NoNode, SetData
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from coordinator import rebalance
from tests.support.cluster import (
    GROUP_TIMINGS,
    call,
    connect,
    coordinates,
    create_topic,
    eventually,
    known_coordinator,
    running_brokers,
    shard_service,
)
from tests.support.scripted_consumer import ScriptedConsumer, static, wildcard

#: The shared small group timings, fewer retries and handlers; one coordinator shard, since
#: these tests are about what one coordinator does (test_coordinator_shards.py spreads groups
#: over several).
FAST = {**GROUP_TIMINGS, "rebalance_max_retries": "3", "coordinator_rebalance_handlers": "2",
        "group_coordinator_shards": "1"}


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 2, **FAST)


def coordinator_of(brokers):
    active = [b for b in brokers if b.running and coordinates(b)]
    return active[0] if len(active) == 1 else None


async def the_coordinator(brokers):
    return await eventually(lambda: coordinator_of(brokers), what="a coordinator")


async def owners_in_zk(store, group):
    out = {}
    try:
        topics = await store.get_children(paths.consumer_owners(group))
    except NoNode:
        return out
    for t in topics:
        for p in await store.get_children(paths.consumer_owners_topic(group, t)):
            data, _ = await store.get(paths.consumer_owner(group, t, int(p)))
            out[(t, int(p))] = data.decode()
    return out


async def offset_in_zk(store, group, topic, partition):
    try:
        data, _ = await store.get(paths.consumer_offset(group, topic, partition))
    except NoNode:
        return None
    return paths.parse_offset_value(data)


def stable(consumers, partitions):
    """Every consumer started in one generation and the partitions owned exactly once."""
    gens = {c.generation for c in consumers}
    if len(gens) != 1 or -1 in gens or not all(c.fetching for c in consumers):
        return False
    owned = [tp for c in consumers for tp in c.owned]
    return sorted(owned) == sorted(partitions)


async def close_all(consumers):
    for c in consumers:
        c.close()


# -- election and ClusterMetadata -------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_one_coordinator_is_elected_and_every_broker_names_it(brokers, store):
    coord = await the_coordinator(brokers)
    data, _ = await store.get(paths.coordinator_shard_seat(0))
    assert paths.CoordinatorRegistration.from_bytes(data).broker_id == coord.broker_id
    epoch, _ = await store.get(paths.coordinator_shard_epoch(0))
    assert int(epoch) >= 1
    for b in brokers:
        md = await eventually(lambda b=b: _metadata_with_brokers(b, len(brokers)),
                              what="ClusterMetadata with every broker")
        assert md.error_code == 0
        assert md.coordinator_id == coord.broker_id
        assert sorted(x.node_id for x in md.brokers) == [1, 2]


async def _metadata_with_brokers(broker, n):
    md = await call(broker, ApiKey.CLUSTER_METADATA, 0, {})
    return md if len(md.brokers) == n and md.coordinator_id >= 0 else None


@pytest_twisted.ensureDeferred
async def test_re_election_when_the_coordinator_broker_stops(brokers, store):
    coord = await the_coordinator(brokers)
    old_epoch = shard_service(coord).elector.epoch
    await coord.stopService()
    other = next(b for b in brokers if b is not coord)
    await eventually(lambda: coordinates(other), what="the other broker elected")
    assert shard_service(other).elector.epoch > old_epoch
    md = await call(other, ApiKey.CLUSTER_METADATA, 0, {})
    assert md.coordinator_id == other.broker_id


# -- registration errors ----------------------------------------------------------------------------


async def _register(broker, **fields):
    body = {"group_id": "g", "consumer_id": "c1", "topic_count": static(t=1),
            "auto_commit": True, "auto_offset_reset": "smallest", "session_timeout_ms": 1500}
    body.update(fields)
    proto = await connect(broker)
    try:
        return await proto.request(ApiKey.REGISTER_CONSUMER, 0, body), proto
    except Exception:
        proto.transport.loseConnection()
        raise


@pytest_twisted.ensureDeferred
async def test_registration_errors_are_clear_and_disturb_nothing(brokers):
    coord = await the_coordinator(brokers)
    other = next(b for b in brokers if b is not coord)
    await eventually(lambda: known_coordinator(other) == coord.broker_id,
                     what="the other broker sees the coordinator")
    member = ScriptedConsumer("g", "c1", static(t=1))
    assert (await member.register_at(coord)).error_code == 0
    opened = []
    try:
        cases = [
            (coord, {}, ErrorCode.DUPLICATE_CONSUMER_ID, "already registered"),
            (coord, {"consumer_id": "c2", "session_timeout_ms": 100},
             ErrorCode.INVALID_SESSION_TIMEOUT, "group.min.session.timeout.ms"),
            (coord, {"consumer_id": "c2", "topic_count": "{not json"},
             ErrorCode.INVALID_TOPIC_COUNT, "not valid JSON"),
            (coord, {"consumer_id": "c2", "topic_count": '{"pattern":"regex","subscription":{}}'},
             ErrorCode.INVALID_TOPIC_COUNT, "pattern"),
            (coord, {"consumer_id": "c2", "topic_count": wildcard("(unclosed")},
             ErrorCode.INVALID_TOPIC_COUNT, "does not compile"),
            (coord, {"group_id": "coordinator", "consumer_id": "c2"},
             ErrorCode.INVALID_GROUP_ID, "reserved"),
            (other, {"consumer_id": "c2"}, ErrorCode.NOT_COORDINATOR,
             f"coordinator is broker {coord.broker_id}"),
        ]
        for broker, fields, code, words in cases:
            resp, proto = await _register(broker, **fields)
            opened.append(proto)
            assert resp.error_code == code, (fields, resp)
            assert words in resp.error_message, resp.error_message
            # The coordinator leaves the connection open; the consumer closes it.
            assert not proto.closed
        # Coordinator-only requests sent to a broker are refused with a message.
        for key, body in [(ApiKey.PING, {"consumer_id": "x", "num_retries": 0}),
                          (ApiKey.STOP_FETCHER, {"consumer_id": "x"}),
                          (ApiKey.START_FETCHER, {"consumer_id": "x", "generation_id": 1,
                                                  "ownership": [], "brokers": []})]:
            for broker in brokers:
                resp = await call(broker, key, 0, body)
                assert resp.error_code == ErrorCode.INVALID_REQUEST
                assert "coordinator channel" in resp.error_message
        # CommitOffsets / DescribeConsumerGroups at a non-coordinator.
        resp = await call(other, ApiKey.DESCRIBE_CONSUMER_GROUPS, 0, {"groups": None})
        assert resp.error_code == ErrorCode.NOT_COORDINATOR
        resp = await call(coord, ApiKey.COMMIT_OFFSETS, 0, {
            "group_id": "g", "consumer_id": "nobody", "offsets": []})
        assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        # Nothing else in the group was disturbed: the one member is still registered.
        group = shard_service(coord).registries.groups["g"]
        assert list(group.members) == ["c1"]
        assert member.connected
    finally:
        for p in opened:
            p.transport.loseConnection()
        member.close()


# -- a group of consumers ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_group_owns_every_partition_once_and_offsets_reach_zookeeper(brokers, store):
    coord = await the_coordinator(brokers)
    await create_topic(coord, "events", partitions=6)
    partitions = [("events", p) for p in range(6)]
    consumers = [ScriptedConsumer("g1", "a", static(events=2)),
                 ScriptedConsumer("g1", "b", static(events=1)),
                 ScriptedConsumer("g1", "c", static(events=1))]
    try:
        for c in consumers:
            assert (await c.register_at(coord)).error_code == 0
        await eventually(lambda: stable(consumers, partitions), what="a stable group")
        # Joined within the initial delay: one rebalance, one StartFetcher each.
        assert [c.starts for c in consumers] == [1, 1, 1]
        # Range over sorted threads a-0, a-1, b-0, c-0: 2, 2, 1, 1 partitions... per thread
        # ceil/floor: 6 partitions over 4 threads.
        assert sorted(len(c.owned) for c in consumers) == [1, 1, 4]
        owners = await eventually(lambda: _owners_if_complete(store, "g1", 6),
                                  what="owners in ZooKeeper")
        assert owners == {tp: thread for c in consumers for tp, thread in c.owned.items()}
        # New consumers start from -1: nothing committed yet.
        assert {o for c in consumers for o in c.start_offsets.values()} == {-1}

        # Offsets reported by Ping reach ZooKeeper...
        a = consumers[0]
        tp = sorted(a.owned)[0]
        a.consume(*tp, 42)
        await eventually(lambda: _offset_is(store, "g1", tp, 42), what="offset 42 in ZooKeeper")
        # ...and never go backwards.
        a.consume(*tp, 7)
        await _sleep(1.0)
        assert await offset_in_zk(store, "g1", *tp) == 42
        # A consumer reporting a partition it does not own is ignored.
        b = consumers[1]
        b.positions[tp] = 99
        b.owned[tp] = "b-0"  # lies about owning it
        await _sleep(1.0)
        assert await offset_in_zk(store, "g1", *tp) == 42
        del b.owned[tp]

        # DescribeConsumerGroups shows the group.
        resp = await call(coord, ApiKey.DESCRIBE_CONSUMER_GROUPS, 0, {"groups": ["g1", "nope"]})
        g1, nope = resp.groups
        assert g1.state == "stable" and [m.consumer_id for m in g1.members] == ["a", "b", "c"]
        assert nope.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert sum(len(p.partitions) for m in g1.members for p in m.ownership) == 6

        # CommitOffsets forged with a member id DescribeConsumerGroups showed: refused, for v0
        # (no session id) and for v1 with a wrong one; the offset is unchanged.
        forged = [{"topic": tp[0], "partition": tp[1], "offset": 1000}]
        resp = await call(coord, ApiKey.COMMIT_OFFSETS, 0, {
            "group_id": "g1", "consumer_id": "a", "offsets": forged})
        assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID and resp.partitions == []
        resp = await call(coord, ApiKey.COMMIT_OFFSETS, 1, {
            "group_id": "g1", "consumer_id": "a", "session_id": a.session_id ^ 1,
            "offsets": forged})
        assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID and resp.partitions == []
        assert await offset_in_zk(store, "g1", *tp) == 42

        # CommitOffsets: only for owned partitions, written before the answer.
        other_tp = sorted(b.owned)[0]
        resp = await call(coord, ApiKey.COMMIT_OFFSETS, 1, {
            "group_id": "g1", "consumer_id": "a", "session_id": a.session_id, "offsets": [
                {"topic": tp[0], "partition": tp[1], "offset": 50},
                {"topic": other_tp[0], "partition": other_tp[1], "offset": 5}]})
        assert resp.error_code == 0
        assert [p.error_code for p in resp.partitions] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert await offset_in_zk(store, "g1", *tp) == 50
        assert await offset_in_zk(store, "g1", *other_tp) is None
    finally:
        await close_all(consumers)


async def _owners_if_complete(store, group, n):
    owners = await owners_in_zk(store, group)
    return owners if len(owners) == n else None


async def _offset_is(store, group, tp, value):
    return await offset_in_zk(store, group, *tp) == value


def _sleep(seconds):
    from twisted.internet import reactor, task

    return task.deferLater(reactor, seconds, lambda: None)


@pytest_twisted.ensureDeferred
async def test_a_member_that_stops_answering_is_failed_and_the_rest_rebalanced(brokers, store):
    coord = await the_coordinator(brokers)
    await create_topic(coord, "t", partitions=4)
    partitions = [("t", p) for p in range(4)]
    a = ScriptedConsumer("g2", "a", static(t=1))
    b = ScriptedConsumer("g2", "b", static(t=1))
    try:
        for c in (a, b):
            assert (await c.register_at(coord)).error_code == 0
        await eventually(lambda: stable([a, b], partitions), what="a stable group")
        tp = sorted(b.owned)[0]
        b.consume(*tp, 11)
        await eventually(lambda: _offset_is(store, "g2", tp, 11), what="b's offset committed")
        b.silent = True
        metrics = coord.metrics
        await eventually(lambda: len(a.owned) == 4 and a.generation == 2, timeout=20,
                         what="a owns everything after b is failed")
        assert "b" not in shard_service(coord).registries.groups["g2"].members
        assert metrics.coordinator_expired_members_total.labels(reason="ping")._value.get() == 1
        assert metrics.coordinator_failed_pings_total._value.get() >= 2
        # a starts b's old partition from b's committed offset.
        assert a.start_offsets[tp] == 11
        owners = await eventually(lambda: _owners_if_complete(store, "g2", 4), what="owners")
        assert set(owners.values()) == {"a-0"}
        await eventually(lambda: not b.connected, what="b's channel closed by the coordinator")
    finally:
        await close_all([a, b])


@pytest_twisted.ensureDeferred
async def test_a_closed_connection_fails_the_member_at_once(brokers, store):
    coord = await the_coordinator(brokers)
    await create_topic(coord, "t", partitions=2)
    partitions = [("t", 0), ("t", 1)]
    a = ScriptedConsumer("g3", "a", static(t=1), session_timeout_ms=30000)
    b = ScriptedConsumer("g3", "b", static(t=1), session_timeout_ms=30000)
    try:
        for c in (a, b):
            assert (await c.register_at(coord)).error_code == 0
        await eventually(lambda: stable([a, b], partitions), what="a stable group")
        b.close()
        # Far sooner than the 30 s session timeout.
        await eventually(lambda: len(a.owned) == 2, timeout=5, what="a owns both partitions")
        m = coord.metrics.coordinator_expired_members_total.labels(reason="disconnect")
        assert m._value.get() == 1
    finally:
        await close_all([a, b])


# -- listeners ---------------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_new_partitions_and_matching_new_topics_rebalance_once(brokers, store):
    coord = await the_coordinator(brokers)
    await create_topic(coord, "logs-a", partitions=1)
    c = ScriptedConsumer("g4", "w", wildcard("logs-.*"))
    try:
        assert (await c.register_at(coord)).error_code == 0
        await eventually(lambda: c.fetching and set(c.owned) == {("logs-a", 0)},
                         what="first assignment")
        starts = c.starts
        await create_topic(coord, "other", partitions=1)  # does not match: no rebalance
        await create_topic(coord, "logs-b", partitions=2)
        await eventually(lambda: set(c.owned) == {("logs-a", 0), ("logs-b", 0), ("logs-b", 1)},
                         what="the new matching topic assigned")
        assert c.starts == starts + 1
        resp = await call(coord, ApiKey.CREATE_PARTITIONS, 0, {
            "topics": [{"name": "logs-a", "count": 3, "assignments": None}],
            "timeout_ms": 10000, "validate_only": False})
        assert resp.results[0].error_code == 0, resp
        await eventually(lambda: len(c.owned) == 5, what="the new partitions assigned")
        assert c.starts == starts + 2
        await _sleep(0.5)
        assert c.starts == starts + 2
    finally:
        c.close()


# -- failover and fencing ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_failover_rebalances_the_group_once_on_the_new_coordinator(brokers, store):
    coord = await the_coordinator(brokers)
    await create_topic(coord, "f", partitions=4)
    partitions = [("f", p) for p in range(4)]
    consumers = [ScriptedConsumer("g5", n, static(f=1)) for n in ("a", "b")]
    try:
        for c in consumers:
            assert (await c.register_at(coord)).error_code == 0
        await eventually(lambda: stable(consumers, partitions), what="a stable group")
        tp = sorted(consumers[0].owned)[0]
        consumers[0].consume(*tp, 5)
        await eventually(lambda: _offset_is(store, "g5", tp, 5), what="offset committed")
        before = await owners_in_zk(store, "g5")
        starts = [c.starts for c in consumers]
        generation = consumers[0].generation

        await coord.stopService()
        other = next(b for b in brokers if b is not coord)
        await eventually(lambda: coordinates(other), what="a new coordinator")
        for c in consumers:
            await eventually(lambda c=c: not c.connected, what="channel closed")
            await c.rejoin(brokers)
        await eventually(lambda: all(c.starts == s + 1 for c, s in zip(consumers, starts,
                                                                       strict=True))
                         and stable(consumers, partitions), what="rebalanced on the new one")
        await _sleep(0.8)
        assert [c.starts for c in consumers] == [s + 1 for s in starts]  # once
        assert await owners_in_zk(store, "g5") == before  # same members: same assignment
        owner = next(c for c in consumers if tp in c.owned)
        assert owner.start_offsets[tp] == 5  # resumed from the committed offset
        # generations keep counting across coordinators (stored with the owners)
        assert {c.generation for c in consumers} == {generation + 1}
    finally:
        await close_all(consumers)


@pytest_twisted.ensureDeferred
async def test_a_deposed_coordinator_cannot_write(brokers, store):
    coord = await the_coordinator(brokers)
    svc = shard_service(coord)
    path = paths.consumer_offset("g6", "t", 0)
    await store.ensure_path(path)
    await store.set(path, b"10")
    epoch_before = svc.elector.epoch
    # Someone else moves the epoch on (a newer coordinator's election).
    data, stat = await store.get(paths.coordinator_shard_epoch(0))
    await store.set(paths.coordinator_shard_epoch(0), str(int(data) + 1).encode(), stat.version)
    with pytest.raises(rebalance.NotCoordinator):
        await svc.fenced([SetData(path, b"99")])
    assert (await store.get(path))[0] == b"10"
    # It stepped down and freed the seat; an election follows with a newer epoch.
    new = await eventually(lambda: coordinator_of(brokers) if coordinator_of(brokers) and
                           shard_service(coordinator_of(brokers)).elector.epoch > epoch_before + 1
                           else None, what="a re-election")
    assert shard_service(new).elector.epoch == epoch_before + 2
