"""The validation of the cluster administration APIs (``broker_core.server.cluster_admin`` and
the ``topic_admin`` functions under it), on the in-memory store of the coordinator tests with
no controller acting, so an accepted reassignment stays visible in progress: each bad request
is refused as Kafka refuses it and writes nothing; and DeleteRecords' log start move."""

from __future__ import annotations

import pytest

from broker_core import metadata_paths as paths
from broker_core.log import Log, LogConfig, OffsetOutOfRange
from broker_core.server.cluster_admin import MAX_PARTITIONS, ClusterAdminApis
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import (
    alter_partition_reassignments,
    elect_leaders,
    list_partition_reassignments,
)
from broker_core.wire.records import Record, build_batch
from tests.support.controller_harness import make, run
from tests.support.manual_time import ManualTime
from tests.support.memory_store import MemoryStore


@pytest.fixture
def store():
    """Brokers 1-3; topic ``t`` with partitions 0-2 on all three, each led by its first."""
    s, _, _, _ = make(partitions=3, store=MemoryStore())
    return s


def pending(store) -> dict | None:
    v = store.nodes.get(paths.REASSIGN_PARTITIONS)
    return None if v is None else paths.PartitionReassignment.from_bytes(v[0]).partitions


def admin(store) -> ClusterAdminApis:
    return ClusterAdminApis(store=store, replicas=None, cache=None, clock=None,
                            cluster_id=lambda: "c", brokers_on=lambda listener: [])


class Header:
    def __init__(self, version: int) -> None:
        self.api_version = version


def alter(store, *partitions) -> dict:
    """AlterPartitionReassignments of ``(topic, partition, replicas)``: ``(topic, partition)
    -> (error name, message)``."""
    topics: dict[str, list] = {}
    for t, p, r in partitions:
        topics.setdefault(t, []).append({"partition_index": p, "replicas": r})
    body = alter_partition_reassignments.REQUEST.build({"topics": [
        {"name": t, "partitions": ps} for t, ps in topics.items()]})
    resp = run(admin(store).alter_partition_reassignments(Header(0), body))
    assert resp["error_code"] == 0, resp
    return {(t["name"], p["partition_index"]): (ErrorCode(p["error_code"]).name,
                                                p["error_message"])
            for t in resp["responses"] for p in t["partitions"]}


def test_a_reassignment_is_written_for_the_controller_and_listed_in_progress(store):
    assert alter(store, ("t", 0, [3, 2])) == {("t", 0): ("NONE", None)}
    assert pending(store) == {("t", 0): [3, 2]}
    body = list_partition_reassignments.REQUEST.build({"topics": None})
    resp = run(admin(store).list_partition_reassignments(Header(0), body))
    # Before the controller starts it, the replicas are the current ones; 1 is to go.
    assert resp["topics"] == [{"name": "t", "partitions": [
        {"partition_index": 0, "replicas": [1, 2, 3], "adding_replicas": [],
         "removing_replicas": [1]}]}]
    body = list_partition_reassignments.REQUEST.build(
        {"topics": [{"name": "t", "partition_indexes": [1]}]})
    assert run(admin(store).list_partition_reassignments(Header(0), body))["topics"] == []


def test_the_latest_target_wins_and_other_partitions_join(store):
    alter(store, ("t", 0, [3, 2]))
    assert alter(store, ("t", 0, [2, 1]), ("t", 1, [1])) == {
        ("t", 0): ("NONE", None), ("t", 1): ("NONE", None)}
    assert pending(store) == {("t", 0): [2, 1], ("t", 1): [1]}


def test_a_cancellation_restores_the_original_replicas(store):
    alter(store, ("t", 0, [3, 2]))
    # The controller has started: AR is OAR + RAR, with what it adds recorded.
    data, _ = store.nodes[paths.topic("t")]
    value = paths.TopicAssignment.from_bytes(data)
    store.nodes[paths.topic("t")] = (paths.TopicAssignment(
        {**value.partitions, 0: [1, 2, 3]}, adding={}, removing={0: [1]}).to_bytes(), 1)
    assert alter(store, ("t", 0, None)) == {("t", 0): ("NONE", None)}
    assert pending(store) == {("t", 0): [1, 2, 3]}


