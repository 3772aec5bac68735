"""Kafka's group APIs (and DeleteGroups / OffsetDelete) on two in-process brokers (ZooKeeper
mode): who answers, and every refusal — each with Kafka's error code, each changing nothing."""

from __future__ import annotations

import pytest
import pytest_twisted

from broker_core import metadata_paths as paths
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from tests.support.cluster import (
    call,
    connect,
    coordinates,
    create_topic,
    eventually,
    known_coordinator,
    running_brokers,
    shard_service,
)

E = ErrorCode
REGISTER = {"group_id": "thin", "consumer_id": "c1",
            "topic_count": '{"version":1,"pattern":"static","subscription":{"t":1}}',
            "auto_commit": False, "auto_offset_reset": "smallest", "session_timeout_ms": 30000}


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    # One coordinator shard: these tests are about who answers when one broker coordinates
    # every group (test_coordinator_shards.py spreads groups over several).
    yield from running_brokers(zk_hosts, tmp_path, 2, group_initial_rebalance_delay_ms="100",
                               group_coordinator_shards="1")


async def roles(brokers):
    await eventually(lambda: any(coordinates(b) for b in brokers)
                     and all(known_coordinator(b) >= 0 for b in brokers),
                     what="a coordinator elected and known")
    coordinator = next(b for b in brokers if coordinates(b))
    other = next(b for b in brokers if b is not coordinator)
    return coordinator, other


def join_body(group: str, member_id: str = "", **extra) -> dict:
    return {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
            "member_id": member_id, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}], **extra}


def commit_body(group: str, *, generation: int = -1, member: str = "",
                partitions=((0, 5, None),), topic: str = "t") -> dict:
    """``partitions``: (index, offset, metadata) or (index, offset, metadata, leader epoch)."""
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p[0], "committed_offset": p[1], "committed_metadata": p[2],
                 "committed_leader_epoch": p[3] if len(p) > 3 else -1}
                for p in partitions]}]}


def codes(resp) -> list[int]:
    return [p.error_code for t in resp.topics for p in t.partitions]


@pytest_twisted.ensureDeferred
async def test_find_coordinator_names_the_coordinator_from_every_broker(brokers):
    coordinator, other = await roles(brokers)
    for b in brokers:
        for version in (0, 3):
            resp = await call(b, ApiKey.FIND_COORDINATOR, version, {"key": "g", "key_type": 0})
            assert (resp.error_code, resp.node_id, resp.port) == (
                0, coordinator.broker_id, coordinator.port.getHost().port)
        resp = await call(b, ApiKey.FIND_COORDINATOR, 4,
                          {"key_type": 0, "coordinator_keys": ["a", "b"]})
        assert [(c.key, c.error_code, c.node_id) for c in resp.coordinators] == [
            ("a", 0, coordinator.broker_id), ("b", 0, coordinator.broker_id)]
    # Transactions are not coordinated here.
    resp = await call(other, ApiKey.FIND_COORDINATOR, 3, {"key": "tx", "key_type": 1})
    assert (resp.error_code, resp.node_id) == (E.INVALID_REQUEST, -1)


