"""The controller on failed log directories (KIP-112): a broker's offline-replica record and its
notification move leadership away from those replicas and take them out of the ISRs; a record
of another registration epoch means nothing; the replicas come back only with a new
registration. The store is the in-memory one of the coordinator tests, time a task.Clock."""

from __future__ import annotations

from twisted.internet import defer

from broker_core import metadata_paths as paths
from broker_core.controller import log_dir_failure
from broker_core.controller.batch import LiveBroker, PartitionDecision
from broker_core.controller.election import Election
from broker_core.controller.log_dir_failure import OfflineReplicaSet, offline_replica_changes
from tests.support.controller_harness import make

#: make(): partition p has replicas [1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3], led by the
#: first, every ISR full. So t-2 is led by 3, t-0 by 1 (3 in its ISR), t-1 by 2.
T0, T1, T2, T5 = ("t", 0), ("t", 1), ("t", 2), ("t", 5)


def report(store, broker: int, epoch: int, partitions, seq: int = 0) -> None:
    """What a broker's LogDirFailureReporter writes (the memory store has no sequential
    create, so the test names the notification)."""
    store.ensure_path(paths.OFFLINE_REPLICAS)
    store.ensure_path(paths.LOG_DIR_EVENT_NOTIFICATION)
    value = paths.OfflineReplicas(broker, epoch, ("/d1",), tuple(partitions)).to_bytes()
    path = paths.offline_replicas(broker)
    if path in store.nodes:
        store.set(path, value)
    else:
        store.create(path, value)
    store.create(f"{paths.LOG_DIR_EVENT_PREFIX}{seq:010d}",
                 paths.LogDirEventNotification(broker).to_bytes())


def run(coro) -> None:
    d = defer.Deferred.fromCoroutine(coro)
    assert d.called, "the event did not finish"
    d.result  # noqa: B018 (raise a failure here)


def test_leadership_moves_and_the_isrs_shrink_for_the_reported_replicas_only():
    store, clock, channels, ctl = make()
    epoch = ctl.context.live[3].epoch
    report(store, 3, epoch, [T0, T2])
    run(log_dir_failure.on_log_dir_event(ctl))

    t2 = ctl.context.states[T2]
    assert t2.leader in (1, 2) and 3 not in t2.isr and t2.leader_epoch == 2
    assert ctl.context.states[T0].leader == 1 and ctl.context.states[T0].isr == (1, 2)
    assert ctl.context.states[T0].leader_epoch == 1  # an ISR change is no new leader generation
    assert 3 in ctl.context.states[T1].isr and ctl.context.states[T5].leader == 3  # not reported: untouched
    # Written to the store, so a new controller and the brokers' startup see it.
    assert paths.LeaderAndIsr.from_bytes(store.nodes[paths.leader_and_isr(*T2)][0]).leader \
        == t2.leader
    # The notification is consumed; the record stays (valid for this registration).
    assert store._children(paths.LOG_DIR_EVENT_NOTIFICATION) == []
    assert paths.offline_replicas(3) in store.nodes
    # The brokers were told: LeaderAndIsr to the live replicas of both partitions.
    assert {T0, T2} in channels[1].leader_and_isr()

    # Handling the same report again changes nothing.
    before = dict(ctl.context.states)
    report(store, 3, epoch, [T0, T2], seq=1)
    run(log_dir_failure.on_log_dir_event(ctl))
    assert ctl.context.states == before


def test_the_notification_watch_runs_the_event(monkeypatch):
    store, clock, channels, ctl = make()
    ctl._register_watches()
    report(store, 3, ctl.context.live[3].epoch, [T2])
    assert ctl.context.states[T2].leader != 3
    assert store._children(paths.LOG_DIR_EVENT_NOTIFICATION) == []


def test_a_record_of_another_registration_is_ignored():
    store, clock, channels, ctl = make()
    ctl.context.live[3] = LiveBroker(3, "h", 9003, None, 42)
    report(store, 3, 41, [T2])  # a previous incarnation's
    run(log_dir_failure.on_log_dir_event(ctl))
    assert ctl.context.states[T2].leader == 3
    assert not ctl.context.offline_replicas.partitions(3)


