"""The controller's conditional leader/ISR writes when a write conflicts: each
retry decides again from the re-read state, a write that committed before the failing multi is
not applied twice, and partitions that conflict in every round are logged and decided again
later. ``DecisionRounds`` (the sans-IO loop) on its own, then the controller on the in-memory
store with time on a ``task.Clock``."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet import defer
from twisted.logger import Logger, formatEvent

from broker_core import fenced_writer
from broker_core import metadata_paths as paths
from broker_core.controller import controller as controller_module
from broker_core.controller.batch import LiveBroker, PartitionDecision
from broker_core.controller.decisions import GONE, DecisionRounds, conflicting
from broker_core.controller.election import Election
from broker_core.controller.event_manager import CONFLICT_RETRY_S
from broker_core.metadata import SetData, Stat
from tests.support.controller_harness import make
from tests.support.memory_store import MemoryStore

T0, T1 = ("t", 0), ("t", 1)


def state(leader=1, epoch=1, isr=(1, 2, 3), version=0) -> PartitionDecision:
    return PartitionDecision(leader, epoch, tuple(isr), (1, 2, 3), version, 5)


def make_decision(cur: PartitionDecision, el: Election) -> PartitionDecision:
    epoch = cur.leader_epoch + (1 if el.leader != cur.leader or el.new_generation else 0)
    return PartitionDecision(el.leader, epoch, el.isr, cur.replicas, cur.zk_version + 1, 5)


def drop_3(tp, d: PartitionDecision) -> Election | None:
    """The rule of the tests below: broker 3 is gone; a leader 3 hands over to the first other
    ISR member."""
    if 3 not in d.isr:
        return None
    isr = tuple(b for b in d.isr if b != 3)
    return Election(isr[0] if d.leader == 3 else d.leader, isr)


# -- DecisionRounds ------------------------------------------------------------------------------


def test_a_conflicting_partition_is_decided_again_from_the_fresh_state():
    states = {T0: state(leader=3, isr=(3, 1, 2))}
    r = DecisionRounds([T0], drop_3, make_decision)
    assert r.next_writes(states) == {T0: state(leader=1, epoch=2, isr=(1, 2), version=1)}
    # Meanwhile broker 1 left the ISR (version 1): electing 1 now could lose messages.
    fresh = state(leader=3, isr=(3, 2), version=1)
    r.conflicted({T0: fresh})
    states[T0] = fresh
    assert r.next_writes(states) == {T0: state(leader=2, epoch=2, isr=(2,), version=2)}
    r.succeeded()
    assert r.written[T0].decision.leader == 2 and r.written[T0].base == fresh
    assert r.next_writes(states) == {} and r.dropped == {}


def test_a_write_found_committed_is_not_decided_again():
    states = {T0: state(leader=3, isr=(3, 1)), T1: state(isr=(1, 3))}
    r = DecisionRounds([T0, T1], drop_3, make_decision)
    planned = r.next_writes(states)
    # T0's multi committed, T1's failed: T0 holds exactly what was planned.
    r.conflicted({T0: planned[T0], T1: state(isr=(1, 3), version=4)})
    states.update({T0: planned[T0], T1: state(isr=(1, 3), version=4)})
    assert set(r.next_writes(states)) == {T1}  # T0's epoch is not bumped a second time
    r.succeeded()
    assert r.written[T0].decision == planned[T0] and r.written[T1].decision.zk_version == 5


def test_what_conflicts_every_round_or_vanishes_is_dropped_with_a_reason():
    states = {T0: state(isr=(1, 3)), T1: state(isr=(1, 3))}
    r = DecisionRounds([T0, T1], drop_3, make_decision, rounds=2)
    for version in (1, 2):
        r.next_writes(states)
        fresh = {T0: state(isr=(1, 3), version=version), T1: None}
        r.conflicted(fresh)
        states = {T0: fresh[T0]}
    assert r.next_writes(states) == {}
    assert r.dropped == {T0: conflicting(2), T1: GONE} and r.written == {}


def test_a_partition_needing_nothing_any_more_is_neither_written_nor_dropped():
    states = {T0: state(isr=(1, 3))}
    r = DecisionRounds([T0], drop_3, make_decision)
    r.next_writes(states)
    r.conflicted({T0: state(isr=(1, 2), version=1)})  # someone else took 3 out already
    assert r.next_writes({T0: state(isr=(1, 2), version=1)}) == {}
    assert r.written == {} and r.dropped == {}


# -- the controller ------------------------------------------------------------------------------


def znode(store: MemoryStore, p: int) -> paths.LeaderAndIsr:
    return paths.LeaderAndIsr.from_bytes(store.nodes[paths.leader_and_isr("t", p)][0])


def test_a_retried_election_is_decided_from_the_re_read_state():
    store, clock, channels, ctl = make()
    # t-2 (replicas 3, 1, 2, led by 3): its state changed behind the controller's back and
    # broker 1 is no longer in its ISR.
    store.set(paths.leader_and_isr("t", 2), paths.LeaderAndIsr(3, 1, [3, 2], 5).to_bytes())
    store.delete(paths.broker(3))
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    for b in (1, 2):
        channels[b].answer()
    assert done.called
    st = znode(store, 2)
    # The old decision (leader 1, ISR 1, 2) would have elected an out-of-sync replica.
    assert (st.leader, st.isr, st.leader_epoch) == (2, [2], 2)
    assert ctl.context.states[("t", 2)].leader == 2


def test_a_restarted_leaders_epoch_bump_committed_before_a_failed_multi_is_applied_once(
        monkeypatch):
    monkeypatch.setattr(fenced_writer, "MULTI_BATCH", 1)  # one multi per partition
    store, clock, channels, ctl = make()
    # Broker 2 (leader of t-1, t-4, t-7) restarted; t-7's znode was rewritten meanwhile, so its
    # multi fails after those of t-1 and t-4 committed.
    ctl.context.live[2] = LiveBroker(2, "h", 9002, None, -7)
    path = paths.leader_and_isr("t", 7)
    store.set(path, store.nodes[path][0])
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    clock.advance(controller_module.LEADERS_FIRST_WAIT_S)
    assert done.called
    assert [znode(store, p).leader_epoch for p in (1, 4, 7)] == [2, 2, 2]
    assert channels[1].leader_and_isr()[0] == {("t", 1), ("t", 4), ("t", 7)}


class InterferingStore(MemoryStore):
    """Another writer rewrites ``path`` just before each of the next ``times`` multis that set
    it (test-only)."""

    def __init__(self) -> None:
        super().__init__()
        self.path = ""
        self.times = 0

    def multi(self, ops):
        if self.times and any(isinstance(op, SetData) and op.path == self.path for op in ops):
            self.times -= 1
            data, version = self.nodes[self.path]
            self.nodes[self.path] = (data, version + 1)
        return super().multi(ops)


def test_a_partition_conflicting_every_round_is_logged_and_decided_again_later(monkeypatch):
    monkeypatch.setattr(fenced_writer, "MULTI_BATCH", 1)
    store, clock, channels, ctl = make(store=InterferingStore())
    events: list[dict] = []
    ctl.log = Logger(namespace="sluice.controller", observer=events.append)
    store.path, store.times = paths.leader_and_isr("t", 2), 3
    store.delete(paths.broker(3))
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    for b in (1, 2):
        channels[b].answer()
    assert done.called
    assert znode(store, 2).leader == 3  # not written: every round conflicted
    assert znode(store, 5).leader != 3 and znode(store, 8).leader != 3
    lines = [formatEvent(e) for e in events]
    assert [line for line in lines if "t-2 not written" in line] == [
        f"new leaders: t-2 not written: {conflicting(3)}; deciding again in "
        f"{CONFLICT_RETRY_S}s"]
    before = len(channels[1].leader_and_isr())
    clock.advance(CONFLICT_RETRY_S)
    st = znode(store, 2)
    assert (st.leader, st.isr, st.leader_epoch) == (1, [1, 2], 2)
    assert ctl.context.states[("t", 2)].leader == 1
    assert channels[1].leader_and_isr()[before:] == [{("t", 2)}]  # the retry's decision sent


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def inc(self, n: int = 1) -> None:
        self.value += n


def test_an_unclean_election_is_logged_and_counted_once_when_written(monkeypatch):
    monkeypatch.setattr(fenced_writer, "MULTI_BATCH", 1)
    store, clock, channels, ctl = make(store=InterferingStore())
    ctl.unclean_leader_election = lambda topic: True
    ctl.metrics = SimpleNamespace(unclean_leader_elections_total=Counter())
    events: list[dict] = []
    ctl.log = Logger(namespace="sluice.controller", observer=events.append)
    # t-2 (replicas 3, 1, 2) has only broker 3 in its ISR; its first write conflicts.
    path = paths.leader_and_isr("t", 2)
    store.set(path, paths.LeaderAndIsr(3, 1, [3], 5).to_bytes())
    data, version = store.nodes[path]
    ctl.context.states[("t", 2)] = ctl.context.decision_from(("t", 2), data, Stat(version, 0))
    store.path, store.times = path, 1
    store.delete(paths.broker(3))
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    for b in (1, 2):
        channels[b].answer()
    assert done.called
    assert znode(store, 2).leader == 1 and znode(store, 2).isr == [1]
    assert ctl.metrics.unclean_leader_elections_total.value == 1
    assert [formatEvent(e) for e in events if "UNCLEAN" in formatEvent(e)] == [
        "UNCLEAN leader election for t-2: broker 1 was not in the ISR [3]; committed messages "
        "may be lost"]


def test_a_retry_pending_when_the_controller_resigns_is_cancelled(monkeypatch):
    monkeypatch.setattr(fenced_writer, "MULTI_BATCH", 1)
    store, clock, channels, ctl = make(store=InterferingStore())
    store.path, store.times = paths.leader_and_isr("t", 2), 3
    store.delete(paths.broker(3))
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    for b in (1, 2):
        channels[b].answer()
    assert done.called and clock.getDelayedCalls()
    defer.Deferred.fromCoroutine(ctl._resign())
    assert not [c for c in clock.getDelayedCalls() if c.active()]
