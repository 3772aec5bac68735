"""The controller side of AlterIsr and of returning leaders (docs/design.md), against a real
ZooKeeper with in-process brokers: an accepted ISR change reaches the znode, every broker's
metadata and the leader's replica; refused ones write nothing; a leader that re-registers with a
new session starts a new leader generation."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import threads
from twisted.internet.defer import Deferred

from broker_core import metadata_paths as paths
from broker_core.metadata import MetadataStoreError, SessionState
from tests.support.cluster import (
    controller_of,
    create_topic,
    eventually,
    running_brokers,
)
from tests.support.zk_sessions import expire_session


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 3)


async def znode(store, topic: str, p: int) -> tuple[paths.LeaderAndIsr, int]:
    data, stat = await store.get(paths.leader_and_isr(topic, p))
    return paths.LeaderAndIsr.from_bytes(data), stat.version


def caches_show(brokers, topic: str, p: int, *, isr, leader_epoch: int, zk_version: int) -> bool:
    for b in brokers:
        st = b.cache.partition(topic, p)
        if st is None or (tuple(st.isr), st.leader_epoch, st.zk_version) != (
                tuple(isr), leader_epoch, zk_version):
            return False
    return True


async def settled(brokers, topic: str, parts: int):
    """The active controller once it and every broker's cache know all partitions of topic."""
    ctrl = await eventually(lambda: controller_of(brokers), what="controller")
    await eventually(lambda: all((topic, p) in ctrl.controller.context.states for p in range(parts))
                     and all(b.cache.partition(topic, p) is not None
                             for b in brokers for p in range(parts)),
                     what=f"{topic} known everywhere")
    return ctrl


