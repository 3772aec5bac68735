"""FetchSnapshot in the Raft core (KIP-630): a leader whose log no longer holds what a fetcher
needs names its latest snapshot; the fetcher gets it chunk by chunk, checks it, installs it
(snapshot store, log reset to its end, its voters, its end as the high watermark, the
``installed_snapshot`` effect for the state machine) and fetches on from its end. A new epoch,
an error answer or a damaged snapshot drops the transfer and the next Fetch starts it again; a
lost chunk is asked for again. In the simulation, a voter that was down while the others
snapshotted and deleted their prefixes, and an observer that joins late, catch up so."""

from __future__ import annotations

import dataclasses
import math

from broker_core.raft import InMemoryRaftLog, RaftNode, Role
from broker_core.raft.entries import VoterAssignment
from broker_core.raft.messages import (
    BeginQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteResponse,
)
from broker_core.raft.snapshots import SnapshotId
from broker_core.wire.errors import ErrorCode
from tests.support.raft_nodes import CLUSTER, CONFIG, FixedRandom, env, sent
from tests.support.raft_sim import SIM_CONFIG, Faults, Simulation

SMALL_CHUNKS = dataclasses.replace(CONFIG, snapshot_retain_entries=0, fetch_snapshot_max_bytes=16)
STATE = b"the state machine's state " * 3


def leader_with_snapshot(entries_after: int = 3) -> RaftNode:
    """Node 1 leads voters {1, 2}; 20 entries are committed (node 2 fetched them), a snapshot
    covers them and the log's prefix below it is gone; ``entries_after`` more follow."""
    node = RaftNode(1, CLUSTER, frozenset({1, 2}), InMemoryRaftLog(), SMALL_CHUNKS,
                    FixedRandom(), 0.0)
    node.tick(2000.0)
    node.receive(env(2, 1, VoteResponse(ErrorCode.NONE, -1, node.epoch, True)), 2001.0)
    assert node.role is Role.LEADER
    for i in range(20):
        node.propose(b"e%d" % i, 2002.0)
    end = node.log.end_offset()
    node.receive(env(2, 1, FetchRequest(CLUSTER, 2, node.epoch, end, node.log.last_epoch(), 0)),
                 2100.0)
    assert node.high_watermark == end
    node.create_snapshot(end, STATE, 2200.0)
    assert node.log.start_offset() == end  # nothing retained
    for i in range(entries_after):
        node.propose(b"after%d" % i, 2300.0)
    return node


def fresh_node(node_id: int = 2, voters=(1, 2)) -> RaftNode:
    return RaftNode(node_id, CLUSTER, frozenset(voters), InMemoryRaftLog(), SMALL_CHUNKS,
                    FixedRandom(), 0.0)


class Wire:
    """Delivers the envelopes two or more nodes send each other, in order, at one time."""

    def __init__(self, *nodes: RaftNode) -> None:
        self.nodes = {n.node_id: n for n in nodes}
        self.log: list[Envelope] = []  # everything delivered
        self.effects: list = []

    def pump(self, messages: list[Envelope], now: float, drop=lambda e: False,
             limit: int = 1000) -> None:
        queue = list(messages)
        while queue and limit:
            limit -= 1
            e = queue.pop(0)
            if e.destination not in self.nodes or drop(e):
                continue
            self.log.append(e)
            fx = self.nodes[e.destination].receive(e, now)
            self.effects.append(fx)
            queue.extend(fx.messages)

    def of(self, kind: type) -> list[Envelope]:
        return [e for e in self.log if isinstance(e.message, kind)]


def begin_epoch(leader: RaftNode, follower: RaftNode, now: float) -> list[Envelope]:
    fx = follower.receive(env(leader.node_id, follower.node_id,
                              BeginQuorumEpochRequest(CLUSTER, leader.node_id, leader.epoch)), now)
    assert follower.role in (Role.FOLLOWER, Role.OBSERVER)
    return fx.messages


