"""The controller on a broker failure and on its own election: new leaders are written and sent
before the ISR shrinks and the full state (and the rest waits for the brokers' answers at most
LEADERS_FIRST_WAIT_S); fenced multis are pipelined and still resign the controller when the epoch
check fails. Time is a task.Clock; the store is the in-memory one of the coordinator tests."""

from __future__ import annotations

import dataclasses

from twisted.internet import defer, task

from broker_core import metadata_paths as paths
from broker_core.controller import controller as controller_module
from broker_core.controller.controller import LEADERS_FIRST_WAIT_S, Controller
from broker_core.controller.event_manager import NotController
from broker_core.controller.writer import FENCED_PIPELINE
from broker_core.fenced_writer import MULTI_BATCH
from broker_core.metadata import Create, SetData
from broker_core.wire.apis import ApiKey
from broker_core.wire.messages import leader_and_isr
from tests.support.controller_harness import make
from tests.support.memory_store import HeldMultiStore, MemoryStore


def test_new_leaders_go_out_before_the_isr_shrinks():
    store, clock, channels, ctl = make()
    led_by_3 = {("t", p) for p in range(9) if 1 + p % 3 == 3}
    store.delete(paths.broker(3))
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())

    # The leaderships moved and were sent; the shrinks wait for the answers (or the timer).
    for b in (1, 2):
        assert channels[b].leader_and_isr() == [led_by_3]
    assert all(3 not in ctl.context.states[tp].isr and ctl.context.states[tp].leader != 3 for tp in led_by_3)
    assert 3 in ctl.context.states[("t", 0)].isr  # led by 1: its ISR not shrunk yet
    assert not done.called
    clock.advance(LEADERS_FIRST_WAIT_S)
    assert done.called
    assert all(3 not in d.isr for d in ctl.context.states.values())
    for b in (1, 2):
        assert channels[b].leader_and_isr()[1] == {("t", p) for p in range(9)} - led_by_3


def test_answers_from_the_brokers_end_the_wait_early():
    store, clock, channels, ctl = make()
    store.delete(paths.broker(3))
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    assert not done.called
    for b in (1, 2):
        channels[b].answer()
    assert done.called and not clock.getDelayedCalls()


def test_a_restarted_broker_gets_its_leaderships_only_with_its_full_state():
    store, clock, channels, ctl = make()
    # Broker 2 came back with a new registration (a new czxid) while 3 died.
    store.delete(paths.broker(3))
    ctl.context.live[2] = controller_module.LiveBroker(2, "h", 9002, None, -7)
    old = channels[2]
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    assert old.sent == []  # the old channel to the old incarnation got nothing
    assert channels[2] is not old and channels[2].sent == []
    clock.advance(LEADERS_FIRST_WAIT_S)
    assert done.called
    lai = [body for key, body, _ in channels[2].sent if key == ApiKey.LEADER_AND_ISR]
    assert len(lai) == 1 and lai[0]["type"] == 1  # one full (INIT) LeaderAndIsr


def test_controller_failover_elects_for_dead_leaders_before_sending_the_full_state():
    store, clock, channels, ctl = make()
    store.delete(paths.broker(3))
    ctl.active = False
    store.nodes[paths.CONTROLLER_EPOCH] = (b"5", 0)

    async def elected() -> None:
        ctl.active = True
        await ctl._on_controller_failover()

    ctl._register_watches = lambda: None  # the memory store's watches would re-enter
    done = defer.Deferred.fromCoroutine(elected())
    led_by_3 = {("t", p) for p in range(9) if 1 + p % 3 == 3}
    for b in (1, 2):
        first = channels[b].leader_and_isr()
        assert first == [led_by_3]
        assert channels[b].sent[0][1]["type"] == 0  # incremental, before the INIT
    clock.advance(LEADERS_FIRST_WAIT_S)
    for b in (1, 2):
        assert [body["type"] for key, body, _ in channels[b].sent
                if key == ApiKey.LEADER_AND_ISR][1] == 1
    clock.advance(LEADERS_FIRST_WAIT_S)
    assert done.called


