"""Partition removal (a Sluice addition): ``topic_admin.remove_partitions`` checks a
request before it writes it, and the controller stops the replicas before it writes the removal,
drops its state only once that write succeeded, and carries a request whose write failed out
again later. The in-memory store of the coordinator tests; time on a ``task.Clock``."""

from __future__ import annotations

import pytest

from broker_core import metadata_paths as paths
from broker_core import topic_admin
from broker_core.controller.event_manager import CONFLICT_RETRY_S
from broker_core.controller.partition_changes import STOP_REPLICA_WAIT_S
from broker_core.wire.apis import ApiKey
from tests.support.controller_harness import make, run
from tests.support.memory_store import MemoryStore


def assignment(store: MemoryStore) -> list[int]:
    data, _ = store.nodes[paths.topic("t")]
    return sorted(paths.TopicAssignment.from_bytes(data).partitions)


def stop_replicas(channel) -> list[tuple[str, int]]:
    """The partitions named by the StopReplica requests sent on ``channel``."""
    return [(t["topic_name"], s["partition_index"]) for key, body, _ in channel.sent
            if key == ApiKey.STOP_REPLICA
            for t in body["topic_states"] for s in t["partition_states"]]


# -- topic_admin.remove_partitions -----------------------------------------------------------


@pytest.fixture
def store():
    s, _, _, _ = make(partitions=5, store=MemoryStore())
    return s


def test_a_valid_request_is_written_for_the_controller(store):
    run(topic_admin.remove_partitions(store, "t", [4, 3]))
    assert store.nodes[paths.partitions_remove_topic("t")][0] == b""
    assert sorted(p for p in store.nodes if p.startswith(paths.partitions_remove_topic("t") + "/")
                  ) == [paths.partition_remove("t", 3), paths.partition_remove("t", 4)]
    assert assignment(store) == [0, 1, 2, 3, 4]  # the controller removes them, not this call


@pytest.mark.parametrize("partitions,why", [
    ([], "no partitions to remove were named"),
    ([4, 4], "a partition is named twice in [4, 4]"),
    (["4"], "partition numbers must be integers"),
    ([9], "topic 't' has no partition(s) [9]"),
    ([0, 1, 2, 3, 4], "topic 't' must keep at least one partition"),
    ([3], "only the highest-numbered partitions of 't' can be removed (it has 5), not [3]"),
    ([2, 4], "not [2, 4]"),
])
def test_a_bad_request_is_refused_and_nothing_is_written(store, partitions, why):
    before = dict(store.nodes)
    with pytest.raises(topic_admin.InvalidPartitions) as e:
        run(topic_admin.remove_partitions(store, "t", partitions))
    assert why in str(e.value)
    assert store.nodes == before


def test_an_unknown_topic_or_a_pending_removal_is_refused(store):
    with pytest.raises(topic_admin.UnknownTopic):
        run(topic_admin.remove_partitions(store, "nope", [1]))
    run(topic_admin.remove_partitions(store, "t", [4]))
    with pytest.raises(topic_admin.InvalidPartitions, match="already in progress"):
        run(topic_admin.remove_partitions(store, "t", [3, 4]))
    assert paths.partition_remove("t", 3) not in store.nodes


# -- the controller --------------------------------------------------------------------------


def removal(partitions: int = 9, remove=(8,)):
    store, clock, channels, ctl = make(partitions=partitions, store=MemoryStore())
    run(topic_admin.remove_partitions(store, "t", list(remove)))
    # The in-memory store calls a watch when it is set, which would queue the handler a second
    # time; ZooKeeper's watches here fire only when the request znodes change.
    ctl.partition_changes.watch_admin_topics = lambda *args: None
    return store, clock, channels, ctl


