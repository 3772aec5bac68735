"""Controlled shutdown on in-process brokers against a real ZooKeeper: a stopping broker asks the
controller to move its leaderships first (new leader epochs, out of every ISR), so acks=all
producing to the others keeps succeeding; the ControlledShutdown API answers with what could not
move and refuses stale or misdirected requests."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor, task

from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from tests.support.cluster import (
    call,
    controller_of,
    create_topic,
    eventually,
    leader_of,
    produce,
    running_brokers,
)
from tests.support.reassignment_checks import FAST, read_all, zk_state

TOPIC = "cs"
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


def spy_on_isr_proposals(broker, proposed: list[tuple[int, tuple[int, ...]]]) -> None:
    """Record ``(partition, ISR)`` of every ISR that ``broker``'s leaders propose to the
    controller (and propose it)."""
    propose = broker.replicas._propose_isr

    def recording(p, new_isr):
        proposed.append((p.index, tuple(new_isr)))
        propose(p, new_isr)

    broker.replicas._propose_isr = recording


def spy_on_fetch_starts(broker) -> list[tuple[str, int, int]]:
    """``(topic, partition, leader)`` of every follower fetch ``broker`` starts from now on."""
    fetchers = broker.replicas.fetchers
    follow = fetchers.follow
    started: list[tuple[str, int, int]] = []

    def recording(partition, leader_id, address):
        tp = (partition.topic, partition.index)
        was = fetchers.following(tp)
        follow(partition, leader_id, address)
        if fetchers.following(tp) == leader_id != was:
            started.append((*tp, leader_id))

    fetchers.follow = recording
    return started


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 3, **FAST)


@pytest.mark.parametrize("stop_controller", [False, True])
@pytest_twisted.ensureDeferred
async def test_leaders_move_away_before_the_broker_stops(brokers, stop_controller):
    ctrl = await eventually(lambda: controller_of(brokers), what="controller")
    await create_topic(brokers[0], TOPIC, assignment=ASSIGNMENT)
    await eventually(lambda: all(leader_of(brokers, TOPIC, p) for p in range(3)), what="leaders")
    victim = ctrl if stop_controller else next(b for b in brokers if b is not ctrl)
    vid = victim.broker_id
    store = next(b for b in brokers if b is not victim).store
    led = [p for p in range(3) if leader_of(brokers, TOPIC, p) is victim]
    assert led, "each broker leads its preferred partition"
    before = {p: await zk_state(store, TOPIC, p) for p in range(3)}
    acked: dict[int, list[bytes]] = {p: [] for p in range(3)}
    for p in range(3):
        for i in range(5):
            v = b"before-%d-%d" % (p, i)
            assert (await produce(leader_of(brokers, TOPIC, p), TOPIC, p, [v])).error_code == 0
            acked[p].append(v)

    # What the others' leaders ask the controller from here on: none of the partitions it led
    # may ask to take the leaving broker back into their ISR (a pending expansion holds the
    # high watermark until the controller answers, and the controller may be the one leaving).
    # A partition it already followed goes on being fetched until the controlled shutdown is
    # over, so its leader may still ask once (and be refused) if a fetch crosses the ISR change.
    proposed: list[tuple[int, tuple[int, ...]]] = []
    for b in brokers:
        if b is not victim:
            spy_on_isr_proposals(b, proposed)
    fetched = spy_on_fetch_starts(victim)
    await victim.stopService()
    assert not [(p, isr) for p, isr in proposed if p in led and vid in isr], proposed
    # The leaving broker follows the partitions it led, but fetches none of them.
    assert fetched == []
    # Leadership was handed over while the broker still ran: it was told it follows.
    for p in led:
        part = victim.replicas.get_partition(TOPIC, p)
        assert part is not None and not part.is_leader
    rest = [b for b in brokers if b is not victim]
    await eventually(lambda: controller_of(rest), timeout=30, what="controller")
    for p in range(3):
        st = await zk_state(store, TOPIC, p)
        assert st.leader != vid and vid not in st.isr
        if p in led:
            assert st.leader_epoch == before[p].leader_epoch + 1
    # acks=all on the remaining two keeps working, and nothing acknowledged is gone.
    for p in range(3):
        leader = await eventually(lambda p=p: leader_of(rest, TOPIC, p), what="leader")
        for i in range(5):
            v = b"after-%d-%d" % (p, i)
            r = await produce(leader, TOPIC, p, [v])
            assert r.error_code == 0, r
            acked[p].append(v)
        assert await read_all(leader, TOPIC, p) == acked[p]


@pytest_twisted.ensureDeferred
async def test_controlled_shutdown_api(brokers):
    ctrl = await eventually(lambda: controller_of(brokers), what="controller")
    other = next(b for b in brokers if b is not ctrl)
    await create_topic(brokers[0], TOPIC, assignment=ASSIGNMENT)
    await create_topic(brokers[0], "single", assignment={0: [other.broker_id]})
    await eventually(lambda: leader_of(brokers, "single", 0), what="leader")

    async def ask(target, broker_id, epoch):
        return await call(target, ApiKey.CONTROLLED_SHUTDOWN, 3,
                          {"broker_id": broker_id, "broker_epoch": epoch}, as_broker=True)

    r = await ask(other, other.broker_id, other.registration_epoch)
    assert r.error_code == ErrorCode.NOT_CONTROLLER
    r = await ask(ctrl, other.broker_id, other.registration_epoch - 1)
    assert r.error_code == ErrorCode.STALE_BROKER_EPOCH
    r = await ask(ctrl, 99, -1)
    assert r.error_code == ErrorCode.BROKER_NOT_AVAILABLE
    r = await ask(ctrl, other.broker_id, other.registration_epoch)
    # A partition with one replica cannot move and is not reported (Kafka reports only
    # replicated ones); the others all moved.
    assert r.error_code == 0 and list(r.remaining_partitions) == []
    for p in range(3):
        st = await zk_state(ctrl.store, TOPIC, p)
        assert st.leader != other.broker_id and other.broker_id not in st.isr
    # While it is shutting down it may not rejoin an ISR, even though it keeps fetching.
    await task.deferLater(reactor, 1.0, lambda: None)
    assert other.broker_id not in (await zk_state(ctrl.store, TOPIC, 0)).isr
    assert ctrl.controller.context.shutting_down == {other.broker_id}
