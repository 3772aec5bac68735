"""Broker liveness over the network (KRaft-style heartbeats and fencing), on task.Clock:

- the sans-IO cores: the controller's liveness table (who is fenced, when the controller counts
  itself isolated), the resignation rule, the "cannot reach the controller" record, and the
  broker's lease;
- the controller wired to them (the in-memory store of the coordinator tests): a broker silent
  for a session loses its leaderships and ISR places and cannot shrink an ISR to itself; it is
  sent its whole state when its heartbeats return; an isolated controller fences nobody and
  resigns only when most other brokers recorded that they cannot reach it.
"""

from __future__ import annotations

import pytest
from twisted.internet import defer, task

from broker_core import metadata_paths as paths
from broker_core.controller.broker_liveness import (
    BrokerLiveness,
    UnreachableVote,
    should_resign,
    unreachable_predecessor,
)
from broker_core.controller.controller import Controller
from broker_core.controller.heartbeat_sender import ControllerLease
from broker_core.wire.apis import ApiKey
from tests.support.controller_harness import make as make_controller
from tests.support.memory_store import MemoryStore

SESSION = 3.0
BEAT = 1.0

# -- the liveness table --------------------------------------------------------------------------


def table(*brokers: int) -> tuple[task.Clock, BrokerLiveness]:
    clock = task.Clock()
    live = BrokerLiveness(1, SESSION, clock)
    live.reset(brokers)
    return clock, live


def test_a_broker_silent_for_a_whole_session_is_fenced_not_before():
    clock, live = table(1, 2, 3)
    for _ in range(5):
        clock.advance(BEAT)
        live.heartbeat(2)
        verdict = live.evaluate()
        if clock.seconds() < SESSION:
            assert not verdict.fence
    assert live.fenced == {3}
    assert not verdict.isolated
    # Fenced once: later evaluations report no new fencing.
    clock.advance(BEAT)
    live.heartbeat(2)
    assert live.evaluate().fence == frozenset()


def test_a_heartbeat_after_the_fencing_unfences():
    clock, live = table(1, 2, 3)
    clock.advance(SESSION)
    live.heartbeat(2)
    assert live.evaluate().fence == {3}
    assert live.heartbeat(3) is True  # still fenced until evaluated
    verdict = live.evaluate()
    assert verdict.unfence == {3} and live.fenced == frozenset()
    assert live.heartbeat(3) is False


def test_a_controller_that_hears_from_too_few_fences_nobody():
    # Broker 1 (the controller) hears from nobody: it, not the other two, is the one cut off
    # (or the whole cluster is slow). Fencing them would take every partition offline.
    clock, live = table(1, 2, 3)
    clock.advance(SESSION * 3)
    verdict = live.evaluate()
    assert verdict.isolated and not verdict.fence and live.fenced == frozenset()
    # Five brokers, two silent: a minority, fenced.
    clock, live = table(1, 2, 3, 4, 5)
    clock.advance(SESSION)
    live.heartbeat(2)
    live.heartbeat(3)
    verdict = live.evaluate()
    assert verdict.fence == {4, 5} and not verdict.isolated
    # Five brokers, three silent: the controller is the odd one out.
    clock, live = table(1, 2, 3, 4, 5)
    clock.advance(SESSION)
    live.heartbeat(2)
    verdict = live.evaluate()
    assert verdict.isolated and not verdict.fence


def test_new_and_restarted_brokers_get_a_full_session_and_gone_ones_are_forgotten():
    clock, live = table(1, 2, 3)
    clock.advance(SESSION)
    live.heartbeat(2)
    assert live.evaluate().fence == {3}
    clock.advance(BEAT)
    live.heartbeat(2)
    live.registered({1: None, 2: None, 3: None, 4: None}, restarted={3})
    assert live.fenced == frozenset()  # a new incarnation of 3 starts unfenced
    clock.advance(SESSION - BEAT)
    live.heartbeat(2)
    assert live.evaluate().fence == frozenset()
    live.registered({1, 2})
    clock.advance(SESSION)
    live.heartbeat(2)
    assert live.evaluate().fence == frozenset() and live.silent() == set()
    assert live.heartbeat(4) is False  # unregistered: ignored


def test_the_controller_itself_is_never_silent():
    clock, live = table(1)
    clock.advance(SESSION * 10)
    verdict = live.evaluate()
    assert live.silent() == set() and not verdict.isolated and not verdict.fence


# -- resignation and records ---------------------------------------------------------------------


