"""Coordinator shards on task.Clock with one in-memory store shared by several brokers' shard
sets: the stored count (agreed, hostile), placement after the settle time, routing and
NOT_COORDINATOR for a group of another broker's shard (changing nothing), shards elected by
different brokers and fenced independently, and the handoff when a broker joins (the old
owner resigns, the new one is elected, the moved members re-register once)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet import defer, task

from broker_core import metadata_paths as paths
from broker_core.metadata import ConnectionLost, SetData
from broker_core.metadata_cache import BrokerEndpoint
from broker_core.metrics import BrokerMetrics
from broker_core.wire.errors import ErrorCode
from coordinator import rebalance
from coordinator.service import CoordinatorConfig
from coordinator.shard_hash import shard_of
from coordinator.shard_placement import desired_owners
from coordinator.shards import RETRY_S, CoordinatorShards
from tests.support.coordinator_channels import FakeChannel, FakeProto
from tests.support.memory_store import MemoryStore

SETTLE = 1.0


class Cluster:
    """Brokers' shard sets on one store and one clock."""

    def __init__(self, count: int = 12) -> None:
        self.clock = task.Clock()
        self.store = MemoryStore()
        for p in (paths.CONSUMERS, paths.TOPICS, paths.BROKER_IDS):
            self.store.ensure_path(p)
        self.store.nodes[paths.topic("t")] = (
            paths.TopicAssignment({0: [1], 1: [1]}).to_bytes(), 0)
        self.count = count
        self.shards: dict[int, CoordinatorShards] = {}
        self.registries: dict[int, CollectorRegistry] = {}

    def gauge(self, broker_id: int, name: str) -> float:
        return self.registries[broker_id].get_sample_value(f"sluice_{name}")

    def endpoints(self):
        return [BrokerEndpoint(b, "h", 9000 + b) for b in sorted(self.shards)]

    def join(self, broker_id: int, configured: int | None = None) -> CoordinatorShards:
        cfg = CoordinatorConfig(min_session_timeout_ms=300, initial_rebalance_delay_ms=0,
                                rebalance_backoff_ms=100)
        s = CoordinatorShards(broker_id, self.store, clock=self.clock, config=cfg,
                              configured_shards=configured or self.count,
                              brokers=self.endpoints, channel_factory=FakeChannel,
                              metrics=BrokerMetrics(self.registries.setdefault(
                                  broker_id, CollectorRegistry())), settle_s=SETTLE)
        self.shards[broker_id] = s
        self.store.create(paths.broker(broker_id), b"{}", ephemeral=True)
        s.start()
        return s

    def settle(self) -> None:
        self.clock.advance(SETTLE)


def register(shards, cid: str, group: str):
    body = SimpleNamespace(group_id=group, consumer_id=cid,
                           topic_count=json.dumps({"subscription": {"t": 1}}),
                           auto_commit=True, auto_offset_reset="smallest",
                           session_timeout_ms=3000)
    proto = FakeProto()
    return shards.register_consumer(None, body, proto), getattr(proto, "channel", None)


def group_in_shard(shard: int, count: int, prefix: str = "g") -> str:
    return next(f"{prefix}{i}" for i in range(10_000) if shard_of(f"{prefix}{i}", count) == shard)