@pytest.mark.parametrize("target,error,why", [
    (("t", 9, [1]), "UNKNOWN_TOPIC_OR_PARTITION", "topic 't' has no partition 9"),
    (("nope", 0, [1]), "UNKNOWN_TOPIC_OR_PARTITION", "topic 'nope' does not exist"),
    (("nope", 0, None), "UNKNOWN_TOPIC_OR_PARTITION", "topic 'nope' does not exist"),
    (("t", 0, []), "INVALID_REPLICA_ASSIGNMENT", "the replica list is empty"),
    (("t", 0, [1, 1]), "INVALID_REPLICA_ASSIGNMENT", "names a broker twice"),
    (("t", 0, [1, 7]), "INVALID_REPLICA_ASSIGNMENT", "brokers [7] are not alive"),
    (("t", 0, None), "NO_REASSIGNMENT_IN_PROGRESS", "t-0 is not being reassigned"),
])
def test_a_bad_partition_is_refused_and_nothing_is_written(store, target, error, why):
    before = dict(store.nodes)
    ((name, message),) = alter(store, target).values()
    assert name == error and why in message
    assert store.nodes == before


def test_a_bad_partition_does_not_stop_the_good_ones(store):
    assert alter(store, ("t", 0, [2]), ("t", 1, [9])) == {
        ("t", 0): ("NONE", None),
        ("t", 1): ("INVALID_REPLICA_ASSIGNMENT",
                   "t-1: brokers [9] are not alive (live brokers: 1, 2, 3)")}
    assert pending(store) == {("t", 0): [2]}


def test_a_partition_named_twice_is_refused_both_times(store):
    before = dict(store.nodes)
    answer = alter(store, ("t", 0, [2]), ("t", 0, [3]))
    assert answer == {("t", 0): ("INVALID_REQUEST", "t-0 is named more than once")}
    assert store.nodes == before


def test_too_many_partitions_are_refused_whole(store):
    before = dict(store.nodes)
    body = alter_partition_reassignments.REQUEST.build({"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "replicas": [1]}] * (MAX_PARTITIONS + 1)}]})
    resp = run(admin(store).alter_partition_reassignments(Header(0), body))
    assert resp["error_code"] == ErrorCode.INVALID_REQUEST
    assert store.nodes == before


def elect(store, version: int, kind: int, partitions) -> tuple[int, dict]:
    body = elect_leaders.REQUEST.build({"election_type": kind, "timeout_ms": 1000,
                                        "topic_partitions": partitions})
    resp = run(admin(store).elect_leaders(Header(version), body))
    return resp["error_code"], {(t["topic"], p["partition_id"]): ErrorCode(p["error_code"]).name
                                for t in resp["replica_election_results"]
                                for p in t["partition_result"]}


def test_an_unknown_election_type_is_refused(store):
    code, parts = elect(store, 2, 7, [{"topic": "t", "partitions": [0]}])
    assert code == ErrorCode.INVALID_REQUEST and parts == {("t", 0): "INVALID_REQUEST"}


def test_unclean_election_is_not_needed_with_a_live_leader_and_refused_with_no_replica(store):
    code, parts = elect(store, 1, elect_leaders.UNCLEAN,
                        [{"topic": "t", "partitions": [1, 8]}])
    assert code == 0
    assert parts == {("t", 1): "ELECTION_NOT_NEEDED", ("t", 8): "UNKNOWN_TOPIC_OR_PARTITION"}
    for b in (1, 2, 3):
        store.delete(paths.broker(b))  # every replica of partition 0 is gone
    code, parts = elect(store, 2, elect_leaders.UNCLEAN, [{"topic": "t", "partitions": [0]}])
    assert (code, parts) == (0, {("t", 0): "ELIGIBLE_LEADERS_NOT_AVAILABLE"})
    assert paths.PREFERRED_REPLICA_ELECTION not in store.nodes


def test_a_preferred_election_nobody_needs_writes_nothing(store):
    before = dict(store.nodes)
    code, parts = elect(store, 0, elect_leaders.PREFERRED,
                        [{"topic": "t", "partitions": [0, 1]}, {"topic": "u", "partitions": [0]}])
    assert parts == {("t", 0): "ELECTION_NOT_NEEDED", ("t", 1): "ELECTION_NOT_NEEDED",
                     ("u", 0): "UNKNOWN_TOPIC_OR_PARTITION"}
    # Every partition (null): those that need nothing are left out of the answer.
    assert elect(store, 2, elect_leaders.PREFERRED, None) == (0, {})
    assert store.nodes == before


# -- the log start (DeleteRecords) ------------------------------------------------------------


def test_the_log_start_moves_up_only_and_never_past_the_high_watermark(tmp_path):
    time = ManualTime()
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=time)
    for _ in range(10):
        log.append_as_leader(build_batch([Record(None, b"v", [], time.now)]), 1)
    log.high_watermark = 6
    with pytest.raises(OffsetOutOfRange):
        log.advance_log_start(7)
    assert log.log_start_offset == 0
    assert log.advance_log_start(4) is True
    assert log.log_start_offset == 4
    assert log.advance_log_start(2) is False and log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 1 << 20)
    assert log.read(4, 1 << 20).records