def vote(b: int, cid: int = 1, epoch: int = 7) -> UnreachableVote:
    return UnreachableVote(b, cid, epoch)


def test_resign_only_when_isolated_and_most_others_cannot_reach_it():
    reg = {1, 2, 3}
    assert should_resign(1, 7, reg, [vote(2), vote(3)], isolated=True)
    assert not should_resign(1, 7, reg, [vote(2), vote(3)], isolated=False)  # hears them
    assert not should_resign(1, 7, reg, [vote(2)], isolated=True)  # not a majority of 2
    # Records naming another controller, another epoch, or an unregistered broker do not count.
    assert not should_resign(1, 7, reg, [vote(2), vote(3, cid=2)], isolated=True)
    assert not should_resign(1, 7, reg, [vote(2), vote(3, epoch=6)], isolated=True)
    assert not should_resign(1, 7, reg, [vote(2), vote(9)], isolated=True)
    assert not should_resign(1, 7, reg, [vote(1), vote(2)], isolated=True)  # its own
    # Two brokers cannot tell which one is cut off.
    assert not should_resign(1, 7, {1, 2}, [vote(2)], isolated=True)
    assert should_resign(1, 7, {1, 2, 3, 4, 5}, [vote(2), vote(3), vote(5)], isolated=True)


def test_the_unreachable_record_round_trips_and_refuses_garbage():
    v = vote(3, cid=2, epoch=11)
    assert UnreachableVote.from_bytes(3, v.to_bytes()) == v
    for bad in (b"", b"\xff", b"[]", b"null", b'{"controller_id": 1}',
                b'{"controller_id": "1", "controller_epoch": 2}',
                b'{"controller_id": true, "controller_epoch": 2}',
                b'{"controller_id": -1, "controller_epoch": 2}',
                b'{"controller_id": 1, "controller_epoch": 99999999999}',
                b"[" * 100000):
        with pytest.raises(ValueError):
            UnreachableVote.from_bytes(3, bad)


# -- the broker's lease ----------------------------------------------------------------------


def test_the_lease_expires_after_a_session_without_answers_only_with_the_store():
    lease = ControllerLease(SESSION, 0.0)
    assert not lease.check(SESSION - 0.1, True)
    assert not lease.check(SESSION, False)  # the store is gone too: ordinary death, not this
    assert lease.check(SESSION, True) and lease.expired
    assert not lease.check(SESSION + 1, True)  # reported once
    assert lease.answered(SESSION + 2) is True and not lease.expired
    assert lease.answered(SESSION + 3) is False
    assert not lease.check(2 * SESSION + 2.9, True)
    assert lease.check(2 * SESSION + 3, True)
    # A new controller: a full session to reach it.
    assert lease.controller_changed(10.0) is True and not lease.check(10.0 + SESSION - 0.1, True)


# -- the controller --------------------------------------------------------------------------


def make(partitions: int = 9):
    """Brokers 1-3, topic ``t`` replicated on all three (partition p led by 1 + p % 3, ISRs
    full); broker 1 is the active controller (epoch 5) with fencing on, freshly taken over."""
    store = MemoryStore()
    store.create(paths.CONTROLLER, paths.ControllerRegistration(1, 0).to_bytes())
    store, clock, channels, ctl = make_controller(
        partitions, store, heartbeat_interval_s=BEAT, session_timeout_s=SESSION)
    ctl.election.standing = True
    ctl.fencing.start(ctl.context.live)
    return store, clock, channels, ctl


def beat(ctl: Controller, *brokers: int) -> None:
    for b in brokers:
        assert ctl.broker_heartbeat(b, ctl.context.live[b].epoch)[0] is None


def alter(ctl: Controller, broker: int, epoch: int, items: list) -> defer.Deferred:
    return defer.Deferred.fromCoroutine(ctl.alter_isr(broker, epoch, items))


def run(clock: task.Clock, ctl: Controller, seconds: float, *beating: int) -> None:
    """``seconds`` of heartbeats from ``beating`` every beat, answering every request sent."""
    for _ in range(round(seconds / BEAT)):
        beat(ctl, *beating)
        clock.advance(BEAT)
        for ch in list(ctl.channels.values()):
            ch.answer()