def test_a_lone_broker_stores_its_count_and_after_the_settle_time_coordinates_every_shard():
    c = Cluster(count=4)
    s = c.join(1)
    assert c.store.nodes[paths.COORDINATOR_SHARD_COUNT][0] == b"4" and s.count == 4
    assert s.services == {}  # nothing moves before the live set has been quiet
    c.settle()
    assert sorted(k for k, v in s.services.items() if v.active) == [0, 1, 2, 3]
    assert c.gauge(1, "coordinator_shards_active") == 4
    assert c.gauge(1, "active_coordinator") == 1
    for k in range(4):
        assert paths.CoordinatorRegistration.from_bytes(
            c.store.nodes[paths.coordinator_shard_seat(k)][0]).broker_id == 1
    answer = s.cluster_metadata(None, SimpleNamespace(group_id="g"))
    assert answer["error_code"] == 0 and answer["coordinator_id"] == 1
    v0 = s.cluster_metadata(None, None)
    assert v0["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "v1" in v0["error_message"] and v0["coordinator_id"] == -1


def test_a_broker_uses_the_stored_count_not_its_own():
    c = Cluster(count=3)
    c.join(1)
    late = c.join(2, configured=50)
    assert late.count == 3
    assert c.store.nodes[paths.COORDINATOR_SHARD_COUNT][0] == b"3"


def test_with_one_shard_v0_still_finds_the_coordinator():
    c = Cluster(count=1)
    s = c.join(1)
    c.settle()
    answer = s.cluster_metadata(None, None)
    assert answer["error_code"] == 0 and answer["coordinator_id"] == 1


@pytest.mark.parametrize("stored", [b"0", b"1025", b"lots", b"", b"12\x00", b"-1"])
def test_a_hostile_stored_count_leaves_the_broker_without_coordination(stored):
    c = Cluster()
    c.store.ensure_path(paths.COORDINATOR_SHARDS)
    c.store.nodes[paths.COORDINATOR_SHARD_COUNT] = (stored, 0)
    s = c.join(1)
    c.settle()
    assert s.count is None and s.services == {}
    before = dict(c.store.nodes)
    resp, channel = register(s, "c1", "g")
    assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert paths.COORDINATOR_SHARD_COUNT in resp["error_message"]
    assert channel is None and c.store.nodes == before
    md = s.cluster_metadata(None, SimpleNamespace(group_id="g"))
    assert md["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE and md["brokers"]
    assert c.store.nodes[paths.COORDINATOR_SHARD_COUNT][0] == stored  # never rewritten


def test_two_brokers_split_the_shards_and_refuse_each_others_groups_changing_nothing():
    c = Cluster(count=12)
    one, two = c.join(1), c.join(2)
    c.settle()
    mine = {k for k, v in one.services.items() if v.active}
    theirs = {k for k, v in two.services.items() if v.active}
    assert mine and theirs and not mine & theirs and mine | theirs == set(range(12))
    k = min(theirs)
    gid = group_in_shard(k, 12)
    before = dict(c.store.nodes)
    resp, channel = register(one, "c1", gid)
    assert resp["error_code"] == ErrorCode.NOT_COORDINATOR
    assert f"shard {k}" in resp["error_message"] and "broker 2" in resp["error_message"]
    assert channel is None and c.store.nodes == before
    assert all(not v.registries.groups for v in one.services.values())
    commit = defer.ensureDeferred(one.commit_offsets(None, SimpleNamespace(
        group_id=gid, consumer_id="c1", offsets=[], session_id=1)))
    assert commit.result["error_code"] == ErrorCode.NOT_COORDINATOR
    # Every broker points the group at its shard's owner.
    for s in (one, two):
        assert s.cluster_metadata(None, SimpleNamespace(group_id=gid))["coordinator_id"] == 2
    resp, channel = register(two, "c1", gid)
    assert resp["error_code"] == 0 and channel is not None
    # A request naming several groups is answered per group, each by its shard.
    other = group_in_shard(min(mine), 12)
    register(one, "c2", other)
    answer = one.describe_consumer_groups(None, SimpleNamespace(groups=[gid, other]))
    assert [(g["group_id"], g["error_code"]) for g in answer["groups"]] == [
        (gid, ErrorCode.NOT_COORDINATOR), (other, 0)]
    assert [g["group_id"] for g in one.describe_consumer_groups(
        None, SimpleNamespace(groups=None))["groups"]] == [other]


def test_each_shard_is_fenced_by_its_own_epoch():
    c = Cluster(count=12)
    one, two = c.join(1), c.join(2)
    c.settle()
    a = next(k for k, v in one.services.items() if v.active)
    b = next(k for k, v in two.services.items() if v.active)
    # Someone else won shard a's epoch meanwhile: only shard a's writes fail.
    path = paths.coordinator_shard_epoch(a)
    data, version = c.store.nodes[path]
    c.store.nodes[path] = (b"99", version + 1)
    probe = paths.CONSUMERS + "/probe"
    c.store.ensure_path(probe)
    fenced_a = defer.ensureDeferred(one.services[a].fenced([SetData(probe, b"a")]))
    assert fenced_a.called and isinstance(fenced_a.result.value, rebalance.NotCoordinator)
    fenced_a.addErrback(lambda f: None)
    fenced_b = defer.ensureDeferred(two.services[b].fenced([SetData(probe, b"b")]))
    assert fenced_b.called and fenced_b.result is None
    assert c.store.nodes[probe][0] == b"b"
    assert two.services[b].active
    # The fenced-off owner resigned, vacated, and (still the desired owner) won it again.
    assert one.services[a].active and one.services[a].elector.epoch == 100


def test_a_joining_broker_takes_its_shards_and_only_their_members_re_register_once():
    c = Cluster(count=12)
    one = c.join(1)
    c.settle()
    assert len([v for v in one.services.values() if v.active]) == 12
    groups = [group_in_shard(k, 12) for k in range(12)]
    channels = {}
    for gid in groups:
        resp, channels[gid] = register(one, f"{gid}-c", gid)
        assert resp["error_code"] == 0
    c.clock.advance(0)
    two = c.join(2)
    assert not two.services  # not before the settle time
    c.settle()
    moved = {k for k, v in two.services.items() if v.active}
    assert moved and not any(one.services.get(k) for k in moved)
    assert {k for k, v in one.services.items() if v.active} == set(range(12)) - moved
    for k, gid in enumerate(groups):
        assert channels[gid].closed == (k in moved)
        owner = 2 if k in moved else 1
        for s in (one, two):
            assert s.cluster_metadata(None, SimpleNamespace(group_id=gid))[
                "coordinator_id"] == owner
    # The moved members register once with the new owner; the old one refuses them.
    for k in moved:
        gid = groups[k]
        refused, _ = register(one, f"{gid}-c", gid)
        assert refused["error_code"] == ErrorCode.NOT_COORDINATOR
        resp, channel = register(two, f"{gid}-c", gid)
        assert resp["error_code"] == 0 and not channel.closed
    assert sum(c.gauge(b, "coordinator_shards_active") for b in (1, 2)) == 12
    assert c.gauge(2, "coordinator_members") == len(moved)
    assert c.gauge(1, "coordinator_members") == 12 - len(moved)


def test_a_stopping_broker_resigns_every_shard_and_the_survivor_takes_them():
    c = Cluster(count=6)
    one, two = c.join(1), c.join(2)
    c.settle()
    defer.ensureDeferred(two.stop())
    assert not two.services
    assert all(paths.coordinator_shard_seat(k) not in c.store.nodes or
               paths.CoordinatorRegistration.from_bytes(
                   c.store.nodes[paths.coordinator_shard_seat(k)][0]).broker_id != 2
               for k in range(6))
    c.store.delete(paths.broker(2))
    c.settle()
    assert sorted(k for k, v in one.services.items() if v.active) == list(range(6))


def test_a_leaving_broker_moves_its_shards_and_no_others_and_a_joining_one_takes_only_its_own():
    c = Cluster(count=12)
    brokers = {b: c.join(b) for b in (1, 2, 3)}
    c.settle()

    def serving() -> dict[int, int]:
        return {k: b for b, s in brokers.items() for k, v in s.services.items() if v.active}

    before = serving()
    assert sorted(before) == list(range(12))
    # Balancing over {1, 2} alone would give some of 1's or 2's shards to the other one.
    assert any(desired_owners([1, 2], 12)[k] != b for k, b in before.items() if b != 3)
    defer.ensureDeferred(brokers.pop(3).stop())
    c.store.delete(paths.broker(3))
    c.settle()
    after = serving()
    assert sorted(after) == list(range(12))
    assert {k: b for k, b in after.items() if before[k] != 3} == {
        k: b for k, b in before.items() if b != 3}  # the survivors' shards did not move
    assert all(after[k] in (1, 2) for k, b in before.items() if b == 3)
    # A broker that joins takes the shards it is the desired owner of, from whoever has them,
    # and nothing moves between the others.
    brokers[4] = c.join(4)
    c.settle()
    wanted = desired_owners([1, 2, 4], 12)
    final = serving()
    assert sorted(final) == list(range(12))
    assert {k for k, b in final.items() if b == 4} == {k for k, b in wanted.items() if b == 4}
    assert {k: b for k, b in final.items() if b != 4} == {
        k: b for k, b in after.items() if wanted[k] != 4}


def test_a_shards_new_coordinator_loads_only_the_groups_of_its_shard():
    c = Cluster(count=12)
    ga, gb = group_in_shard(3, 12), group_in_shard(7, 12)
    for gid in (ga, gb):
        c.store.ensure_path(paths.consumer_owners_topic(gid, "t"))
        c.store.create(paths.consumer_owner(gid, "t", 0), f"{gid}-c-0".encode())
    s = c.join(1)
    c.settle()
    assert list(s.services[3].registries.groups) == [ga]
    assert list(s.services[7].registries.groups) == [gb]
    assert all(not s.services[k].registries.groups for k in range(12) if k not in (3, 7))


def _join_body(group: str) -> SimpleNamespace:
    return SimpleNamespace(group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                           member_id="", group_instance_id=None, protocol_type="consumer",
                           protocols=[SimpleNamespace(name="range", metadata=b"")])


def test_kafka_group_requests_are_routed_per_group_and_refused_for_another_brokers_shard():
    c = Cluster(count=12)
    one, two = c.join(1), c.join(2)
    c.settle()
    mine = group_in_shard(min(k for k, v in one.services.items() if v.active), 12)
    theirs = group_in_shard(min(k for k, v in two.services.items() if v.active), 12)
    before = dict(c.store.nodes)
    # FindCoordinator v4: each key answered with its own shard's owner, from any broker.
    found = one.kafka.find_coordinator(
        4, SimpleNamespace(key_type=0, coordinator_keys=[mine, theirs]), None,
        lambda g: True)
    assert [(x["key"], x["node_id"]) for x in found["coordinators"]] == [(mine, 1), (theirs, 2)]
    # A group of broker 2's shard, asked of broker 1: NOT_COORDINATOR, nothing kept.
    joined = one.kafka.join_group(5, _join_body(theirs), client_id="k", client_host="/h")
    assert joined.result["error_code"] == ErrorCode.NOT_COORDINATOR
    beat = one.kafka.heartbeat(3, SimpleNamespace(group_id=theirs, member_id="m",
                                                  generation_id=1, group_instance_id=None))
    assert beat["error_code"] == ErrorCode.NOT_COORDINATOR
    assert c.store.nodes == before
    assert all(not s.kafka.groups.groups for s in one.services.values())
    # Its own group's join is served (a member id handed out, Kafka's v4+ first round).
    joined = one.kafka.join_group(5, _join_body(mine), client_id="k", client_host="/h")
    assert joined.result["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    # Several groups in one request: each answered by its shard.
    described = one.kafka.describe_groups(5, SimpleNamespace(
        groups=[theirs, mine], include_authorized_operations=False), lambda g: True)
    assert [(g["group_id"], g["error_code"]) for g in described["groups"]] == [
        (theirs, ErrorCode.NOT_COORDINATOR), (mine, 0)]
    deleted = defer.ensureDeferred(one.deletion.delete_groups(
        2, SimpleNamespace(groups_names=[theirs, mine]), lambda g: True)).result
    assert [(r["group_id"], r["error_code"]) for r in deleted["results"]] == [
        (theirs, ErrorCode.NOT_COORDINATOR), (mine, ErrorCode.NON_EMPTY_GROUP)]
    listed = one.kafka.list_groups(4, SimpleNamespace(states_filter=[]), lambda g: True)
    assert listed["error_code"] == 0


def serving_brokers(c: Cluster) -> dict[int, int]:
    """Shard -> the broker whose service for it is active."""
    return {k: b for b, s in c.shards.items() for k, v in s.services.items() if v.active}


def test_a_registered_broker_not_ready_to_coordinate_is_never_a_desired_owner():
    c = Cluster(count=6)
    one = c.join(1)
    # Registered but not standing: starting up, failed in its start, or an older release.
    c.store.create(paths.broker(2), b"{}", ephemeral=True)
    c.settle()
    assert paths.coordinator_shard_broker(1) in c.store.nodes
    assert paths.coordinator_shard_broker(2) not in c.store.nodes
    assert one.live == frozenset({1})
    assert sorted(k for k, v in one.services.items() if v.active) == list(range(6))
    # Once broker 2's coordination starts, it announces itself and takes its share.
    two = c.join(2)
    c.settle()
    assert paths.coordinator_shard_broker(2) in c.store.nodes
    assert serving_brokers(c) == desired_owners([1, 2], 6)
    assert two.services and one.live == two.live == frozenset({1, 2})


def test_the_announcement_returns_after_a_lost_session_and_goes_on_stop():
    c = Cluster(count=2)
    one = c.join(1)
    c.settle()
    c.store.delete(paths.coordinator_shard_broker(1))  # as a lost session removes it
    assert paths.coordinator_shard_broker(1) in c.store.nodes
    defer.ensureDeferred(one.stop())
    assert paths.coordinator_shard_broker(1) not in c.store.nodes


def legacy_seat(broker_id: int) -> bytes:
    return paths.CoordinatorRegistration(broker_id).to_bytes()


def test_no_shard_is_stood_for_while_an_earlier_releases_coordinator_holds_its_seat():
    c = Cluster(count=4)
    c.store.nodes[paths.LEGACY_COORDINATOR] = (legacy_seat(7), 0)  # an older broker's seat
    one = c.join(1)
    c.settle()
    assert one.services == {}
    assert not any(paths.coordinator_shard_seat(k) in c.store.nodes for k in range(4))
    md = one.cluster_metadata(None, SimpleNamespace(group_id="g"))
    assert md["error_code"] == 0 and md["coordinator_id"] == 7  # the old one serves every group
    resp, channel = register(one, "c1", "g")
    assert resp["error_code"] == ErrorCode.NOT_COORDINATOR and channel is None
    assert "7" in resp["error_message"]
    # The last older broker goes: its seat with it; the shards are elected at once.
    c.store.delete(paths.LEGACY_COORDINATOR)
    assert sorted(k for k, v in one.services.items() if v.active) == [0, 1, 2, 3]
    assert one.cluster_metadata(None, SimpleNamespace(group_id="g"))["coordinator_id"] == 1


def test_shard_coordinators_resign_when_an_earlier_releases_coordinator_is_elected():
    c = Cluster(count=2)
    one = c.join(1)
    c.settle()
    assert len(one.active_services()) == 2
    c.store.create(paths.LEGACY_COORDINATOR, legacy_seat(7), ephemeral=True)
    assert one.services == {}
    assert not any(paths.coordinator_shard_seat(k) in c.store.nodes for k in range(2))


def test_a_flapping_registration_postpones_placement_by_at_most_five_settle_times():
    c = Cluster(count=2)
    one = c.join(1)
    flapping = paths.coordinator_shard_broker(9)
    for i in range(20):  # a change every half settle time: never quiet for a whole one
        if i % 2:
            c.store.delete(flapping)
        else:
            c.store.create(flapping, b"", ephemeral=True)
        c.clock.advance(SETTLE / 2)
        if one.services:
            break
    assert one.services
    assert c.clock.seconds() <= 5 * SETTLE


@pytest.mark.parametrize("change", ["other", "hostile", "deleted"])
def test_a_count_changed_or_deleted_after_it_was_agreed_stops_coordination(change):
    c = Cluster(count=3)
    one = c.join(1)
    c.settle()
    assert len(one.active_services()) == 3
    if change == "deleted":
        c.store.delete(paths.COORDINATOR_SHARD_COUNT)
    else:
        c.store.set(paths.COORDINATOR_SHARD_COUNT, b"5" if change == "other" else b"lots")
    assert one.services == {} and one.count is None
    assert paths.COORDINATOR_SHARD_COUNT in one.unusable
    assert not any(paths.coordinator_shard_seat(k) in c.store.nodes for k in range(3))
    assert paths.coordinator_shard_broker(1) not in c.store.nodes
    before = dict(c.store.nodes)
    resp, channel = register(one, "c1", "g")
    assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE and channel is None
    md = one.cluster_metadata(None, SimpleNamespace(group_id="g"))
    assert md["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    c.settle()
    assert one.services == {} and c.store.nodes == before


def test_the_count_rewritten_with_the_same_value_changes_nothing():
    c = Cluster(count=3)
    one = c.join(1)
    c.settle()
    c.store.set(paths.COORDINATOR_SHARD_COUNT, b"3")
    assert one.count == 3 and len(one.active_services()) == 3 and not one.unusable


@pytest.mark.parametrize("broker_id", [-1, -7, 2 ** 31, 10 ** 30])
def test_a_seat_naming_an_id_out_of_range_names_no_coordinator(broker_id):
    c = Cluster(count=1)
    one = c.join(1)  # not settled: it does not stand, it only follows the seat
    c.store.create(paths.coordinator_shard_seat(0),
                   json.dumps({"version": 1, "brokerid": broker_id}).encode(), ephemeral=True)
    assert one.owners[0] == -1
    md = one.cluster_metadata(None, SimpleNamespace(group_id="g"))
    assert md["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE and md["coordinator_id"] == -1
    fc = one.kafka.find_coordinator(3, SimpleNamespace(key="g", key_type=0, coordinator_keys=None),
                                    None, lambda g: True)
    assert fc["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_the_largest_broker_id_is_a_coordinator():
    c = Cluster(count=1)
    one = c.join(1)
    c.store.create(paths.coordinator_shard_seat(0),
                   json.dumps({"version": 1, "brokerid": 2 ** 31 - 1}).encode(), ephemeral=True)
    assert one.owners[0] == 2 ** 31 - 1


class FlakyGetStore(MemoryStore):
    """A store whose reads fail with ConnectionLost while ``failing``."""

    failing = True

    def get(self, path):
        if self.failing:
            return defer.fail(ConnectionLost("connection lost"))
        return super().get(path)


def test_started_fires_once_the_count_is_agreed_not_after_a_failed_attempt():
    c = flaky_cluster()
    one = c.join(1)
    started = one.started
    assert not started.called and one.count is None
    c.clock.advance(RETRY_S)  # the retry fails too
    assert one.started is started and not started.called
    c.store.failing = False
    c.clock.advance(RETRY_S)
    assert started.called and one.count == 2
    assert one.start() is started


def flaky_cluster() -> Cluster:
    c = Cluster(count=2)
    c.store = FlakyGetStore()
    c.store.ensure_path(paths.BROKER_IDS)
    return c


def test_a_retry_is_not_scheduled_once_stopped():
    c = flaky_cluster()
    one = c.join(1)
    defer.ensureDeferred(one.stop())
    assert one.started.called  # nobody waits for a start that will not come
    c.store.failing = False
    assert not c.clock.getDelayedCalls()
    c.clock.advance(RETRY_S)
    assert one.count is None


def test_an_attempt_failing_after_stop_schedules_no_retry():
    c = flaky_cluster()
    gate: defer.Deferred = defer.Deferred()
    c.store.get = lambda path: gate  # the read is in flight when the broker stops
    one = c.join(1)
    defer.ensureDeferred(one.stop())
    gate.errback(ConnectionLost("connection lost"))
    assert not c.clock.getDelayedCalls() and one.count is None


def test_find_coordinator_v4_lists_the_brokers_once_per_request_not_per_key():
    c = Cluster(count=4)
    one = c.join(1)
    c.settle()
    calls = []

    def counted():
        calls.append(1)
        return c.endpoints()
    one.brokers = counted
    keys = [group_in_shard(k, 4) for k in range(4)]
    found = one.kafka.find_coordinator(4, SimpleNamespace(key_type=0, coordinator_keys=keys),
                                       None, lambda g: True)
    assert [x["node_id"] for x in found["coordinators"]] == [1, 1, 1, 1]
    assert [x["port"] for x in found["coordinators"]] == [9001] * 4
    assert len(calls) == 1


def test_a_service_that_cannot_act_creates_no_parent_znode():
    c = Cluster(count=1)
    one = c.join(1)
    c.settle()
    svc = one.services[0]
    assert svc.can_act()
    defer.ensureDeferred(svc.ensure_path("/consumers/g1/owners"))
    assert "/consumers/g1/owners" in c.store.nodes
    defer.ensureDeferred(one.stop())  # resigned: it can no longer act
    assert not svc.can_act()
    defer.ensureDeferred(svc.ensure_path("/consumers/g2/owners"))
    assert "/consumers/g2" not in c.store.nodes