@pytest_twisted.ensureDeferred
async def test_only_the_coordinator_serves_group_requests(brokers):
    coordinator, other = await roles(brokers)
    resp = await call(other, ApiKey.JOIN_GROUP, 5, join_body("g"))
    assert resp.error_code == E.NOT_COORDINATOR
    resp = await call(other, ApiKey.HEARTBEAT, 3,
                      {"group_id": "g", "generation_id": 1, "member_id": "m"})
    assert resp.error_code == E.NOT_COORDINATOR
    resp = await call(other, ApiKey.OFFSET_COMMIT, 8, commit_body("g"))
    assert codes(resp) == [E.NOT_COORDINATOR]
    resp = await call(other, ApiKey.OFFSET_FETCH, 7, {"group_id": "g", "topics": None})
    assert resp.error_code == E.NOT_COORDINATOR
    resp = await call(other, ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g"]})
    assert resp.groups[0].error_code == E.NOT_COORDINATOR
    resp = await call(other, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert [r.error_code for r in resp.results] == [E.NOT_COORDINATOR]
    resp = await call(other, ApiKey.OFFSET_DELETE, 0, {"group_id": "g", "topics": []})
    assert resp.error_code == E.NOT_COORDINATOR
    # ListGroups: a broker that coordinates nothing lists nothing (admin clients ask all).
    resp = await call(other, ApiKey.LIST_GROUPS, 4, {"states_filter": []})
    assert (resp.error_code, resp.groups) == (0, [])
    assert all(not s.kafka.groups.groups for s in other.coordinator.services.values())


@pytest_twisted.ensureDeferred
async def test_join_refusals_change_nothing(brokers):
    coordinator, _ = await roles(brokers)
    groups = shard_service(coordinator).kafka.groups
    for group, extra, code in [
            ("", {}, E.INVALID_GROUP_ID),
            ("a/b", {}, E.INVALID_GROUP_ID),
            ("coordinator", {}, E.INVALID_GROUP_ID),
            ("g", {"session_timeout_ms": 10}, E.INVALID_SESSION_TIMEOUT),
            ("g", {"protocol_type": ""}, E.INCONSISTENT_GROUP_PROTOCOL),
            ("g", {"protocols": []}, E.INCONSISTENT_GROUP_PROTOCOL),
            ("g", {"member_id": "ghost"}, E.UNKNOWN_MEMBER_ID),
            # A group instance id (KIP-345) follows Kafka's rules for it.
            ("g", {"group_instance_id": ""}, E.INVALID_REQUEST),
            ("g", {"group_instance_id": "a/b"}, E.INVALID_REQUEST),
            ("g", {"group_instance_id": "i" * 250}, E.INVALID_REQUEST),
            # More protocol metadata than a member may have kept.
            ("g", {"protocols": [{"name": "range", "metadata": b"x" * (1 << 20)}]},
             E.INVALID_REQUEST)]:
        body = join_body(group, **extra)
        resp = await call(coordinator, ApiKey.JOIN_GROUP, 5, body)
        assert resp.error_code == code, (group, extra)
    assert groups.groups == {}


@pytest_twisted.ensureDeferred
async def test_a_group_id_is_of_one_kind(brokers):
    coordinator, _ = await roles(brokers)
    await create_topic(coordinator, "t")
    thin = await connect(coordinator)
    try:
        resp = await thin.request(ApiKey.REGISTER_CONSUMER, 1, REGISTER)
        assert resp.error_code == 0
        # A Kafka client cannot join (or commit to) a group with thin members.
        resp = await call(coordinator, ApiKey.JOIN_GROUP, 5, join_body("thin"))
        assert resp.error_code == E.INCONSISTENT_GROUP_PROTOCOL
        assert shard_service(coordinator).kafka.groups.get("thin") is None
        resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 8, commit_body("thin"))
        assert codes(resp) == [E.UNKNOWN_MEMBER_ID]
        # Nor delete it, nor the offsets of a topic its members consume.
        resp = await call(coordinator, ApiKey.DELETE_GROUPS, 0, {"groups_names": ["thin"]})
        assert [r.error_code for r in resp.results] == [E.NON_EMPTY_GROUP]
        resp = await call(coordinator, ApiKey.OFFSET_DELETE, 0, {"group_id": "thin", "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}]}]})
        assert (resp.error_code, codes(resp)) == (0, [E.GROUP_SUBSCRIBED_TO_TOPIC])
        assert "thin" in shard_service(coordinator).registries.groups
    finally:
        thin.transport.loseConnection()
    # And a thin client cannot register in a Kafka group with members.
    first = await call(coordinator, ApiKey.JOIN_GROUP, 5, join_body("kafka"))
    assert first.error_code == E.MEMBER_ID_REQUIRED  # KIP-394: the id is now pending
    resp = await call(coordinator, ApiKey.REGISTER_CONSUMER, 1, {**REGISTER, "group_id": "kafka"})
    assert resp.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert "kafka" not in shard_service(coordinator).registries.groups


@pytest_twisted.ensureDeferred
async def test_offsets_commit_and_fetch(brokers):
    coordinator, _ = await roles(brokers)
    await create_topic(coordinator, "t", partitions=2)
    store = coordinator.coordinator.store
    # A group without members takes a simple (generation -1) commit, as Kafka allows.
    resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 8, commit_body(
        "solo", partitions=[(0, 5, "meta"), (1, 7, None), (9, 1, None),
                            (0, 6, "x" * 5000)]))
    assert codes(resp) == [0, 0, E.UNKNOWN_TOPIC_OR_PARTITION, E.OFFSET_METADATA_TOO_LARGE]
    assert paths.parse_offset_value((await store.get(paths.consumer_offset("solo", "t", 0)))[0]) \
        == 5
    resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 8, commit_body("solo", topic="nope"))
    assert codes(resp) == [E.UNKNOWN_TOPIC_OR_PARTITION]
    # A commit may move an offset back (the client seeked).
    resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 2, commit_body(
        "solo", partitions=[(0, 3, None)]))
    assert codes(resp) == [0]
    # OffsetFetch: named partitions (-1 where nothing is committed), or every one (null).
    resp = await call(coordinator, ApiKey.OFFSET_FETCH, 7, {"group_id": "solo", "topics": [
        {"name": "t", "partition_indexes": [0, 1]}, {"name": "t2", "partition_indexes": [0]}]})
    assert [(t.name, p.partition_index, p.committed_offset) for t in resp.topics
            for p in t.partitions] == [("t", 0, 3), ("t", 1, 7), ("t2", 0, -1)]
    resp = await call(coordinator, ApiKey.OFFSET_FETCH, 7, {"group_id": "solo", "topics": None})
    assert [(t.name, p.partition_index, p.committed_offset) for t in resp.topics
            for p in t.partitions] == [("t", 0, 3), ("t", 1, 7)]
    # v8: several groups at once, each with its own error.
    resp = await call(coordinator, ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": "solo", "topics": None}, {"group_id": "a/b", "topics": None},
        {"group_id": "empty", "topics": None}]})
    assert [(g.group_id, g.error_code, len(g.topics)) for g in resp.groups] == [
        ("solo", 0, 1), ("a/b", E.INVALID_GROUP_ID, 0), ("empty", 0, 0)]


