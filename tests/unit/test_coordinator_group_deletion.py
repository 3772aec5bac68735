"""DeleteGroups and OffsetDelete on the coordinator (coordinator.group_deletion), on task.Clock
with an in-memory store: both kinds of group, every refusal (each changing nothing), the
fenced write, and the consumer-protocol decoding OffsetDelete relies on."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from twisted.internet import defer, task

from broker_core import metadata_paths as paths
from broker_core.leader_election import Role
from broker_core.metadata_cache import BrokerEndpoint
from broker_core.wire import consumer_protocol
from broker_core.wire.errors import ErrorCode, MalformedFrame
from coordinator.classic.group import GroupState
from coordinator.service import CoordinatorConfig, CoordinatorService
from tests.support.memory_store import MemoryStore
from tests.support.wire_bytes import i16, i32, string

E = ErrorCode


class Channel:
    """A thin member's coordinator channel that never answers (its requests stay pending)."""

    def request(self, api_key, version, body):
        return defer.Deferred()

    def on_lost(self, cb):
        pass

    def close(self):
        pass


def make():
    clock = task.Clock()
    store = MemoryStore()
    store.ensure_path(paths.CONSUMERS)
    store.ensure_path(paths.TOPICS)
    for t in ("t", "u"):
        store.nodes[paths.topic(t)] = (paths.TopicAssignment({0: [1], 1: [1]}).to_bytes(), 0)
    cfg = CoordinatorConfig(min_session_timeout_ms=300, initial_rebalance_delay_ms=0)
    svc = CoordinatorService(1, store, clock=clock, config=cfg, channel_factory=Channel,
                             brokers=lambda: [BrokerEndpoint(1, "h", 9)])
    svc.start()
    assert svc.active
    return clock, store, svc