def test_the_low_watermark_is_the_lowest_log_start_of_the_live_replicas(tmp_path):
    from broker_core.replica.partition import LeaderAndIsrState, Partition

    time = ManualTime()
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=time)
    for _ in range(10):
        log.append_as_leader(build_batch([Record(None, b"v", [], time.now)]), 1)
    p = Partition("t", 0, 1, log)
    p.make_leader(LeaderAndIsrState(1, 1, (1, 2, 3), (1, 2, 3), 1, 0), now_ms=0)
    log.high_watermark = 10
    log.advance_log_start(5)
    alive = {1, 2, 3}
    assert p.low_watermark(alive.__contains__) == -1  # no follower has reported yet
    assert p.record_follower_log_start(2, 5) and p.record_follower_log_start(3, 3)
    assert not p.record_follower_log_start(3, 3)  # nothing new
    assert not p.record_follower_log_start(7, 0)  # not a replica
    assert p.low_watermark(alive.__contains__) == 3
    alive.discard(3)  # a dead replica does not hold it back
    assert p.low_watermark(alive.__contains__) == 5


def test_a_delete_records_waits_for_the_low_watermark_then_times_out():
    from twisted.internet import task

    from broker_core.purgatory import Purgatory
    from broker_core.replica.delayed import DelayedDeleteRecords

    clock = task.Clock()
    purgatory = Purgatory("delete_records", clock)
    lows: dict = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    answers: list = []
    op = DelayedDeleteRecords(5.0, {("t", 0): 4, ("t", 1): 4, ("t", 2): 4}, lows.get,
                              answers.append)
    assert not purgatory.try_complete_else_watch(op, list(lows))
    lows[("t", 0)] = 6
    del lows[("t", 2)]  # no longer led here
    purgatory.check_and_complete(("t", 0))
    assert answers == []  # ("t", 1) still waits
    clock.advance(5.5)
    assert answers == [{("t", 0): (None, 6), ("t", 1): ("REQUEST_TIMED_OUT", -1),
                        ("t", 2): ("NOT_LEADER_OR_FOLLOWER", -1)}]


@pytest.mark.parametrize("name", ["..", "a/b", "", "x" * 300])
def test_a_name_no_topic_can_have_is_an_unknown_topic_and_never_a_store_path(store, name):
    before = dict(store.nodes)
    assert alter(store, (name, 0, [1])) == {
        (name, 0): ("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")}
    code, parts = elect(store, 2, elect_leaders.PREFERRED, [{"topic": name, "partitions": [0]}])
    assert parts == {(name, 0): "UNKNOWN_TOPIC_OR_PARTITION"}
    assert store.nodes == before