@pytest_twisted.ensureDeferred
async def test_alter_isr_shrinks_expands_and_refuses(brokers, monkeypatch):
    ctrl_b = await eventually(lambda: controller_of(brokers), what="controller")
    leader_b = next(b for b in brokers if b is not ctrl_b)
    L = leader_b.broker_id  # noqa: N806 (a broker id, named as in docs/design.md)
    others = [b.broker_id for b in brokers if b is not leader_b]
    await create_topic(brokers[0], "isr", assignment={0: [L, *others], 1: [L, *reversed(others)]})
    ctrl_b = await settled(brokers, "isr", 2)
    # Only this test's requests move the ISR: the leader's own proposals are held back. (A
    # follower dropped below is caught up at once on an empty log, so the leader would ask to
    # expand the ISR again, racing the checks of each version below.)
    monkeypatch.setattr(leader_b.replicas, "_propose_isr", lambda p, new_isr: None)
    ctrl = ctrl_b.controller
    store = ctrl_b.store
    st, version = await znode(store, "isr", 0)
    assert (st.leader, sorted(st.isr)) == (L, sorted([L, *others]))
    epoch = st.leader_epoch
    broker_epoch = ctrl.context.live[L].epoch
    assert broker_epoch == leader_b.registration_epoch  # the czxid both sides know

    # Shrink: the znode, every cache and the leader's replica show the new ISR at the next
    # version; the leader epoch does not move.
    small = (L, others[0])
    err, res = await ctrl.alter_isr(L, broker_epoch, [("isr", 0, epoch, small, version)])
    assert err is None
    e, d = res[("isr", 0)]
    assert e is None and (d.leader, d.leader_epoch, d.isr, d.zk_version) == (
        L, epoch, small, version + 1)
    st, v = await znode(store, "isr", 0)
    assert (tuple(st.isr), st.leader_epoch, v, st.controller_epoch) == (
        small, epoch, version + 1, ctrl.epoch)
    await eventually(lambda: caches_show(brokers, "isr", 0, isr=small, leader_epoch=epoch,
                                         zk_version=version + 1), what="caches show the shrink")
    await eventually(lambda: leader_b.replicas.get_partition("isr", 0).state.isr == small,
                     what="the leader got LeaderAndIsr with the new ISR")

    # Expand back, from the version the shrink answered; the second partition rides along in
    # the same request (one multi).
    full = (L, *others)
    st1, v1 = await znode(store, "isr", 1)
    err, res = await ctrl.alter_isr(L, broker_epoch, [
        ("isr", 0, epoch, full, version + 1),
        ("isr", 1, st1.leader_epoch, (L,), v1)])
    assert err is None
    assert res[("isr", 0)][0] is None and res[("isr", 0)][1].zk_version == version + 2
    assert res[("isr", 1)][0] is None and res[("isr", 1)][1].isr == (L,)
    await eventually(lambda: caches_show(brokers, "isr", 0, isr=full, leader_epoch=epoch,
                                         zk_version=version + 2)
                     and caches_show(brokers, "isr", 1, isr=(L,),
                                     leader_epoch=st1.leader_epoch, zk_version=v1 + 1),
                     what="caches show the expansion and the second shrink")

    # Refusals: nothing is written.
    async def answer(items, requester=L, b_epoch=broker_epoch, controller=ctrl):
        return await controller.alter_isr(requester, b_epoch, items)

    current = version + 2
    refused = {
        "INVALID_UPDATE_VERSION": ("isr", 0, epoch, small, current - 1),  # stale version
        "FENCED_LEADER_EPOCH": ("isr", 0, epoch - 1, small, current),
        "INVALID_REQUEST": ("isr", 0, epoch, tuple(others), current),  # leader left out
        "UNKNOWN_TOPIC_OR_PARTITION": ("isr", 9, epoch, small, current),
    }
    for expected, item in refused.items():
        err, res = await answer([item])
        assert (err, res[item[:2]]) == (None, (expected, None)), expected
    err, res = await answer([("isr", 0, epoch, small, current)], requester=others[0],
                            b_epoch=ctrl.context.live[others[0]].epoch)
    assert res[("isr", 0)] == ("NOT_LEADER_OR_FOLLOWER", None)
    assert await answer([("isr", 0, epoch, small, current)], b_epoch=broker_epoch - 1) == (
        "STALE_BROKER_EPOCH", {})
    assert await answer([("isr", 0, epoch, small, current)], requester=99) == (
        "STALE_BROKER_EPOCH", {})
    not_ctrl = next(b for b in brokers if b is not ctrl_b).controller
    assert not not_ctrl.active
    assert await answer([("isr", 0, epoch, small, current)], controller=not_ctrl) == (
        "NOT_CONTROLLER", {})
    st, v = await znode(store, "isr", 0)
    assert (tuple(st.isr), v) == (full, current)

    # A retry of a change that was applied (its answer lost) succeeds without a write.
    err, res = await answer([("isr", 0, epoch, full, current - 1)])
    assert res[("isr", 0)][0] is None and res[("isr", 0)][1].zk_version == current
    assert (await znode(store, "isr", 0))[1] == current


@pytest_twisted.ensureDeferred
async def test_alter_isr_answers_invalid_update_version_after_a_concurrent_change(brokers):
    ctrl_b = await eventually(lambda: controller_of(brokers), what="controller")
    L = ctrl_b.broker_id  # noqa: N806
    others = [b.broker_id for b in brokers if b is not ctrl_b]
    await create_topic(brokers[0], "race", assignment={0: [L, *others]})
    ctrl_b = await settled(brokers, "race", 1)
    ctrl = ctrl_b.controller
    st, version = await znode(ctrl_b.store, "race", 0)
    # Someone else rewrites the znode behind the controller's back (as a deposed controller's
    # last write would): the controller's cached version is now stale. The write keeps the
    # full ISR: one that dropped a caught-up follower would be a passing state (the leader
    # asks to add the follower back at its next fetch), not one the caches can be seen in.
    full = tuple(st.isr)
    assert len(full) == 3
    await ctrl_b.store.set(paths.leader_and_isr("race", 0), paths.LeaderAndIsr(
        L, st.leader_epoch, list(full), st.controller_epoch).to_bytes(), version=version)
    err, res = await ctrl.alter_isr(L, ctrl.context.live[L].epoch,
                                    [("race", 0, st.leader_epoch, (L, others[0]), version)])
    assert (err, res[("race", 0)]) == (None, ("INVALID_UPDATE_VERSION", None))
    # The controller re-read the znode and told everyone what it holds (not the refused ISR).
    assert ctrl.context.states[("race", 0)].zk_version == version + 1
    assert tuple(ctrl.context.states[("race", 0)].isr) == full
    await eventually(lambda: caches_show(brokers, "race", 0, isr=full,
                                         leader_epoch=st.leader_epoch, zk_version=version + 1),
                     what="caches show the znode's state")