def test_fenced_multis_are_pipelined_and_still_fenced():
    store = HeldMultiStore()
    MemoryStore.multi(store, [Create(paths.CONTROLLER_EPOCH, b"5")])
    ctl = Controller(1, store, reactor=task.Clock())
    ctl.active, ctl.epoch_zk_version = True, 0
    n = MULTI_BATCH * (FENCED_PIPELINE + 2)
    ops = [Create(f"/n{i}", b"") for i in range(n)]
    done = defer.Deferred.fromCoroutine(ctl.writer.fenced(ops))
    assert len(store.held) == FENCED_PIPELINE  # a whole window sent before any answer
    assert all(ops[0].path == paths.CONTROLLER_EPOCH for ops, _ in store.held)
    store.release()
    assert len(store.held) == 2 and not done.called
    store.release()
    assert done.called and len([p for p in store.nodes if p.startswith("/n")]) == n

    # A newer controller bumped the epoch: the controller learns it is deposed.
    MemoryStore.multi(store, [SetData(paths.CONTROLLER_EPOCH, b"6", 0)])
    failed = defer.Deferred.fromCoroutine(ctl.writer.fenced([Create("/late", b"")]))
    store.release()
    errors: list = []
    failed.addErrback(errors.append)
    assert len(errors) == 1 and errors[0].check(NotController)


def test_controller_failover_sends_the_full_state_with_the_isrs_already_shrunk():
    store, clock, channels, ctl = make()
    store.delete(paths.broker(3))
    ctl.active = False
    store.nodes[paths.CONTROLLER_EPOCH] = (b"5", 0)

    async def elected() -> None:
        ctl.active = True
        await ctl._on_controller_failover()

    ctl._register_watches = lambda: None  # the memory store's watches would re-enter
    done = defer.Deferred.fromCoroutine(elected())
    for b in (1, 2):
        channels[b].answer()
    assert done.called
    # Every ISR shrunk in ZooKeeper, not only in the controller's view.
    for p in range(9):
        data, _ = store.nodes[paths.leader_and_isr("t", p)]
        assert 3 not in paths.LeaderAndIsr.from_bytes(data).isr
    for b in (1, 2):
        lai = [body for key, body, _ in channels[b].sent if key == ApiKey.LEADER_AND_ISR]
        # The new leaders, then the full state; no third request repeating the shrinks.
        assert [body["type"] for body in lai] == [0, 1]
        msg = leader_and_isr.REQUEST
        full = msg.from_bytes(msg.to_bytes(lai[1], 5), 5)
        isrs = {(t.topic_name, s.partition_index): s.isr
                for t in full.topic_states for s in t.partition_states}
        assert len(isrs) == 9 and all(3 not in isr for isr in isrs.values())


def test_controller_failover_leaves_an_unseen_leader_restart_to_the_broker_change():
    store, clock, channels, ctl = make()
    store.delete(paths.broker(3))
    ctl.active = False
    store.nodes[paths.CONTROLLER_EPOCH] = (b"5", 0)
    # Partition 1 (led by broker 2) was elected under an older registration of broker 2.
    path = paths.leader_and_isr("t", 1)
    store.nodes[path] = (paths.LeaderAndIsr(2, 1, [2, 3, 1], 5, 77).to_bytes(),
                         store.nodes[path][1])

    async def elected() -> None:
        ctl.active = True
        await ctl._on_controller_failover()

    ctl._register_watches = lambda: None
    done = defer.Deferred.fromCoroutine(elected())
    clock.advance(LEADERS_FIRST_WAIT_S)
    clock.advance(LEADERS_FIRST_WAIT_S)
    assert done.called
    d = ctl.context.states[("t", 1)]
    # Broker 2 restarted unseen: the other live in-sync replica (1) leads, in a new epoch; 2
    # is out of the ISR until it has caught up (its recovery may have cut its log).
    assert d.leader == 1 and d.leader_epoch == 2 and d.isr == (1,)
    assert all(3 not in s.isr for s in ctl.context.states.values())