def test_a_fetch_below_the_log_start_is_answered_with_the_latest_snapshot_id():
    leader = leader_with_snapshot()
    snapshot_id = leader.latest_snapshot.snapshot_id
    fx = leader.receive(env(2, 1, FetchRequest(CLUSTER, 2, leader.epoch, 3, 1, 0)), 2400.0)
    (answer,) = sent(fx, FetchResponse, to=2)
    assert answer.message.error_code is ErrorCode.NONE
    assert answer.message.snapshot_id == snapshot_id
    assert answer.message.records == () and answer.message.diverging_epoch is None
    # At the snapshot's end with its epoch: entries as usual.
    fx = leader.receive(env(2, 1, FetchRequest(CLUSTER, 2, leader.epoch, snapshot_id.end_offset,
                                               snapshot_id.epoch, 0)), 2401.0)
    (answer,) = sent(fx, FetchResponse, to=2)
    assert answer.message.snapshot_id is None and len(answer.message.records) == 3


def test_a_far_behind_follower_fetches_the_snapshot_in_chunks_installs_it_and_fetches_on():
    leader = leader_with_snapshot()
    follower = fresh_node()
    wire = Wire(leader, follower)
    wire.pump(begin_epoch(leader, follower, 2500.0), 2500.0)
    snapshot = leader.latest_snapshot
    size = leader.snapshots.size(snapshot.snapshot_id)
    chunks = wire.of(FetchSnapshotRequest)
    assert [c.message.position for c in chunks] == list(range(0, size, 16))
    assert len(chunks) == math.ceil(size / 16) > 1
    installed = [fx.installed_snapshot for fx in wire.effects if fx.installed_snapshot]
    assert installed == [snapshot]
    assert follower.snapshots_installed == 1
    assert follower.latest_snapshot == snapshot == follower.snapshots.latest()
    assert follower.log.start_offset() == snapshot.end_offset
    # It fetched on from the snapshot's end: it holds the leader's log, committed.
    assert follower.log.end_offset() == leader.log.end_offset()
    assert follower.log.read(snapshot.end_offset, 10) == leader.log.read(snapshot.end_offset, 10)
    assert follower.high_watermark == leader.high_watermark == leader.log.end_offset()
    assert follower.voters == frozenset({1, 2})


def test_the_leader_answers_what_it_does_not_keep_with_errors():
    leader = leader_with_snapshot()
    sid = leader.latest_snapshot.snapshot_id
    size = leader.snapshots.size(sid)

    def ask(snapshot_id=sid, position=0, epoch=None, node=leader):
        request = FetchSnapshotRequest(CLUSTER, 2, leader.epoch if epoch is None else epoch,
                                       snapshot_id, position, 100)
        (answer,) = sent(node.receive(env(2, node.node_id, request), 3000.0),
                         FetchSnapshotResponse)
        return answer.message

    whole = ask()
    assert (whole.error_code, whole.size, whole.position) == (ErrorCode.NONE, size, 0)
    assert len(whole.data) == 16  # the leader's own bound, below the request's 100
    assert ask(SnapshotId(sid.end_offset - 1, sid.epoch)).error_code is \
        ErrorCode.SNAPSHOT_NOT_FOUND
    assert ask(position=size).error_code is ErrorCode.POSITION_OUT_OF_RANGE
    assert ask(epoch=leader.epoch - 1).error_code is ErrorCode.FENCED_LEADER_EPOCH
    assert ask(epoch=leader.epoch + 1).error_code is ErrorCode.UNKNOWN_LEADER_EPOCH
    follower = fresh_node()
    begin_epoch(leader, follower, 3000.0)
    answer = ask(node=follower)
    assert answer.error_code is ErrorCode.NOT_LEADER_OR_FOLLOWER and answer.leader_id == 1


