"""Replication between in-process brokers against a real ZooKeeper: followers copy the leader's
log, acks=all waits for the ISR, the HW is the ISR's minimum, min.insync.replicas is enforced,
a lagging follower leaves the ISR through AlterIsr and returns when it catches up, and a new
leader chosen from the ISR holds every acknowledged message."""

from __future__ import annotations

import pytest
import pytest_twisted

from broker_core import metadata_paths as paths
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import decode_records
from tests.support.cluster import (
    call,
    controller_of,
    create_topic,
    eventually,
    leader_of,
    local_batches,
    produce,
    running_brokers,
)


def isr_everywhere(brokers, topic, p, isr):
    return all(b.cache.partition(topic, p) is not None
               and sorted(b.cache.partition(topic, p).isr) == sorted(isr)
               for b in brokers if b.running)


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 3, replica_lag_time_max_ms="2000",
                               replica_fetch_wait_max_ms="100", replica_fetch_backoff_ms="100")


@pytest_twisted.ensureDeferred
async def test_followers_copy_the_leader_and_acks_all_waits_for_the_isr(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "rep", partitions=2, rf=3)
    await eventually(lambda: all(leader_of(brokers, "rep", p) for p in range(2)), what="leaders")
    for p in range(2):
        leader = leader_of(brokers, "rep", p)
        for i in range(20):
            r = await produce(leader, "rep", p, [b"p%d-m%d" % (p, i)] * 3)
            assert r.error_code == 0 and r.base_offset == 3 * i
        # acks=all answered, so the HW passed the last message on the leader ...
        assert leader.replicas.get_partition("rep", p).high_watermark == 60
        # ... and every follower holds the same batches, byte for byte.
        await eventually(lambda p=p: all(
            b.replicas.get_partition("rep", p).log.log_end_offset == 60 for b in brokers),
            what="followers caught up")
        expected = local_batches(leader, "rep", p)
        assert len(expected) == 20
        for b in brokers:
            assert local_batches(b, "rep", p) == expected
        # Followers learn the HW from the leader's fetch responses.
        await eventually(lambda p=p: all(
            b.replicas.get_partition("rep", p).high_watermark == 60 for b in brokers),
            what="HW on followers")


@pytest_twisted.ensureDeferred
async def test_lagging_follower_leaves_the_isr_and_returns(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "lag", rf=3, configs=[("min.insync.replicas", "2")])
    leader = await eventually(lambda: leader_of(brokers, "lag", 0), what="leader")
    assert (await produce(leader, "lag", 0, [b"a"])).error_code == 0
    follower = next(b for b in brokers if b is not leader)
    # Stop the follower's fetching (as if it hung): after replica.lag.time.max.ms the leader
    # asks the controller to drop it, and acks=all still succeeds with 2 of 3.
    await follower.replicas.fetchers.stop()
    rest = sorted(b.broker_id for b in brokers if b is not follower)
    assert (await produce(leader, "lag", 0, [b"b"])).error_code in (0, ErrorCode.REQUEST_TIMED_OUT)
    await eventually(lambda: isr_everywhere(brokers, "lag", 0, rest), timeout=20,
                     what="ISR shrunk to the two live fetchers")
    data, stat = await leader.store.get(paths.leader_and_isr("lag", 0))
    assert sorted(paths.LeaderAndIsr.from_bytes(data).isr) == rest
    r = await produce(leader, "lag", 0, [b"c"])
    assert r.error_code == 0
    reg = leader.metrics.registry
    assert reg.get_sample_value("sluice_isr_shrinks_total") >= 1
    assert reg.get_sample_value("sluice_under_replicated_partitions") == 1
    assert reg.get_sample_value("sluice_follower_lag_messages", {
        "topic": "lag", "partition": "0", "replica": str(follower.broker_id)}) >= 2

    # The follower fetches again: it catches up and the leader asks to add it back.
    part = follower.replicas.get_partition("lag", 0)
    follower.replicas.fetchers.start()
    follower.replicas._follow(part, leader.broker_id, None)
    await eventually(lambda: isr_everywhere(brokers, "lag", 0, [1, 2, 3]), timeout=20,
                     what="ISR expanded again")
    assert reg.get_sample_value("sluice_isr_expands_total") >= 1
    assert reg.get_sample_value("sluice_under_replicated_partitions") == 0
    await eventually(lambda: local_batches(follower, "lag", 0) == local_batches(leader, "lag", 0),
                     what="follower identical to leader")


