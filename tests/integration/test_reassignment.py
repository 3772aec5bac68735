"""Replica reassignment on in-process brokers against a real ZooKeeper: a partition
moves from brokers {1,2,3} to {2,3,4} while a producer sends acks=all and loses nothing it was
told was written; a cancellation restores the original replicas; a new controller resumes a
reassignment the old one started; bad requests are rejected and removed from the admin path."""

from __future__ import annotations

import re

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task

from broker_core import metadata_paths as paths
from broker_core import topic_admin
from tests.support.cluster import (
    controller_of,
    create_topic,
    eventually,
    leader_of,
    produce,
    running_brokers,
)
from tests.support.reassignment_checks import FAST, read_all, zk_state


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 4, **FAST)


async def zk_assignment(store, topic: str) -> paths.TopicAssignment:
    data, _ = await store.get(paths.topic(topic))
    return paths.TopicAssignment.from_bytes(data)






class Producer:
    """Sends one acks=all message at a time to whichever broker leads, retrying a value until
    it is acknowledged; ``acked`` holds what the cluster promised to keep."""

    def __init__(self, brokers, topic: str) -> None:
        self.brokers, self.topic = brokers, topic
        self.acked: list[bytes] = []
        self.running = True
        self.done = defer.Deferred.fromCoroutine(self._run())

    async def _run(self) -> None:
        i = 0
        while self.running:
            value = b"m%d" % i
            leader = leader_of(self.brokers, self.topic, 0)
            try:
                r = None if leader is None else await produce(leader, self.topic, 0, [value],
                                                              timeout_ms=5000)
            except Exception:
                r = None
            if r is not None and r.error_code == 0:
                self.acked.append(value)
                i += 1
            else:
                await task.deferLater(reactor, 0.05, lambda: None)

    async def stop(self) -> list[bytes]:
        self.running = False
        await self.done
        return self.acked


@pytest_twisted.ensureDeferred
async def test_reassign_to_new_brokers_while_producing_keeps_every_acked_message(brokers,
                                                                                  tmp_path):
    await eventually(lambda: controller_of(brokers), what="controller")
    store = brokers[0].store
    await create_topic(brokers[0], "mv", assignment={0: [1, 2, 3]})
    await eventually(lambda: leader_of(brokers, "mv", 0), what="leader")
    producer = Producer(brokers, "mv")
    await eventually(lambda: len(producer.acked) >= 30, what="some acked messages")

    current = await topic_admin.execute_reassignment(store, {("mv", 0): [2, 3, 4]})
    assert current == {("mv", 0): [1, 2, 3]}

    async def finished():
        return (await store.exists(paths.REASSIGN_PARTITIONS) is None
                and (await zk_assignment(store, "mv")).partitions[0] == [2, 3, 4])

    await eventually(finished, timeout=30, what="reassignment completed")
    await eventually(lambda: len(producer.acked) >= 60, what="producing after the move")
    acked = await producer.stop()

    value = await zk_assignment(store, "mv")
    assert value.adding == {} and value.removing == {}
    state = await zk_state(store, "mv", 0)
    assert state.leader in (2, 3, 4) and sorted(state.isr) == [2, 3, 4]
    leader = leader_of(brokers, "mv", 0)
    assert leader.broker_id == state.leader
    stored = await read_all(leader, "mv", 0)
    missing = [v for v in acked if v not in stored]
    assert missing == []
    # Broker 1 was told to delete its replica: no partition object, no directory.
    assert brokers[0].replicas.get_partition("mv", 0) is None
    assert not (tmp_path / "broker-1" / "mv-0").exists()
    assert (tmp_path / "broker-4" / "mv-0").exists()
    # Every broker's metadata has the new replicas.
    await eventually(lambda: all(b.cache.partition("mv", 0) is not None and list(
        b.cache.partition("mv", 0).replicas) == [2, 3, 4] for b in brokers), what="metadata")
    assert await topic_admin.verify_reassignment(store, {("mv", 0): [2, 3, 4]}) == {
        ("mv", 0): topic_admin.REASSIGNMENT_COMPLETE}


@pytest_twisted.ensureDeferred
async def test_cancel_restores_the_original_replicas(brokers, tmp_path):
    await eventually(lambda: controller_of(brokers), what="controller")
    store = brokers[0].store
    await create_topic(brokers[0], "cx", assignment={0: [1, 2, 3]})
    leader = await eventually(lambda: leader_of(brokers, "cx", 0), what="leader")
    for i in range(5):
        assert (await produce(leader, "cx", 0, [b"v%d" % i])).error_code == 0
    # Broker 4 cannot catch up (its fetching is stopped), so the move stays in progress.
    await brokers[3].replicas.fetchers.stop()
    await topic_admin.execute_reassignment(store, {("cx", 0): [2, 3, 4]})

    async def started():
        v = await zk_assignment(store, "cx")
        return v.partitions[0] == [1, 2, 3, 4] and v.adding == {0: [4]} and v.removing == {
            0: [1]}

    await eventually(started, what="AR = OAR + RAR")
    await eventually(lambda: brokers[3].replicas.get_partition("cx", 0) is not None,
                     what="broker 4 got its replica")
    await task.deferLater(reactor, 0.5, lambda: None)
    assert await topic_admin.verify_reassignment(store, {("cx", 0): [2, 3, 4]}) == {
        ("cx", 0): topic_admin.REASSIGNMENT_IN_PROGRESS}

    assert await topic_admin.cancel_reassignment(store, [("cx", 0)]) == [("cx", 0)]

    async def reverted():
        return (await store.exists(paths.REASSIGN_PARTITIONS) is None
                and (await zk_assignment(store, "cx")).partitions[0] == [1, 2, 3])

    await eventually(reverted, timeout=30, what="cancellation done")
    value = await zk_assignment(store, "cx")
    assert value.adding == {} and value.removing == {}
    state = await zk_state(store, "cx", 0)
    assert state.leader == 1 and 4 not in state.isr
    await eventually(lambda: brokers[3].replicas.get_partition("cx", 0) is None,
                     what="broker 4 dropped its replica")
    assert not (tmp_path / "broker-4" / "cx-0").exists()
    assert await topic_admin.verify_reassignment(store, {("cx", 0): [2, 3, 4]}) == {
        ("cx", 0): topic_admin.REASSIGNMENT_FAILED}
    assert await topic_admin.cancel_reassignment(store, [("cx", 0)]) == []
    assert (await produce(leader_of(brokers, "cx", 0), "cx", 0, [b"after"])).error_code == 0


