"""``QuorumMetadataStore`` on a real three-voter quorum in this process
(``LocalQuorumCluster``: three RaftNodes, each with its own log and tree, on an in-memory
network), on a ``task.Clock``: a store on a follower reads its own writes and the others catch
up to the same tree; the stores ride out the leader's loss; a store cut off for longer than its
session timeout loses its session and its ephemerals, and gets a new session once back."""

from __future__ import annotations

from dataclasses import replace

import pytest
from twisted.internet import task

from broker_core.metadata import SessionState
from broker_core.raft.metadata_store import QuorumMetadataStore
from tests.support.local_quorum import FAST, LocalQuorumCluster, run


@pytest.fixture
def clock():
    return task.Clock()


def until(clock: task.Clock, condition, what: str, limit: float = 20.0,
          step: float = 0.01) -> None:
    """Advance ``clock`` until ``condition()`` holds, at most ``limit`` seconds of it."""
    start = clock.seconds()
    while not condition():
        if clock.seconds() - start > limit:
            raise AssertionError(f"no {what} after {limit}s of clock time")
        clock.advance(step)


@pytest.fixture
def cluster(clock):
    c = LocalQuorumCluster(clock, 3)
    until(clock, lambda: c.leader() is not None, "leader")
    yield c
    c.stop()


def settle(clock: task.Clock, seconds: float = 1.0) -> None:
    for _ in range(int(seconds / 0.01)):
        clock.advance(0.01)


def stores(clock, cluster, timeout: float = 3.0) -> list[QuorumMetadataStore]:
    out = []
    for m in cluster.members:
        s = QuorumMetadataStore(m, reactor=clock, session_timeout=timeout)
        run(clock, s.start())
        out.append(s)
    return out


def test_a_follower_reads_its_own_writes_and_every_replica_ends_equal(clock, cluster):
    leader = cluster.leader()
    follower = next(m for m in cluster.members if m is not leader)
    s = QuorumMetadataStore(follower, reactor=clock, session_timeout=3.0)
    run(clock, s.start())
    assert run(clock, s.create("/a/b", b"v", makepath=True)) == "/a/b"
    assert s.get("/a/b").result[0] == b"v"  # at once, from the follower's own tree
    run(clock, s.create("/a/e", b"", ephemeral=True))
    settle(clock)
    trees = [m.tree.to_snapshot() for m in cluster.members]
    assert trees[0] == trees[1] == trees[2]
    assert cluster.members[0].tree.exists("/a/e").ephemeral_owner == s.session_id


def test_stores_ride_out_the_loss_of_the_leader(clock):
    # Followers notice the lost leader after 3 s, so every store's heartbeat (every 2 s) meets
    # a quorum without a reachable leader once before the election ends.
    cluster = LocalQuorumCluster(clock, 3, config=replace(FAST, fetch_timeout_ms=3000))
    until(clock, lambda: cluster.leader() is not None, "leader")
    all_stores = stores(clock, cluster, timeout=6.0)
    old = cluster.leader()
    survivors = [s for s, m in zip(all_stores, cluster.members, strict=True) if m is not old]
    states = {id(s): [] for s in survivors}
    for s in survivors:
        s.add_state_listener(states[id(s)].append)
        run(clock, s.create(f"/{s.session_id}", b"", ephemeral=True))
    old_epoch = old.node.epoch
    cluster.isolate(old.node.node_id)
    until(clock, lambda: cluster.leader() not in (None, old) and all(
        s.state is SessionState.CONNECTED and states[id(s)] for s in survivors),
        "new leader with every surviving store reconnected")
    new = cluster.leader()
    assert new is not old and new.node.epoch > old_epoch
    for s in survivors:
        # SUSPENDED while no reachable leader took heartbeats, then CONNECTED on the same
        # session: the new leader granted it a full timeout.
        assert states[id(s)] == [SessionState.SUSPENDED, SessionState.CONNECTED]
        assert s.session_id in new.tree.sessions
        run(clock, s.set(f"/{s.session_id}", b"after"))
    cluster.stop()


def test_a_store_cut_off_longer_than_its_session_loses_it_and_gets_a_new_one(clock, cluster):
    leader = cluster.leader()
    follower = next(m for m in cluster.members if m is not leader)
    watcher = QuorumMetadataStore(leader, reactor=clock, session_timeout=3.0)
    run(clock, watcher.start())
    s = QuorumMetadataStore(follower, reactor=clock, session_timeout=3.0)
    run(clock, s.start())
    run(clock, s.create("/broker", b"", ephemeral=True))
    old_sid, old_czxid = s.session_id, leader.tree.exists("/broker").czxid
    states: list[SessionState] = []
    s.add_state_listener(states.append)

    cluster.isolate(follower.node.node_id)
    settle(clock, 5.0)
    assert leader.tree.exists("/broker") is None  # expired by the leader, through the log
    assert states == [SessionState.SUSPENDED]  # its own replica cannot know yet
    assert follower.tree.exists("/broker") is not None

    cluster.heal()
    until(clock, lambda: s.state is SessionState.CONNECTED, "a new session")
    assert states == [SessionState.SUSPENDED, SessionState.LOST, SessionState.CONNECTED]
    assert s.session_id != old_sid and follower.tree.exists("/broker") is None
    run(clock, s.create("/broker", b"", ephemeral=True))
    settle(clock)
    assert leader.tree.exists("/broker").czxid > old_czxid
