"""The two leader-epoch cases, run deterministically with in-process brokers on a real ZooKeeper.

Scenario 1 (high-watermark truncation followed by immediate leader election): a follower that
restarts knowing an older high watermark than the leader must not cut acknowledged messages off
its log, because it may be elected next. It asks the leader where its epoch ends instead.

Scenario 2 (replica divergence after a restart of all replicas): the replicas hold different
messages at the same offset after a double failure; when the old leader returns as a follower
it truncates to where the new leader's history diverges from its own and then copies the new
leader, so the logs end identical. (Losing the unreplicated message is allowed here; divergence
is not.)
"""

from __future__ import annotations

import pytest_twisted

from broker_core.log.checkpoints import read_offsets, write_offsets
from tests.support.cluster import (
    controller_of,
    create_topic,
    eventually,
    leader_of,
    local_batches,
    produce,
    restart,
    start_brokers,
    stop_brokers,
)

HW_FILE = "replication-offset-checkpoint"


def values(broker, topic):
    from broker_core.wire.records import decode_records

    part = broker.replicas.get_partition(topic, 0)
    return [(r.offset, r.value) for r in decode_records(part.log.read(0, 1 << 24).records)]


@pytest_twisted.ensureDeferred
async def test_scenario_1_restarted_follower_keeps_messages_above_its_stale_high_watermark(
        zk_hosts, tmp_path):
    brokers = await start_brokers(zk_hosts, tmp_path, 2, replica_fetch_wait_max_ms="100",
                                  replica_fetch_backoff_ms="100")
    try:
        await eventually(lambda: controller_of(brokers), what="controller")
        a, b = brokers
        await create_topic(a, "s1", assignment={0: [a.broker_id, b.broker_id]})
        await eventually(lambda: leader_of(brokers, "s1", 0) is a, what="A leads")
        for v in (b"m1", b"m2"):
            assert (await produce(a, "s1", 0, [v])).error_code == 0  # acks=all: committed
        await eventually(lambda: b.replicas.get_partition("s1", 0).log.log_end_offset == 2,
                         what="B has m1 and m2")

        # B goes down knowing only HW 1 (the leader's HW 2 reaches a follower one fetch later).
        await b.stopService()
        hw_path = b.log_dir / HW_FILE
        offsets = read_offsets(hw_path)
        offsets[("s1", 0)] = 1
        write_offsets(hw_path, offsets)
        b = await restart(b)
        brokers[1] = b
        part = b.replicas.get_partition("s1", 0)
        assert part.log.log_end_offset == 2 and part.high_watermark == 1

        # B rejoins as a follower. The old rule would cut it back to its HW (1), and an
        # election right then would lose m2; asking A where epoch 0 ends keeps it.
        await eventually(lambda: b.replicas.fetchers.following(("s1", 0)) == a.broker_id
                         and not b.replicas.fetchers.fetchers[a.broker_id]
                         .partitions[("s1", 0)].truncating, what="B finished truncating")
        assert part.log._truncations == 0
        assert [v for _, v in values(b, "s1")] == [b"m1", b"m2"]

        # The election right after: A dies as soon as B is back in the ISR.
        await eventually(lambda: sorted(a.replicas.get_partition("s1", 0).isr) == [1, 2],
                         what="B back in the ISR")
        await a.stopService()
        await eventually(lambda: leader_of([b], "s1", 0) is b, timeout=30, what="B leads")
        assert [v for _, v in values(b, "s1")] == [b"m1", b"m2"]
        assert (await produce(b, "s1", 0, [b"m3"], acks=1)).base_offset == 2
    finally:
        await stop_brokers(brokers)


@pytest_twisted.ensureDeferred
async def test_scenario_2_replicas_do_not_diverge_after_both_restart(zk_hosts, tmp_path):
    brokers = await start_brokers(zk_hosts, tmp_path, 2, replica_fetch_wait_max_ms="100",
                                  replica_fetch_backoff_ms="100")
    try:
        await eventually(lambda: controller_of(brokers), what="controller")
        a, b = brokers
        # Unclean election lets B lead after both died although A was the last ISR member:
        # a power outage, where losing m2 is permitted, diverging is not.
        await create_topic(a, "s2", assignment={0: [a.broker_id, b.broker_id]},
                        configs=[("unclean.leader.election.enable", "true")])
        await eventually(lambda: leader_of(brokers, "s2", 0) is a, what="A leads")
        assert (await produce(a, "s2", 0, [b"m1"])).error_code == 0
        await eventually(lambda: b.replicas.get_partition("s2", 0).log.log_end_offset == 1,
                         what="B has m1")
        await b.replicas.fetchers.stop()  # B stops copying: m2 exists on A only
        assert (await produce(a, "s2", 0, [b"m2"], acks=1)).base_offset == 1

        await b.stopService()
        await a.stopService()
        # B comes back first and leads a new generation; it takes m3 at offset 1.
        b = await restart(b)
        brokers[1] = b
        await eventually(lambda: leader_of([b], "s2", 0) is b, timeout=30, what="B leads")
        epoch_b = b.replicas.get_partition("s2", 0).leader_epoch
        assert epoch_b >= 1
        r = await produce(b, "s2", 0, [b"m3"], acks=1)
        assert r.error_code == 0 and r.base_offset == 1

        # A returns as a follower holding m2 at offset 1 in epoch 0: it must drop it.
        a = await restart(a)
        brokers[0] = a
        await eventually(lambda: a.replicas.get_partition("s2", 0) is not None
                         and values(a, "s2") == values(b, "s2"), timeout=30,
                         what="A identical to B")
        assert [v for _, v in values(a, "s2")] == [b"m1", b"m3"]
        assert local_batches(a, "s2", 0) == local_batches(b, "s2", 0)
        entries_a = a.replicas.get_partition("s2", 0).log.leader_epochs.entries
        entries_b = b.replicas.get_partition("s2", 0).log.leader_epochs.entries
        assert entries_a == entries_b
    finally:
        await stop_brokers(brokers)
