"""Preferred-leader election through ``/admin/preferred_replica_election`` on in-process brokers
against a real ZooKeeper: after a broker stops and returns (and the controller fails over),
leadership goes back to each partition's first replica with a new leader epoch; partitions
already led by their preferred replica, or whose preferred replica is out of the ISR, are left."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor

from broker_core import metadata_paths as paths
from broker_core import topic_admin
from broker_core.broker import BrokerService
from tests.support.cluster import (
    broker_config,
    controller_of,
    create_topic,
    eventually,
    leader_of,
    produce,
    running_brokers,
)
from tests.support.reassignment_checks import FAST, zk_state


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 3, **FAST)


@pytest_twisted.ensureDeferred
async def test_preferred_election_moves_leaders_back_after_a_failover(brokers, zk_hosts,
                                                                     tmp_path):
    ctrl = await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], "pref", assignment={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
    await eventually(lambda: all(leader_of(brokers, "pref", p) for p in range(3)),
                     what="leaders")
    for p in range(3):
        assert (await produce(leader_of(brokers, "pref", p), "pref", p, [b"x"])).error_code == 0
    victim = ctrl  # the controller leads one partition: stopping it is a failover too
    vid = victim.broker_id
    before = await zk_state(brokers[(vid % 3)].store, "pref", vid - 1)
    await victim.stopService()
    rest = [b for b in brokers if b is not victim]
    await eventually(lambda: controller_of(rest), timeout=30, what="new controller")
    store = rest[0].store
    moved = await zk_state(store, "pref", vid - 1)
    assert moved.leader != vid and moved.leader_epoch > before.leader_epoch

    # The broker comes back: it follows, catches up and rejoins the ISR, but does not lead.
    back = BrokerService(broker_config(vid, zk_hosts, tmp_path / f"broker-{vid}", **FAST),
                         reactor=reactor)
    brokers[brokers.index(victim)] = back
    await back.startService()

    async def in_isr():
        return vid in (await zk_state(store, "pref", vid - 1)).isr

    await eventually(in_isr, timeout=30, what="returned broker back in the ISR")
    assert (await zk_state(store, "pref", vid - 1)).leader != vid

    everything = await topic_admin.all_partitions(store)
    result = await topic_admin.elect_preferred_leaders(store, everything, clock=reactor)
    assert result[("pref", vid - 1)] == topic_admin.ELECTED
    assert all(result[("pref", p)] == topic_admin.ELECTION_NOT_NEEDED
               for p in range(3) if p != vid - 1)
    assert await store.exists(paths.PREFERRED_REPLICA_ELECTION) is None
    after = await zk_state(store, "pref", vid - 1)
    assert after.leader == vid and after.leader_epoch == moved.leader_epoch + 1
    await eventually(lambda: leader_of(brokers, "pref", vid - 1) is back, what="back leads")
    r = await produce(back, "pref", vid - 1, [b"y"])
    assert r.error_code == 0 and r.base_offset == 1


@pytest_twisted.ensureDeferred
async def test_preferred_replica_out_of_the_isr_is_not_elected(brokers):
    await eventually(lambda: controller_of(brokers), what="controller")
    store = brokers[0].store
    await create_topic(brokers[0], "oos", assignment={0: [1, 2, 3]})
    await eventually(lambda: leader_of(brokers, "oos", 0), what="leader")
    # Take broker 1 out of the ISR and leadership (a controlled shutdown that never stops).
    ctrl = controller_of(brokers)
    await ctrl.controller.controlled_shutdown(1, brokers[0].registration_epoch)
    st = await zk_state(store, "oos", 0)
    assert st.leader != 1 and 1 not in st.isr
    result = await topic_admin.elect_preferred_leaders(store, [("oos", 0), ("oos", 7),
                                                               ("none", 0)], clock=reactor)
    assert result[("oos", 0)].startswith("PREFERRED_LEADER_NOT_AVAILABLE")
    assert result[("oos", 7)].startswith("UNKNOWN_TOPIC_OR_PARTITION")
    assert result[("none", 0)].startswith("UNKNOWN_TOPIC_OR_PARTITION")
    assert (await zk_state(store, "oos", 0)).leader == st.leader
    # Straight into ZooKeeper: the controller deletes the znode even when nothing can move.
    await store.create(paths.PREFERRED_REPLICA_ELECTION,
                       paths.PreferredReplicaElection([("oos", 0)]).to_bytes())
    await eventually(lambda: store.exists(paths.PREFERRED_REPLICA_ELECTION).addCallback(
        lambda s: s is None), what="znode deleted")
    assert (await zk_state(store, "oos", 0)).leader == st.leader