@pytest_twisted.ensureDeferred
async def test_returning_leader_gets_a_new_leader_epoch(brokers, zk_hosts):
    ctrl_b = await eventually(lambda: controller_of(brokers), what="controller")
    leader_b = next(b for b in brokers if b is not ctrl_b)
    L = leader_b.broker_id  # noqa: N806
    others = [b.broker_id for b in brokers if b is not leader_b]
    # Three copies and a single copy (no other replica to elect: docs/design.md#leader-epochs).
    await create_topic(brokers[0], "back", assignment={0: [L, *others]})
    await create_topic(brokers[0], "solo", assignment={0: [L]})
    ctrl_b = await settled(brokers, "back", 1)
    await settled(brokers, "solo", 1)
    ctrl = ctrl_b.controller
    before = {t: await znode(ctrl_b.store, t, 0) for t in ("back", "solo")}
    assert all(st.leader == L for st, _ in before.values())
    old_czxid = ctrl.context.live[L].epoch

    # The controller must see the broker come back with a new registration, not see it die
    # first (then leadership would move, or the partition go offline, for other reasons). Hold
    # its event queue as a suspended ZooKeeper connection does while the broker bounces.
    ctrl.election.on_session_state(SessionState.SUSPENDED)
    try:
        hosts = zk_hosts.split("/", 1)[0]
        await threads.deferToThread(expire_session, hosts, *leader_b.store._client.client_id)

        async def re_registered():
            try:
                _, stat = await ctrl_b.store.get(paths.broker(L))
            except MetadataStoreError:
                return False
            return stat.czxid != old_czxid

        await eventually(lambda: Deferred.fromCoroutine(re_registered()), timeout=30,
                         what="the broker registered again with a new session")
    finally:
        ctrl.election.on_session_state(SessionState.CONNECTED)

    await eventually(lambda: ctrl.context.live[L].epoch != old_czxid, timeout=15,
                     what="the controller caches the new czxid")
    assert ctrl.context.live[L].epoch == leader_b.registration_epoch
    # The single copy: nobody else has its messages, so the returning broker leads again, in a
    # new generation (docs/design.md#leader-epochs).
    st, version = before["solo"]
    await eventually(lambda: caches_show(
        brokers, "solo", 0, isr=st.isr, leader_epoch=st.leader_epoch + 1, zk_version=version + 1),
        what="solo-0: new leader epoch in every cache")
    now, v = await znode(ctrl_b.store, "solo", 0)
    assert (now.leader, now.leader_epoch, now.isr, v) == (L, st.leader_epoch + 1, st.isr,
                                                           version + 1)
    # Three copies: a restart is a failure then a start (its recovery may have cut its log), so
    # an in-sync replica that did not restart leads, in a new generation, and the returning
    # broker follows and is asked back into the ISR once it has caught up.
    st, version = before["back"]
    await eventually(lambda: all(
        (c := b.cache.partition("back", 0)) is not None and c.leader == others[0]
        and c.leader_epoch == st.leader_epoch + 1 for b in brokers),
        what="back-0: another in-sync replica leads, new leader epoch in every cache")
    await eventually(lambda: L in ctrl.context.states[("back", 0)].isr, timeout=30,
                     what="back-0: the returning broker back in the ISR")
    for t in ("solo", "back"):
        st, _ = before[t]
        await eventually(lambda t=t, st=st: (
            leader_b.replicas.get_partition(t, 0) is not None
            and leader_b.replicas.get_partition(t, 0).leader_epoch == st.leader_epoch + 1),
            what=f"{t}-0: the returning broker got LeaderAndIsr with the new epoch")