def test_a_silent_leader_is_fenced_its_partitions_move_and_it_cannot_shrink_to_itself():
    store, clock, channels, ctl = make()
    led_by_3 = {("t", p) for p in range(9) if 1 + p % 3 == 3}
    before = {tp: ctl.context.states[tp].leader_epoch for tp in led_by_3}
    run(clock, ctl, SESSION - BEAT, 2)
    assert all(ctl.context.states[tp].leader == 3 for tp in led_by_3)  # not within the session
    run(clock, ctl, 2 * BEAT, 2)
    assert ctl.fencing.liveness.fenced == {3}
    for tp, d in ctl.context.states.items():
        assert d.leader != 3 and 3 not in d.isr, (tp, d)
    for tp in led_by_3:
        # A new leader generation: the fenced leader's acks=all writes can never commit.
        assert ctl.context.states[tp].leader_epoch > before[tp]
        data, _ = store.nodes[paths.leader_and_isr(*tp)]
        assert paths.LeaderAndIsr.from_bytes(data).leader != 3
    # Its AlterPartition (shrink the ISR to itself, at its old epoch) is refused.
    tp = sorted(led_by_3)[0]
    result = alter(ctl, 3, ctl.context.live[3].epoch, [(tp[0], tp[1], before[tp], (3,), 0)])
    clock.advance(0)
    assert result.result == ("STALE_BROKER_EPOCH", {})
    # A heartbeat that reaches the controller again unfences it at once.
    assert ctl.broker_heartbeat(3, ctl.context.live[3].epoch) == (None, False)
    assert ctl.fencing.liveness.fenced == frozenset()


def test_an_unfenced_broker_gets_its_whole_state_and_may_rejoin_the_isr():
    store, clock, channels, ctl = make()
    run(clock, ctl, SESSION + BEAT, 2)
    assert ctl.fencing.liveness.fenced == {3}
    old_channel = channels[3]
    sent_before = len(old_channel.sent)
    run(clock, ctl, BEAT, 2, 3)
    assert ctl.fencing.liveness.fenced == frozenset()
    full = [body for key, body, _ in channels[3].sent[sent_before:]
            if key == ApiKey.LEADER_AND_ISR and body["type"] == 1]
    assert full, "the unfenced broker was not sent its whole state"
    # Back in an ISR once it catches up: its follower's AlterPartition from the leader passes.
    tp = ("t", 0)
    d = ctl.context.states[tp]
    assert 3 not in d.isr
    result = alter(ctl, d.leader, ctl.context.live[d.leader].epoch,
                           [(tp[0], tp[1], d.leader_epoch, (*d.isr, 3), d.zk_version)])
    clock.advance(0)
    top, parts = result.result
    assert top is None and parts[tp][0] is None and 3 in ctl.context.states[tp].isr


def test_a_fenced_broker_cannot_join_an_isr():
    store, clock, channels, ctl = make()
    run(clock, ctl, SESSION + BEAT, 2)
    tp = ("t", 0)
    d = ctl.context.states[tp]
    result = alter(ctl, d.leader, ctl.context.live[d.leader].epoch,
                           [(tp[0], tp[1], d.leader_epoch, (*d.isr, 3), d.zk_version)])
    clock.advance(0)
    top, parts = result.result
    assert top is None and parts[tp][0] is not None and 3 not in ctl.context.states[tp].isr


def test_an_isolated_controller_fences_nobody_and_resigns_on_the_others_records():
    store, clock, channels, ctl = make()
    states = dict(ctl.context.states)
    run(clock, ctl, 3 * SESSION)  # nobody's heartbeats arrive
    assert ctl.active and ctl.fencing.liveness.fenced == frozenset()
    assert ctl.context.states == states  # nothing moved
    # One broker records that it cannot reach the controller: not a majority of the others.
    store.create(paths.controller_unreachable(2), UnreachableVote(2, 1, 5).to_bytes(),
                 makepath=True)
    run(clock, ctl, 2 * BEAT)
    assert ctl.active
    store.create(paths.controller_unreachable(3), UnreachableVote(3, 1, 5).to_bytes())
    run(clock, ctl, BEAT)
    assert not ctl.active
    assert paths.CONTROLLER not in store.nodes  # given up, so the others elect one of them
    assert ctl.context.states == {}  # resigned: its state dropped, nothing written
    for tp, d in states.items():
        data, _ = store.nodes[paths.leader_and_isr(*tp)]
        assert paths.LeaderAndIsr.from_bytes(data).leader == d.leader
    # It stays out of elections for a session...
    defer.Deferred.fromCoroutine(ctl._elect())
    assert not ctl.active and paths.CONTROLLER not in store.nodes
    # ...and stands again afterwards if nobody else took over.
    ctl._on_controller_failover = lambda: defer.succeed(None)
    clock.advance(SESSION)
    assert ctl.active and paths.CONTROLLER in store.nodes