def fetched(resp) -> list[tuple]:
    return [(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
             p.metadata) for t in resp.topics for p in t.partitions]


@pytest_twisted.ensureDeferred
async def test_commit_metadata_and_leader_epoch_are_kept_across_failover(brokers):
    coordinator, other = await roles(brokers)
    await create_topic(coordinator, "t", partitions=3)
    store = coordinator.coordinator.store
    resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 8, commit_body(
        "meta", partitions=[(0, 5, "state-0", 4), (1, 7, None, 2), (2, 9, "")]))
    assert codes(resp) == [0, 0, 0]
    # v2-v5 carry no epoch: kept as -1; metadata in every version.
    resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 2, commit_body(
        "meta", partitions=[(2, 9, "v2")]))
    assert codes(resp) == [0]
    # A refused commit (metadata too long) leaves the stored value as it was.
    resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 8, commit_body(
        "meta", partitions=[(0, 6, "x" * 4097, 5)]))
    assert codes(resp) == [E.OFFSET_METADATA_TOO_LARGE]
    want = [("t", 0, 5, 4, "state-0"), ("t", 1, 7, 2, ""), ("t", 2, 9, -1, "v2")]
    resp = await call(coordinator, ApiKey.OFFSET_FETCH, 7, {"group_id": "meta", "topics": None})
    assert fetched(resp) == want
    # An offset without extras stays a plain decimal; one with them is JSON.
    raw = [(await store.get(paths.consumer_offset("meta", "t", p)))[0] for p in range(3)]
    assert [paths.CommittedOffset.from_bytes(r) for r in raw] == [
        paths.CommittedOffset(5, 4, "state-0"), paths.CommittedOffset(7, 2),
        paths.CommittedOffset(9, -1, "v2")]
    # Before v5 OffsetFetch has no epoch; the metadata is there.
    resp = await call(coordinator, ApiKey.OFFSET_FETCH, 1, {"group_id": "meta", "topics": [
        {"name": "t", "partition_indexes": [0]}]})
    assert [(p.committed_offset, p.metadata) for t in resp.topics for p in t.partitions] == [
        (5, "state-0")]
    # The next coordinator reads them from the store.
    await coordinator.stopService()
    await eventually(lambda: coordinates(other), what="the other broker elected")
    resp = await call(other, ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": "meta", "topics": None}]})
    assert [fetched(g) for g in resp.groups] == [want]
    # Committing the same offset with other metadata is a change, written at once.
    resp = await call(other, ApiKey.OFFSET_COMMIT, 8, commit_body(
        "meta", partitions=[(0, 5, "state-1", 4)]))
    assert codes(resp) == [0]
    data, _ = await other.coordinator.store.get(paths.consumer_offset("meta", "t", 0))
    assert paths.CommittedOffset.from_bytes(data) == paths.CommittedOffset(5, 4, "state-1")


@pytest_twisted.ensureDeferred
async def test_a_damaged_stored_offset_reads_as_none(brokers):
    coordinator, _ = await roles(brokers)
    await create_topic(coordinator, "t", partitions=2)
    store = coordinator.coordinator.store
    resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 8, commit_body(
        "hurt", partitions=[(0, 5, "m", 1), (1, 6, None)]))
    assert codes(resp) == [0, 0]
    # Another writer damages partition 0's value behind the coordinator's back; a new
    # coordinator (this one forgets what it held) must not trust it.
    await store.set(paths.consumer_offset("hurt", "t", 0),
                    b'{"version":1,"offset":"5","leader_epoch":1,"metadata":"m"}')
    shard_service(coordinator).registries.groups.pop("hurt")
    resp = await call(coordinator, ApiKey.OFFSET_FETCH, 7, {"group_id": "hurt", "topics": None})
    assert fetched(resp) == [("t", 0, -1, -1, ""), ("t", 1, 6, -1, "")]
    # A commit replaces the damaged value.
    resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 8, commit_body(
        "hurt", partitions=[(0, 8, "ok", 2)]))
    assert codes(resp) == [0]
    resp = await call(coordinator, ApiKey.OFFSET_FETCH, 7, {"group_id": "hurt", "topics": None})
    assert fetched(resp)[0] == ("t", 0, 8, 2, "ok")