@pytest_twisted.ensureDeferred
async def test_min_insync_replicas_refuses_acks_all_but_not_acks_1(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "strict", rf=3, configs=[("min.insync.replicas", "3")])
    leader = await eventually(lambda: leader_of(brokers, "strict", 0), what="leader")
    assert (await produce(leader, "strict", 0, [b"ok"])).error_code == 0
    for b in brokers:
        if b is not leader:
            await b.replicas.fetchers.stop()
            break
    # A stopped follower that holds everything is not lagging; new data makes it lag.
    assert (await produce(leader, "strict", 0, [b"more"], acks=1)).error_code == 0
    await eventually(lambda: len(leader.replicas.get_partition("strict", 0).isr) == 2, timeout=20,
                     what="ISR below min.insync.replicas")
    before = leader.replicas.get_partition("strict", 0).log.log_end_offset
    r = await produce(leader, "strict", 0, [b"refused"])
    assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert leader.replicas.get_partition("strict", 0).log.log_end_offset == before  # not appended
    r = await produce(leader, "strict", 0, [b"fine"], acks=1)
    assert r.error_code == 0


@pytest_twisted.ensureDeferred
async def test_new_leader_from_the_isr_keeps_every_acknowledged_message(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "fo", rf=3)
    leader = await eventually(lambda: leader_of(brokers, "fo", 0), what="leader")
    acked = []
    for i in range(30):
        r = await produce(leader, "fo", 0, [b"v%d" % i])
        assert r.error_code == 0
        acked.append(b"v%d" % i)
    old_epoch = leader.replicas.get_partition("fo", 0).leader_epoch
    await leader.stopService()
    rest = [b for b in brokers if b is not leader]
    new = await eventually(lambda: leader_of(rest, "fo", 0), timeout=30, what="new leader")
    assert new.replicas.get_partition("fo", 0).leader_epoch > old_epoch
    r = await produce(new, "fo", 0, [b"after"])
    assert r.error_code == 0 and r.base_offset == 30
    fetch = await call(new, ApiKey.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "topics": [{"topic": "fo", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    values = [rec.value for rec in decode_records(fetch.responses[0].partitions[0].records)]
    assert values == acked + [b"after"]
    # The epoch file of the new leader records where its epoch began.
    entries = new.replicas.get_partition("fo", 0).log.leader_epochs.entries
    assert entries[-1].start_offset == 30


@pytest_twisted.ensureDeferred
async def test_new_controller_bumps_the_epoch_of_a_leader_that_restarted_unseen(brokers):
    """A returning leader, across a controller failover: the state znode records the
    leader's registration czxid, so a new controller that never saw the restart still starts a
    new leader generation."""
    ctrl = await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "gen", partitions=3, rf=3)
    await eventually(lambda: all(leader_of(brokers, "gen", p) for p in range(3)), what="leaders")
    p = next(i for i in range(3) if leader_of(brokers, "gen", i) is not ctrl)
    leader = leader_of(brokers, "gen", p)
    path = paths.leader_and_isr("gen", p)
    data, stat = await leader.store.get(path)
    state = paths.LeaderAndIsr.from_bytes(data)
    assert state.leader_broker_epoch == leader.registration_epoch
    # As if the leader had registered again while no controller was watching.
    stale = paths.LeaderAndIsr(state.leader, state.leader_epoch, state.isr,
                               state.controller_epoch, state.leader_broker_epoch - 1)
    await leader.store.set(path, stale.to_bytes(), stat.version)

    await ctrl.stopService()
    rest = [b for b in brokers if b is not ctrl]
    await eventually(lambda: controller_of(rest), timeout=30, what="new controller")
    # A leader that restarted is treated as a failure then a start: another in-sync replica
    # leads, in the next generation, and the restarted one follows.
    part = leader.replicas.get_partition("gen", p)
    await eventually(lambda: not part.is_leader and part.leader_epoch == state.leader_epoch + 1,
                     timeout=30, what="another leader, next generation")
    data, _ = await leader.store.get(path)
    now = paths.LeaderAndIsr.from_bytes(data)
    new_leader = next(b for b in rest if b.broker_id == now.leader)
    assert now.leader != leader.broker_id and now.leader in state.isr
    assert now.leader_broker_epoch == new_leader.registration_epoch
    await eventually(lambda: new_leader.replicas.get_partition("gen", p).log.leader_epochs
                     .latest_epoch == state.leader_epoch + 1, what="the new leader's epoch file")
