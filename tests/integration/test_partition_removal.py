"""Partition removal end to end: in-process brokers against a real ZooKeeper. The request is
checked when it is made; the controller stops the replicas (their data is deleted), then removes
the partitions from ZooKeeper, and every broker's metadata forgets them while the remaining
partitions keep working."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import defer

from broker_core import metadata_paths as paths
from broker_core import topic_admin
from broker_core.wire.errors import ErrorCode
from tests.support.cluster import (
    controller_of,
    create_topic,
    eventually,
    leader_of,
    produce,
    running_brokers,
)


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 3)


@pytest_twisted.ensureDeferred
async def test_removed_partitions_are_stopped_deleted_and_forgotten(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "shrink", partitions=4, rf=2)
    await eventually(lambda: all(leader_of(brokers, "shrink", p) for p in range(4)),
                     what="leaders")
    for p in range(4):
        assert (await produce(leader_of(brokers, "shrink", p), "shrink", p, [b"x"])
                ).error_code == 0
    dirs = {p: [b.log_dir / f"shrink-{p}" for b in brokers
                if (b.log_dir / f"shrink-{p}").exists()] for p in range(4)}
    assert all(len(d) == 2 for d in dirs.values())
    store = brokers[0].store

    with pytest.raises(topic_admin.InvalidPartitions, match="highest-numbered"):
        await topic_admin.remove_partitions(store, "shrink", [1])
    await topic_admin.remove_partitions(store, "shrink", [2, 3])

    async def removed() -> bool:
        data, _ = await store.get(paths.topic("shrink"))
        return (sorted(paths.TopicAssignment.from_bytes(data).partitions) == [0, 1]
                and await store.exists(paths.partitions_remove_topic("shrink")) is None
                and await store.exists(paths.partition("shrink", 2)) is None
                and await store.exists(paths.leader_and_isr("shrink", 3)) is None)

    await eventually(lambda: defer.Deferred.fromCoroutine(removed()), what="removal written")
    await eventually(lambda: not any(d.exists() for p in (2, 3) for d in dirs[p]),
                     what="removed partitions' data deleted")
    await eventually(lambda: all(sorted(b.cache.topics["shrink"]) == [0, 1] for b in brokers),
                     what="metadata without the removed partitions")
    assert all(b.replicas.get_partition("shrink", p) is None for b in brokers for p in (2, 3))
    ctl = controller_of(brokers).controller
    assert ("shrink", 2) not in ctl.context.states and sorted(ctl.context.assignments["shrink"]) == [0, 1]
    # The remaining partitions still take writes; a removed one is unknown.
    for p in (0, 1):
        assert (await produce(leader_of(brokers, "shrink", p), "shrink", p, [b"y"])
                ).error_code == 0
    refused = await produce(brokers[0], "shrink", 3, [b"z"])
    assert refused.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert all(d.exists() for p in (0, 1) for d in dirs[p])
