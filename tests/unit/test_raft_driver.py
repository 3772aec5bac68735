"""The Raft driver's contract, on ``task.Clock`` with an in-memory loopback between drivers:
the quorum state is on disk before any message revealing it leaves, the one timer follows the
node's next deadline, proposals settle on commit / truncation / stop, committed entries reach
subscribers once and in order."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from twisted.internet import task
from zope.interface.verify import verifyObject

from broker_core.raft import InMemoryRaftLog, NotLeaderError, Role
from broker_core.raft.driver import DriverStopped, EntryTruncated, IRaftTransport, RaftDriver
from broker_core.raft.messages import VoteResponse
from broker_core.raft.quorum_state import (
    QuorumState,
    QuorumStateError,
    read_quorum_state,
    write_quorum_state,
)
from tests.support.raft_loopback import CONFIG, Loopback, _NodeTransport, leader_of, run_until


def _epoch_of(message) -> int:
    for name in ("candidate_epoch", "leader_epoch", "current_leader_epoch"):
        if hasattr(message, name):
            return getattr(message, name)
    raise AssertionError(f"no epoch in {message}")






def make_quorum(tmp_path: Path, clock: task.Clock, loop: Loopback, ids=(1, 2, 3), seed=7
                ) -> dict[int, RaftDriver]:
    rng = random.Random(seed)
    for n in ids:
        driver = RaftDriver(n, "cluster-a", frozenset(ids), InMemoryRaftLog(), tmp_path / str(n),
                            CONFIG, clock, loop.transport_for(n), random.Random(rng.random()))
        loop.drivers[n] = driver
    for driver in loop.drivers.values():
        driver.start()
    return loop.drivers






def test_driver_transport_interface_is_provided():
    verifyObject(IRaftTransport, _NodeTransport(Loopback(task.Clock()), 1))


@pytest.mark.parametrize("delay", [0.001, None], ids=["delayed", "synchronous"])
def test_quorum_state_is_on_disk_before_a_message_revealing_it_leaves(tmp_path, delay):
    clock = task.Clock()
    clock.advance(1000)
    loop = Loopback(clock, delay)
    drivers = make_quorum(tmp_path, clock, loop)
    run_until(clock, lambda: leader_of(drivers) is not None
              and all(d.high_watermark >= 2 for d in drivers.values()), within_s=10)
    assert loop.handed, "no message was sent"
    granted = 0
    for env, persisted in loop.handed:
        assert persisted is not None, f"{env} left before any quorum state was written"
        assert persisted.leader_epoch >= _epoch_of(env.message), (env, persisted)
        if isinstance(env.message, VoteResponse) and env.message.vote_granted:
            granted += 1
            assert persisted.leader_epoch == env.message.leader_epoch
            assert persisted.voted_id == env.destination, (env, persisted)
    assert granted >= 1
    # The winner's epoch is durable on every node that follows it.
    leader = leader_of(drivers)
    for d in drivers.values():
        assert read_quorum_state(d.data_dir).leader_epoch == leader.node.epoch


def _timer_matches_deadline(clock: task.Clock, driver: RaftDriver) -> None:
    calls = [c for c in clock.getDelayedCalls() if c.active()]
    deadline = driver.node.next_deadline()
    if deadline is None:
        assert calls == []
    else:
        assert len(calls) == 1, calls
        assert calls[0].getTime() == pytest.approx(max(deadline / 1000, clock.seconds()))


def test_one_timer_follows_the_next_deadline_after_every_step(tmp_path):
    clock = task.Clock()
    clock.advance(50)
    driver = RaftDriver(1, "cluster-a", frozenset({1}), InMemoryRaftLog(), tmp_path, CONFIG,
                        clock, Loopback(clock).transport_for(1), random.Random(1))
    driver.start()
    _timer_matches_deadline(clock, driver)
    first = driver.node.next_deadline()
    clock.advance(first / 1000 - clock.seconds())  # the election timeout: stands and wins
    assert driver.role is Role.LEADER
    _timer_matches_deadline(clock, driver)
    for _ in range(3):
        driver.propose(b"x")
        clock.advance(0)  # the proposal's step runs at the end of the turn
        _timer_matches_deadline(clock, driver)
        clock.advance(0.01)
        _timer_matches_deadline(clock, driver)
    driver.stop(graceful=False)
    assert [c for c in clock.getDelayedCalls() if c.active()] == []


def test_propose_fires_with_the_offset_once_committed_and_after_the_flush(tmp_path):
    clock = task.Clock()
    loop = Loopback(clock)
    drivers = make_quorum(tmp_path, clock, loop)
    run_until(clock, lambda: leader_of(drivers) is not None, within_s=10)
    leader = leader_of(drivers)
    flushes_before = leader.raft_log.flushes
    results: list[int] = []
    ds = [leader.propose(f"p{i}".encode()) for i in range(5)]
    for d in ds:
        d.addCallback(results.append)
    clock.advance(0)
    assert results == []  # needs the followers' fetches first
    # The five proposals of one turn were appended and flushed together.
    assert leader.raft_log.flushes == flushes_before + 1
    assert leader.raft_log.end_offset() >= 5
    run_until(clock, lambda: len(results) == 5, within_s=5)
    end = leader.raft_log.end_offset()
    assert results == list(range(end - 5, end))
    assert [leader.raft_log.read(o, 1)[0].payload for o in results] == \
        [f"p{i}".encode() for i in range(5)]


def test_a_follower_propose_fails_naming_the_leader(tmp_path):
    clock = task.Clock()
    loop = Loopback(clock)
    drivers = make_quorum(tmp_path, clock, loop)
    run_until(clock, lambda: leader_of(drivers) is not None
              and all(d.leader_id >= 0 for d in drivers.values()), within_s=10)
    leader = leader_of(drivers)
    follower = next(d for d in drivers.values() if d is not leader)
    failures = []
    follower.propose(b"x").addErrback(failures.append)
    clock.advance(0)
    assert len(failures) == 1
    failures[0].trap(NotLeaderError)
    assert failures[0].value.leader_id == leader.node_id
    assert f"known leader: {leader.node_id}" in str(failures[0].value)


def test_a_proposal_truncated_away_fails_and_the_new_leaders_entries_commit(tmp_path):
    clock = task.Clock()
    loop = Loopback(clock)
    drivers = make_quorum(tmp_path, clock, loop)
    run_until(clock, lambda: leader_of(drivers) is not None
              and all(d.high_watermark >= 2 for d in drivers.values()), within_s=10)
    old = leader_of(drivers)
    loop.isolated.add(old.node_id)
    failures: list = []
    committed: list = []
    old.propose(b"never-committed").addCallbacks(committed.append, failures.append)
    others = {n: d for n, d in drivers.items() if d is not old}
    run_until(clock, lambda: leader_of(others) is not None, within_s=10)
    new = leader_of(others)
    assert new.node.epoch > old.node.epoch
    new_results: list = []
    new.propose(b"replacement").addCallback(new_results.append)
    clock.advance(0)
    run_until(clock, lambda: new_results, within_s=5)
    loop.isolated.clear()
    run_until(clock, lambda: failures or committed, within_s=20)
    assert committed == []
    failures[0].trap(EntryTruncated)
    assert "truncated away" in str(failures[0].value)
    run_until(clock, lambda: old.high_watermark >= new.high_watermark, within_s=10)
    payloads = [e.payload for e in old.raft_log.read(0, 100)]
    assert b"replacement" in payloads and b"never-committed" not in payloads


def test_committed_entries_reach_each_subscriber_once_in_order(tmp_path):
    clock = task.Clock()
    loop = Loopback(clock)
    drivers = make_quorum(tmp_path, clock, loop)
    seen: dict[int, list] = {n: [] for n in drivers}
    for n, d in drivers.items():
        d.subscribe_committed(lambda chunk, n=n: seen[n].extend(chunk))
    run_until(clock, lambda: leader_of(drivers) is not None, within_s=10)
    leader = leader_of(drivers)
    done: list = []
    for i in range(30):
        leader.propose(f"e{i}".encode()).addCallback(done.append)
        clock.advance(0.002)
    run_until(clock, lambda: len(done) == 30
              and all(d.high_watermark == leader.high_watermark for d in drivers.values()),
              within_s=10)
    for n, d in drivers.items():
        assert [e.offset for e in seen[n]] == list(range(d.high_watermark)), n
        assert seen[n] == list(leader.raft_log.read(0, d.high_watermark))
    late: list = []
    leader.subscribe_committed(late.extend)  # a late subscriber gets the past first
    assert late == seen[leader.node_id]


def test_stop_fails_pending_proposals_and_silences_the_node(tmp_path):
    clock = task.Clock()
    loop = Loopback(clock)
    drivers = make_quorum(tmp_path, clock, loop)
    run_until(clock, lambda: leader_of(drivers) is not None, within_s=10)
    leader = leader_of(drivers)
    loop.isolated.add(leader.node_id)
    failures: list = []
    leader.propose(b"x").addErrback(failures.append)
    clock.advance(0)
    leader.stop(graceful=False)
    failures[0].trap(DriverStopped)
    sent = len(loop.handed)
    clock.advance(1)
    assert all(env.source != leader.node_id for env, _ in loop.handed[sent:])
    stopped: list = []
    leader.propose(b"y").addErrback(stopped.append)
    stopped[0].trap(DriverStopped)


def test_a_graceful_stop_of_the_leader_resigns_and_another_leads_soon(tmp_path):
    clock = task.Clock()
    loop = Loopback(clock)
    drivers = make_quorum(tmp_path, clock, loop)
    run_until(clock, lambda: leader_of(drivers) is not None
              and all(d.high_watermark >= 2 for d in drivers.values()), within_s=10)
    old = leader_of(drivers)
    old.stop(graceful=True)
    assert old.role is Role.RESIGNED
    others = {n: d for n, d in drivers.items() if d is not old}
    # EndQuorumEpoch lets a successor stand within the election backoff, well before the
    # fetch timeout would have run out.
    start = clock.seconds()
    run_until(clock, lambda: leader_of(others) is not None, within_s=10)
    assert clock.seconds() - start < CONFIG.fetch_timeout_ms / 1000


class _FailingFlushLog(InMemoryRaftLog):
    """A log whose disk fails: every flush raises."""

    def __init__(self, loop: Loopback) -> None:
        super().__init__()
        self.loop = loop
        self.first_append_at: int | None = None  # how many envelopes had been handed then

    def append(self, entries) -> None:
        if entries and self.first_append_at is None:
            self.first_append_at = len(self.loop.handed)
        super().append(entries)

    def flush(self) -> None:
        raise OSError("disk gone")


def test_a_failed_flush_stops_the_node_before_its_messages_leave(tmp_path):
    clock = task.Clock()
    loop = Loopback(clock)
    drivers = make_quorum(tmp_path, clock, loop)
    broken = drivers[1]
    broken.stop(graceful=False)
    failing = _FailingFlushLog(loop)
    broken = RaftDriver(1, "cluster-a", frozenset(drivers), failing, tmp_path / "1b", CONFIG,
                        clock, loop.transport_for(1), random.Random(3))
    loop.drivers[1] = broken
    broken.start()
    run_until(clock, lambda: failing.first_append_at is not None, within_s=10)
    assert not broken.running
    assert all(env.source != 1 for env, _ in loop.handed[failing.first_append_at:])
    others = {n: d for n, d in drivers.items() if n != 1}
    run_until(clock, lambda: leader_of(others) is not None, within_s=10)


def test_a_data_directory_of_another_cluster_refuses_to_start(tmp_path):
    clock = task.Clock()
    write_quorum_state(tmp_path, QuorumState("cluster-b", -1, 4, -1, -1, (1, 2, 3)))
    driver = RaftDriver(1, "cluster-a", frozenset({1, 2, 3}), InMemoryRaftLog(), tmp_path,
                        CONFIG, clock, Loopback(clock).transport_for(1))
    with pytest.raises(QuorumStateError, match="belongs to cluster 'cluster-b', not 'cluster-a'"):
        driver.start()
    assert not driver.running


def test_a_snapshot_installed_from_the_leader_goes_to_the_loaders_and_entries_go_on_after_it(
        tmp_path):
    clock = task.Clock()
    loop = Loopback(clock)
    config = dataclasses.replace(CONFIG, snapshot_retain_entries=0)
    rng = random.Random(3)
    for n in (1, 2, 3):
        loop.drivers[n] = RaftDriver(n, "cluster-a", frozenset({1, 2, 3}), InMemoryRaftLog(),
                                     tmp_path / str(n), config, clock, loop.transport_for(n),
                                     random.Random(rng.random()))
        loop.drivers[n].start()
    drivers = loop.drivers
    run_until(clock, lambda: leader_of(drivers) is not None, within_s=10)
    leader = leader_of(drivers)
    behind = next(d for d in drivers.values() if d is not leader)
    seen: list = []
    loaded: list = []
    behind.subscribe_committed(seen.extend, load_snapshot=loaded.append)
    loop.isolated.add(behind.node_id)
    done: list = []
    for i in range(30):
        leader.propose(f"e{i}".encode()).addCallback(done.append)
        clock.advance(0.002)
    run_until(clock, lambda: len(done) == 30, within_s=10)
    for d in drivers.values():
        if d is not behind:
            d.take_snapshot(d.high_watermark, b"state at %d" % d.high_watermark)
    clock.advance(0.01)
    assert leader.raft_log.start_offset() > behind.raft_log.end_offset()
    loop.isolated.clear()
    run_until(clock, lambda: behind.high_watermark == leader.high_watermark
              and behind.raft_log.end_offset() == leader.raft_log.end_offset(), within_s=10)
    (snapshot,) = loaded
    assert snapshot == leader.node.latest_snapshot and behind.node.snapshots_installed == 1
    before = [e for e in seen if e.offset < snapshot.end_offset]
    after = [e.offset for e in seen if e.offset >= snapshot.end_offset]
    assert [e.offset for e in before] == list(range(len(before)))  # what it had, then none
    assert after == list(range(snapshot.end_offset, behind.high_watermark))
