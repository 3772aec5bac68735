"""The Raft core and snapshots (RaftNode.create_snapshot, start from a snapshot): only committed
state is kept; the snapshot records the voters in force at its end; a restarted node starts from
its latest snapshot (entries below it committed, its voters when newer than the persisted ones,
its log reset when it does not continue the snapshot); a leader whose log no longer holds what a
fetcher needs names its snapshot (FetchSnapshot: test_raft_fetch_snapshot.py); and in the
simulation nodes snapshot at random points, crash, restart from their snapshots, and every state
machine equals the committed log applied from scratch."""

from __future__ import annotations

import dataclasses

import pytest

from broker_core.raft import InMemoryRaftLog, QuorumState, RaftNode, Role
from broker_core.raft.entries import LogEntry, VoterAssignment
from broker_core.raft.messages import FetchRequest, FetchResponse, VoteResponse
from broker_core.raft.snapshots import InMemorySnapshotStore, Snapshot, SnapshotId
from broker_core.wire.errors import ErrorCode
from tests.support.raft_invariants import InvariantViolation
from tests.support.raft_nodes import CLUSTER, CONFIG, FixedRandom, env, sent
from tests.support.raft_sim import SIM_CONFIG, Faults, Simulation


def single_voter_leader(config=CONFIG, entries: int = 20) -> RaftNode:
    node = RaftNode(1, CLUSTER, frozenset({1}), InMemoryRaftLog(), config, FixedRandom(), 0.0)
    node.tick(config.election_timeout_ms * 2)
    assert node.role is Role.LEADER
    for i in range(entries):
        node.propose(b"e%d" % i, 3000.0 + i)
    return node


def test_only_committed_state_is_kept_and_the_snapshot_names_its_end_epoch_and_voters():
    node = single_voter_leader()
    hw = node.high_watermark
    with pytest.raises(ValueError, match="past the high watermark"):
        node.create_snapshot(hw + 1, b"s", 4000.0)
    node.create_snapshot(hw, b"state", 4000.0)
    snapshot = node.latest_snapshot
    assert snapshot == node.snapshots.latest()
    assert snapshot.snapshot_id == SnapshotId(hw, node.log.epoch_at(hw - 1))
    assert snapshot.voters == VoterAssignment(CLUSTER, (1,))
    assert snapshot.voters_offset == 0  # the bootstrap assignment, the log's first entry
    node.create_snapshot(hw - 1, b"older", 4001.0)  # not newer: nothing changes
    assert node.latest_snapshot == snapshot
    assert node.log.start_offset() == 0  # the default keeps the whole log


def test_with_retention_the_prefix_goes_and_a_fetch_below_it_is_told_of_the_snapshot():
    config = dataclasses.replace(CONFIG, snapshot_retain_entries=5)
    node = RaftNode(1, CLUSTER, frozenset({1, 2}), InMemoryRaftLog(), config, FixedRandom(),
                    0.0)
    # Leader of a two-voter quorum whose follower fetched everything: entries commit.
    node.tick(2000.0)
    node.receive(env(2, 1, _vote_granted(node.epoch)), 2001.0)
    assert node.role is Role.LEADER
    for i in range(20):
        node.propose(b"e%d" % i, 2002.0 + i)
    end = node.log.end_offset()
    node.receive(env(2, 1, _fetch(end, node.log.last_epoch(), node.epoch)), 2100.0)
    assert node.high_watermark == end
    node.create_snapshot(end, b"state", 2200.0)
    assert node.log.start_offset() == end - 5
    fx = node.receive(env(2, 1, _fetch(3, 1, node.epoch), correlation_id=7), 2300.0)
    (answer,) = sent(fx, FetchResponse, to=2)
    assert answer.message.snapshot_id == node.latest_snapshot.snapshot_id  # FetchSnapshot
    fx = node.receive(env(2, 1, _fetch(end - 2, node.log.last_epoch(), node.epoch)), 2400.0)
    (answer,) = sent(fx, FetchResponse, to=2)
    assert answer.message.error_code is ErrorCode.NONE  # above the start: entries as usual


def _vote_granted(epoch):
    return VoteResponse(ErrorCode.NONE, -1, epoch, True)


def _fetch(offset, last_epoch, epoch):
    return FetchRequest(CLUSTER, 2, epoch, offset, last_epoch, 0)