def _first_chunk_then(leader: RaftNode, follower: RaftNode):
    """Run the exchange until the follower asks for its second chunk; returns that request."""
    wire = Wire(leader, follower)
    held: list[Envelope] = []

    def hold_second(e: Envelope) -> bool:
        if isinstance(e.message, FetchSnapshotRequest) and e.message.position > 0:
            held.append(e)
            return True
        return False

    wire.pump(begin_epoch(leader, follower, 2500.0), 2500.0, drop=hold_second)
    (second,) = held
    return second


def test_a_new_epoch_mid_transfer_drops_it_and_the_follower_fetches_from_the_new_leader():
    leader = leader_with_snapshot()
    follower = fresh_node()
    _first_chunk_then(leader, follower)
    fx = follower.receive(env(1, 2, BeginQuorumEpochRequest(CLUSTER, 1, leader.epoch + 1)),
                          2600.0)
    (fetch,) = sent(fx, FetchRequest, to=1)
    assert (fetch.message.fetch_offset, fetch.message.current_leader_epoch) == (
        0, leader.epoch + 1)
    assert not sent(fx, FetchSnapshotRequest)
    assert follower.snapshots_installed == 0 and follower.latest_snapshot is None


def test_snapshot_not_found_drops_the_transfer_and_the_next_fetch_names_the_new_snapshot():
    leader = leader_with_snapshot()
    follower = fresh_node()
    second = _first_chunk_then(leader, follower)
    answer = FetchSnapshotResponse(ErrorCode.SNAPSHOT_NOT_FOUND, 1, leader.epoch,
                                   second.message.snapshot_id)
    fx = follower.receive(Envelope(1, 2, second.correlation_id, answer), 2600.0)
    assert not fx.messages  # backs off
    fx = follower.tick(2600.0 + SMALL_CHUNKS.retry_backoff_ms)
    (fetch,) = sent(fx, FetchRequest, to=1)
    assert fetch.message.fetch_offset == 0
    # The leader made a newer snapshot meanwhile: the fetcher is told that one and gets it.
    leader.receive(env(2, 1, FetchRequest(CLUSTER, 2, leader.epoch, leader.log.end_offset(),
                                          leader.log.last_epoch(), 0)), 2650.0)
    leader.create_snapshot(leader.high_watermark, STATE + b"newer", 2660.0)
    wire = Wire(leader, follower)
    wire.pump([fetch], 2700.0)
    assert follower.latest_snapshot == leader.latest_snapshot
    assert follower.latest_snapshot.state.endswith(b"newer")
    assert follower.log.end_offset() == leader.log.end_offset()


def test_a_damaged_snapshot_is_refused_and_fetched_again():
    leader = leader_with_snapshot()
    follower = fresh_node()
    wire = Wire(leader, follower)
    damaged: list[Envelope] = []

    def flip(e: Envelope) -> bool:  # hold the second chunk back, damaged
        m = e.message
        if isinstance(m, FetchSnapshotResponse) and m.position == 16 and not damaged:
            bad = dataclasses.replace(m, data=bytes([m.data[0] ^ 1]) + m.data[1:])
            damaged.append(Envelope(e.source, e.destination, e.correlation_id, bad))
            return True
        return False

    wire.pump(begin_epoch(leader, follower, 2500.0), 2500.0, drop=flip)
    (bad,) = damaged
    # The damaged chunk arrives in its place; the rest of the transfer goes on.
    wire.pump([bad], 2500.0, drop=lambda e: e is not bad and isinstance(e.message, FetchRequest))
    assert damaged and follower.snapshots_installed == 0
    assert any("checksum" in p for p in follower.snapshot_problems)
    # It backed off; its next fetch starts the transfer again, which completes.
    fx = follower.tick(2500.0 + SMALL_CHUNKS.retry_backoff_ms)
    (fetch,) = sent(fx, FetchRequest, to=1)
    wire.pump([fetch], 2600.0)
    assert follower.snapshots_installed == 1
    assert follower.latest_snapshot == leader.latest_snapshot