def test_a_controller_that_hears_its_brokers_ignores_their_records():
    store, clock, channels, ctl = make()
    store.create(paths.controller_unreachable(2), UnreachableVote(2, 1, 5).to_bytes(),
                 makepath=True)
    store.create(paths.controller_unreachable(3), UnreachableVote(3, 1, 5).to_bytes())
    run(clock, ctl, 3 * SESSION, 2, 3)  # a slow cluster: heartbeats arrive, answers were late
    assert ctl.active and paths.CONTROLLER in store.nodes


def test_an_isolated_controller_refuses_isr_shrinks_but_not_expansions():
    # Cut off, the controller leads partitions whose followers stopped fetching from it. Had
    # it shrunk their ISRs to itself, the broker that replaces it could elect no other leader.
    store, clock, channels, ctl = make()
    run(clock, ctl, SESSION + BEAT)  # nobody's heartbeats: isolated
    tp = ("t", 0)  # led by broker 1, the controller
    d = ctl.context.states[tp]
    result = alter(ctl, 1, ctl.context.live[1].epoch, [(tp[0], tp[1], d.leader_epoch, (1,),
                                                d.zk_version)])
    clock.advance(0)
    top, parts = result.result
    assert top is None and parts[tp][0] == "OPERATION_NOT_ATTEMPTED"
    assert ctl.context.states[tp].isr == d.isr
    # Heard from a majority again, the same shrink passes.
    run(clock, ctl, BEAT, 2)
    result = alter(ctl, 1, ctl.context.live[1].epoch, [(tp[0], tp[1], d.leader_epoch, (1, 2),
                                                d.zk_version)])
    clock.advance(0)
    top, parts = result.result
    assert top is None and parts[tp][0] is None and ctl.context.states[tp].isr == (1, 2)


def test_the_previous_controller_most_brokers_could_not_reach_is_fenced_at_once():
    # Broker 1 takes over (epoch 5) from broker 3, which brokers 1 and 2 recorded they could
    # not reach at epoch 4: 3 is fenced at the first look, not a session later.
    assert unreachable_predecessor(1, 5, {1, 2, 3}, [vote(1, 3, 4), vote(2, 3, 4)]) == {3}
    assert unreachable_predecessor(1, 5, {1, 2, 3}, [vote(2, 3, 4)]) == set()
    assert unreachable_predecessor(1, 5, {1, 2, 3}, [vote(1, 3, 5), vote(2, 3, 5)]) == set()
    assert unreachable_predecessor(1, 5, {1, 2}, [vote(1, 3, 4), vote(2, 3, 4)]) == set()
    assert unreachable_predecessor(1, 5, {1, 2, 3}, [vote(2, 1, 4), vote(3, 1, 4)]) == set()
    store, clock, channels, ctl = make()
    store.create(paths.controller_unreachable(1), UnreachableVote(1, 3, 4).to_bytes(),
                 makepath=True)
    store.create(paths.controller_unreachable(2), UnreachableVote(2, 3, 4).to_bytes())
    ctl.fencing.start(ctl.context.live)
    defer.Deferred.fromCoroutine(ctl.fencing.inherit())
    assert ctl.fencing.liveness.fenced == {3}
    run(clock, ctl, BEAT, 2)
    assert all(d.leader != 3 and 3 not in d.isr for d in ctl.context.states.values())


def test_time_the_controller_did_not_run_is_not_held_against_the_brokers():
    # The controller's process stalls (SIGSTOP, a long GC) for longer than a session: the
    # brokers' heartbeats wait unread in its sockets. Its first check after the stall credits
    # them that time, so it fences nobody for a silence that was its own.
    store, clock, channels, ctl = make()
    run(clock, ctl, BEAT, 2, 3)
    clock.rightNow += 3 * SESSION  # the process did not run: no timer, no socket read
    beat(ctl, 2)  # on resuming, broker 2's heartbeat is read before the overdue check...
    clock.advance(0)  # ...which runs before broker 3's is read
    assert ctl.fencing.liveness.fenced == frozenset()
    run(clock, ctl, BEAT, 2, 3)
    assert ctl.fencing.liveness.fenced == frozenset()
    # A real silence is still fenced.
    run(clock, ctl, SESSION + BEAT, 2)
    assert ctl.fencing.liveness.fenced == {3}