def run(coro):
    d = defer.ensureDeferred(coro)
    assert d.called, "the in-memory store answers at once"
    return d.result


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 (version, topics, null user data)."""
    return i16(0) + i32(len(topics)) + b"".join(string(t) for t in topics) + i32(-1)


def assignment(parts: dict[str, list[int]]) -> bytes:
    out = i16(0) + i32(len(parts))
    for t, ps in parts.items():
        out += string(t) + i32(len(ps)) + b"".join(i32(p) for p in ps)
    return out + i32(-1)


def commit(svc, group, offsets):
    body = SimpleNamespace(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                           group_instance_id=None, topics=[
                               SimpleNamespace(name=t, partitions=[SimpleNamespace(
                                   partition_index=p, committed_offset=o,
                                   committed_leader_epoch=-1, committed_metadata=None)])
                               for (t, p), o in offsets.items()])
    resp = run(svc.kafka.offset_commit(8, body, topic_allowed=lambda _: True,
                                       partition_exists=lambda t, p: p < 2))
    assert [p["error_code"] for t in resp["topics"] for p in t["partitions"]] == [0] * len(
        offsets)


def join_stable(svc, clock, group, protocol_type="consumer", metadata=b""):
    """One member, joined and synced: the group is Stable. Returns the member id."""
    joined = []
    svc.kafka.join_group(3, SimpleNamespace(
        group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="",
        group_instance_id=None, protocol_type=protocol_type,
        protocols=[SimpleNamespace(name="range", metadata=metadata)]),
        client_id="c", client_host="/127.0.0.1").addCallback(joined.append)
    clock.advance(0)
    (j,) = joined
    assert j["error_code"] == 0
    svc.kafka.sync_group(3, SimpleNamespace(
        group_id=group, generation_id=j["generation_id"], member_id=j["member_id"],
        group_instance_id=None, protocol_type=protocol_type, protocol_name="range",
        assignments=[SimpleNamespace(member_id=j["member_id"], assignment=b"")]))
    assert svc.kafka.groups.get(group).state is GroupState.STABLE
    return j["member_id"]


def delete(svc, *groups, allowed=lambda _: True):
    resp = run(svc.deletion.delete_groups(2, SimpleNamespace(groups_names=list(groups)),
                                          allowed))
    return [(r["group_id"], r["error_code"]) for r in resp["results"]]


def offset_delete(svc, group, tps, *, topic_allowed=lambda _: True):
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    body = SimpleNamespace(group_id=group, topics=[
        SimpleNamespace(name=t, partitions=[SimpleNamespace(partition_index=p) for p in ps])
        for t, ps in by_topic.items()])
    resp = run(svc.deletion.offset_delete(0, body, topic_allowed=topic_allowed,
                                          partition_exists=lambda t, p: p < 2))
    return resp["error_code"], [p["error_code"] for t in resp["topics"]
                                for p in t["partitions"]]


def subtree(store, group):
    root = paths.consumer_group(group)
    return sorted(p for p in store.nodes if p == root or p.startswith(root + "/"))


def test_delete_groups_removes_an_empty_groups_offsets_and_answers_each_group():
    clock, store, svc = make()
    commit(svc, "solo", {("t", 0): 5, ("u", 1): 7})
    assert subtree(store, "solo")
    assert delete(svc, "solo", "never", "a/b", "coordinator") == [
        ("solo", E.NONE), ("never", E.GROUP_ID_NOT_FOUND), ("a/b", E.INVALID_GROUP_ID),
        ("coordinator", E.INVALID_GROUP_ID)]
    assert subtree(store, "solo") == []
    assert "solo" not in svc.registries.groups
    # Gone for good: a second delete finds nothing, and new commits start from scratch
    # (the coordinator's cache of created znodes was forgotten with them).
    assert delete(svc, "solo") == [("solo", E.GROUP_ID_NOT_FOUND)]
    commit(svc, "solo", {("t", 0): 1})
    assert paths.parse_offset_value(store.nodes[paths.consumer_offset("solo", "t", 0)][0]) == 1


def test_delete_groups_refusals_change_nothing():
    clock, store, svc = make()
    commit(svc, "kept", {("t", 0): 5})
    before = {p: store.nodes[p] for p in subtree(store, "kept")}
    assert delete(svc, "kept", allowed=lambda g: g != "kept") == [
        ("kept", E.GROUP_AUTHORIZATION_FAILED)]
    # A Kafka group with a member.
    join_stable(svc, clock, "kept")
    assert delete(svc, "kept") == [("kept", E.NON_EMPTY_GROUP)]
    assert {p: store.nodes[p] for p in subtree(store, "kept")} == before
    assert svc.kafka.groups.get("kept").state is GroupState.STABLE


def test_an_empty_kafka_group_is_deleted_with_its_memory():
    clock, store, svc = make()
    mid = join_stable(svc, clock, "k")
    svc.kafka.leave_group(1, SimpleNamespace(group_id="k", member_id=mid))
    assert svc.kafka.groups.get("k").state is GroupState.EMPTY
    assert delete(svc, "k") == [("k", E.NONE)]  # no offsets: known from memory only
    assert svc.kafka.groups.get("k") is None


def test_a_thin_group_is_deleted_only_without_members():
    clock, store, svc = make()
    body = SimpleNamespace(group_id="thin", consumer_id="c1",
                           topic_count=json.dumps({"subscription": {"t": 1}}),
                           auto_commit=True, auto_offset_reset="smallest",
                           session_timeout_ms=3000)
    assert svc.register_consumer(None, body, SimpleNamespace(
        peer="127.0.0.1:1", attach_channel=lambda ch: None))["error_code"] == 0
    g = svc.registries.groups["thin"]
    assert delete(svc, "thin") == [("thin", E.NON_EMPTY_GROUP)]
    # OffsetDelete: the topics its members subscribe to are refused.
    commit_thin = {("t", 0): 3, ("u", 0): 4}
    for tp, o in commit_thin.items():
        g.set_offset(tp, o)
    run(svc.commit(g))
    assert offset_delete(svc, "thin", [("t", 0), ("u", 0)]) == (
        0, [E.GROUP_SUBSCRIBED_TO_TOPIC, 0])
    assert g.offsets == {("t", 0): 3}
    assert paths.consumer_offset("thin", "u", 0) not in store.nodes
    assert svc.registries.groups["thin"] is g
    # Its only member gone, the rebalance that follows still holds the group...
    svc.handle_consumer_failure(g.members["c1"], "test")
    assert g.rebalance_initiated and not g.members
    assert delete(svc, "thin") == [("thin", E.NON_EMPTY_GROUP)]
    clock.advance(10)
    assert not g.members and g.curr_rebalancer is None and not g.rebalance_initiated
    # ...then it goes, with the offsets it held in memory (never to be written).
    g.set_offset(("t", 0), 9)
    assert delete(svc, "thin") == [("thin", E.NONE)]
    assert "thin" not in svc.registries.groups and not g.dirty
    assert subtree(store, "thin") == []


def test_delete_groups_is_fenced_and_not_served_by_a_standby():
    clock, store, svc = make()
    commit(svc, "g", {("t", 0): 5})
    before = subtree(store, "g")
    data, version = store.nodes[paths.coordinator_shard_epoch(0)]
    store.nodes[paths.coordinator_shard_epoch(0)] = (b"99", version + 1)
    assert delete(svc, "g") == [("g", E.NOT_COORDINATOR)]
    assert subtree(store, "g") == before
    svc.elector.role = Role.FOLLOWER  # a broker that is not the coordinator
    assert delete(svc, "g") == [("g", E.NOT_COORDINATOR)]
    assert subtree(store, "g") == before


def test_offset_delete_on_an_empty_group_deletes_only_what_is_named():
    clock, store, svc = make()
    commit(svc, "solo", {("t", 0): 5, ("t", 1): 6, ("u", 0): 7})
    assert offset_delete(svc, "solo", [("t", 0), ("t", 5), ("u", 1), ("t", 0)]) == (
        0, [0, E.UNKNOWN_TOPIC_OR_PARTITION, 0, 0])
    assert paths.consumer_offset("solo", "t", 0) not in store.nodes
    assert paths.consumer_offset("solo", "t", 1) in store.nodes
    assert paths.consumer_offset("solo", "u", 0) in store.nodes
    assert ("t", 0) not in svc.registries.groups["solo"].offsets
    # READ on the topic is needed; a refused partition keeps its offset.
    assert offset_delete(svc, "solo", [("u", 0)], topic_allowed=lambda t: t != "u") == (
        0, [E.TOPIC_AUTHORIZATION_FAILED])
    assert paths.consumer_offset("solo", "u", 0) in store.nodes
    assert offset_delete(svc, "nobody", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, [])
    assert offset_delete(svc, "a/b", [("t", 0)]) == (E.INVALID_GROUP_ID, [])


def test_offset_delete_refuses_topics_a_consumer_group_subscribes_to():
    clock, store, svc = make()
    commit(svc, "g", {("t", 0): 5, ("u", 0): 7})
    join_stable(svc, clock, "g", metadata=subscription("t"))
    assert offset_delete(svc, "g", [("t", 0), ("u", 0)]) == (
        0, [E.GROUP_SUBSCRIBED_TO_TOPIC, 0])
    assert paths.consumer_offset("g", "t", 0) in store.nodes
    assert paths.consumer_offset("g", "u", 0) not in store.nodes


def test_offset_delete_when_the_subscription_is_unknown_or_not_a_consumers():
    clock, store, svc = make()
    commit(svc, "odd", {("u", 0): 7})
    join_stable(svc, clock, "odd", metadata=b"\x00")  # not a subscription: every topic
    assert offset_delete(svc, "odd", [("u", 0)]) == (0, [E.GROUP_SUBSCRIBED_TO_TOPIC])
    commit(svc, "conn", {("u", 0): 7})
    join_stable(svc, clock, "conn", protocol_type="connect")
    assert offset_delete(svc, "conn", [("u", 0)]) == (E.NON_EMPTY_GROUP, [])
    assert paths.consumer_offset("odd", "u", 0) in store.nodes
    assert paths.consumer_offset("conn", "u", 0) in store.nodes


def test_consumer_protocol_decoding():
    assert consumer_protocol.subscribed_topics(subscription("a", "b")) == ["a", "b"]
    # A later version is read by its v0 prefix.
    assert consumer_protocol.subscribed_topics(
        i16(3) + i32(1) + string("a") + i32(-1) + i32(0) + i32(5) + i16(-1)) == ["a"]
    assert consumer_protocol.assigned_partitions(assignment({"a": [0, 2], "b": []})) == [
        ("a", [0, 2]), ("b", [])]
    assert consumer_protocol.assigned_partitions(b"") == []
    for bad in [b"\x00", i16(-1) + i32(0), i16(0) + i32(1 << 30), i16(0) + i32(1) + i16(50)]:
        with pytest.raises(MalformedFrame):
            consumer_protocol.subscribed_topics(bad)
        with pytest.raises(MalformedFrame):
            consumer_protocol.assigned_partitions(bad)


def test_a_commit_that_waited_for_the_delete_goes_with_it_and_a_later_one_starts_afresh():
    clock, store, svc = make()
    commit(svc, "g", {("t", 0): 5})
    svc._commit_lock.acquire()  # another offset write of the coordinator in progress
    deleting = defer.ensureDeferred(svc.deletion.delete_groups(
        2, SimpleNamespace(groups_names=["g"]), lambda _: True))
    body = SimpleNamespace(group_id="g", generation_id_or_member_epoch=-1, member_id="",
                           group_instance_id=None, topics=[SimpleNamespace(
                               name="t", partitions=[SimpleNamespace(
                                   partition_index=0, committed_offset=9,
                                   committed_leader_epoch=-1, committed_metadata=None)])])
    committing = defer.ensureDeferred(svc.kafka.offset_commit(
        8, body, topic_allowed=lambda _: True, partition_exists=lambda t, p: True))
    assert not deleting.called and not committing.called
    svc._commit_lock.release()
    # Both answered; the delete went first (the lock is first come, first served), and the
    # commit queued behind it had nothing left to write: neither had answered, so the commit
    # is ordered before the delete.
    assert deleting.result["results"] == [{"group_id": "g", "error_code": 0}]
    assert committing.result["topics"][0]["partitions"][0]["error_code"] == 0
    assert subtree(store, "g") == []
    commit(svc, "g", {("t", 0): 11})
    assert paths.parse_offset_value(store.nodes[paths.consumer_offset("g", "t", 0)][0]) == 11