def test_a_lost_chunk_is_asked_for_again_after_the_request_timeout():
    leader = leader_with_snapshot()
    follower = fresh_node()
    second = _first_chunk_then(leader, follower)
    assert follower.tick(2500.0 + SMALL_CHUNKS.request_timeout_ms - 1).messages == []
    fx = follower.tick(2500.0 + SMALL_CHUNKS.request_timeout_ms)
    (again,) = sent(fx, FetchSnapshotRequest, to=1)
    assert again.message == second.message and again.correlation_id != second.correlation_id


def test_an_observer_becomes_a_follower_when_the_snapshot_names_it_a_voter():
    leader = leader_with_snapshot(entries_after=0)
    leader.propose(VoterAssignment(CLUSTER, (1, 2, 3)), 2400.0)  # node 3 joins
    end = leader.log.end_offset()
    leader.receive(env(2, 1, FetchRequest(CLUSTER, 2, leader.epoch, end, leader.epoch, 0)),
                   2450.0)
    assert leader.high_watermark == end
    leader.create_snapshot(end, STATE, 2460.0)
    assert leader.latest_snapshot.voters.current_voters == (1, 2, 3)
    newcomer = fresh_node(3, voters=(1, 2))  # its bootstrap voters do not name it
    assert newcomer.role is Role.OBSERVER
    wire = Wire(leader, newcomer)
    # It knows no leader: it asks a voter, which names the leader and epoch; then it fetches.
    wire.pump(newcomer.tick(newcomer.next_deadline()).messages, 2500.0)
    assert newcomer.snapshots_installed == 1
    assert newcomer.voters == frozenset({1, 2, 3})
    assert newcomer.role is Role.FOLLOWER and newcomer.leader_id == 1
    assert newcomer.quorum_state().current_voters == (1, 2, 3)  # persisted with the step


def _catch_up(sim: Simulation, within_ms: float = 6000.0) -> None:
    sim.heal()
    proposal = sim.propose_to_leader(b"after") if sim.run_until(
        lambda: sim.leader() is not None, within_ms) else None
    assert proposal is not None
    assert sim.run_until(lambda: sim.committed_everywhere(proposal.offset), within_ms)


def test_in_the_simulation_a_voter_down_for_long_catches_up_through_fetch_snapshot():
    # The others snapshot and delete their prefixes (no entry retained) while node 3 is down,
    # on a lossy network; back, it cannot fetch entries the leader no longer has.
    config = dataclasses.replace(SIM_CONFIG, snapshot_retain_entries=0)
    sim = Simulation(5, voters=(1, 2, 3), faults=Faults(drop=0.1, duplicate=0.05),
                     snapshot_every_ms=40.0, config=config)
    sim.run_until(lambda: sim.leader() is not None and sim.leader().high_watermark > 5, 2000.0)
    sim._crash(3)
    sim.run_for(1500.0)
    assert min(sim.nodes[n].log.start_offset() for n in (1, 2)) > sim.logs[3].end_offset()
    _catch_up(sim)
    node = sim.nodes[3]
    assert sim.installs.get(3, 0) >= 1
    assert node.log.start_offset() > 0
    assert node.latest_snapshot is not None and node.snapshots_installed >= 1
    assert sim.applied[3][0] == node.high_watermark  # its state machine caught up too


def test_in_the_simulation_an_observer_added_late_catches_up_through_fetch_snapshot():
    config = dataclasses.replace(SIM_CONFIG, snapshot_retain_entries=5)
    sim = Simulation(8, voters=(1, 2, 3), observers=(4,), start_at={4: 1500.0},
                     faults=Faults(drop=0.1, max_delay_ms=20.0), snapshot_every_ms=40.0,
                     config=config)
    sim.run_for(1500.0)
    _catch_up(sim)
    assert sim.installs.get(4, 0) >= 1
    assert sim.nodes[4].role is Role.OBSERVER
    assert sim.nodes[4].log.start_offset() > 0