def test_a_restarted_node_starts_from_its_snapshot_with_the_snapshots_newer_voters():
    log = InMemoryRaftLog([LogEntry(i, 1, b"x") for i in range(10)])
    store = InMemorySnapshotStore()
    store.save(Snapshot(SnapshotId(8, 1), VoterAssignment(CLUSTER, (1, 2, 4)), 5, b"s"))
    node = RaftNode(1, CLUSTER, frozenset({1, 2, 3}), log, CONFIG, FixedRandom(), 0.0,
                    snapshots=store)
    assert node.high_watermark == 8
    assert node.voters == frozenset({1, 2, 4})
    assert node.log.end_offset() == 10  # the log continues the snapshot: kept


def test_a_log_that_does_not_continue_the_snapshot_is_reset_to_it():
    # Installed from a leader, then the node stopped before its log was reset.
    log = InMemoryRaftLog([LogEntry(i, 1, b"x") for i in range(3)])
    store = InMemorySnapshotStore()
    store.save(Snapshot(SnapshotId(50, 4), VoterAssignment(CLUSTER, (1, 2, 3)), 0, b"s"))
    node = RaftNode(1, CLUSTER, frozenset({1, 2, 3}), log, CONFIG, FixedRandom(), 0.0,
                    snapshots=store)
    assert (log.start_offset(), log.end_offset(), log.last_epoch()) == (50, 50, 4)
    assert node.high_watermark == 50


def test_a_snapshot_of_another_cluster_is_refused():
    store = InMemorySnapshotStore()
    store.save(Snapshot(SnapshotId(1, 1), VoterAssignment("other", (1,)), 0, b"s"))
    with pytest.raises(ValueError, match="other"):
        RaftNode(1, CLUSTER, frozenset({1}), InMemoryRaftLog([LogEntry(0, 1, b"x")]), CONFIG,
                 FixedRandom(), 0.0, snapshots=store)


def test_in_the_simulation_nodes_restart_from_their_snapshots_and_agree():
    sim = Simulation(11, voters=(1, 2, 3), faults=Faults(crashes_per_s=2.0, drop=0.05),
                     snapshot_every_ms=50.0)
    restarts_from_snapshot = []
    original = sim._start_node

    def start(n):
        original(n)
        if sim.nodes[n].latest_snapshot is not None:
            restarts_from_snapshot.append(n)

    sim._start_node = start
    sim.run_for(3000.0)
    assert sum(s.saves for s in sim.snapshot_stores.values()) > 10
    assert restarts_from_snapshot


def test_the_checker_catches_a_state_machine_that_diverges_from_the_log():
    class LossySnapshots(RaftNode):
        """Keeps a snapshot one entry short of the state it is given: the state machine that
        restarts from it has skipped an entry."""

        def create_snapshot(self, end_offset, state, now):
            e, _, digest = state.partition(b":")
            return super().create_snapshot(end_offset - 1, b"%d:%s" % (int(e) - 1, digest),
                                           now)

    with pytest.raises(InvariantViolation, match="state machine"):
        for seed in range(20):
            sim = Simulation(seed, voters=(1, 2, 3), faults=Faults(crashes_per_s=3.0),
                             snapshot_every_ms=30.0, node_factory=LossySnapshots,
                             config=SIM_CONFIG)
            sim.run_for(2000.0)


def test_after_a_restart_a_snapshot_below_the_persisted_assignment_finds_its_voters_in_the_log():
    entries = [LogEntry(0, 1, VoterAssignment(CLUSTER, (1,)))]
    entries += [LogEntry(i, 1, b"x") for i in range(1, 30)]
    entries += [LogEntry(30, 1, VoterAssignment(CLUSTER, (1,), (1, 2)))]
    persisted = QuorumState(CLUSTER, -1, 1, -1, applied_offset=30, current_voters=(1,),
                            target_voters=(1, 2))
    node = RaftNode(1, CLUSTER, frozenset({1}), InMemoryRaftLog(entries), CONFIG, FixedRandom(),
                    0.0, persisted)
    node.tick(5000.0)
    assert node.role is Role.LEADER and node.high_watermark > 30
    node.create_snapshot(27, b"s", 6000.0)  # the state machine is still replaying
    assert node.latest_snapshot.voters == VoterAssignment(CLUSTER, (1,))
    assert node.latest_snapshot.voters_offset == 0