@pytest_twisted.ensureDeferred
async def test_member_commits_need_the_current_generation(brokers):
    coordinator, _ = await roles(brokers)
    await create_topic(coordinator, "t")
    resp = await call(coordinator, ApiKey.JOIN_GROUP, 3, join_body("g"))
    assert (resp.error_code, resp.generation_id) == (0, 1)
    mid = resp.member_id
    # Between the join and the leader's SyncGroup the assignment is not settled.
    resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 8, commit_body(
        "g", generation=1, member=mid))
    assert codes(resp) == [E.REBALANCE_IN_PROGRESS]
    resp = await call(coordinator, ApiKey.SYNC_GROUP, 3, {
        "group_id": "g", "generation_id": 1, "member_id": mid, "assignments": []})
    assert resp.error_code == 0
    for generation, member, code in [(0, mid, E.ILLEGAL_GENERATION),
                                     (1, "ghost", E.UNKNOWN_MEMBER_ID),
                                     (-1, "", E.UNKNOWN_MEMBER_ID),  # the group has members
                                     (1, mid, E.NONE)]:
        resp = await call(coordinator, ApiKey.OFFSET_COMMIT, 8, commit_body(
            "g", generation=generation, member=member))
        assert codes(resp) == [code], (generation, member)
    resp = await call(coordinator, ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g", "none"]})
    assert [(g.group_id, g.group_state, g.protocol_data) for g in resp.groups] == [
        ("g", "Stable", "range"), ("none", "Dead", "")]
    resp = await call(coordinator, ApiKey.LIST_GROUPS, 5,
                      {"states_filter": ["stable"], "types_filter": ["classic"]})
    assert [(g.group_id, g.group_state, g.group_type) for g in resp.groups] == [
        ("g", "Stable", "classic")]
    resp = await call(coordinator, ApiKey.LIST_GROUPS, 5,
                      {"states_filter": ["empty"], "types_filter": []})
    assert resp.groups == []
    # LeaveGroup v0-2 names one member; its error is the answer's.
    resp = await call(coordinator, ApiKey.LEAVE_GROUP, 1, {"group_id": "g", "member_id": "x"})
    assert resp.error_code == E.UNKNOWN_MEMBER_ID
    resp = await call(coordinator, ApiKey.LEAVE_GROUP, 1, {"group_id": "g", "member_id": mid})
    assert resp.error_code == 0
    assert shard_service(coordinator).kafka.groups.get("g").state.value == "Empty"


@pytest_twisted.ensureDeferred
async def test_a_static_member_over_the_wire(brokers):
    """KIP-345 through the request handlers: a static member joins without MEMBER_ID_REQUIRED,
    its instance joining again takes it over without a new generation, the old member id is
    fenced, DescribeGroups shows the instance id, and a LeaveGroup by instance id alone
    removes it."""
    coordinator, _ = await roles(brokers)
    first = await call(coordinator, ApiKey.JOIN_GROUP, 5,
                       join_body("s", group_instance_id="i1"))
    assert first.error_code == 0 and first.generation_id == 1
    assert [(m.member_id, m.group_instance_id) for m in first.members] == [
        (first.member_id, "i1")]
    sync = {"group_id": "s", "generation_id": 1, "group_instance_id": "i1",
            "assignments": [{"member_id": first.member_id, "assignment": b"mine"}]}
    resp = await call(coordinator, ApiKey.SYNC_GROUP, 3, {**sync, "member_id": first.member_id})
    assert (resp.error_code, resp.assignment) == (0, b"mine")
    again = await call(coordinator, ApiKey.JOIN_GROUP, 5, join_body("s", group_instance_id="i1"))
    assert again.error_code == 0 and again.member_id != first.member_id
    assert (again.generation_id, again.leader, again.members) == (1, first.member_id, [])
    resp = await call(coordinator, ApiKey.SYNC_GROUP, 3,
                      {**sync, "member_id": again.member_id, "assignments": []})
    assert (resp.error_code, resp.assignment) == (0, b"mine")
    for member, code in [(first.member_id, E.FENCED_INSTANCE_ID), (again.member_id, 0)]:
        resp = await call(coordinator, ApiKey.HEARTBEAT, 3,
                          {"group_id": "s", "generation_id": 1, "member_id": member,
                           "group_instance_id": "i1"})
        assert resp.error_code == code
    resp = await call(coordinator, ApiKey.DESCRIBE_GROUPS, 4, {"groups": ["s"]})
    (group,) = resp.groups
    assert group.group_state == "Stable"
    assert [(m.member_id, m.group_instance_id) for m in group.members] == [
        (again.member_id, "i1")]
    resp = await call(coordinator, ApiKey.LEAVE_GROUP, 3, {"group_id": "s", "members": [
        {"member_id": "", "group_instance_id": "nobody"},
        {"member_id": "", "group_instance_id": "i1"}]})
    assert [m.error_code for m in resp.members] == [E.UNKNOWN_MEMBER_ID, 0]
    assert shard_service(coordinator).kafka.groups.get("s").state.value == "Empty"