@pytest_twisted.ensureDeferred
async def test_new_controller_resumes_a_reassignment(brokers):
    ctrl = await eventually(lambda: controller_of(brokers), what="controller")
    others = sorted(b.broker_id for b in brokers if b is not ctrl)
    by_id = {b.broker_id: b for b in brokers}
    old, new = [others[0], others[1]], [others[1], others[2]]
    store = by_id[others[0]].store
    await create_topic(brokers[0], "fo", assignment={0: old})
    leader = await eventually(lambda: leader_of(brokers, "fo", 0), what="leader")
    for i in range(10):
        assert (await produce(leader, "fo", 0, [b"v%d" % i])).error_code == 0
    newcomer = by_id[others[2]]
    await newcomer.replicas.fetchers.stop()
    await topic_admin.execute_reassignment(store, {("fo", 0): new})
    await eventually(lambda: newcomer.replicas.get_partition("fo", 0) is not None,
                     what="reassignment started")
    assert (await zk_assignment(store, "fo")).adding == {0: [others[2]]}

    await ctrl.stopService()
    rest = [b for b in brokers if b is not ctrl]
    await eventually(lambda: controller_of(rest), timeout=30, what="new controller")
    # The newcomer fetches again; the new controller completes the move from ZooKeeper state.
    newcomer.replicas.fetchers.start()
    part = newcomer.replicas.get_partition("fo", 0)
    newcomer.replicas._follow(part, part.leader_id, None)

    async def finished():
        return (await store.exists(paths.REASSIGN_PARTITIONS) is None
                and (await zk_assignment(store, "fo")).partitions[0] == new)

    await eventually(finished, timeout=30, what="reassignment completed by the new controller")
    state = await zk_state(store, "fo", 0)
    assert sorted(state.isr) == sorted(new) and state.leader in new
    await eventually(lambda: by_id[others[0]].replicas.get_partition("fo", 0) is None,
                     what="old replica removed")
    values = await read_all(leader_of(rest, "fo", 0), "fo", 0)
    assert values == [b"v%d" % i for i in range(10)]


@pytest_twisted.ensureDeferred
async def test_bad_requests_are_rejected(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    store = brokers[0].store
    await create_topic(brokers[0], "bad", assignment={0: [1, 2]})
    await eventually(lambda: leader_of(brokers, "bad", 0), what="leader")
    cases = [
        ({("nope", 0): [1]}, topic_admin.UnknownTopic, "does not exist"),
        ({("bad", 5): [1]}, topic_admin.UnknownTopic, "no partition 5"),
        ({("bad", 0): []}, topic_admin.InvalidReplicaAssignment, "empty"),
        ({("bad", 0): [1, 1]}, topic_admin.InvalidReplicaAssignment, "twice"),
        ({("bad", 0): [1, 9]}, topic_admin.InvalidReplicaAssignment, "[9] are not alive"),
    ]
    for proposal, error, text in cases:
        with pytest.raises(error, match=re.escape(text)):
            await topic_admin.execute_reassignment(store, proposal)
    assert await store.exists(paths.REASSIGN_PARTITIONS) is None
    with pytest.raises(topic_admin.InvalidReplicaAssignment, match="listed twice"):
        topic_admin.parse_reassignment(
            b'{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1]},'
            b'{"topic":"a","partition":0,"replicas":[2]}]}')

    # Written straight into ZooKeeper, a bad entry is dropped by the controller while a good
    # one in the same request (a replication-factor change, allowed) is carried out.
    value = paths.PartitionReassignment({("bad", 0): [2, 3, 4], ("ghost", 0): [1]})
    await store.create(paths.REASSIGN_PARTITIONS, value.to_bytes())

    async def finished():
        return (await store.exists(paths.REASSIGN_PARTITIONS) is None
                and (await zk_assignment(store, "bad")).partitions[0] == [2, 3, 4])

    await eventually(finished, timeout=30, what="good entry done, bad one dropped")
    # A second reassignment while one is pending is refused.
    await brokers[0].replicas.fetchers.stop()
    await topic_admin.execute_reassignment(store, {("bad", 0): [2, 3, 1]})
    with pytest.raises(topic_admin.ReassignmentInProgress, match="in progress"):
        await topic_admin.execute_reassignment(store, {("bad", 0): [2, 3]})
    await topic_admin.cancel_reassignment(store, [("bad", 0)])
    await eventually(lambda: store.exists(paths.REASSIGN_PARTITIONS).addCallback(
        lambda st: st is None), what="cancelled")