def _bounce(ctl, b: int) -> None:
    """The controller saw broker ``b`` come back with a new registration (a new czxid)."""
    ctl.context.live[b] = controller_module.LiveBroker(b, "h", 9000 + b, None, -7)


def test_a_restarted_follower_leaves_the_isrs_until_it_has_caught_up():
    store, clock, channels, ctl = make()
    _bounce(ctl, 3)
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    clock.advance(LEADERS_FIRST_WAIT_S)
    clock.advance(LEADERS_FIRST_WAIT_S)
    assert done.called
    for p in range(9):
        d = ctl.context.states[("t", p)]
        assert 3 not in d.isr, (p, d)
        if p % 3 != 2:  # led by 1 or 2: same leader, same epoch, ISR without 3
            assert d.leader == 1 + p % 3 and d.leader_epoch == 1


def test_a_restarted_leader_hands_over_to_an_in_sync_replica_that_did_not_restart():
    store, clock, channels, ctl = make()
    _bounce(ctl, 3)
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    clock.advance(LEADERS_FIRST_WAIT_S)
    clock.advance(LEADERS_FIRST_WAIT_S)
    assert done.called
    for p in (2, 5, 8):  # led by 3, replicas [3, 1, 2]
        d = ctl.context.states[("t", p)]
        assert d.leader == 1 and d.leader_epoch == 2 and d.isr == (1, 2), (p, d)


def test_a_restarted_leader_with_no_other_in_sync_replica_leads_a_new_generation():
    """Every replica crashed and the leader came back first: nobody else has its messages, so
    it leads again, in a new leader epoch (so its followers truncate by epoch)."""
    store, clock, channels, ctl = make(partitions=3)
    path = paths.leader_and_isr("t", 2)
    store.nodes[path] = (paths.LeaderAndIsr(3, 1, [3], 5).to_bytes(), store.nodes[path][1])
    ctl.context.states[("t", 2)] = dataclasses.replace(ctl.context.states[("t", 2)], isr=(3,))
    _bounce(ctl, 3)
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    clock.advance(LEADERS_FIRST_WAIT_S)
    clock.advance(LEADERS_FIRST_WAIT_S)
    assert done.called
    d = ctl.context.states[("t", 2)]
    assert d.leader == 3 and d.leader_epoch == 2 and d.isr == (3,)


def test_a_controller_fenced_off_by_a_foreign_epoch_bump_resigns_and_gives_up_its_seat():
    # Someone moved /controller_epoch on without taking /controller (an operator, a broken
    # peer): the controller's next fenced write fails. Keeping the seat would leave the
    # cluster with a controller that can never write again; resigning and vacating it makes
    # an election run, which this broker (the only candidate) wins with a newer epoch.
    store = MemoryStore()
    clock = task.Clock()
    ctl = Controller(1, store, reactor=clock)
    ctl._register_watches = lambda: None  # the memory store's watches would re-enter
    ctl.start()
    clock.advance(0)
    assert ctl.active
    won_epoch, won_version = ctl.epoch, ctl.epoch_zk_version
    assert paths.ControllerRegistration.from_bytes(store.nodes[paths.CONTROLLER][0]).broker_id == 1

    store.nodes[paths.CONTROLLER_EPOCH] = (b"41", won_version + 1)  # the foreign bump
    failed = defer.Deferred.fromCoroutine(ctl.writer.fenced([Create("/late", b"")]))
    errors: list = []
    failed.addErrback(errors.append)
    assert len(errors) == 1 and errors[0].check(NotController)
    assert "/late" not in store.nodes
    for _ in range(5):
        clock.advance(0)

    # It resigned, vacated /controller, and won the election that followed past the bump.
    assert ctl.active and ctl.epoch == 42 and ctl.epoch > won_epoch
    assert ctl.epoch_zk_version == won_version + 2
    defer.Deferred.fromCoroutine(ctl.writer.fenced([Create("/after", b"")]))
    assert "/after" in store.nodes