def test_a_partition_with_no_other_in_sync_replica_goes_offline_and_returns_after_a_restart():
    store, clock, channels, ctl = make()
    # t-2 (replicas 3, 1, 2) has shrunk to broker 3 alone.
    d = ctl.context.states[T2]
    ctl.context.states[T2] = PartitionDecision(3, d.leader_epoch, (3,), d.replicas, d.zk_version,
                                       d.controller_epoch, d.leader_broker_epoch)
    report(store, 3, ctl.context.live[3].epoch, [T2])
    run(log_dir_failure.on_log_dir_event(ctl))
    assert ctl.context.states[T2].leader == -1 and ctl.context.states[T2].isr == (3,)
    # Broker 3's replica is never chosen while offline; with unclean election on, another
    # (out-of-sync) replica could be, as for a dead leader.
    ctl.unclean_leader_election = lambda topic: True
    assert ctl._offline_election(T2, ctl.context.states[T2], ctl.context.live).leader in (1, 2)
    assert ctl._offline_election(T2, ctl.context.states[T2], [3]).leader == -1
    ctl.unclean_leader_election = lambda topic: False
    run(ctl.broker_failover.elect_offline_partitions(ctl._new_batch(), send=True))
    assert ctl.context.states[T2].leader == -1
    # Broker 3 restarts (a new registration) with the directory repaired: it leads again.
    del store.nodes[paths.offline_replicas(3)]
    ctl.context.live[3] = LiveBroker(3, "h", 9003, None, -5)  # the old epoch: now is a bounce
    done = defer.Deferred.fromCoroutine(ctl.broker_failover.on_broker_change())
    clock.advance(5)  # the leaders-first wait
    assert done.called
    assert not ctl.context.offline_replicas.partitions(3)
    assert ctl.context.states[T2].leader == 3


def test_a_new_controller_learns_the_offline_replicas_from_the_records():
    store, clock, channels, ctl = make()
    report(store, 3, ctl.context.live[3].epoch, [T2])  # nobody handled the notification yet
    run(log_dir_failure.on_failover(ctl))
    assert ctl.context.states[T2].leader != 3 and ctl.context.offline_replicas.is_offline(3, T2)
    assert store._children(paths.LOG_DIR_EVENT_NOTIFICATION) == []


def test_offline_replica_changes_table():
    def dec(leader, isr, replicas=(1, 2, 3)):
        return PartitionDecision(leader, 4, isr, replicas, 7, 1)

    states = {("a", 0): dec(3, (3, 1, 2)), ("a", 1): dec(1, (1, 3)), ("a", 2): dec(1, (1, 2)),
              ("a", 3): dec(3, (3,)), ("a", 4): dec(-1, (3,)), ("b", 0): dec(1, (1,), (1, 2))}
    offline = OfflineReplicaSet()
    offline.record(3, 9, [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 0)])
    offline.record(1, 9, [("a", 0)])  # broker 1's replica of a-0 is offline too
    changes = offline_replica_changes(states, 3, offline.partitions(3), {1, 2, 3},
                                      offline.usable, lambda topic: False)
    assert changes == {
        ("a", 0): Election(2, (2,)),       # 1 is in the ISR but its replica is offline too
        ("a", 1): Election(1, (1,)),       # a follower leaves the ISR
        ("a", 3): Election(-1, (3,)),      # nobody else: offline, ISR kept
    }                                      # a-2, a-4, b-0: nothing to do


def test_the_offline_set_is_per_registration():
    s = OfflineReplicaSet()
    assert s.record(3, 1, [T0, T1]) == {T0, T1}
    assert s.record(3, 1, [T1, T2]) == {T2}
    assert s.partitions(3) == {T0, T1, T2} and len(s) == 3
    assert s.record(3, 2, [T5]) == {T5} and s.partitions(3) == {T5}  # a new incarnation
    assert s.usable(T5, [1, 2, 3]) == [1, 2]
    s.forget([3])
    assert s.brokers() == [] and s.usable(T5, [1, 3]) == [1, 3]


def test_the_new_leader_is_neither_fenced_nor_shutting_down_when_another_can_lead():
    """t-2 (replicas 3, 1, 2) loses its leader 3's replica: broker 1, first in assignment
    order, is fenced (or shutting down), so 2 leads; with both others unavailable except a
    broker shutting down, that one still leads rather than none."""
    store, clock, channels, ctl = make()
    ctl._fenced_brokers = lambda: {1}
    report(store, 3, ctl.context.live[3].epoch, [T2])
    run(log_dir_failure.on_log_dir_event(ctl))
    assert ctl.context.states[T2].leader == 2 and ctl.context.states[T2].isr == (2,)  # fenced: out too

    store, clock, channels, ctl = make()
    ctl.context.shutting_down = {1}
    report(store, 3, ctl.context.live[3].epoch, [T2])
    run(log_dir_failure.on_log_dir_event(ctl))
    assert ctl.context.states[T2].leader == 2

    store, clock, channels, ctl = make()
    ctl.context.shutting_down = {1}
    ctl._fenced_brokers = lambda: {2}
    report(store, 3, ctl.context.live[3].epoch, [T2])
    run(log_dir_failure.on_log_dir_event(ctl))
    assert ctl.context.states[T2].leader == 1  # only 1 can: shutting down, it still serves