def test_replicas_are_stopped_before_the_store_is_written_and_the_state_dropped_after():
    store, clock, channels, ctl = removal()
    ctl.events.enqueue("partitions_remove", ctl.partition_changes.on_partitions_remove)
    # StopReplica (delete) went to every replica; nothing is written or forgotten yet.
    for b in (1, 2, 3):
        assert stop_replicas(channels[b]) == [("t", 8)]
    assert paths.leader_and_isr("t", 8) in store.nodes and assignment(store) == list(range(9))
    assert ("t", 8) in ctl.context.states and 8 in ctl.context.assignments["t"]
    assert paths.partition_remove("t", 8) in store.nodes
    for b in (1, 2, 3):
        channels[b].answer()
    assert paths.leader_and_isr("t", 8) not in store.nodes
    assert paths.partition("t", 8) not in store.nodes
    assert assignment(store) == list(range(8))
    assert paths.partitions_remove_topic("t") not in store.nodes
    assert ("t", 8) not in ctl.context.states and 8 not in ctl.context.assignments["t"]
    assert ctl.context.topic_versions["t"] == store.nodes[paths.topic("t")][1]


def test_without_answers_the_removal_is_written_after_the_wait():
    store, clock, channels, ctl = removal()
    ctl.events.enqueue("partitions_remove", ctl.partition_changes.on_partitions_remove)
    assert assignment(store) == list(range(9))
    clock.advance(STOP_REPLICA_WAIT_S)
    assert assignment(store) == list(range(8)) and ("t", 8) not in ctl.context.states


def test_a_failed_write_keeps_the_state_and_the_request_is_carried_out_later():
    store, clock, channels, ctl = removal(remove=(7, 8))
    # Another writer rewrote the topic znode: the controller's version of it is stale.
    data, _ = store.nodes[paths.topic("t")]
    store.set(paths.topic("t"), data)
    ctl.events.enqueue("partitions_remove", ctl.partition_changes.on_partitions_remove)
    for b in (1, 2, 3):
        channels[b].answer()
    # Nothing removed, nothing forgotten: the state is what ZooKeeper still says.
    assert assignment(store) == list(range(9))
    assert {("t", 7), ("t", 8)} <= set(ctl.context.states) and sorted(ctl.context.assignments["t"]) == list(
        range(9))
    assert paths.partition_remove("t", 8) in store.nodes
    clock.advance(CONFLICT_RETRY_S)
    for b in (1, 2, 3):
        assert stop_replicas(channels[b]) == [("t", 7), ("t", 8)] * 2  # step 1 again
        channels[b].answer()
    assert assignment(store) == list(range(7))
    assert not {("t", 7), ("t", 8)} & set(ctl.context.states)
    assert paths.partitions_remove_topic("t") not in store.nodes


def test_a_request_the_controller_refuses_is_deleted_and_nothing_is_stopped():
    store, clock, channels, ctl = removal()
    # Written by hand (topic_admin refuses it): partition 3 is not among the highest.
    store.delete(paths.partition_remove("t", 8))
    store.create(paths.partition_remove("t", 3))
    ctl.events.enqueue("partitions_remove", ctl.partition_changes.on_partitions_remove)
    assert paths.partitions_remove_topic("t") not in store.nodes
    assert all(stop_replicas(channels[b]) == [] for b in (1, 2, 3))
    assert assignment(store) == list(range(9)) and ("t", 3) in ctl.context.states


def test_a_removal_refused_after_its_replicas_were_stopped_serves_them_again():
    """StopReplica went out, the write conflicted, and by the retry the request no longer
    holds (here: withdrawn by hand). The partition is still in the metadata but its replicas
    dropped it: the controller sends its state again instead of leaving it unavailable."""
    store, clock, channels, ctl = removal()
    data, _ = store.nodes[paths.topic("t")]
    store.set(paths.topic("t"), data)  # the controller's version of the topic is stale
    ctl.events.enqueue("partitions_remove", ctl.partition_changes.on_partitions_remove)
    for b in (1, 2, 3):
        channels[b].answer()
    assert assignment(store) == list(range(9))
    sent_before = {b: len(channels[b].leader_and_isr()) for b in (1, 2, 3)}
    store.delete(paths.partition_remove("t", 8))  # the request is withdrawn
    clock.advance(CONFLICT_RETRY_S)
    assert assignment(store) == list(range(9)) and ("t", 8) in ctl.context.states
    for b in (1, 2, 3):  # every replica of t-8 is told to serve it again
        again = channels[b].leader_and_isr()[sent_before[b]:]
        assert ("t", 8) in {tp for lai in again for tp in lai}, b
